"""Tensor handles and variables (internal; the names are gradtape's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from gradtape import _backend, _dtypes, _slicing

if TYPE_CHECKING:
    from gradtape.session import Session

ArrayLike = Any  # anything np.asarray accepts
TensorLike = Union["Tensor", "Variable", ArrayLike]

# ---------------------------------------------------------------------------
# Tensors


class Tensor:
    """A handle to a tensor held by the server: an id in one session.

    Handles are cheap and never wait. When the Python object is garbage
    collected, a ReleaseTensors for its id is buffered (sent with the next
    batch), which frees the server's tensor and lets tapes forget it.

    A handle may name a tensor whose command is still in flight or failed;
    using it then fails on the server, and ``numpy()`` raises the failure.

    The Python protocol is TensorFlow's: ``+`` AddV2, ``-`` Sub, ``*`` Mul,
    ``/`` RealDiv (integers divide as float64, as in TF), ``@`` MatMul,
    ``**`` Pow (Square for a float tensor ** 2), unary ``-`` Neg, ``abs``
    Abs, ``<`` ``<=`` ``>`` ``>=`` ``==`` ``!=`` the comparisons
    (elementwise: a Tensor is unhashable, use ``.ref()`` as a key), each
    reflected too; ``x[1:3, ..., None]`` StridedSlice. Python numbers,
    lists and numpy values convert to the tensor's dtype as TensorFlow
    converts them (floats round: ``0.1 * x`` is float32 for a float32 x;
    a float on an integer tensor raises TypeError). ``bool(x)``,
    ``int(x)``, ``float(x)``, ``format(x, spec)``, ``operator.index(x)``
    and ``numpy()`` wait for the value; ``len(x)`` and iteration need only
    the shape, which the client knows without a round trip for most ops.
    """

    # _conn: what the tape set (_tape.TapeSet) knows of this tensor's
    # connection to watched sources; None: connected to nothing.
    __slots__ = ("_session", "_id", "_dtype", "_shape", "_conn", "__weakref__")
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
        self._conn: Any = None

    def __del__(self) -> None:
        if self._id <= 0:
            # A placeholder traced by custom_gradient (negative ids), never
            # a server tensor: it may outlive the trace (a traceback frame
            # holding it), when its release would reach the real backend.
            return
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
        reads, gradients and every op output (ListOps' rules); otherwise
        fetched (waits)."""
        if self._dtype is None:
            self._dtype = self.numpy().dtype
        return self._dtype

    @property
    def shape(self) -> Tuple[int, ...]:
        """The shape. Known without a round trip for constants, variable
        reads, slices and the outputs of most ops (elementwise with
        broadcasting, MatMul, reductions, Reshape, Transpose, Cast, ...);
        otherwise fetched (waits)."""
        if self._shape is None:
            self._shape = tuple(self.numpy().shape)
        return self._shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numpy(self) -> np.ndarray:
        """Wait point: the value as a numpy array."""
        array = self._session._core.fetch(self._id)  # chunked if large
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

    def __index__(self) -> int:
        """Wait point: an integer scalar as a Python int (TypeError or
        AttributeError otherwise, as TensorFlow)."""
        index: int = self.numpy()[()].__index__()
        return index

    def __bool__(self) -> bool:
        """Wait point: the truth of a one-element tensor (ValueError for
        more elements), as TensorFlow eager."""
        return bool(self.numpy())

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise TypeError("Scalar tensor has no `len()`")
        return shape[0]

    def __iter__(self) -> Iterator["Tensor"]:
        shape = self.shape
        if not shape:
            raise TypeError("Cannot iterate over a scalar tensor.")
        for i in range(shape[0]):
            yield _slicing.strided_slice(self, i)

    def __format__(self, format_spec: str) -> str:
        return format(self.numpy(), format_spec)

    def __repr__(self) -> str:
        dtype = self._dtype.name if self._dtype is not None else "?"
        shape = self._shape if self._shape is not None else "?"
        return f"<gradtape.Tensor id={self._id} dtype={dtype} shape={shape}>"

    def __hash__(self) -> int:
        raise TypeError("Tensor is unhashable. Instead, use tensor.ref() as the key.")

    def ref(self) -> "Reference":
        """A hashable reference to this tensor (TensorFlow's ``ref()``)."""
        return Reference(self)

    def __getitem__(self, key: Any) -> "Tensor":
        return _slicing.strided_slice(self, key)

    # -- operators -------------------------------------------------------
    # A Tensor of the same session goes straight to Session._execute1; the
    # rest through _binary (conversion as TensorFlow's: soft for + / @
    # forward, strict elsewhere and reflected).
    def __add__(self, other: TensorLike) -> "Tensor":
        s = self._session
        if type(other) is not Tensor or other._session is not s:
            other = s._operand(other, self._dtype if self._dtype is not None else self.dtype, False)
        return s._execute1("AddV2", self, other)

    def __radd__(self, other: TensorLike) -> "Tensor":
        s = self._session
        return s._execute1("AddV2", s._operand(other, self._dtype if self._dtype is not None else self.dtype, True), self)

    def __sub__(self, other: TensorLike) -> "Tensor":
        s = self._session
        if type(other) is not Tensor or other._session is not s:
            other = s._operand(other, self._dtype if self._dtype is not None else self.dtype, True)
        return s._execute1("Sub", self, other)

    def __rsub__(self, other: TensorLike) -> "Tensor":
        s = self._session
        return s._execute1("Sub", s._operand(other, self._dtype if self._dtype is not None else self.dtype, True), self)

    def __mul__(self, other: TensorLike) -> "Tensor":
        s = self._session
        if type(other) is not Tensor or other._session is not s:
            other = s._operand(other, self._dtype if self._dtype is not None else self.dtype, True)
        return s._execute1("Mul", self, other)

    def __rmul__(self, other: TensorLike) -> "Tensor":
        s = self._session
        return s._execute1("Mul", s._operand(other, self._dtype if self._dtype is not None else self.dtype, True), self)

    def __truediv__(self, other: TensorLike) -> "Tensor":
        if type(other) is Tensor and other._session is self._session and self._dtype is not None and self._dtype is other._dtype and _FLOATING.get(self._dtype):
            return self._session._execute1("RealDiv", self, other)
        return _truediv(self, other, False)

    def __rtruediv__(self, other: TensorLike) -> "Tensor":
        return _truediv(self, other, True)

    def __matmul__(self, other: TensorLike) -> "Tensor":
        return _matmul(self, other, False)

    def __rmatmul__(self, other: TensorLike) -> "Tensor":
        return _matmul(self, other, True)

    def __neg__(self) -> "Tensor":
        return self._session._execute_unary("Neg", self)

    def __pos__(self) -> "Tensor":
        return self

    def __abs__(self) -> "Tensor":
        s = self._session
        if self.dtype.kind == "c":  # |z|, real (TF's ComplexAbs)
            if "ComplexAbs" in s._specs:
                return s._execute_unary("ComplexAbs", self)
            re = s._execute_unary("Real", self)
            im = s._execute_unary("Imag", self)
            return s._execute_unary("Sqrt", re * re + im * im)
        return s._execute_unary("Abs", self)

    def __pow__(self, exponent: TensorLike) -> "Tensor":
        s = self._session
        t = type(exponent)
        if (t is int or t is float) and exponent == 2 and _FLOATING.get(self.dtype):
            return s._execute_unary("Square", self)  # the same values and gradient as Pow(x, 2)
        if "Pow" not in s._specs:
            if (t is int or t is float) and exponent == 0.5:
                return s._execute_unary("Sqrt", self)
            raise NotImplementedError("gradtape: this server has no Pow; ** supports 2 and 0.5 only")
        return _binary(self, exponent, "Pow", False, True)

    def __rpow__(self, base: TensorLike) -> "Tensor":
        return _binary(self, base, "Pow", True, True)

    def __lt__(self, other: TensorLike) -> "Tensor":
        s = self._session
        if type(other) is not Tensor or other._session is not s:
            other = s._operand(other, self._dtype if self._dtype is not None else self.dtype, True)
        return s._execute1("Less", self, other)

    def __le__(self, other: TensorLike) -> "Tensor":
        s = self._session
        if type(other) is not Tensor or other._session is not s:
            other = s._operand(other, self._dtype if self._dtype is not None else self.dtype, True)
        return s._execute1("LessEqual", self, other)

    def __gt__(self, other: TensorLike) -> "Tensor":
        s = self._session
        if type(other) is not Tensor or other._session is not s:
            other = s._operand(other, self._dtype if self._dtype is not None else self.dtype, True)
        return s._execute1("Greater", self, other)

    def __ge__(self, other: TensorLike) -> "Tensor":
        s = self._session
        if type(other) is not Tensor or other._session is not s:
            other = s._operand(other, self._dtype if self._dtype is not None else self.dtype, True)
        return s._execute1("GreaterEqual", self, other)

    def __eq__(self, other: object) -> Any:  # elementwise, as TensorFlow 2
        return _equality(self, other, "Equal")

    def __ne__(self, other: object) -> Any:
        return _equality(self, other, "NotEqual")

    @property
    def T(self) -> "Tensor":
        """Transpose (reverses the axes; needs the rank, known for most tensors)."""
        return self._session.execute("Transpose", [self], {"perm": list(range(self.ndim))[::-1]})[0]


_NO_ATTRS: Dict[str, Any] = {}
_FLOATING = {np.dtype(d): True for d in (np.float32, np.float64, np.complex64, np.complex128)}
_TRUEDIV_CAST = {
    np.dtype(np.int32): np.dtype(np.float64),
    np.dtype(np.int64): np.dtype(np.float64),
    np.dtype(np.int16): np.dtype(np.float32),
    np.dtype(np.int8): np.dtype(np.float32),
    np.dtype(np.uint8): np.dtype(np.float32),
}


class Reference:
    """A hashable reference to a Tensor or Variable (TensorFlow's ``ref()``):
    equal to another reference of the same object; ``deref()`` returns it."""

    __slots__ = ("_obj",)

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    def deref(self) -> Any:
        return self._obj

    def __hash__(self) -> int:
        return id(self._obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Reference) and other._obj is self._obj

    def __repr__(self) -> str:
        return f"<Reference to {self._obj!r}>"


def _operand(x: Tensor, other: Any, strict: bool) -> Tensor:
    d = x._dtype if x._dtype is not None else x.dtype
    return x._session._operand(other, d, strict)


def _binary(x: Tensor, other: Any, op: str, reverse: bool, strict: bool) -> Tensor:
    """x op other (other op x if reverse), other converted to x's dtype."""
    o = _operand(x, other, strict)
    a, b = (o, x) if reverse else (x, o)
    s = x._session
    if op in s._specs:
        return s._execute1(op, a, b)
    return s.execute(op, [a, b])[0]  # the server names the missing op


def _truediv(x: Tensor, other: Any, reverse: bool) -> Tensor:
    """TensorFlow's ``/``: the same dtype on both sides (TypeError otherwise),
    integers divided as floats (int32, int64: float64), then RealDiv."""
    o = _operand(x, other, reverse)
    a, b = (o, x) if reverse else (x, o)
    if a.dtype != b.dtype:
        raise TypeError(f"`x` and `y` must have the same dtype, got {a.dtype.name} != {b.dtype.name}")
    cast = _TRUEDIV_CAST.get(a.dtype)
    if cast is not None:
        s = x._session
        a = s.execute("Cast", [a], {"DstT": cast})[0]
        b = s.execute("Cast", [b], {"DstT": cast})[0]
    elif a.dtype.kind not in "fc":
        raise TypeError(f"Invalid dtype {a.dtype.name} in __truediv__")
    return x._session._execute1("RealDiv", a, b)


def _matmul(x: Tensor, other: Any, reverse: bool) -> Tensor:
    """``@``: MatMul for matrices, BatchMatMulV2 for higher ranks (when the
    server has it)."""
    s = x._session
    o = other if type(other) is Tensor and other._session is s else _operand(x, other, reverse)
    a, b = (o, x) if reverse else (x, o)
    op = "MatMul"
    if (a._shape is not None and len(a._shape) > 2) or (b._shape is not None and len(b._shape) > 2):
        if "BatchMatMulV2" in s._specs:
            op = "BatchMatMulV2"
    spec = s._specs.get(op)
    if spec is None:
        return s.execute(op, [a, b])[0]  # the server reports the missing op
    return s._execute_spec(spec, (a, b), _NO_ATTRS, None, 1)[0]


def _equality(x: Tensor, other: Any, op: str) -> Any:
    """TensorFlow 2's ``==`` / ``!=``: None compares unequal; shapes that do
    not broadcast give a scalar False (True for !=); else Equal / NotEqual."""
    if other is None:
        return op == "NotEqual"
    from gradtape import _shapes

    o = _operand(x, other, True)
    if x._shape is not None and o._shape is not None and _shapes.broadcast(x._shape, o._shape) is None:
        return x._session.constant(op == "NotEqual")
    return _binary(x, o, op, False, True)


# ---------------------------------------------------------------------------
# Variables


class Variable:
    """A server-side resource variable (VarHandleOp + AssignVariableOp).

    Passing a Variable to an op reads it (ReadVariableOp), as TensorFlow
    does, except at the inputs that take the resource itself (ListOps'
    resource_inputs: ResourceApply*, Assign*VariableOp, ...), which get the
    handle. Reading a
    variable inside a ``GradientTape(watch_accessed_variables=True)`` (the
    default) watches it, so ``tape.gradient(loss, variable)`` works; a
    ``trainable=False`` variable is not watched that way (``tape.watch``
    still watches it).
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
        session._variables[self._handle.id] = self
        session.execute("AssignVariableOp", [self._handle, value])
        self._read_attrs: List[_backend.EncodedAttr] = [("dtype", _backend.ATTR_TYPE, _dtypes.to_pb_dtype(self._dtype))]

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
        # Tapes (gradtape._tape.TapeSet): a trainable variable read under a
        # recording tape that watches accessed variables is watched first.
        tapes = self._session._tapes
        if tapes.active:
            tapes.on_read_variable(self)
        return self._session._execute_encoded("ReadVariableOp", (self._handle,), self._read_attrs, self._dtype, self._shape)

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

    # The Python protocol reads the variable first (as TensorFlow's does).
    def __add__(self, o: TensorLike) -> Tensor:
        return self.read_value() + o

    def __radd__(self, o: TensorLike) -> Tensor:
        return self.read_value().__radd__(o)

    def __sub__(self, o: TensorLike) -> Tensor:
        return self.read_value() - o

    def __rsub__(self, o: TensorLike) -> Tensor:
        return self.read_value().__rsub__(o)

    def __mul__(self, o: TensorLike) -> Tensor:
        return self.read_value() * o

    def __rmul__(self, o: TensorLike) -> Tensor:
        return self.read_value().__rmul__(o)

    def __truediv__(self, o: TensorLike) -> Tensor:
        return self.read_value() / o

    def __rtruediv__(self, o: TensorLike) -> Tensor:
        return self.read_value().__rtruediv__(o)

    def __matmul__(self, o: TensorLike) -> Tensor:
        return self.read_value() @ o

    def __rmatmul__(self, o: TensorLike) -> Tensor:
        return self.read_value().__rmatmul__(o)

    def __pow__(self, o: TensorLike) -> Tensor:
        return self.read_value() ** o

    def __rpow__(self, o: TensorLike) -> Tensor:
        return self.read_value().__rpow__(o)

    def __neg__(self) -> Tensor:
        return -self.read_value()

    def __abs__(self) -> Tensor:
        return abs(self.read_value())

    def __lt__(self, o: TensorLike) -> Tensor:
        return self.read_value() < o

    def __le__(self, o: TensorLike) -> Tensor:
        return self.read_value() <= o

    def __gt__(self, o: TensorLike) -> Tensor:
        return self.read_value() > o

    def __ge__(self, o: TensorLike) -> Tensor:
        return self.read_value() >= o

    def __eq__(self, o: object) -> Any:  # elementwise, as TensorFlow 2
        return self.read_value() == o

    def __ne__(self, o: object) -> Any:
        return self.read_value() != o

    def __hash__(self) -> int:
        raise TypeError("Variable is unhashable. Instead, use variable.ref() as the key.")

    def ref(self) -> Reference:
        """A hashable reference to this variable (TensorFlow's ``ref()``)."""
        return Reference(self)

    def __getitem__(self, key: Any) -> Tensor:
        return self.read_value()[key]

    def __iter__(self) -> Iterator[Tensor]:
        return iter(self.read_value())

    def __bool__(self) -> bool:
        return bool(self.read_value())

    def __float__(self) -> float:
        return float(self.read_value())

    def __int__(self) -> int:
        return int(self.read_value())
