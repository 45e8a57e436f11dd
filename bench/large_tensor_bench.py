"""Large tensors through the Python client against a raw Python gRPC stub.

Starts `large_tensor_bench --serve` (the gradtape server and the raw
TapeService of bench/large_tensor_bench.cc, in one process on loopback) and
times, alternating, medians of --reps runs:

  gradtape  session.constant(x) + sync()  and  t.numpy()   (chunked when
            larger than chunk_bytes, 64 MiB by default)
  raw       the same bytes in the same messages on a Stream of the raw
            service: one PutTensorChunk batch per chunk (answered empty),
            and FetchTensor chunks decoded into a numpy array the same way

and the small-fetch path: t.numpy() of a float32[4] against the plain
FetchTensor call the client made before chunked transfer. Each backend of
the client is timed (--backends: native, the compiled extension, and pure,
StreamCore), alternated with the raw stub in the same run.

  python bench/large_tensor_bench.py [--bin build/bench/large_tensor_bench]
      [--sizes_mb 64] [--reps 5] [--backends native,pure]
"""

import argparse
import statistics
import subprocess
import time

import grpc
import numpy as np

import gradtape
from gradtape import _dtypes
from gradtape.v1 import tape_service_pb2 as pb
from gradtape.v1 import tape_service_pb2_grpc as pb_grpc

CHUNK = 64 << 20


def raw_put(stub, array):
    data = np.ascontiguousarray(array).tobytes()
    batches = [
        pb.CommandBatch(
            batch_id=i + 1,
            commands=[pb.Command(seq=i + 1, put_chunk=pb.PutTensorChunk(id=1, offset=at, data=data[at : at + CHUNK]))],
        )
        for i, at in enumerate(range(0, len(data), CHUNK))
    ]
    for _ in stub.Stream(iter(batches)):
        pass


def raw_fetch(stub, nbytes, dtype, shape):
    requests = [
        pb.CommandBatch(
            batch_id=i + 1,
            commands=[pb.Command(seq=i + 1, fetch=pb.FetchTensor(id=1, offset=at, max_bytes=min(CHUNK, nbytes - at)))],
        )
        for i, at in enumerate(range(0, nbytes, CHUNK))
    ]
    if len(requests) == 1:
        (reply,) = list(stub.Stream(iter(requests)))
        return np.frombuffer(reply.results[0].chunk.data, dtype=dtype).reshape(shape).copy()
    buffer = bytearray(nbytes)
    for reply in stub.Stream(iter(requests)):
        c = reply.results[0].chunk
        buffer[c.offset : c.offset + len(c.data)] = c.data
    return np.frombuffer(buffer, dtype=dtype).reshape(shape)


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def small_fetches(session, n=5000, block=500):
    t = session.constant(np.arange(4, dtype=np.float32))
    core = session._core
    now, before = [], []
    for _ in range(n // block):
        start = time.perf_counter()
        for _ in range(block):
            t.numpy()
        now.append((time.perf_counter() - start) / block * 1e6)
        start = time.perf_counter()
        for _ in range(block):
            _dtypes.from_value(core.call(pb.Command(fetch=pb.FetchTensor(id=t.id))).tensor)
        before.append((time.perf_counter() - start) / block * 1e6)
    a, b = statistics.median(now), statistics.median(before)
    print(
        f"python small fetch (float32[4], {n} each): {a:.1f} us with numpy() (chunk-aware), "
        f"{b:.1f} us with the plain FetchTensor call, ratio {a / b:.3f} (medians of blocks of {block})"
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default="build/bench/large_tensor_bench")
    parser.add_argument("--sizes_mb", default="64")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--backends", default="native,pure", help="native, pure or both")
    args = parser.parse_args()
    proc = subprocess.Popen([args.bin, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        words = proc.stdout.readline().split()  # gradtape ADDR raw ADDR
        gradtape_address, raw_address = words[1], words[3]
        options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        channel = grpc.insecure_channel(raw_address, options=options)
        stub = pb_grpc.TapeServiceStub(channel)
        backends = args.backends.split(",")
        sessions = {b: gradtape.connect(gradtape_address, timeout=30, native=b == "native") for b in backends}
        try:
            for name, session in sessions.items():
                print(f"[{name}] ", end="")
                small_fetches(session)
            print(f"python large_tensor_bench: float32, chunks of {CHUNK >> 20} MiB, {args.reps} runs, medians")
            print(f"{'MiB':<6} {'op':<6} {'backend':<8} {'gradtape MB/s':>14} {'raw MB/s':>14} {'time ratio g/raw':>18}")
            for mib in (int(m) for m in args.sizes_mb.split(",")):
                x = (np.arange(mib << 18) % 1024).astype(np.float32)
                times = {(b, op): [] for b in backends + ["raw"] for op in ("put", "fetch")}
                for _ in range(args.reps):
                    for name, session in sessions.items():
                        holder = {}

                        def put():
                            holder["t"] = session.constant(x)
                            session.sync()

                        times[name, "put"].append(timed(put))
                        times["raw", "put"].append(timed(lambda: raw_put(stub, x)))
                        out = {}
                        times[name, "fetch"].append(timed(lambda: out.update(g=holder["t"].numpy())))
                        times["raw", "fetch"].append(
                            timed(lambda: out.update(r=raw_fetch(stub, x.nbytes, np.float32, x.shape)))
                        )
                        assert np.array_equal(out["g"], x)
                        del holder["t"], out
                mb = x.nbytes / 1e6
                for op in ("put", "fetch"):
                    r = statistics.median(times["raw", op])
                    for name in backends:
                        g = statistics.median(times[name, op])
                        print(f"{mib:<6} {op:<6} {name:<8} {mb / g:>14.0f} {mb / r:>14.0f} {g / r:>18.2f}")
        finally:
            for session in sessions.values():
                session.close()
        channel.close()
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
