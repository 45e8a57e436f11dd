"""Where a Python op's time goes: client CPU, server CPU and wall per op.

Runs the per-op chain of bench/python_bench.py (float32[4] AddV2, ``a = a +
b``, no tape and recorded) on one backend against a gradtape-server it starts
on 127.0.0.1, and prints per op: wall time, this process's CPU time (user +
system, all threads: the Python layer, the transport, the reader thread) and
the server process's CPU time, from /proc, medians of --reps chains.

For the split inside the client, run it under py-spy (PyPI) and aggregate
the samples by module with --summarize:

  py-spy record --format raw --rate 500 --native -o /tmp/op.txt -- \\
      python bench/python_op_profile.py --backend pure --ops 20000 --reps 5
  python bench/python_op_profile.py --summarize /tmp/op.txt

  python bench/python_op_profile.py [--backend native|pure] [--ops 20000]
      [--reps 5] [--server-bin build/server/gradtape-server]
"""

from __future__ import annotations

import argparse
import collections
import itertools
import os
import re
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gradtape  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """utime + stime of process `pid` (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_pid(address: str) -> int:
    """The pid of the gradtape-server child listening on `address` (its
    only child process is the one gradtape_server started)."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if int(fields[1]) == me and b"gradtape-server" in cmdline:
            return int(entry)
    raise RuntimeError(f"no gradtape-server child of {me} (address {address})")


# Module groups for --summarize: the innermost gradtape/grpc/protobuf frame
# of a sample names where its time goes.
GROUPS: Tuple[Tuple[str, str], ...] = (
    (r"gradtape/_core\.py|gradtape/_resume\.py|gradtape/_chunks\.py|gradtape/_transport\.py", "transport (_core, pure Python)"),
    (r"gradtape/_native|_native_core", "native extension"),
    (r"gradtape/_tape\.py", "Python layer: _tape"),
    (r"gradtape/_tensor\.py", "Python layer: _tensor"),
    (r"gradtape/_ops\.py", "Python layer: _ops"),
    (r"gradtape/session\.py", "Python layer: session"),
    (r"gradtape/_dtypes\.py", "Python layer: _dtypes"),
    (r"google/protobuf|_message|upb", "protobuf"),
    (r"grpc/|grpc_|cygrpc|libgrpc", "grpcio"),
    (r"python_op_profile\.py|python_bench\.py", "benchmark loop"),
)


def summarize(path: str) -> None:
    """Aggregates py-spy's raw (collapsed) output: per thread, the share of
    samples whose innermost recognised frame is in each group."""
    per_thread: Dict[str, "collections.Counter[str]"] = collections.defaultdict(collections.Counter)
    totals: "collections.Counter[str]" = collections.Counter()
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            if not stack:
                continue
            frames = stack.split(";")
            thread = frames[0]
            group = "other (interpreter, libc, numpy)"
            for frame in reversed(frames):
                hit = next((g for pattern, g in GROUPS if re.search(pattern, frame)), None)
                if hit:
                    group = hit
                    break
            per_thread[thread][group] += int(count)
            totals[thread] += int(count)
    for thread, counter in sorted(per_thread.items(), key=lambda kv: -totals[kv[0]]):
        print(f"{thread}: {totals[thread]} samples")
        for group, n in counter.most_common():
            print(f"  {n / totals[thread]:6.1%}  {group}")


def null_chain(session: "gradtape.Session") -> Callable[[bool, int], float]:
    """The chain with the backend's execute and release replaced by counters:
    what the Python layer (Tensor, Session.execute, output dtypes, TapeSet,
    finalizers) costs per op by itself. Nothing reaches the server."""
    core = session._core
    ids = itertools.count(1 << 40)
    real_execute, real_release = core.execute, core.release

    def execute(op: str, input_ids: Sequence[int], num_outputs: int, attrs: Any) -> int:
        first = next(ids)
        for _ in range(num_outputs - 1):
            next(ids)
        return first

    def run(recorded: bool, n: int) -> float:
        a0 = session.constant(np.ones(4, np.float32))
        b = session.constant(np.ones(4, np.float32))
        session.sync()
        tape = session.GradientTape()
        if recorded:
            tape.__enter__()
            tape.watch(a0)
        core.execute, core.release = execute, lambda tensor_id: None  # type: ignore[method-assign]
        try:
            start = time.perf_counter()
            a = a0
            for _ in range(n):
                a = a + b
            del a
            elapsed = time.perf_counter() - start
        finally:
            core.execute, core.release = real_execute, real_release  # type: ignore[method-assign]
        if recorded:
            tape.__exit__(None, None, None)
        del tape
        session.sync()
        return elapsed

    return run


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("native", "pure", "null"), default="pure",
                        help="null: the pure session with execute and release replaced by "
                        "id counters (the Python layer's own cost; no value is fetched)")
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--server-bin", default=os.path.join(os.path.dirname(HERE), "build", "server", "gradtape-server"))
    parser.add_argument("--summarize", help="aggregate a py-spy --format raw file and exit")
    args = parser.parse_args(argv)
    if args.summarize:
        summarize(args.summarize)
        return
    import python_bench as pb

    with pb.gradtape_server(args.server_bin) as address:
        spid = server_pid(address)
        session, why = pb.open_gradtape(address, args.backend == "native")
        if session is None:
            print(f"{args.backend}: {why}")
            return
        chain = null_chain(session) if args.backend == "null" else pb.gradtape_chain(session)
        chain(True, args.ops)  # warm-up
        for recorded in (False, True):
            rows: List[Tuple[float, float, float]] = []
            for _ in range(args.reps):
                c0, s0 = time.process_time(), cpu_seconds(spid)
                elapsed = chain(recorded, args.ops)
                c1, s1 = time.process_time(), cpu_seconds(spid)
                rows.append((elapsed / args.ops * 1e6, (c1 - c0) / args.ops * 1e6, (s1 - s0) / args.ops * 1e6))
            wall, client, server = (statistics.median(r[i] for r in rows) for i in range(3))
            print(f"{args.backend} {'recorded' if recorded else 'no tape '}: per op {wall:.2f} us "
                  f"(python_bench's timing), client CPU {client:.2f} us, server CPU {server:.2f} us "
                  f"(CPU over the whole chain with its setup and sync; median of {args.reps} chains of "
                  f"{args.ops}; /proc ticks are 10 ms: +-{1e4 / args.ops:.1f} us)")
        session.close()


if __name__ == "__main__":
    main()
