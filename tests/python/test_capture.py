"""Captured steps (gradtape.function, gradtape.tf.function; issue 29).

The first call per input signature runs eagerly and is recorded into a
DefineProgram; later calls are one CallProgram. What is held here:

* the recording itself (the program a trace defines: params, steps over
  params / captured ids / step outputs, tape steps, outputs), read from the
  commands the client sends;
* training through captured steps equals the eager training BIT FOR BIT:
  100 steps of the example transformer (a tiny config, with dropout from
  stateless random ops seeded by a step argument) and 100 of the digits
  MLP, two fresh sessions each;
* tracing: a new shape, dtype or Python value traces again, a same one
  does not; input_signature (TypeError on a mismatch, as TensorFlow);
  Python side effects only at tracing; a trace that creates variables is
  traced again; a trace that reads a value falls back to eager with one
  RuntimeWarning;
* a call inside an outer GradientTape is differentiable (the gradient
  equals the eager one); a step that fails at run time raises at the wait
  point and leaves the variables as they were.

Resume and exactly-once with a captured loop: test_resume.py.
"""

from __future__ import annotations

import gc
import importlib.util
import pathlib
import sys
import threading
import warnings
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

import gradtape
from gradtape import optimizers
from gradtape.v1 import tape_service_pb2 as pb

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "client" / "python" / "examples"
STEPS = 100


def _example(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tt() -> Any:
    return _example("train_transformer")


@pytest.fixture(scope="module")
def td() -> Any:
    return _example("train_digits")


class _Spy:
    """The session's backend, with the program commands it was given
    written down (and, with `send` False, not sent: the recording can be
    checked against a server that does not know them)."""

    def __init__(self, real: Any, send: bool) -> None:
        self._real, self._send = real, send
        self.programs: List[pb.Command] = []
        self._unsent_outputs: set = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def enqueue(self, command: pb.Command) -> int:
        if command.WhichOneof("kind") in ("define_program", "call_program"):
            self.programs.append(command)
            if not self._send:
                self._unsent_outputs.update(command.call_program.output_ids)
                return 0
        return self._real.enqueue(command)  # type: ignore[no-any-return]

    def release(self, tensor_id: int) -> None:
        if tensor_id not in self._unsent_outputs:
            self._real.release(tensor_id)


def _spy(session: gradtape.Session, send: bool = True) -> _Spy:
    spy = _Spy(session._core, send)
    session._core = spy  # type: ignore[assignment]
    session._tapes._core = spy  # type: ignore[assignment]
    return spy


# -- the recording ------------------------------------------------------------


def test_a_trace_defines_the_program_of_what_it_sent(gt: gradtape.Session) -> None:
    w = gt.Variable(np.ones((3, 2), np.float32))
    lr = gt.constant(np.float32(0.5))
    spy = _spy(gt, send=False)  # checked here without the server's programs

    @gradtape.function
    def step(x: gradtape.Tensor) -> Tuple[gradtape.Tensor, str]:
        with gt.GradientTape() as tape:
            loss = gt.ops.sum(gt.ops.tanh(x @ w), axis=[0, 1])
        (g,) = tape.gradient(loss, [w])
        w.assign_sub(g * lr)
        return loss, "done"

    x = gt.constant(np.full((4, 3), 0.1, np.float32))
    first = step(x)
    assert first[1] == "done" and np.isfinite(first[0].numpy())  # the eager run's loss
    (define,) = [c.define_program for c in spy.programs]
    assert [(p.dtype, list(p.shape)) for p in define.params] == [(pb.DTYPE_FLOAT32, [4, 3])]
    kinds = [s.WhichOneof("kind") for s in define.steps]
    ops = [s.op.op for s in define.steps if s.HasField("op")]
    assert kinds[0] == "push_tape" and "pop_tape" in kinds and "gradient" in kinds
    assert ops[:4] == ["ReadVariableOp", "MatMul", "Tanh", "Sum"]
    assert ops[-1] == "AssignSubVariableOp"
    matmul = next(s.op for s in define.steps if s.op.op == "MatMul")
    assert matmul.inputs[0].param == 0 and matmul.inputs[1].WhichOneof("ref") == "step"
    read = next(s.op for s in define.steps if s.op.op == "ReadVariableOp")
    assert read.inputs[0].captured_id == w.handle.id  # the variable, by its handle
    grad = next(s.gradient for s in define.steps if s.HasField("gradient"))
    assert grad.tape == 0 and [r.captured_id for r in grad.sources] == [w.handle.id]
    mul = next(s.op for s in define.steps if s.op.op == "Mul")
    assert mul.inputs[1].captured_id == lr.id  # a constant put before: captured
    (out,) = define.outputs
    sum_step = kinds.index("op") + 3
    assert out.step.step == sum_step and out.step.output == 0

    second = step(x)
    assert step.experimental_get_tracing_count() == 1
    call = spy.programs[-1].call_program
    assert call.program_id == define.program_id and list(call.input_ids) == [x.id]
    assert list(call.output_ids) == [second[0].id] and second[1] == "done"
    assert second[0]._dtype == np.float32 and second[0]._shape == ()  # known without a round trip


# -- bit for bit with eager training ----------------------------------------------


def _transformer_run(tt: Any, address: str,
                     captured: bool) -> Tuple[List[np.ndarray], Dict[str, np.ndarray], List[gradtape.ProgramInfo]]:
    cfg = tt.Config(n_layer=1, d_model=16, n_head=2, context=16, d_ff=32, dropout=0.1)
    text = tt.load_text()[:20000]
    vocab = tt.Vocab(text)
    tokens = vocab.encode(text)
    rng = np.random.default_rng(7)
    with gradtape.connect(address) as s:
        data = s.constant(tokens)
        model = tt.Transformer(s, cfg, len(vocab), seed=3)
        opts = tt.make_optimizers(model, 3e-3, 0.01)
        dropout = tt.DropoutStream(4)
        step = tt.make_step(model, data, opts, dropout.key, captured)
        losses = [tt.train_step(model, data, tt.batch_starts(rng, len(tokens), 4, cfg.context), opts, dropout, step)
                  for _ in range(STEPS)]
        values = [l.numpy() for l in losses]
        params = {n: v.numpy() for n, v in model.vars.items()}
        programs = s.programs() if captured else []
    return values, params, programs


def test_transformer_100_captured_steps_equal_the_eager_ones_bit_for_bit(tt: Any, server_address: str) -> None:
    eager, eager_params, _ = _transformer_run(tt, server_address, captured=False)
    captured, captured_params, programs = _transformer_run(tt, server_address, captured=True)
    assert len(programs) == 1  # AdamW's slots made on the first call: that trace is not kept
    # Its calls after the first ran the plan: the gradient's ops as steps,
    # no tape (fewer steps than the program's forward and backward: loops
    # and folded layouts).
    (info,) = programs
    assert info.not_planned == "" and info.plan_steps > 0
    assert eager[-1] < eager[0]  # it trains
    differing = [i for i, (a, b) in enumerate(zip(eager, captured)) if not np.array_equal(a, b)]
    assert not differing, f"{len(differing)} losses differ, the first at step {differing[0]}"
    for name, value in eager_params.items():
        assert np.array_equal(value, captured_params[name]), name


def _digits_run(td: Any, address: str,
                captured: bool) -> Tuple[List[np.ndarray], List[np.ndarray], List[gradtape.ProgramInfo]]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    rng = np.random.default_rng(5)
    with gradtape.connect(address) as s:
        train_x, train_y = s.constant(x), s.constant(y)
        model = td.MLP(s, [64, 32, 32, 10], seed=5)
        step = td.make_step(model, optimizers.Adam(learning_rate=1e-2), train_x, train_y, captured)
        losses = [step(s.constant(rng.integers(0, len(x), size=32).astype(np.int32))) for _ in range(STEPS)]
        return [l.numpy() for l in losses], [p.numpy() for p in model.params], s.programs()


def test_digits_100_captured_steps_equal_the_eager_ones_bit_for_bit(td: Any, server_address: str) -> None:
    eager, eager_params, _ = _digits_run(td, server_address, captured=False)
    captured, captured_params, programs = _digits_run(td, server_address, captured=True)
    assert [p.not_planned for p in programs] == [""] and programs[0].plan_steps > programs[0].steps
    assert eager[-1] < eager[0]
    differing = [i for i, (a, b) in enumerate(zip(eager, captured)) if not np.array_equal(a, b)]
    assert not differing, f"{len(differing)} losses differ, the first at step {differing[0]}"
    for i, (a, b) in enumerate(zip(eager_params, captured_params)):
        assert np.array_equal(a, b), f"parameter {i}"


# -- tracing ----------------------------------------------------------------------


def test_a_new_shape_dtype_or_python_value_traces_again(gt: gradtape.Session) -> None:
    traced: List[Any] = []

    @gradtape.function(session=gt)  # (a call with a numpy array names no session)
    def f(x: gradtape.Tensor, scale: float) -> gradtape.Tensor:
        traced.append((x.dtype, x.shape, scale))  # a Python side effect: at tracing only
        return x * scale + x

    a = gt.constant(np.arange(3, dtype=np.float32))
    assert np.array_equal(f(a, 2.0).numpy(), [0, 3, 6])
    assert np.array_equal(f(gt.constant(np.ones(3, np.float32)), 2.0).numpy(), [3, 3, 3])  # a call
    assert np.array_equal(f(a, 3.0).numpy(), [0, 4, 8])  # new value
    assert np.array_equal(f(gt.constant(np.ones(2, np.float32)), 2.0).numpy(), [3, 3])  # new shape
    assert np.array_equal(f(gt.constant(np.ones(3, np.float64)), 2.0).numpy(), [3, 3, 3])  # new dtype
    assert np.array_equal(f(np.ones(3, np.float32), 3.0).numpy(), [4, 4, 4])  # numpy: a tensor, same signature
    assert f.experimental_get_tracing_count() == 4 == len(traced)
    assert len(gt.programs()) == 4
    info = gt.programs()
    assert all(p.params == 1 and p.outputs == 1 for p in info)
    assert sum(p.calls for p in info) == 2


def test_a_garbage_collected_function_deletes_its_programs(gt: gradtape.Session) -> None:
    def make() -> Any:
        @gradtape.function(session=gt)
        def f(x: gradtape.Tensor) -> gradtape.Tensor:
            return x * 2.0

        return f

    f = make()
    x = gt.constant(np.arange(3, dtype=np.float32))
    f(x)
    f(gt.constant(np.ones(2, np.float32)))  # a second signature: a second program
    assert len(gt.programs()) == 2
    del f
    gc.collect()
    assert len(gt.programs()) == 2  # deleted with the next definition, not from the finalizer
    g = make()
    assert np.array_equal(g(x).numpy(), [0, 2, 4])
    (info,) = gt.programs()
    assert info.program_id == 3
    assert np.array_equal(g(x).numpy(), [0, 2, 4])  # g's program still runs


def test_another_threads_commands_during_a_trace_are_neither_recorded_nor_held(gt: gradtape.Session) -> None:
    other: List[np.ndarray] = []

    def elsewhere() -> None:
        y = gt.constant(np.full(2, 5.0, np.float32))
        z = gt.ops.exp(y) - y  # two ops, sent on this thread's own
        other.append(z.numpy())
        del y, z  # releases: sent now, not deferred to the trace's end

    @gradtape.function(session=gt)
    def f(x: gradtape.Tensor) -> gradtape.Tensor:
        a = x + 1.0
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join(timeout=30)
        assert not thread.is_alive()
        return a * x

    x = gt.constant(np.arange(3, dtype=np.float32))
    assert np.array_equal(f(x).numpy(), [0, 2, 6])
    np.testing.assert_allclose(other[0], np.exp(np.float32(5.0)) - 5.0, rtol=1e-6)
    (info,) = gt.programs()
    assert info.steps == 2  # AddV2, Mul: the other thread's ops are not steps
    assert np.array_equal(f(gt.constant(np.ones(3, np.float32))).numpy(), [2, 2, 2])


def test_side_effects_run_only_when_tracing(gt: gradtape.Session) -> None:
    v = gt.Variable(np.float32(0.0))
    log: List[str] = []

    @gradtape.function
    def bump(x: gradtape.Tensor) -> None:
        log.append("traced")
        v.assign_add(x)

    one = gt.constant(np.float32(1.0))
    for _ in range(5):
        bump(one)
    assert log == ["traced"] and v.numpy() == 5.0  # the effect on the server: every call


def test_input_signature_checks_calls_and_traces_per_concrete_shape(gt: gradtape.Session) -> None:
    @gradtape.function(input_signature=[gradtape.TensorSpec([None, 2], np.float32)], session=gt)
    def f(x: gradtape.Tensor) -> gradtape.Tensor:
        return gt.ops.sum(x, axis=[0])

    assert np.array_equal(f(gt.constant(np.ones((3, 2), np.float32))).numpy(), [3, 3])
    assert np.array_equal(f(np.ones((3, 2), np.float32)).numpy(), [3, 3])
    assert np.array_equal(f(gt.constant(np.ones((5, 2), np.float32))).numpy(), [5, 5])
    assert f.experimental_get_tracing_count() == 2  # a program per concrete shape
    with pytest.raises(TypeError, match="Can not cast"):
        f(gt.constant(np.ones((3, 3), np.float32)))
    with pytest.raises(TypeError, match="Can not cast"):
        f(gt.constant(np.ones((3, 2), np.float64)))
    with pytest.raises(TypeError):
        f(gt.constant(np.ones((3, 2), np.float32)), gt.constant(np.ones((3, 2), np.float32)))


def test_a_trace_that_creates_variables_is_traced_again(gt: gradtape.Session) -> None:
    w = gt.Variable(np.ones((2, 2), np.float32))
    opt = optimizers.Adam(learning_rate=0.1)

    @gradtape.function
    def step(x: gradtape.Tensor) -> gradtape.Tensor:
        with gt.GradientTape() as tape:
            loss = gt.ops.sum(x @ w, axis=[0, 1])
        opt.apply_gradients([(tape.gradient(loss, w), w)])  # Adam's slots on the first call
        return loss

    x = gt.constant(np.ones((1, 2), np.float32))
    for _ in range(4):
        step(x)
    assert step.experimental_get_tracing_count() == 2
    (info,) = gt.programs()
    assert info.calls == 2


def test_a_trace_that_reads_a_value_runs_eagerly_with_one_warning(gt: gradtape.Session) -> None:
    v = gt.Variable(np.float32(1.0))

    @gradtape.function
    def f(x: gradtape.Tensor) -> gradtape.Tensor:
        y = x * 2.0
        if float(y) > 0:  # a value read: no program can hold the branch
            v.assign_add(y)
        return y

    x = gt.constant(np.float32(1.5))
    with pytest.warns(RuntimeWarning, match="runs eagerly.*value read"):
        f(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f(x).numpy() == 3.0
        assert f(x).numpy() == 3.0
    assert v.numpy() == 10.0
    assert f.experimental_get_tracing_count() == 1
    assert gt.programs() == []


def test_tf_function_takes_tensorflows_arguments(gtf: Any) -> None:
    calls: List[int] = []

    @gtf.function(input_signature=[gtf.TensorSpec([2], gtf.float32)], jit_compile=True, reduce_retracing=True,
                  autograph=False, experimental_relax_shapes=True, name="double")
    def double(x: Any) -> Any:
        calls.append(1)
        return x * 2.0

    for _ in range(3):
        assert np.array_equal(double(gtf.constant([1.0, 2.0])).numpy(), [2.0, 4.0])
    assert double.experimental_get_tracing_count() == 1 == len(calls)
    with pytest.raises(TypeError):
        double(gtf.constant([1.0, 2.0, 3.0]))

    @gtf.function
    def plain(x: Any) -> Any:
        return x + 1.0

    assert plain(gtf.constant(1.0)).numpy() == 2.0 and plain(gtf.constant(2.0)).numpy() == 3.0


# -- tapes and failures -------------------------------------------------------------


def _outer_gradients(gt: gradtape.Session, read_variable: bool) -> None:
    """z = f(x) under an outer tape, eager and captured: z, dz/dx and (with
    `read_variable`) dz/dw of a variable f reads, bit for bit equal."""
    w = gt.Variable(np.array([[0.5, -1.0], [2.0, 0.25]], np.float32))
    wc = gt.constant(np.array([[0.5, -1.0], [2.0, 0.25]], np.float32))

    def f(x: gradtape.Tensor) -> gradtape.Tensor:
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = gt.ops.sum(gt.ops.tanh(x @ (w if read_variable else wc)), axis=[0, 1])
        (dx,) = inner.gradient(y, [x])
        return y + gt.ops.sum(dx * dx, axis=[0, 1])  # second order through the call

    captured = gradtape.function(f)
    x = gt.constant(np.array([[0.3, -0.7]], np.float32))
    captured(x)  # the trace
    results = []
    for fn in (f, captured):
        with gt.GradientTape() as outer:
            outer.watch(x)
            z = fn(x)
        sources = [x, w] if read_variable else [x]
        grads = outer.gradient(z, sources)  # w: watched as an accessed variable
        assert all(g is not None for g in grads)
        results.append([z.numpy()] + [g.numpy() for g in grads])
    assert captured.experimental_get_tracing_count() == 1
    for eager, call in zip(*results):
        assert np.array_equal(eager, call)


def test_a_call_inside_an_outer_tape_is_differentiable(gt: gradtape.Session) -> None:
    _outer_gradients(gt, read_variable=False)


def test_a_call_inside_an_outer_tape_differentiates_the_variables_it_reads(gt: gradtape.Session) -> None:
    _outer_gradients(gt, read_variable=True)


def test_a_step_failing_at_run_time_raises_at_the_wait_point_and_changes_nothing(gt: gradtape.Session) -> None:
    table = gt.constant(np.arange(6, dtype=np.float32).reshape(3, 2))
    v = gt.Variable(np.float32(0.0))

    @gradtape.function
    def f(idx: gradtape.Tensor) -> gradtape.Tensor:
        v.assign_add(gt.constant(np.float32(1.0)))
        return gt.ops.gather_v2(table, idx, axis=0)  # after the update: its failure undoes it

    assert np.array_equal(f(gt.constant(np.array([1], np.int32))).numpy(), [[2, 3]])
    assert np.array_equal(f(gt.constant(np.array([2], np.int32))).numpy(), [[4, 5]])
    assert v.numpy() == 2.0
    bad = f(gt.constant(np.array([7], np.int32)))  # out of range: the call's step fails
    with pytest.raises(gradtape.GradtapeError) as failure:
        gt.sync()
    assert "GatherV2" in str(failure.value)
    with pytest.raises(gradtape.GradtapeError):
        bad.numpy()
    assert v.numpy() == 2.0  # the call's AssignAddVariableOp undone
    assert np.array_equal(f(gt.constant(np.array([0], np.int32))).numpy(), [[0, 1]])
    assert v.numpy() == 3.0
