"""What the client's tape bookkeeping (gradtape._tape.TapeSet) costs per op.

Session.execute calls TapeSet.on_execute only while a tape records; this
times that call alone, in process (no server), for the ops of a recorded
AddV2 chain (one input connected to a watched source, one not) and of a
layer (both inputs connected), with one and with two recording tapes, and
prints the median (and the minimum: on a loaded machine the least
disturbed repeat) of several repeats, in microseconds per op:

  .venv/bin/python bench/tape_bookkeeping_bench.py [--ops N] [--repeats R]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, List

import numpy as np

from gradtape._tape import TapeSet
from gradtape._tensor import Tensor


class _NoCore:
    def release(self, tensor_id: int) -> None:
        pass


class _NoSession:
    _core = _NoCore()


class _Empty:
    def on_execute(self, op: str, inputs: Any, outputs: Any) -> None:
        pass


def _per_op(tapes: Any, inputs: List[Tensor], n: int, repeats: int) -> str:
    out = [Tensor(_NoSession(), 0, np.dtype(np.float32))]  # type: ignore[arg-type]
    on_execute = tapes.on_execute
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            on_execute("AddV2", inputs, out)
        samples.append((time.perf_counter() - start) / n * 1e6)
    return f"{statistics.median(samples):.3f} (min {min(samples):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    f32 = np.dtype(np.float32)
    sess: Any = _NoSession()

    def setup(n_tapes: int) -> Any:
        tapes = TapeSet()
        x = Tensor(sess, 1, f32)
        w = Tensor(sess, 2, f32)
        for k in range(n_tapes):
            rec = tapes.new_recorder("tape", k + 1, True, False)
            tapes.push(rec)
            tapes.watch(rec, [x, w])
        c = Tensor(sess, 3, f32)  # a constant: connected to nothing
        return tapes, x, w, c

    print(f"TapeSet.on_execute, median of {args.repeats} x {args.ops} calls, us per op")
    base = _per_op(_Empty(), [Tensor(sess, 1, f32), Tensor(sess, 3, f32)], args.ops, args.repeats)  # type: ignore[arg-type]
    print(f"  baseline, an empty method with the same arguments: {base}")
    for n_tapes in (1, 2):
        tapes, x, w, c = setup(n_tapes)
        chain = _per_op(tapes, [x, c], args.ops, args.repeats)
        layer = _per_op(tapes, [x, w], args.ops, args.repeats)
        none = _per_op(tapes, [c, c], args.ops, args.repeats)
        print(
            f"  {n_tapes} recording tape(s): chain op {chain}  two connected inputs {layer}  "
            f"unconnected inputs {none}"
        )
    print("  no tape recording: 0 (Session.execute skips the call: TapeSet.active is False)")


if __name__ == "__main__":
    main()
