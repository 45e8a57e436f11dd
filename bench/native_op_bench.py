"""Per-op cost of the Python client: the native backend (gradtape._native)
against the pure one (StreamCore) and against the Python layer alone.

A chain of --ops float32[4] `a = a + b` (AddV2), then a wait for the last
value, timed --reps times per variant, the variants alternated in one run;
prints medians per op and ratios. Variants:

  native   connect(native=True) against a local gradtape-server
  pure     connect(native=False), the same server
  layer    the Python layer alone (Tensor, Session.execute, dtype rules)
           on a closed native session: every op still makes its one native
           call, which buffers nothing (no wait at the end)
  call     one Core.execute call from Python with no Python layer, timed
           until the last is buffered: the native transport's own cost
           (ids, attrs, arena, batching, writes)

  python bench/native_op_bench.py [--server build/server/gradtape-server]
      [--ops 20000] [--reps 7] [--recorded]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import time
from typing import Any, Callable, Dict, Iterator, List

import numpy as np

import gradtape
from gradtape.session import Session


@contextlib.contextmanager
def server(binary: str) -> Iterator[str]:
    proc = subprocess.Popen(
        [binary, "--address=127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("gradtape-server listening on "):
                yield line.split()[-1]
                return
        raise RuntimeError("the server did not start")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def chain(session: Session, n: int, recorded: bool, wait: bool = True) -> float:
    """Seconds per op of n AddV2, waiting for the last value (`wait`)."""
    a = session.constant(np.ones(4, np.float32))
    b = session.constant(np.full(4, 1e-3, np.float32))
    if wait:
        session.sync()
    tape: Any = session.GradientTape() if recorded else contextlib.nullcontext()
    start = time.perf_counter()
    with tape:
        if recorded:
            tape.watch(a)
        for _ in range(n):
            a = a + b
    if wait:
        a.numpy()
    return (time.perf_counter() - start) / n


def raw_calls(session: Session, n: int) -> float:
    """Seconds per Core.execute call (no Python layer), until the last is
    buffered (the server's time to run them is not counted)."""
    core = session._core
    a = session.constant(np.ones(4, np.float32))
    b = session.constant(np.full(4, 1e-3, np.float32))
    session.sync()
    execute, release = core.execute, core.release
    last, b_id = a.id, b.id
    start = time.perf_counter()
    for _ in range(n):
        out = execute("AddV2", (last, b_id), 1, None)
        if last != a.id:
            release(last)  # as a dropped handle does
        last = out
    issued = time.perf_counter()
    core.fetch(last)
    return (issued - start) / n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", default="build/server/gradtape-server")
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--recorded", action="store_true", help="inside a tape that watches a")
    args = parser.parse_args()
    with server(args.server) as address:
        native = gradtape.connect(address, native=True)
        pure = gradtape.connect(address, native=False)
        # A closed native session still runs every op through the Python
        # layer and one native call, which then buffers nothing.
        layer = gradtape.connect(address, native=True)
        layer.close()
        variants: Dict[str, Callable[[], float]] = {
            "native": lambda: chain(native, args.ops, args.recorded),
            "pure": lambda: chain(pure, args.ops, args.recorded),
            "layer": lambda: chain(layer, args.ops, args.recorded, wait=False),
            "call": lambda: raw_calls(native, args.ops),
        }
        times: Dict[str, List[float]] = {k: [] for k in variants}
        for name, run in variants.items():  # warm-up
            run()
        for _ in range(args.reps):
            for name, run in variants.items():
                times[name].append(run())
        native.close()
        pure.close()
    med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    what = "recorded (watched tape)" if args.recorded else "no tape"
    print(
        f"python per-op bench: {args.ops} float32[4] AddV2, {what}, {args.reps} runs alternated, "
        f"medians in us/op"
    )
    for name in variants:
        lo, hi = min(times[name]) * 1e6, max(times[name]) * 1e6
        print(f"  {name:<7} {med[name]:8.2f}   (min {lo:.2f}, max {hi:.2f})")
    print(
        f"  ratios: pure/native {med['pure'] / med['native']:.2f}, "
        f"native/layer {med['native'] / med['layer']:.2f}, "
        f"native - layer {med['native'] - med['layer']:.2f} us (the transport's share)"
    )


if __name__ == "__main__":
    main()
