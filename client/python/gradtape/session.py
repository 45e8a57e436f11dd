"""Sessions, tensor handles, variables and gradient tapes.

Everything here is a thin, pipelined view of server state: a ``Tensor`` is an
id in one session, a ``Variable`` is a VarHandleOp resource, a
``GradientTape`` is a tape id. Calls that only change server state are
buffered and return at once; ``Tensor.numpy()``, ``Session.sync()``,
``GradientTape.gradient_values()``, ``Session.stats()`` and closing wait, and
raise a ``GradtapeError`` for the earliest failed command not reported yet.
"""

from __future__ import annotations

import contextlib
import keyword
import re
import threading
from typing import (
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import grpc
import numpy as np

from gradtape import _chunks, _dtypes, _transport
from gradtape._core import StreamCore
from gradtape.errors import GradtapeError
from gradtape.v1 import tape_service_pb2 as pb

ArrayLike = Any  # anything np.asarray accepts
TensorLike = Union["Tensor", "Variable", ArrayLike]


def snake_case(name: str) -> str:
    """TensorFlow's op-name -> Python function name rule (python_op_gen):
    MatMul -> mat_mul, AddV2 -> add_v2, Conv2D -> conv2d, L2Loss -> l2_loss,
    MaxPool3DGrad -> max_pool3d_grad."""
    out = []
    for i, c in enumerate(name):
        if c.isupper() and i > 0 and name[i - 1] != "_":
            prev_lower = name[i - 1].islower()
            next_lower = i + 1 < len(name) and name[i + 1].islower()
            if prev_lower or next_lower:
                out.append("_")
        out.append(c.lower())
    result = "".join(out)
    return result + "_" if keyword.iskeyword(result) else result


# ---------------------------------------------------------------------------
# Tensors


class Tensor:
    """A handle to a tensor held by the server: an id in one session.

    Handles are cheap and never wait. When the Python object is garbage
    collected, a ReleaseTensors for its id is buffered (sent with the next
    batch), which frees the server's tensor and lets tapes forget it.

    A handle may name a tensor whose command is still in flight or failed;
    using it then fails on the server, and ``numpy()`` raises the failure.

    Operators run server ops: ``+`` AddV2, ``-`` Sub, ``*`` Mul, ``/``
    RealDiv, ``@`` MatMul, unary ``-`` Neg, ``**`` (integer powers 2 only:
    Square), ``<`` ``<=`` ``>`` ``>=`` Less/LessEqual/Greater/GreaterEqual.
    Python numbers and numpy arrays are converted to constants of this
    tensor's dtype.
    """

    __slots__ = ("_session", "_id", "_dtype", "_shape", "__weakref__")
    __array_ufunc__ = None  # numpy defers to our reflected operators

    def __init__(
        self,
        session: "Session",
        tensor_id: int,
        dtype: Optional[np.dtype] = None,
        shape: Optional[Tuple[int, ...]] = None,
    ) -> None:
        self._session = session
        self._id = tensor_id
        self._dtype = dtype
        self._shape = shape

    def __del__(self) -> None:
        try:
            self._session._core.release(self._id)
        except Exception:  # interpreter shutdown
            pass

    @property
    def id(self) -> int:
        """The tensor's id in its session."""
        return self._id

    @property
    def session(self) -> "Session":
        return self._session

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype. Known without a round trip for constants, variable
        reads, gradients and most op outputs; otherwise fetched (waits)."""
        if self._dtype is None:
            self._dtype = self.numpy().dtype
        return self._dtype

    @property
    def shape(self) -> Tuple[int, ...]:
        """The shape. Known for constants; otherwise fetched (waits)."""
        if self._shape is None:
            self._shape = tuple(self.numpy().shape)
        return self._shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numpy(self) -> np.ndarray:
        """Wait point: the value as a numpy array."""
        array = _chunks.fetch(self._session._core, self._id)  # chunked if large
        if self._dtype is None:
            self._dtype = array.dtype
        if self._shape is None:
            self._shape = array.shape
        return array

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        array = self.numpy()
        return array if dtype is None else array.astype(dtype)

    def __float__(self) -> float:
        return float(self.numpy())

    def __int__(self) -> int:
        return int(self.numpy())

    def __repr__(self) -> str:
        dtype = self._dtype.name if self._dtype is not None else "?"
        shape = self._shape if self._shape is not None else "?"
        return f"<gradtape.Tensor id={self._id} dtype={dtype} shape={shape}>"

    def __bool__(self) -> bool:
        raise TypeError(
            "the truth value of a gradtape.Tensor is not defined; use .numpy() to read it"
        )

    # -- operators -------------------------------------------------------
    def _binary(self, op: str, other: TensorLike, reverse: bool = False) -> "Tensor":
        s = self._session
        o = s.convert_to_tensor(other, dtype_hint=self._dtype)
        return s.execute(op, [o, self] if reverse else [self, o])[0]

    def __add__(self, other: TensorLike) -> "Tensor":
        return self._binary("AddV2", other)

    def __radd__(self, other: TensorLike) -> "Tensor":
        return self._binary("AddV2", other, reverse=True)

    def __sub__(self, other: TensorLike) -> "Tensor":
        return self._binary("Sub", other)

    def __rsub__(self, other: TensorLike) -> "Tensor":
        return self._binary("Sub", other, reverse=True)

    def __mul__(self, other: TensorLike) -> "Tensor":
        return self._binary("Mul", other)

    def __rmul__(self, other: TensorLike) -> "Tensor":
        return self._binary("Mul", other, reverse=True)

    def __truediv__(self, other: TensorLike) -> "Tensor":
        return self._binary("RealDiv", other)

    def __rtruediv__(self, other: TensorLike) -> "Tensor":
        return self._binary("RealDiv", other, reverse=True)

    def __matmul__(self, other: TensorLike) -> "Tensor":
        return self._binary("MatMul", other)

    def __rmatmul__(self, other: TensorLike) -> "Tensor":
        return self._binary("MatMul", other, reverse=True)

    def __neg__(self) -> "Tensor":
        return self._session.execute("Neg", [self])[0]

    def __pos__(self) -> "Tensor":
        return self

    def __pow__(self, exponent: Any) -> "Tensor":
        if isinstance(exponent, (int, float)) and exponent == 2:
            return self._session.execute("Square", [self])[0]
        if isinstance(exponent, (int, float)) and exponent == 0.5:
            return self._session.execute("Sqrt", [self])[0]
        raise NotImplementedError("gradtape.Tensor supports ** 2 and ** 0.5 only")

    def __lt__(self, other: TensorLike) -> "Tensor":
        return self._binary("Less", other)

    def __le__(self, other: TensorLike) -> "Tensor":
        return self._binary("LessEqual", other)

    def __gt__(self, other: TensorLike) -> "Tensor":
        return self._binary("Greater", other)

    def __ge__(self, other: TensorLike) -> "Tensor":
        return self._binary("GreaterEqual", other)

    @property
    def T(self) -> "Tensor":
        """Transpose (reverses the axes; needs the rank, known for constants)."""
        return self._session.execute("Transpose", [self], {"perm": list(range(self.ndim))[::-1]})[0]


# ---------------------------------------------------------------------------
# Variables


class Variable:
    """A server-side resource variable (VarHandleOp + AssignVariableOp).

    Passing a Variable to an op reads it (ReadVariableOp), as TensorFlow
    does, except at the inputs that take the resource itself (ListOps'
    resource_inputs: ResourceApply*, Assign*VariableOp, ...), which get the
    handle. Reading a
    variable inside a ``GradientTape(watch_accessed_variables=True)`` (the
    default) watches it, so ``tape.gradient(loss, variable)`` works.
    """

    def __init__(
        self,
        session: "Session",
        initial_value: TensorLike,
        dtype: Optional[_dtypes.DTypeLike] = None,
        name: Optional[str] = None,
        trainable: bool = True,
    ) -> None:
        if isinstance(initial_value, Variable):
            initial_value = initial_value.read_value()
        if isinstance(initial_value, Tensor):
            value = initial_value
            if dtype is not None and _dtypes.as_numpy_dtype(dtype) != value.dtype:
                value = session.execute("Cast", [value], {"DstT": dtype})[0]
        else:
            value = session.constant(initial_value, dtype=dtype)
        self._session = session
        self._dtype: np.dtype = value.dtype
        self._shape: Tuple[int, ...] = tuple(value.shape)
        self.trainable = trainable
        attrs: Dict[str, Any] = {"dtype": self._dtype, "shape": list(self._shape)}
        if name:
            attrs["shared_name"] = name
        self._name = name
        (self._handle,) = session.execute("VarHandleOp", [], attrs)
        self._handle._dtype = _dtypes.RESOURCE
        self._handle._shape = ()
        session.execute("AssignVariableOp", [self._handle, value])

    @property
    def handle(self) -> Tensor:
        """The resource handle (VarHandleOp's output)."""
        return self._handle

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def shape(self) -> Tuple[int, ...]:
        return self._shape

    @property
    def name(self) -> Optional[str]:
        return self._name

    @property
    def session(self) -> "Session":
        return self._session

    def read_value(self) -> Tensor:
        """A tensor holding the variable's current value (ReadVariableOp).
        Later assigns do not change it."""
        (t,) = self._session.execute("ReadVariableOp", [self._handle], {"dtype": self._dtype})
        t._dtype, t._shape = self._dtype, self._shape
        return t

    value = read_value

    def numpy(self) -> np.ndarray:
        """Wait point: the current value."""
        return self.read_value().numpy()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        array = self.numpy()
        return array if dtype is None else array.astype(dtype)

    def _as_value(self, value: TensorLike) -> Tensor:
        if isinstance(value, Variable):
            value = value.read_value()
        return self._session.convert_to_tensor(value, dtype=self._dtype)

    def assign(self, value: TensorLike) -> "Variable":
        """Buffers AssignVariableOp (same dtype and shape); returns self."""
        self._session.execute("AssignVariableOp", [self._handle, self._as_value(value)])
        return self

    def assign_add(self, delta: TensorLike) -> "Variable":
        """variable += delta (AssignAddVariableOp when the server has it)."""
        return self._update("AssignAddVariableOp", "AddV2", delta)

    def assign_sub(self, delta: TensorLike) -> "Variable":
        """variable -= delta (AssignSubVariableOp when the server has it)."""
        return self._update("AssignSubVariableOp", "Sub", delta)

    def _update(self, resource_op: str, op: str, delta: TensorLike) -> "Variable":
        d = self._as_value(delta)
        if self._session.has_op(resource_op):
            self._session.execute(resource_op, [self._handle, d])
        else:
            self.assign(self._session.execute(op, [self.read_value(), d])[0])
        return self

    def __repr__(self) -> str:
        return (
            f"<gradtape.Variable name={self._name!r} dtype={self._dtype.name} "
            f"shape={self._shape} handle={self._handle.id}>"
        )

    # Arithmetic reads the variable first.
    def __add__(self, o: TensorLike) -> Tensor:
        return self.read_value() + o

    def __radd__(self, o: TensorLike) -> Tensor:
        return o + self.read_value()

    def __sub__(self, o: TensorLike) -> Tensor:
        return self.read_value() - o

    def __rsub__(self, o: TensorLike) -> Tensor:
        return o - self.read_value()

    def __mul__(self, o: TensorLike) -> Tensor:
        return self.read_value() * o

    def __rmul__(self, o: TensorLike) -> Tensor:
        return o * self.read_value()

    def __truediv__(self, o: TensorLike) -> Tensor:
        return self.read_value() / o

    def __matmul__(self, o: TensorLike) -> Tensor:
        return self.read_value() @ o

    def __rmatmul__(self, o: TensorLike) -> Tensor:
        return o @ self.read_value()

    def __neg__(self) -> Tensor:
        return -self.read_value()


# ---------------------------------------------------------------------------
# Gradient tapes

Sources = Any  # a Tensor, a Variable, or a (nested) list / tuple / dict of them


class GradientTape:
    """A gradient tape on the server, used as a context manager::

        with session.GradientTape() as tape:
            tape.watch(x)
            y = session.ops.tanh(x @ w)
        dx = tape.gradient(y, x)      # a Tensor handle, no wait
        dx.numpy()                    # waits

    Entering pushes the tape (it records every op that touches what it
    watches, and variables read while ``watch_accessed_variables``);
    leaving pops it (it stops recording but can still compute gradients).
    A non-persistent tape computes one gradient; a second fails with
    FAILED_PRECONDITION. The server frees the tape when this object is
    garbage collected. Tapes nest: an outer tape records the ops the inner
    tape's gradient runs, so gradients of gradients work.
    """

    def __init__(
        self, session: "Session", persistent: bool = False, watch_accessed_variables: bool = True
    ) -> None:
        self._session = session
        self._persistent = persistent
        self._watch_accessed_variables = watch_accessed_variables
        self._id = 0
        self._recording = False

    @property
    def id(self) -> int:
        return self._id

    @property
    def persistent(self) -> bool:
        return self._persistent

    def __enter__(self) -> "GradientTape":
        if self._id:
            raise RuntimeError("a GradientTape can be entered once")
        core = self._session._core
        self._id = core.new_tape_id()
        core.enqueue(
            pb.Command(
                push_tape=pb.PushTape(
                    tape_id=self._id,
                    persistent=self._persistent,
                    watch_accessed_variables=self._watch_accessed_variables,
                )
            )
        )
        self._recording = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        """Pops the tape (idempotent)."""
        if self._recording:
            self._recording = False
            self._session._core.enqueue(pb.Command(pop_tape=pb.PopTape(tape_id=self._id)))

    def __del__(self) -> None:
        try:
            if self._id:
                self._session._core.delete_tape(self._id, pop_first=self._recording)
        except Exception:
            pass

    def _check_entered(self, what: str) -> None:
        if not self._id:
            raise RuntimeError(f"GradientTape.{what}: use the tape in a `with` block first")

    def watch(self, tensors: Sources) -> None:
        """Watches tensors or variables (a single one or a nested structure)."""
        self._check_entered("watch")
        flat = _flatten(tensors)
        ids = [self._session._source_id(t, f"watch[{i}]") for i, t in enumerate(flat)]
        self._session._core.enqueue(pb.Command(watch=pb.Watch(tape_id=self._id, ids=ids)))

    def _gradient_command(
        self,
        target: Any,
        sources: Sources,
        output_gradients: Any,
        unconnected_gradients: Any,
    ) -> Tuple[pb.Command, List[Any], List[Tensor]]:
        self._check_entered("gradient")
        s = self._session
        targets = _flatten(target)
        flat_sources = _flatten(sources)
        if not targets or not flat_sources:
            raise ValueError(
                f"GradientTape.gradient on tape {self._id}: needs at least one target and one "
                f"source, got {len(targets)} and {len(flat_sources)}"
            )
        unconnected = _unconnected(unconnected_gradients)
        out_ids: List[int] = []
        if output_gradients is not None:
            grads = _flatten(output_gradients, keep_none=True)
            if len(grads) != len(targets):
                raise ValueError(
                    f"GradientTape.gradient on tape {self._id}: output_gradients must have one "
                    f"entry per target ({len(targets)}), got {len(grads)}"
                )
            for i, (g, t) in enumerate(zip(grads, targets)):
                if g is None:
                    out_ids.append(0)  # ones
                else:
                    hint = t._dtype if isinstance(t, Tensor) else None
                    out_ids.append(s._input_id(s.convert_to_tensor(g, dtype_hint=hint), f"output_gradients[{i}]"))
        target_ids = [s._input_id(s._read_if_variable(t), f"target[{i}]") for i, t in enumerate(targets)]
        source_ids = [s._source_id(x, f"source[{i}]") for i, x in enumerate(flat_sources)]
        results = []
        for x in flat_sources:
            dtype = x.dtype if isinstance(x, Variable) else x._dtype
            shape = x.shape if isinstance(x, Variable) else x._shape
            results.append(Tensor(s, s._core.new_id(), dtype, shape))
        command = pb.Command(
            gradient=pb.Gradient(
                tape_id=self._id,
                target_ids=target_ids,
                source_ids=source_ids,
                output_gradient_ids=out_ids,
                unconnected=unconnected,
                result_ids=[r.id for r in results],
            )
        )
        return command, flat_sources, results

    def gradient(
        self,
        target: Any,
        sources: Sources,
        output_gradients: Any = None,
        unconnected_gradients: Union[str, "UnconnectedGradients"] = "none",
    ) -> Any:
        """d(sum of targets)/d(source) for each source, as Tensor handles in
        the structure of `sources` (no wait).

        Args:
          target: a Tensor or a list of Tensors (their gradients are summed).
          sources: a Tensor, a Variable, or a nested list / tuple / dict of them.
          output_gradients: None, or one per target: the gradient flowing into
            that target (None entries mean ones).
          unconnected_gradients: "none" or "zero". With "zero" an unconnected
            source gets zeros. With "none" (TensorFlow's default) it gets a
            handle to a None gradient: any use of it fails with
            FAILED_PRECONDITION saying so. Call ``gradient_values`` to get
            Python ``None`` for those instead.
        """
        command, _, results = self._gradient_command(
            target, sources, output_gradients, unconnected_gradients
        )
        self._session._core.enqueue(command)
        return _pack_like(sources, results)

    def gradient_values(
        self,
        target: Any,
        sources: Sources,
        output_gradients: Any = None,
        unconnected_gradients: Union[str, "UnconnectedGradients"] = "none",
    ) -> Any:
        """Wait point: like ``gradient`` but returns numpy arrays (``None`` for
        an unconnected source with unconnected_gradients="none")."""
        command, _, results = self._gradient_command(
            target, sources, output_gradients, unconnected_gradients
        )
        command.gradient.return_values = True
        result = self._session._core.call(command)
        values = result.gradient
        if len(values.values) != len(results):
            raise GradtapeError(
                grpc.StatusCode.INTERNAL,
                f"gradient on tape {self._id}: the server's result for command {result.seq} "
                "does not hold one value per source",
                seq=result.seq,
            )
        out: List[Optional[np.ndarray]] = []
        for i, v in enumerate(values.values):
            none = i < len(values.is_none) and values.is_none[i]
            out.append(None if none else _dtypes.from_value(v))
        return _pack_like(sources, out)

    def jacobian(
        self,
        target: Any,
        sources: Sources,
        unconnected_gradients: Union[str, "UnconnectedGradients"] = "none",
    ) -> Any:
        """d target / d source for each source (TensorFlow's
        ``tape.jacobian``), computed on the server by one Jacobian command (no
        round trip per row): Tensor handles of shape target.shape +
        source.shape, in the structure of `sources`, without waiting.
        An unconnected source gets, with "none", a handle to a None result
        (using it fails, as for ``gradient``), with "zero" zeros. A
        non-persistent tape computes one Jacobian."""
        return self._jacobian(target, sources, unconnected_gradients, batch=False)

    def batch_jacobian(
        self,
        target: Any,
        sources: Sources,
        unconnected_gradients: Union[str, "UnconnectedGradients"] = "none",
    ) -> Any:
        """TensorFlow's ``tape.batch_jacobian``: target and sources share
        their first (batch) dim, row b of the target depends only on row b of
        the sources; results have shape [batch] + target.shape[1:] +
        source.shape[1:]. Handles, no wait."""
        return self._jacobian(target, sources, unconnected_gradients, batch=True)

    def _jacobian(self, target: Any, sources: Sources, unconnected_gradients: Any, batch: bool) -> Any:
        self._check_entered("jacobian")
        s = self._session
        flat_sources = _flatten(sources)
        if not flat_sources:
            raise ValueError(f"GradientTape.jacobian on tape {self._id}: needs at least one source")
        target_id = s._input_id(s._read_if_variable(target), "target")
        source_ids = [s._source_id(x, f"source[{i}]") for i, x in enumerate(flat_sources)]
        results = []
        for x in flat_sources:
            dtype = x.dtype if isinstance(x, Variable) else x._dtype
            results.append(Tensor(s, s._core.new_id(), dtype))
        s._core.enqueue(
            pb.Command(
                jacobian=pb.Jacobian(
                    tape_id=self._id,
                    target_id=target_id,
                    source_ids=source_ids,
                    unconnected=_unconnected(unconnected_gradients),
                    batch=batch,
                    result_ids=[r.id for r in results],
                )
            )
        )
        return _pack_like(sources, results)


class UnconnectedGradients:
    """TensorFlow's names for the unconnected-gradient modes."""

    NONE = "none"
    ZERO = "zero"


def _unconnected(value: Any) -> int:
    v = str(value).lower()
    if v in ("none", "unconnectedgradients.none"):
        return pb.UNCONNECTED_NONE
    if v in ("zero", "unconnectedgradients.zero"):
        return pb.UNCONNECTED_ZERO
    raise ValueError(f'unconnected_gradients must be "none" or "zero", got {value!r}')


def _flatten(structure: Any, keep_none: bool = False) -> List[Any]:
    if isinstance(structure, (list, tuple)):
        return [y for x in structure for y in _flatten(x, keep_none)]
    if isinstance(structure, Mapping):
        return [y for k in sorted(structure) for y in _flatten(structure[k], keep_none)]
    if structure is None and not keep_none:
        return []
    return [structure]


def _pack_like(structure: Any, flat: List[Any]) -> Any:
    it = iter(flat)

    def pack(s: Any) -> Any:
        if isinstance(s, (list, tuple)):
            items = [pack(x) for x in s]
            return type(s)(items) if not hasattr(s, "_fields") else type(s)(*items)
        if isinstance(s, Mapping):
            return {k: pack(s[k]) for k in sorted(s)}
        return next(it)

    return pack(structure)


# ---------------------------------------------------------------------------
# Ops generated from ListOps


_TO_REAL = {np.dtype(np.complex64): np.dtype(np.float32), np.dtype(np.complex128): np.dtype(np.float64)}
_TO_COMPLEX = {v: k for k, v in _TO_REAL.items()}


def _attr_dtype(info: pb.OpInfo, attrs: Mapping[str, Any], name: str) -> Optional[np.dtype]:
    """The type attr `name` as given, else its declared default (None: unset)."""
    if name in attrs:
        try:
            return _dtypes.as_numpy_dtype(attrs[name])
        except TypeError:
            return None  # the server reports the bad attr
    for a in info.attrs:
        if a.name == name and a.default_value.WhichOneof("value") == "type" and a.default_value.type:
            return _dtypes.from_pb_dtype(a.default_value.type)
    return None


def _output_dtypes(info: Optional[pb.OpInfo], inputs: Sequence[Tensor], attrs: Mapping[str, Any]) -> List[Optional[np.dtype]]:
    """Each output's dtype by the rules the server declares in ListOps
    (OpInfo.output_dtypes); None where a rule leaves it open (an input of
    unknown dtype, ReadVariableOp without its dtype attr, a server that
    sends no rules): Tensor.dtype then asks the server."""
    if info is None:
        return []
    dtypes: List[Optional[np.dtype]] = []
    for rule in info.output_dtypes:
        kind = rule.WhichOneof("rule")
        d: Optional[np.dtype] = None
        if kind == "from_attr":
            d = _attr_dtype(info, attrs, rule.from_attr)
        elif kind == "fixed":
            d = _dtypes.from_pb_dtype(rule.fixed) if rule.fixed else None
        elif kind is not None:
            i = getattr(rule, kind)
            d = inputs[i]._dtype if i < len(inputs) else None
            if d is not None and kind == "real_of_input":
                d = _TO_REAL.get(d, d)
            elif d is not None and kind == "complex_of_input":
                d = _TO_COMPLEX.get(d)
        dtypes.append(d)
    return dtypes


class OpFunction:
    """A callable for one registered op: inputs positionally or by their
    names, attrs by name. Returns a Tensor (one output), a tuple named after
    the outputs (several) or None (none)."""

    def __init__(self, session: "Session", info: pb.OpInfo) -> None:
        self._session = session
        self.info = info
        self.name = info.name
        self.__name__ = snake_case(info.name)
        self._inputs = list(info.input_names)
        self._attrs = {a.name: a for a in info.attrs}
        # Inputs that take a variable handle (ListOps): a Variable passed
        # there is passed as its handle, elsewhere read.
        self._resource_inputs = set(info.resource_inputs)
        self._outputs_type = (
            NamedTuple(info.name + "Outputs", [(snake_case(n) or f"output_{i}", Any) for i, n in enumerate(info.output_names)])
            if len(info.output_names) > 1
            else None
        )
        self.__doc__ = self._doc()

    def _doc(self) -> str:
        info = self.info
        lines = [f"{info.name}({', '.join(info.input_names)}) -> {', '.join(info.output_names) or 'nothing'}"]
        if info.summary:
            lines += ["", info.summary]
        if info.attrs:
            lines += ["", "Attrs:"]
            for a in info.attrs:
                default = "required" if a.required else f"default {_attr_python(a.default_value)!r}"
                lines.append(f"  {a.name}: {a.type} ({default})")
        lines += [
            "",
            f"differentiable: {info.differentiable}; the tape keeps inputs "
            f"{list(info.saved_inputs)} and outputs {list(info.saved_outputs)}",
        ]
        return "\n".join(lines)

    def __call__(self, *args: TensorLike, **kwargs: Any) -> Any:
        s = self._session
        if len(args) > len(self._inputs):
            raise TypeError(f"{self.__name__}: {self.name} takes {len(self._inputs)} inputs, got {len(args)}")
        values: List[Any] = list(args)
        for name in self._inputs[len(args):]:
            if name not in kwargs:
                raise TypeError(f"{self.__name__}: missing input {name!r} of {self.name}")
            values.append(kwargs.pop(name))
        attrs = kwargs
        tensors: List[Tensor] = []
        hint = None
        for v in values:
            d = v.dtype if isinstance(v, Variable) else v._dtype if isinstance(v, Tensor) else None
            if d is not None and d != _dtypes.RESOURCE:
                hint = d
                break
        for i, v in enumerate(values):
            if isinstance(v, Variable):
                tensors.append(v.handle if i in self._resource_inputs else v.read_value())
            else:
                tensors.append(s.convert_to_tensor(v, dtype_hint=hint))
        outputs = s.execute(self.name, tensors, attrs, num_outputs=len(self.info.output_names))
        if not outputs:
            return None
        if len(outputs) == 1:
            return outputs[0]
        return self._outputs_type(*outputs)

    def __repr__(self) -> str:
        return f"<gradtape op {self.name} as {self.__name__}>"


def _attr_python(value: pb.AttrValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ints":
        return list(value.ints.values)
    if kind == "type":
        return _dtypes.from_pb_dtype(value.type).name if value.type else None
    return getattr(value, kind)


class Ops:
    """The server's ops as Python functions, built from ListOps when the
    session connects, named like TensorFlow's raw ops in snake_case
    (``MatMul`` -> ``mat_mul``, ``AddV2`` -> ``add_v2``, ``Conv2D`` ->
    ``conv2d``). ``ops["MatMul"]`` also works. A new server op is usable
    without a client release; ``help(session.ops.mat_mul)`` shows its
    inputs, attrs and what the tape keeps for its backward."""

    def __init__(self, session: "Session", infos: Iterable[pb.OpInfo]) -> None:
        self._by_name: Dict[str, OpFunction] = {}
        for info in infos:
            fn = OpFunction(session, info)
            self._by_name[info.name] = fn
            setattr(self, fn.__name__, fn)

    def __getitem__(self, op_name: str) -> OpFunction:
        return self._by_name[op_name]

    def __contains__(self, op_name: str) -> bool:
        return op_name in self._by_name

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._by_name))

    def __dir__(self) -> List[str]:
        return sorted(fn.__name__ for fn in self._by_name.values())


# ---------------------------------------------------------------------------
# Sessions


class SessionStats(NamedTuple):
    """gradtape.v1.SessionStats."""

    live_tensors: int
    poisoned_ids: int
    bytes_in_use: int
    tapes: int
    tape_entries: int
    tape_saved_bytes: int
    # Commands applied (or failed) since the session was created, and
    # duplicates the server skipped (resent after a reconnect).
    commands_applied: int = 0
    duplicate_commands: int = 0


class Session:
    """A session on a gradtape server. Use ``gradtape.connect(address)``.

    A context manager: leaving the ``with`` block closes the session
    (waiting for outstanding commands, then CloseSession). Thread-safe for
    buffering; typically one thread drives a session.
    """

    def __init__(self, core: StreamCore) -> None:
        self._core = core
        response = core.unary(
            "ListOps",
            lambda t: core.stub.ListOps(pb.ListOpsRequest(), metadata=core.metadata, timeout=t),
        )
        self._op_infos = {op.name: op for op in response.ops}
        self.ops = Ops(self, response.ops)
        self._constants: Dict[Tuple[Any, str], Tensor] = {}

    # -- lifecycle -------------------------------------------------------
    @property
    def id(self) -> str:
        """The session id (32 hex digits)."""
        return self._core.session_id

    @property
    def keep_alive_seconds(self) -> int:
        return self._core.keep_alive_seconds

    @property
    def closed(self) -> bool:
        return self._core.closed

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.close()
        else:  # keep the original exception
            try:
                self.close()
            except GradtapeError:
                pass

    def close(self) -> None:
        """Waits for outstanding commands (bounded), ends the stream and
        closes the server session. Raises the first unreported error.
        Idempotent."""
        self._constants.clear()
        self._core.close()

    def sync(self, timeout: Optional[float] = None) -> None:
        """Wait point: sends everything buffered and waits for the replies;
        raises the earliest unreported command error."""
        self._core.sync(timeout)

    def flush(self) -> None:
        """Sends the buffered commands without waiting."""
        self._core.flush()

    def keep_alive(self) -> None:
        """Refreshes the session's lease (unary KeepAlive)."""
        self._core.keep_alive()

    def stats(self) -> SessionStats:
        """Wait point: the server's statistics for this session."""
        r = self._core.call(pb.Command(stats=pb.Stats())).stats
        return SessionStats(
            r.live_tensors,
            r.poisoned_ids,
            r.bytes_in_use,
            r.tapes,
            r.tape_entries,
            r.tape_saved_bytes,
            r.commands_applied,
            r.duplicate_commands,
        )

    @property
    def last_seq(self) -> int:
        """Sequence number of the last command buffered (what error messages
        quote as "command N")."""
        return self._core.last_seq()

    @property
    def counters(self) -> Dict[str, int]:
        """Client-side counters: commands and batches sent."""
        return {"commands_sent": self._core.commands_sent, "batches_sent": self._core.batches_sent}

    def transport_stats(self) -> Dict[str, int]:
        """Client-side counters of transport failures and resumes:
        transport_failures, reconnect_attempts, reconnects, batches_resent,
        commands_resent, resent_already_applied (resent commands the server
        had applied: it skips them), duplicate_results, refetches."""
        return self._core.transport_stats()

    # -- tensors -----------------------------------------------------------
    def constant(self, value: ArrayLike, dtype: Optional[_dtypes.DTypeLike] = None) -> Tensor:
        """Buffers a PutTensor of `value` (anything np.asarray accepts)."""
        array = np.asarray(value, dtype=None if dtype is None else _dtypes.as_numpy_dtype(dtype))
        if array.dtype == np.dtype(np.float16) or array.dtype.kind == "U":
            raise TypeError(f"gradtape has no dtype for numpy {array.dtype}")
        t = Tensor(self, self._core.new_id(), array.dtype, tuple(array.shape))
        _chunks.put(self._core, t.id, array)  # chunked if large
        return t

    def convert_to_tensor(
        self,
        value: TensorLike,
        dtype: Optional[_dtypes.DTypeLike] = None,
        dtype_hint: Optional[np.dtype] = None,
    ) -> Tensor:
        """`value` as a Tensor of this session: Tensors pass through (checked
        to belong here), Variables are read, the rest becomes a constant
        (Python numbers take `dtype_hint`'s dtype, as TensorFlow converts
        them to the other operand's dtype)."""
        if isinstance(value, Tensor):
            if value._session is not self:
                raise ValueError(f"tensor {value.id} belongs to another gradtape session")
            return value
        if isinstance(value, Variable):
            if value.session is not self:
                raise ValueError("the variable belongs to another gradtape session")
            return value.read_value()
        if dtype is None and dtype_hint is not None and dtype_hint != _dtypes.RESOURCE:
            array = np.asarray(value)
            if isinstance(value, (bool, int, float, complex, list, tuple)) or array.ndim == 0:
                converted = array.astype(dtype_hint)
                if not np.array_equal(converted, array):
                    raise TypeError(
                        f"cannot convert {value!r} to a gradtape constant of dtype {dtype_hint} "
                        "without loss (cast one operand first)"
                    )
                dtype = dtype_hint
        return self.constant(value, dtype=dtype)

    def _read_if_variable(self, value: Any) -> Tensor:
        if isinstance(value, Variable):
            return value.read_value()
        if not isinstance(value, Tensor):
            raise TypeError(f"expected a gradtape Tensor or Variable, got {type(value).__name__}")
        return value

    def _input_id(self, t: Tensor, role: str) -> int:
        if not isinstance(t, Tensor):
            raise TypeError(f"{role}: expected a gradtape Tensor, got {type(t).__name__}")
        if t._session is not self:
            raise ValueError(f"{role} (id {t.id}) belongs to another gradtape session")
        return t.id

    def _source_id(self, x: Any, role: str) -> int:
        """Gradient sources and watched things: a Variable's handle, a Tensor's id."""
        if isinstance(x, Variable):
            if x.session is not self:
                raise ValueError(f"{role}: the variable belongs to another gradtape session")
            return x.handle.id
        return self._input_id(x, role)

    def execute(
        self,
        op: str,
        inputs: Sequence[Tensor],
        attrs: Optional[Mapping[str, Any]] = None,
        num_outputs: Optional[int] = None,
    ) -> List[Tensor]:
        """Buffers an ExecuteOp of `op` and returns handles to its outputs.

        Attrs are converted by their declared type (ListOps): bool, int,
        float, string, type (numpy dtype or name), list(int).
        `num_outputs` defaults to the registry's count for `op`.
        """
        attrs = dict(attrs or {})
        info = self._op_infos.get(op)
        if num_outputs is None:
            num_outputs = len(info.output_names) if info is not None else 1
        input_ids = [self._input_id(t, f"{op}: input {i}") for i, t in enumerate(inputs)]
        dtypes = _output_dtypes(info, inputs, attrs)
        outputs = []
        for i in range(num_outputs):
            dtype = dtypes[i] if i < len(dtypes) else None
            outputs.append(Tensor(self, self._core.new_id(), dtype))
        execute = pb.ExecuteOp(op=op, input_ids=input_ids, output_ids=[o.id for o in outputs])
        declared = {a.name: a.type for a in info.attrs} if info is not None else {}
        for name, value in attrs.items():
            _set_attr(execute.attrs[name], value, declared.get(name), op, name)
        self._core.enqueue(pb.Command(execute=execute))
        return outputs

    def has_op(self, op: str) -> bool:
        """Whether the server registers `op` (as of connecting)."""
        return op in self._op_infos

    def list_ops(self) -> List[pb.OpInfo]:
        """The registry as the server reported it when the session connected."""
        return list(self._op_infos.values())

    def scalar(self, value: float, dtype: _dtypes.DTypeLike) -> Tensor:
        """A cached scalar constant (for learning rates and the like)."""
        d = _dtypes.as_numpy_dtype(dtype)
        key = (value, d.str)
        t = self._constants.get(key)
        if t is None:
            t = self._constants[key] = self.constant(np.asarray(value, dtype=d))
        return t

    # -- variables and tapes ---------------------------------------------
    def Variable(  # noqa: N802 (TensorFlow's spelling)
        self,
        initial_value: TensorLike,
        dtype: Optional[_dtypes.DTypeLike] = None,
        name: Optional[str] = None,
        trainable: bool = True,
    ) -> "Variable":
        """A server-side variable holding `initial_value` (VarHandleOp +
        AssignVariableOp, buffered). Its shape is fixed at creation."""
        return Variable(self, initial_value, dtype=dtype, name=name, trainable=trainable)

    def GradientTape(  # noqa: N802 (TensorFlow's spelling)
        self, persistent: bool = False, watch_accessed_variables: bool = True
    ) -> GradientTape:
        """A tape to use in a ``with`` block; see gradtape.GradientTape."""
        return GradientTape(self, persistent=persistent, watch_accessed_variables=watch_accessed_variables)

    @contextlib.contextmanager
    def stop_recording(self) -> Iterator[None]:
        """Stops recording on every tape of the session inside the block."""
        self._core.enqueue(pb.Command(stop_recording=pb.StopRecording()))
        try:
            yield
        finally:
            self._core.enqueue(pb.Command(start_recording=pb.StartRecording()))


def _set_attr(out: pb.AttrValue, value: Any, declared: Optional[str], op: str, name: str) -> None:
    try:
        if declared == "bool" or (declared is None and isinstance(value, (bool, np.bool_))):
            out.b = bool(value)
        elif declared == "int" or (declared is None and isinstance(value, (int, np.integer))):
            out.i = int(value)
        elif declared == "float" or (declared is None and isinstance(value, (float, np.floating))):
            out.f = float(value)
        elif declared == "string" or (declared is None and isinstance(value, str)):
            out.s = str(value)
        elif declared == "type" or (declared is None and isinstance(value, (np.dtype, type))):
            out.type = _dtypes.to_pb_dtype(value)
        elif declared == "list(int)" or (declared is None and isinstance(value, (list, tuple))):
            out.ints.values.extend(int(v) for v in value)
        else:
            raise TypeError(f"unsupported attr type {declared or type(value).__name__}")
    except (TypeError, ValueError) as e:
        raise TypeError(f"{op}: attr {name!r} ({declared or 'undeclared'}): {e}") from None


def connect(
    address: str,
    *,
    session_id: Optional[str] = None,
    keep_alive_seconds: int = 0,
    batch_size: int = 512,
    max_batch_bytes: int = 16 << 20,
    chunk_bytes: int = 64 << 20,
    timeout: float = 10.0,
    credentials: Optional[grpc.ChannelCredentials] = None,
    root_certificates: Optional[bytes] = None,
    private_key: Optional[bytes] = None,
    certificate_chain: Optional[bytes] = None,
    server_name_override: Optional[str] = None,
    keepalive_time: Optional[float] = None,
    keepalive_timeout: float = 20.0,
    keepalive_permit_without_calls: bool = False,
    api_key: Optional[str] = None,
    reconnect_timeout: float = 30.0,
) -> Session:
    """Connects to a gradtape server and creates a session.

    Args:
      address: "host:port".
      session_id: proposed id (32 lowercase hex digits); default 128 random
        bits. Sent as `gradtape-session-id` metadata so a proxy can route on it.
      keep_alive_seconds: idle time after which the server collects the
        session (0: the server's default).
      batch_size: commands per batch; the buffer is also sent at wait points.
      max_batch_bytes: the buffer is also sent once it holds this many bytes.
      chunk_bytes: tensors larger than this move in chunks of this many bytes
        (puts: PutTensorBegin, then one PutTensorChunk per batch; fetches ask
        for at most this many bytes, the rest pipelined). A chunk must fit
        the server's message limit (--max_message_mb, 256 MiB by default).
      timeout: seconds for connecting and for each unary call.
      credentials: a grpc.ChannelCredentials; None (with no PEM argument) for
        plaintext, fine on loopback. Exclusive with the PEM arguments below
        (ValueError).
      root_certificates: PEM bytes of the CAs that sign the server's
        certificate: the channel uses TLS (None with a key: gRPC's default
        roots).
      private_key, certificate_chain: PEM bytes of the client's certificate
        (mTLS, for a server started with --tls_client_ca_file); both or
        neither (ValueError).
      server_name_override: the name the server's certificate must hold
        instead of the address's host.
      keepalive_time: seconds between HTTP/2 keepalive pings (None: no pings).
        gradtape-server refuses pings more often than every
        --keepalive_min_ping_interval_seconds (10 s by default).
      keepalive_timeout: seconds to wait for a ping's acknowledgement.
      keepalive_permit_without_calls: also ping with no call open.
      api_key: the key of a server started with --api_keys_file, sent as
        `authorization: Bearer <key>` on every call; None for none. Send keys
        over TLS except on loopback.
      reconnect_timeout: after a transport failure (the stream ends with
        UNAVAILABLE, INTERNAL or UNKNOWN not sent by the server: a dropped
        connection, a proxy's reset), the client reconnects with backoff for
        at most this many seconds since the last reply, opens a new stream
        on the same session and resends the commands not yet acknowledged
        (the server applies each seq once). Past it, every wait point raises
        a SessionLostError (UNAVAILABLE "... unreachable for T s ...").
        0: off, the first transport failure loses the session. Also bounds
        retries of a CreateSession that fails in transport (each with a new
        random id, unless `session_id` is given).

    Returns:
      A Session (a context manager that closes it).
    """
    core = StreamCore(
        address,
        session_id=session_id,
        keep_alive_seconds=keep_alive_seconds,
        batch_size=batch_size,
        max_batch_bytes=max_batch_bytes,
        chunk_bytes=chunk_bytes,
        timeout=timeout,
        credentials=_transport.make_credentials(
            credentials, root_certificates, private_key, certificate_chain
        ),
        channel_options=_transport.channel_options(
            server_name_override=server_name_override,
            keepalive_time=keepalive_time,
            keepalive_timeout=keepalive_timeout,
            keepalive_permit_without_calls=keepalive_permit_without_calls,
        ),
        api_key=api_key,
        reconnect_timeout=reconnect_timeout,
    )
    try:
        return Session(core)
    except BaseException:
        core.close()
        raise
