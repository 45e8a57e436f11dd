"""The server's RSS while sessions fetch without acknowledging (issue 25).

Starts gradtape-server with the given flags, then --sessions sessions at
once each put a float32 tensor of --tensor_mb MiB and fetch it --fetches
times over the raw protocol, never sending CommandBatch.ack_seq, so every
result is kept up to --result_cache_mb per session (and, with a budget, up
to an eighth of the budget for all). Prints the server's RSS idle, its peak
(sampled every 20 ms) and at the end, beside what the flags allow: the
tensors plus sessions x --result_cache_mb.

  python bench/result_cache_rss.py [--bin build/server/gradtape-server]
      [--sessions 8] [--tensor_mb 8] [--fetches 40] [-- SERVER_FLAGS...]

Needs grpcio-tools (tests/python/requirements.txt): the stubs are generated
from proto/ into a temporary directory.
"""

import argparse
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
MiB = 1 << 20


def generate_stubs(out):
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'proto'}",
         f"--python_out={out}", f"--grpc_python_out={out}",
         str(ROOT / "proto" / "gradtape" / "v1" / "tape_service.proto")],
        check=True, timeout=120,
    )
    sys.path.insert(0, str(out))
    from gradtape.v1 import tape_service_pb2, tape_service_pb2_grpc  # noqa: E402

    class Generated:
        pb2 = tape_service_pb2
        pb2_grpc = tape_service_pb2_grpc

    return Generated


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default=str(ROOT / "build" / "server" / "gradtape-server"))
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--tensor_mb", type=int, default=8)
    parser.add_argument("--fetches", type=int, default=40)
    parser.add_argument("--result_cache_mb", type=int, default=64)
    args, server_flags = parser.parse_known_args()
    server_flags = [f for f in server_flags if f != "--"]
    with tempfile.TemporaryDirectory() as gen:
        pb = generate_stubs(gen)
        # The raw session and the RSS sampler of the memory-budget tests.
        sys.path.insert(0, str(ROOT / "tests" / "python"))
        import test_memory_budget as t  # noqa: E402

        proc = subprocess.Popen(
            [args.bin, "--address=127.0.0.1:0", f"--result_cache_mb={args.result_cache_mb}",
             *server_flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        try:
            address, budget_line = None, ""
            for line in proc.stdout:
                if "memory budget" in line:
                    budget_line = line.strip()
                match = re.search(r"listening on (\S+)", line)
                if match:
                    address = match.group(1)
                    break
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            idle = t.rss_bytes(proc.pid)
            sessions = [t.Raw(pb, address) for _ in range(args.sessions)]

            def run(s):
                i, c = s.put(np.ones(args.tensor_mb * MiB // 4, np.float32))
                s.run(c)
                for _ in range(args.fetches):
                    s.run(s.fetch(i))

            with t.RssSampler(proc.pid) as rss:
                threads = [threading.Thread(target=run, args=(s,)) for s in sessions]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
                time.sleep(0.5)
            end = t.rss_bytes(proc.pid)
            for s in sessions:
                s.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    allowed = args.sessions * (args.tensor_mb + args.result_cache_mb)
    print(budget_line)
    print(
        f"result_cache_rss sessions={args.sessions} tensor_mb={args.tensor_mb} "
        f"fetches={args.fetches}: RSS idle {idle / MiB:.0f} MiB, peak {rss.peak / MiB:.0f} MiB, "
        f"end {end / MiB:.0f} MiB; end above idle {(end - idle) / MiB:.0f} MiB against "
        f"{allowed} MiB allowed (tensors + sessions x --result_cache_mb)"
    )


if __name__ == "__main__":
    main()
