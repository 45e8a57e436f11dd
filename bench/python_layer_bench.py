"""Per-op cost of gradtape's Python layer alone (Tensor, operators, ops,
conversions), without the transport, and with the pure-Python backend.

The "fake" backend takes the server's real registry (ListOps, fetched once
from a gradtape-server) but its execute only counts ids: what remains is the
Python layer's cost per op (the fake's own execute, a small Python method,
is timed alone and printed, so it can be subtracted). "pure" runs the same
loops through gradtape's StreamCore to a server on 127.0.0.1 and waits for
the last value (a chain of AddV2 as in issue 15's table).

  python bench/python_layer_bench.py --server build/server/gradtape-server
  python bench/python_layer_bench.py --server ... --repeats 7 --ops 20000

Prints one line per case: the median over --repeats of the per-op time,
and min / max; with torch importable, local PyTorch's ``a + b`` and
``x * 0.5`` in the same run for scale. Run it twice (or beside another build of the client, with
PYTHONPATH) to compare; the machine's load moves these figures.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np

import gradtape
from gradtape.session import Session


class FakeCore:
    """The Backend interface, doing nothing but handing out ids."""

    session_id = "0" * 32
    keep_alive_seconds = 0
    closed = False
    chunk_bytes = 64 << 20
    commands_sent = 0
    batches_sent = 0

    def __init__(self, list_ops_response: Any) -> None:
        self._ops = list_ops_response
        self._next = 1

    def list_ops(self) -> Any:
        return self._ops

    def new_id(self) -> int:
        n = self._next
        self._next = n + 1
        return n

    def new_tape_id(self) -> int:
        return self.new_id()

    def execute(self, op: str, input_ids: Any, num_outputs: int, attrs: Any) -> int:
        n = self._next
        self._next = n + num_outputs
        return n

    def put(self, tensor_id: int, array: np.ndarray) -> None:
        pass

    release = staticmethod(id)  # a C builtin of one argument

    def delete_tape(self, tape_id: int, pop_first: bool = False) -> None:
        pass

    def enqueue(self, command: Any) -> int:
        return 0

    def flush(self) -> None:
        pass

    def sync(self, timeout: Optional[float] = None) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def last_seq(self) -> int:
        return 0

    def transport_stats(self) -> Dict[str, int]:
        return {}


def _per_op(loop: Callable[[int], None], n: int, repeats: int) -> List[float]:
    out = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        loop(n)
        out.append((time.perf_counter() - t0) / n * 1e6)
    return out


def _report(label: str, times: List[float]) -> None:
    print(f"{label:<44} median {statistics.median(times):7.3f} us/op  (min {min(times):.3f}, max {max(times):.3f})")


def _cases(s: Session) -> Dict[str, Callable[[int], None]]:
    a = s.constant(np.ones(4, np.float32))
    b = s.constant(np.ones(4, np.float32))
    m = s.constant(np.ones((4, 4), np.float32))
    v = s.Variable(np.ones(4, np.float32))
    tanh = s.ops.tanh
    mat_mul = s.ops.mat_mul

    def add(n: int) -> None:
        x = a
        for _ in range(n):
            x = x + b

    def mul_literal(n: int) -> None:
        x = a
        for _ in range(n):
            x = x * 0.5

    def op_function(n: int) -> None:
        x = a
        for _ in range(n):
            x = tanh(x)

    def op_attrs(n: int) -> None:
        for _ in range(n):
            mat_mul(m, m, transpose_b=True)

    def read_variable(n: int) -> None:
        for _ in range(n):
            v.read_value()

    def execute(n: int) -> None:
        for _ in range(n):
            s.execute("AddV2", [a, b])

    cases: Dict[str, Callable[[int], None]] = {
        "a + b (Tensor operator)": add,
        "x * 0.5 (Python literal)": mul_literal,
        "ops.tanh(x) (OpFunction)": op_function,
        "ops.mat_mul(m, m, transpose_b=True)": op_attrs,
        "v.read_value()": read_variable,
        "session.execute('AddV2', [a, b])": execute,
    }
    if s.has_op("StridedSlice") and hasattr(type(m), "__getitem__"):

        def slicing(n: int) -> None:
            for _ in range(n):
                m[:, 1]

        cases["m[:, 1] (StridedSlice)"] = slicing
    return cases


def _pure(real: Session, args: Any) -> None:
    a = real.constant(np.ones(4, np.float32))
    b = real.constant(np.ones(4, np.float32))

    def chain(n: int) -> None:
        x = a
        for _ in range(n):
            x = x + b
        x.numpy()

    with real.GradientTape() as tape:
        tape.watch(a)

        def recorded(n: int) -> None:
            chain(n)

        _report("pure: chain of AddV2 on a watched tape", _per_op(recorded, args.ops, args.repeats))
    _report("pure: chain of AddV2, waiting for the last", _per_op(chain, args.ops, args.repeats))
    _report("pure: MLP 64-128-128-10 Adam step, batch 64 (us/step)", _per_op(_mlp_steps(real), 300, args.repeats))


def _mlp_steps(s: Session) -> Callable[[int], None]:
    """The digits example's step (gather a batch, forward, tape, gradient,
    Adam) on random data, waiting for the last loss: the client's cost per
    step with the server pipelined behind it."""
    from gradtape import optimizers

    rng = np.random.default_rng(0)
    ops = s.ops
    tx = s.constant(rng.random((1400, 64), dtype=np.float32))
    ty = s.constant(rng.integers(0, 10, 1400))
    sizes = [64, 128, 128, 10]
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        params.append(s.Variable(rng.normal(0, 0.1, (fan_in, fan_out)).astype(np.float32)))
        params.append(s.Variable(np.zeros(fan_out, np.float32)))
    opt = optimizers.Adam(1e-3)
    batches = [s.constant(np.arange(64, dtype=np.int32) + 64 * i) for i in range(20)]

    def steps(n: int) -> None:
        loss = None
        for i in range(n):
            idx = batches[i % len(batches)]
            xb = ops.gather_v2(tx, idx, axis=0)
            yb = ops.gather_v2(ty, idx, axis=0)
            with s.GradientTape() as tape:
                h = xb
                for j in range(0, len(params), 2):
                    h = ops.bias_add(h @ params[j], params[j + 1])
                    if j < len(params) - 2:
                        h = ops.relu(h)
                loss = ops.mean(ops.sparse_softmax_cross_entropy_with_logits(h, yb).loss, axis=[0])
            grads = tape.gradient(loss, params)
            opt.apply_gradients(zip(grads, params))
        assert loss is not None
        loss.numpy()

    steps(2)
    return steps


def _start_server(binary: str) -> Any:
    proc = subprocess.Popen([binary, "--address=127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("gradtape-server listening on "):
            return proc, line.split()[-1]
    proc.wait()
    raise RuntimeError("gradtape-server did not start")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="the gradtape-server binary")
    parser.add_argument("--ops", type=int, default=20000, help="ops per timed loop")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-pure", action="store_true", help="skip the pure-Python backend")
    parser.add_argument("--no-fake", action="store_true", help="skip the fake backend (and PyTorch)")
    args = parser.parse_args()

    proc, address = _start_server(args.server)
    try:
        with gradtape.connect(address, native=False) as real:
            response = real._core.list_ops()
            print(f"gradtape {gradtape.__file__}")
            fake_core = FakeCore(response)
            fake = Session(fake_core)  # type: ignore[arg-type]
            if args.no_fake:
                _pure(real, args)
                return 0

            def bare(n: int) -> None:
                ex = fake_core.execute
                for _ in range(n):
                    ex("AddV2", (1, 2), 1, None)

            _report("fake: the fake's own execute (subtract)", _per_op(bare, args.ops, args.repeats))
            for label, loop in _cases(fake).items():
                _report(f"fake: {label}", _per_op(loop, args.ops, args.repeats))
            fake._tapes.active = True  # what Session pays to tell the tape set
            for label in ("a + b (Tensor operator)", "ops.tanh(x) (OpFunction)"):
                loop = _cases(fake)[label]
                _report(f"fake, tape set active: {label}", _per_op(loop, args.ops, args.repeats))
            fake._tapes.active = False
            try:
                import torch  # type: ignore[import-not-found,unused-ignore] # the reference of issue 15 (optional here)
            except ImportError:
                torch = None
            if torch is not None:
                ta = torch.ones(4)
                tb = torch.ones(4)

                def torch_add(n: int) -> None:
                    x = ta
                    for _ in range(n):
                        x = x + tb

                def torch_literal(n: int) -> None:
                    x = ta
                    for _ in range(n):
                        x = x * 0.5

                _report("local PyTorch: a + b", _per_op(torch_add, args.ops, args.repeats))
                _report("local PyTorch: x * 0.5", _per_op(torch_literal, args.ops, args.repeats))
            if not args.no_pure:
                _pure(real, args)
    finally:
        proc.terminate()
        proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
