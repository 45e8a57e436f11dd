"""Custom gradients in TensorFlow's shape, over the server's
ExecuteWithGradient::

    @gradtape.custom_gradient
    def log1pexp(x):
        e = ops.exp(x)
        def grad(upstream):
            return upstream * (1 - 1 / (1 + e))
        return ops.log(1 + e), grad

How it works. The server computes gradients, so the Python ``grad``
function cannot be called back at gradient time: it is *traced* once, when
the decorated function runs, into a straight-line program of server ops
(GradientStep). While it is traced, the session's backend is a recorder:
each op becomes a step, the upstream gradient is a placeholder, tensors of
the session it reads (x, e above, variables, constants made on the fly)
are captured by id; nothing runs. ``grad`` must therefore compute with ops
only (no ``.numpy()``, no Python branches on values).

The forward runs as any code does (its ops are recorded, as TensorFlow
records them, and forward mode sees them: ``acc.jvp(y)`` is the forward
JVP), and the result is connected to the inputs by one recorded link per
differentiable input: ExecuteWithGradient of ``Select(True, y, carrier)``,
whose value is exactly ``y`` and whose backward gives the carrier that
input's traced gradient and y itself nothing (so the forward's own ops
never add a gradient). The carrier is the input itself when it has y's shape and dtype; an input
that broadcasts to y's shape is carried by ``BroadcastTo``; any other
shape by ``BroadcastTo(x, [m] + x.shape)`` (about size(y) + size(x)
elements) flattened, gathered and reshaped to y's shape, the program's
first steps recovering the upstream from what reaches the broadcast (see
``_carrier``). Limits: one output tensor (a clear error otherwise); an
integer output records nothing.

With ``variables`` (TensorFlow's rule): when the function reads variables,
``grad(upstream, variables=...)`` gets them and returns ``(input_grads,
variable_grads)``; each variable's value read becomes one more input.
Forward mode ignores custom gradients (the server's rule): the JVP is that
of the forward's ops, as in TensorFlow. Variable.read_value is wrapped while
the function runs to see which variables it reads (not thread-safe with
another thread reading variables meanwhile).
"""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from gradtape import _backend, _dtypes
from gradtape._tensor import Tensor, Variable
from gradtape.v1 import tape_service_pb2 as pb

if TYPE_CHECKING:
    from gradtape.session import Session

Converter = Callable[[Any], Tensor]


class _TracingBackend:
    """Records ops as GradientSteps instead of sending them (see the module
    docstring). Traced values get negative ids, never sent; real ids (puts
    made while tracing, captured tensors) are real tensors of the session."""

    def __init__(self, real: _backend.Backend, upstream_id: int) -> None:
        self._real = real
        self._next = -1
        self.upstream_id = upstream_id
        # traced id -> (step index, output)
        self.produced: Dict[int, Tuple[int, int]] = {}
        self.steps: List[Tuple[str, List[int], Optional[List[_backend.EncodedAttr]]]] = []
        self.deferred_releases: List[int] = []

    # -- the parts of Backend a session uses while tracing ----------------
    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def new_traced_id(self) -> int:
        i = self._next
        self._next -= 1
        return i

    def execute(
        self, op: str, input_ids: Sequence[int], num_outputs: int, attrs: Optional[List[_backend.EncodedAttr]]
    ) -> int:
        step = len(self.steps)
        self.steps.append((op, list(input_ids), attrs))
        first = self._next - num_outputs + 1  # ids first .. first+num_outputs-1 ascending
        for k in range(num_outputs):
            self.produced[first + k] = (step, k)
        self._next = first - 1
        return first

    def put(self, tensor_id: int, array: np.ndarray) -> None:
        self._real.put(tensor_id, array)

    def release(self, tensor_id: int) -> None:
        if tensor_id > 0:
            self.deferred_releases.append(tensor_id)

    def fetch(self, tensor_id: int) -> np.ndarray:
        raise RuntimeError(
            "custom_gradient: the grad function is traced into a server program, so it "
            f"cannot read tensor values (tensor {tensor_id}); compute with ops only"
        )

    def call(self, command: pb.Command) -> pb.CommandResult:
        raise RuntimeError("custom_gradient: the grad function cannot wait on the server (it is traced)")

    def enqueue(self, command: pb.Command) -> int:
        raise RuntimeError(
            f"custom_gradient: the grad function can only run ops (it is traced); it sent a {command.WhichOneof('kind')}"
        )


def _ref(tracer: _TracingBackend, tensor_id: int, upstream: pb.GradientRef) -> pb.GradientRef:
    if tensor_id == tracer.upstream_id:
        r = pb.GradientRef()
        r.CopyFrom(upstream)
        return r
    if tensor_id in tracer.produced:
        step, output = tracer.produced[tensor_id]
        return pb.GradientRef(step=pb.GradientRef.StepOutput(step=step, output=output))
    return pb.GradientRef(tensor_id=tensor_id)


def _program(
    tracer: _TracingBackend, result_id: int, prologue: Sequence[pb.GradientStep] = ()
) -> Tuple[List[pb.GradientStep], pb.GradientRef]:
    """The steps `result_id` needs (renumbered, after `prologue`), and the
    reference to it. With a prologue, the traced upstream is its last
    step's output; otherwise the op's upstream 0."""
    needed: Set[int] = set()
    stack = [result_id]
    while stack:
        i = stack.pop()
        if i in tracer.produced:
            step = tracer.produced[i][0]
            if step not in needed:
                needed.add(step)
                stack.extend(tracer.steps[step][1])
    first = len(prologue)
    upstream = (
        pb.GradientRef(step=pb.GradientRef.StepOutput(step=first - 1, output=0))
        if prologue
        else pb.GradientRef(upstream=0)
    )
    order = sorted(needed)
    renumber = {old: first + new for new, old in enumerate(order)}

    def ref(i: int) -> pb.GradientRef:
        r = _ref(tracer, i, upstream)
        if r.WhichOneof("ref") == "step" and i in tracer.produced:
            r.step.step = renumber[r.step.step]
        return r

    steps: List[pb.GradientStep] = list(prologue)
    for old in order:
        op, input_ids, attrs = tracer.steps[old]
        s = pb.GradientStep(op=op)
        for i in input_ids:
            s.inputs.append(ref(i))
        for name, kind, value in attrs or []:
            _backend.to_pb_attr(s.attrs[name], kind, value)
        steps.append(s)
    return steps, ref(result_id)


def _trace_grad(
    session: "Session", y: Tensor, grad_fn: Callable[..., Any], variables: List[Variable]
) -> Tuple[_TracingBackend, List[Any], List[Any]]:
    """Runs grad_fn on a placeholder upstream with the session recording
    into a tracer; returns it and the (input, variable) results."""
    real = session._core
    tracer = _TracingBackend(real, 0)
    tracer.upstream_id = tracer.new_traced_id()
    tapes = session._tapes
    was_active = tapes.active
    session._core = tracer
    tapes.active = False
    failure: Optional[BaseException] = None
    try:
        upstream = Tensor(session, tracer.upstream_id, y._dtype, y._shape)
        if variables:
            out = grad_fn(upstream, variables=variables)
            if not (isinstance(out, (list, tuple)) and len(out) == 2):
                raise TypeError(
                    "custom_gradient: with variables, grad must return (input_gradients, variable_gradients)"
                )
            input_grads, var_grads = out
            var_grads = list(var_grads) if isinstance(var_grads, (list, tuple)) else [var_grads]
        else:
            input_grads, var_grads = grad_fn(upstream), []
        if not isinstance(input_grads, (list, tuple)):
            input_grads = [input_grads]
        results = [_as_traced(session, g, y) for g in input_grads]
        var_results = [_as_traced(session, g, y) for g in var_grads]
        del upstream
    except Exception as e:
        # Drop the traceback while the tracer is still installed: its frames
        # hold traced handles, whose releases must not reach the server.
        failure = e.with_traceback(None)
        del e
    finally:
        session._core = real
        tapes.active = was_active
    if failure is not None:
        raise failure
    return tracer, results, var_results


def _as_traced(session: "Session", g: Any, y: Tensor) -> Any:
    if g is None or isinstance(g, Tensor):
        return g
    if isinstance(g, Variable):
        return g.read_value()
    return session.constant(np.asarray(g, dtype=y._dtype))


def _broadcastable(shape: Tuple[int, ...], to: Tuple[int, ...]) -> bool:
    try:
        return np.broadcast_shapes(shape, to) == to
    except ValueError:
        return False


def _check_link(y: Tensor, x: Tensor, name: str, index: int) -> None:
    if x._shape is None or y._shape is None:
        raise ValueError(f"custom_gradient {name}: the shapes of input {index} and of the output must be known")


def _ints(name: str, values: Sequence[int]) -> Tuple[str, int, List[int]]:
    return (name, _backend.ATTR_INTS, [int(v) for v in values])


def _execute_with_gradient(
    session: "Session",
    op: str,
    inputs: Sequence[Tensor],
    attrs: Sequence[Tuple[str, int, Any]],
    steps: Sequence[pb.GradientStep],
    input_gradients: Sequence[Optional[pb.GradientRef]],
    dtype: Optional[np.dtype],
    shape: Tuple[int, ...],
) -> Tensor:
    """Buffers ExecuteWithGradient of a one-output `op`; returns its output
    (reported to the TapeSet as an op with a client-given backward)."""
    core = session._core
    out = core.new_id()
    command = pb.Command(
        execute_with_gradient=pb.ExecuteWithGradient(
            op=pb.ExecuteOp(op=op, input_ids=[t.id for t in inputs], output_ids=[out]),
            steps=list(steps),
            input_gradients=[pb.InputGradient() if g is None else pb.InputGradient(ref=g) for g in input_gradients],
        )
    )
    for a_name, kind, value in attrs:
        _backend.to_pb_attr(command.execute_with_gradient.op.attrs[a_name], kind, value)
    core.enqueue(command)
    result = Tensor(session, out, dtype, shape)
    session._tapes.on_custom_execute(list(inputs), [result])
    return result


def _carrier(
    session: "Session", y: Tensor, x: Tensor, tracer: _TracingBackend, grad_id: int
) -> Tuple[Tensor, Optional[pb.GradientRef], List[pb.GradientStep]]:
    """A tensor of y's shape and dtype recorded as depending on x, whose
    gradient reaching it is the upstream of y; x gets the traced gradient.
    Returns it, and the steps / result of the Select link's gradient for it.

    * x of y's shape and dtype: x itself (the link's program computes x's
      gradient);
    * x broadcastable to y's shape: BroadcastTo(x) with the program;
    * otherwise: c = BroadcastTo(x, [m] + x.shape) with m * size(x) >= size(y)
      carrying the program (its first steps recover the upstream: flatten,
      gather the first size(y) entries, reshape to y's shape), then
      Reshape, GatherV2 and Reshape to y's shape with their own backwards
      (which put the upstream into those first entries). Values do not
      matter: Select takes y's.
    Then a Cast to y's dtype if x's differs (its backward casts back)."""
    assert x._shape is not None and y._shape is not None
    if x._shape == y._shape and x._dtype == y._dtype:
        steps, ref = _program(tracer, grad_id)
        return x, ref, steps
    # The upstream reaching the carrier op has x's dtype: a Cast step gives
    # the traced program y's (exactly: x's dtype is the wider one or equal).
    cast: List[pb.GradientStep] = []
    if x._dtype != y._dtype and y._dtype is not None:
        cast = [pb.GradientStep(op="Cast")]
        _backend.to_pb_attr(cast[0].attrs["DstT"], _backend.ATTR_TYPE, _dtypes.to_pb_dtype(y._dtype))
    if _broadcastable(x._shape, y._shape):
        if cast:
            cast[0].inputs.append(pb.GradientRef(upstream=0))
        steps, ref = _program(tracer, grad_id, cast)
        c = _execute_with_gradient(
            session, "BroadcastTo", [x], [_ints("shape", y._shape)], steps, [ref], x._dtype, y._shape
        )
    else:
        n_y, n_x = int(np.prod(y._shape)), max(1, int(np.prod(x._shape)))
        m = -(-n_y // n_x)
        wide = (m,) + tuple(x._shape)
        index = session.constant(np.arange(n_y, dtype=np.int64))
        prologue = [
            pb.GradientStep(op="Reshape", inputs=[pb.GradientRef(upstream=0)]),
            pb.GradientStep(
                op="GatherV2",
                inputs=[pb.GradientRef(step=pb.GradientRef.StepOutput(step=0)), pb.GradientRef(tensor_id=index.id)],
            ),
            pb.GradientStep(op="Reshape", inputs=[pb.GradientRef(step=pb.GradientRef.StepOutput(step=1))]),
        ]
        _backend.to_pb_attr(prologue[0].attrs["shape"], _backend.ATTR_INTS, [m * n_x])
        _backend.to_pb_attr(prologue[1].attrs["axis"], _backend.ATTR_INT, 0)
        _backend.to_pb_attr(prologue[2].attrs["shape"], _backend.ATTR_INTS, list(y._shape))
        if cast:
            cast[0].inputs.append(pb.GradientRef(step=pb.GradientRef.StepOutput(step=2)))
        steps, ref = _program(tracer, grad_id, prologue + cast)
        c = _execute_with_gradient(session, "BroadcastTo", [x], [_ints("shape", wide)], steps, [ref], x._dtype, wide)
        flat = session.execute("Reshape", [c], {"shape": [m * n_x]})[0]
        taken = session.execute("GatherV2", [flat, index], {"axis": 0})[0]
        c = session.execute("Reshape", [taken], {"shape": list(y._shape)})[0]
        c._shape = y._shape
    if c._dtype != y._dtype:
        c = session.execute("Cast", [c], {"DstT": y._dtype})[0]
    c._dtype, c._shape = y._dtype, y._shape
    return c, pb.GradientRef(upstream=0), []


def _link(session: "Session", y: Tensor, x: Tensor, tracer: _TracingBackend, grad_id: int, first: bool) -> Tensor:
    """y, recorded as depending on x with the traced gradient as x's:
    Select(True, y, carrier) with a client-given backward. The first link
    gives the function's own result no gradient (its ops were recorded, as
    in TensorFlow, but the custom gradient replaces them); later links pass
    the upstream on to the earlier ones."""
    carrier, carrier_grad, steps = _carrier(session, y, x, tracer, grad_id)
    true = session.scalar(True, np.bool_)
    assert y._shape is not None
    return _execute_with_gradient(
        session,
        "Select",
        [true, y, carrier],
        [],
        steps,
        [None, None if first else pb.GradientRef(upstream=0), carrier_grad],
        y._dtype,
        y._shape,
    )


class _VariableReads:
    """Collects the variables read in a block (TensorFlow's VariableWatcher)."""

    def __init__(self, session: "Session") -> None:
        self._session = session
        self.variables: List[Variable] = []
        self._original: Any = None

    def __enter__(self) -> "_VariableReads":
        original = Variable.read_value
        self._original = original
        seen = self.variables

        def read_value(var: Variable) -> Tensor:
            if var.session is self._session and var.trainable and all(v is not var for v in seen):
                seen.append(var)
            return original(var)

        Variable.read_value = read_value  # type: ignore[method-assign,assignment]
        Variable.value = read_value  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: Any) -> None:
        Variable.read_value = self._original  # type: ignore[method-assign]
        Variable.value = self._original


def _session_of(values: Sequence[Any]) -> Optional["Session"]:
    for v in values:
        if isinstance(v, (Tensor, Variable)):
            return v.session
    return None


def _accepts_variables(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True
    return "variables" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def call_with_custom_gradient(
    f: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Dict[str, Any],
    session: Optional["Session"] = None,
    convert: Optional[Converter] = None,
) -> Any:
    """Runs ``f(*args, **kwargs)`` (which returns ``(y, grad)``) and returns
    y recorded with grad as its gradient (see the module docstring)."""
    name = getattr(f, "__name__", "function")
    if session is None:
        session = _session_of(list(args) + list(kwargs.values()))
    if session is None:
        raise ValueError(f"custom_gradient {name}: no argument is a gradtape Tensor (no session to run on)")
    conv: Converter = convert if convert is not None else session.convert_to_tensor
    inputs: List[Tensor] = [
        a.read_value() if isinstance(a, Variable) else conv(a) if not isinstance(a, Tensor) else a for a in args
    ]
    with _VariableReads(session) as reads:
        y, grad_fn = f(*inputs, **kwargs)  # recorded as TF does; the links override
    if isinstance(y, (list, tuple)):
        if len(y) != 1:
            raise NotImplementedError(f"custom_gradient {name}: gradtape supports one output tensor, got {len(y)}")
        y = y[0]
    if isinstance(y, Variable):
        y = y.read_value()
    if not isinstance(y, Tensor):
        y = conv(y)
    variables = reads.variables
    if variables and not _accepts_variables(grad_fn):
        raise TypeError(
            f"custom_gradient {name}: the function reads variables "
            f"({', '.join(v.name or str(v.handle.id) for v in variables)}), so grad must accept "
            "a keyword argument 'variables' (TensorFlow's rule)"
        )
    if y._dtype is not None and y._dtype.kind not in "fc":
        return y  # nothing differentiable flows through an integer result
    if y._shape is None:
        y._shape = tuple(y.shape)  # waits: the links need it
    tracer, results, var_results = _trace_grad(session, y, grad_fn, variables)
    if len(results) != len(inputs):
        raise ValueError(
            f"custom_gradient {name}: grad returned {len(results)} input gradients for {len(inputs)} inputs"
        )
    if len(var_results) != len(variables):
        raise ValueError(
            f"custom_gradient {name}: grad returned {len(var_results)} variable gradients for "
            f"{len(variables)} variables"
        )
    result_ids: List[Optional[int]] = []
    for r in results + var_results:
        result_ids.append(None if r is None else r.id)
        if r is not None and r.id < 0:
            setattr(r, "_session", _NullSession())  # traced: never released on the server
    keep_alive = [r for r in results + var_results if r is not None]  # real ones live until sent
    sources = list(zip(inputs, result_ids[: len(inputs)])) + [
        (v.read_value(), g) for v, g in zip(variables, result_ids[len(inputs) :])
    ]
    for index, (x, g) in enumerate(sources):  # every check before anything is sent
        if g is not None and _differentiable(x):
            if x._shape is None:
                x._shape = tuple(x.shape)
            _check_link(y, x, name, index)
    out = y
    for x, g in sources:
        if g is not None and _differentiable(x):
            out = _link(session, out, x, tracer, g, first=out is y)
    if out is y and session._tapes.active:
        # no input gets a gradient: y's own ops must not give one either
        out = _execute_with_gradient(session, "Identity", [y], [], [], [None], y._dtype, y._shape or ())
    del keep_alive
    for i in tracer.deferred_releases:
        session._core.release(i)
    return out


def _differentiable(x: Tensor) -> bool:
    return x._dtype is None or x._dtype.kind in "fc"


class _NullCore:
    def release(self, tensor_id: int) -> None:
        pass


class _NullSession:
    _core = _NullCore()


def custom_gradient(f: Optional[Callable[..., Any]] = None) -> Any:
    """TensorFlow's ``@tf.custom_gradient``: `f(*x)` returns ``(y, grad)``
    with ``grad(upstream)`` giving the gradient of each x (a tensor, or a
    list with one per x; None for none); if f reads variables,
    ``grad(upstream, variables=None)`` returns ``(input_grads,
    variable_grads)``. The decorated function returns y, recorded on the
    tapes with grad as its gradient. See gradtape._custom's docstring for
    how grad is traced and the limits."""
    if f is None:
        return custom_gradient

    @functools.wraps(f)
    def decorated(*args: Any, **kwargs: Any) -> Any:
        return call_with_custom_gradient(f, args, kwargs)

    return decorated
