"""gradtape.tf's base: dtypes, TensorFlow's conversion rules, running an op,
Variable, GradientTape and tensor creation (internal)."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from gradtape import _dtypes, _tape
from gradtape._default import get_default_session, set_default_session
from gradtape._tensor import Tensor, Variable as _Variable
from gradtape.session import Session, connect as _connect

# -- dtypes ---------------------------------------------------------------
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
double = float64
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
bool = np.dtype(np.bool_)  # noqa: A001 (TensorFlow's name)
complex64 = np.dtype(np.complex64)
complex128 = np.dtype(np.complex128)
DType = np.dtype

UnconnectedGradients = _tape.UnconnectedGradients
TensorLike = Any


def connect(address: str, **connect_kwargs: Any) -> Session:
    """Connects to a gradtape server (gradtape.connect's arguments) and makes
    the session the default one of gradtape.tf."""
    session = _connect(address, **connect_kwargs)
    set_default_session(session)
    return session


def _session() -> Session:
    return get_default_session()


# -- conversion with TensorFlow's rules -----------------------------------


def _tf_array(value: Any, dtype: Optional[Any]) -> np.ndarray:
    """`value` as numpy the way tf.constant infers: Python floats float32,
    Python ints int32 (int64 when they do not fit), numpy keeps its dtype."""
    if dtype is not None:
        d = _dtypes.as_numpy_dtype(dtype)
        array = np.asarray(value)
        if d.kind in "iub" and array.dtype.kind in "fc" and not np.array_equal(array, array.astype(d)):
            raise TypeError(f"cannot convert {value!r} to EagerTensor of dtype {d.name}")
        return np.asarray(value, dtype=d)
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value)
    array = np.asarray(value)
    if array.dtype == np.float64:
        return array.astype(np.float32)
    if array.dtype == np.int64:
        info = np.iinfo(np.int32)
        if array.size == 0 or (array.min() >= info.min and array.max() <= info.max):
            return array.astype(np.int32)
    return array


def convert_to_tensor(value: TensorLike, dtype: Optional[Any] = None, dtype_hint: Optional[Any] = None, name: Optional[str] = None) -> Tensor:
    """tf.convert_to_tensor: Tensors pass (a dtype mismatch is a ValueError),
    Variables are read, the rest becomes a constant (TF's dtype inference;
    `dtype_hint` is used when the value converts to it)."""
    if dtype is None and type(value) is Tensor:
        return value  # the hot path
    s = _session()
    if isinstance(value, _Variable):
        value = value.read_value()
    if isinstance(value, Tensor):
        if dtype is not None and _dtypes.as_numpy_dtype(dtype) != value.dtype:
            raise ValueError(
                f"Tensor conversion requested dtype {_dtypes.as_numpy_dtype(dtype).name} for Tensor "
                f"with dtype {value.dtype.name}"
            )
        return value
    if dtype is None and dtype_hint is not None:
        try:
            return s.constant(_tf_array(value, dtype_hint))
        except (TypeError, ValueError):
            pass
    return s.constant(_tf_array(value, dtype))


def constant(value: Any, dtype: Optional[Any] = None, shape: Optional[Sequence[int]] = None, name: Optional[str] = None) -> Tensor:
    """tf.constant (a Tensor value is cast to `dtype` when given)."""
    if isinstance(value, (Tensor, _Variable)):
        t = convert_to_tensor(value)
        return t if dtype is None else cast(t, dtype)
    array = _tf_array(value, dtype)
    if shape is not None:
        shape = tuple(int(d) for d in shape)
        array = np.broadcast_to(array, shape).copy() if array.size == 1 else array.reshape(shape)
    return _session().constant(array)


def _operands(*values: TensorLike) -> List[Tensor]:
    """Binary-op operands: Python numbers and lists take the dtype of the
    first tensor among them (TensorFlow rounds floats to it)."""
    if all(type(v) is Tensor for v in values):
        return list(values)  # the hot path
    hint = None
    for v in values:
        if isinstance(v, (Tensor, _Variable)):
            hint = v.dtype
            break
    out = []
    for v in values:
        if isinstance(v, (Tensor, _Variable)):
            out.append(convert_to_tensor(v))
        elif hint is not None:
            out.append(_session().constant(np.asarray(v, dtype=hint)))
        else:
            out.append(convert_to_tensor(v))
    return out


_ELEMENTWISE_UNARY = frozenset(
    "Identity StopGradient Neg Square Sqrt Exp Log Sin Cos Tan Tanh Sigmoid Abs Sign Log1p Expm1 "
    "Reciprocal Softplus Softsign Relu Relu6 Elu Selu ZerosLike OnesLike Cast Softmax LogSoftmax "
    "Real Imag Conj".split()
)
_ELEMENTWISE_BINARY = frozenset(
    "AddV2 Sub Mul RealDiv Maximum Minimum SquaredDifference Pow Equal Greater Less".split()
)


def _run(op: str, inputs: Sequence[Tensor], attrs: Optional[Dict[str, Any]] = None) -> Tensor:
    """Runs `op`; the output's shape is set where the op's rule gives it
    from known input shapes (elementwise ops, with broadcasting), so that
    code traced for a custom gradient can still ask for ranks."""
    s = inputs[0].session if inputs else _session()
    out = s.execute(op, list(inputs), attrs)[0]
    if out._shape is None and inputs:
        shapes = [t._shape for t in inputs]
        if op in _ELEMENTWISE_UNARY and shapes[0] is not None:
            out._shape = shapes[0]
        elif op in _ELEMENTWISE_BINARY and shapes[0] is not None and shapes[0] == shapes[-1]:
            out._shape = shapes[0]
        elif op in _ELEMENTWISE_BINARY and all(sh is not None for sh in shapes):
            try:
                out._shape = tuple(np.broadcast_shapes(*shapes))  # type: ignore[arg-type]
            except ValueError:
                pass
        elif op in ("Reshape", "BroadcastTo") and attrs is not None and -1 not in list(attrs["shape"]):
            out._shape = tuple(int(d) for d in attrs["shape"])
    return out


def _unary(op: str) -> Callable[..., Tensor]:
    def fn(x: TensorLike, name: Optional[str] = None) -> Tensor:
        return _run(op, [convert_to_tensor(x)])

    fn.__name__ = op
    fn.__doc__ = f"The server's {op}."
    return fn


def _binary(op: str) -> Callable[..., Tensor]:
    def fn(x: TensorLike, y: TensorLike, name: Optional[str] = None) -> Tensor:
        return _run(op, _operands(x, y))

    fn.__name__ = op
    fn.__doc__ = f"The server's {op} (numpy broadcasting)."
    return fn


# -- tensors, variables, tapes ---------------------------------------------


class Variable(_Variable):
    """tf.Variable on the default session (TF's dtype inference of Python
    values; a callable initial value is called)."""

    def __init__(
        self,
        initial_value: Any = None,
        trainable: Optional[Any] = None,
        validate_shape: Any = True,
        caching_device: Any = None,
        name: Optional[str] = None,
        variable_def: Any = None,
        dtype: Optional[Any] = None,
        **kwargs: Any,
    ) -> None:
        if initial_value is None:
            raise ValueError("tf.Variable: initial_value must be specified")
        if callable(initial_value):
            initial_value = initial_value()
        if isinstance(initial_value, (Tensor, _Variable)):
            value = convert_to_tensor(initial_value)
            if dtype is not None:
                value = cast(value, dtype)
        else:
            value = constant(initial_value, dtype=dtype)
        super().__init__(value.session, value, name=name, trainable=True if trainable is None else builtins_bool(trainable))


class GradientTape(_tape.GradientTape):
    """tf.GradientTape on the default session."""

    def __init__(self, persistent: Any = False, watch_accessed_variables: Any = True) -> None:
        super().__init__(_session(), persistent=persistent, watch_accessed_variables=watch_accessed_variables)


def identity(x: TensorLike, name: Optional[str] = None) -> Tensor:
    return _run("Identity", [convert_to_tensor(x)])


def stop_gradient(x: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.stop_gradient: x's value, no gradient or tangent through it."""
    t = convert_to_tensor(x)
    return t.session.stop_gradient(t)


def zeros(shape: Any, dtype: Any = float32, name: Optional[str] = None) -> Tensor:
    return _session().constant(np.zeros(_shape_list(shape), dtype=_dtypes.as_numpy_dtype(dtype)))


def ones(shape: Any, dtype: Any = float32, name: Optional[str] = None) -> Tensor:
    return _session().constant(np.ones(_shape_list(shape), dtype=_dtypes.as_numpy_dtype(dtype)))


def fill(dims: Any, value: Any, name: Optional[str] = None) -> Tensor:
    v = _tf_array(value, None)
    return _session().constant(np.full(_shape_list(dims), v, dtype=v.dtype))


def zeros_like(input: TensorLike, dtype: Optional[Any] = None, name: Optional[str] = None) -> Tensor:  # noqa: A002
    t = _run("ZerosLike", [convert_to_tensor(input)])
    return t if dtype is None else cast(t, dtype)


def ones_like(input: TensorLike, dtype: Optional[Any] = None, name: Optional[str] = None) -> Tensor:  # noqa: A002
    t = _run("OnesLike", [convert_to_tensor(input)])
    return t if dtype is None else cast(t, dtype)


def _shape_list(shape: Any) -> List[int]:
    if isinstance(shape, (Tensor, _Variable)):
        shape = np.asarray(shape)
    if isinstance(shape, (int, np.integer)):
        return [int(shape)]
    return [int(d) for d in np.asarray(shape).reshape(-1)]


def cast(x: TensorLike, dtype: Any, name: Optional[str] = None) -> Tensor:
    t = convert_to_tensor(x)
    d = _dtypes.as_numpy_dtype(dtype)
    if t._dtype is not None and t._dtype == d:
        return t
    return _run("Cast", [t], {"DstT": d})


def reshape(tensor: TensorLike, shape: Any, name: Optional[str] = None) -> Tensor:
    return _run("Reshape", [convert_to_tensor(tensor)], {"shape": _shape_list(shape)})


def transpose(a: TensorLike, perm: Optional[Sequence[int]] = None, conjugate: Any = False, name: Optional[str] = None) -> Tensor:
    t = convert_to_tensor(a)
    if perm is None:
        perm = list(range(t.ndim))[::-1]
    out = _run("Transpose", [t], {"perm": [int(p) for p in perm]})
    return _run("Conj", [out]) if conjugate and t.dtype.kind == "c" else out


def shape(input: TensorLike, out_type: Any = int32, name: Optional[str] = None) -> Tensor:  # noqa: A002
    return _run("Shape", [convert_to_tensor(input)], {"out_type": _dtypes.as_numpy_dtype(out_type)})


def size(input: TensorLike, out_type: Any = int32, name: Optional[str] = None) -> Tensor:  # noqa: A002
    t = convert_to_tensor(input)
    return _session().constant(np.asarray(int(np.prod(t.shape)), dtype=_dtypes.as_numpy_dtype(out_type)))


def rank(input: TensorLike, name: Optional[str] = None) -> Tensor:  # noqa: A002
    return _session().constant(np.asarray(convert_to_tensor(input).ndim, dtype=np.int32))


def builtins_bool(v: Any) -> Any:
    return v is True or (v is not False and v is not None and v != 0)


def _axes(t: Tensor, axis: Any) -> List[int]:
    if axis is None:
        return list(range(t.ndim))
    if isinstance(axis, (Tensor, _Variable)):
        axis = np.asarray(axis)
    axes = [int(a) for a in np.asarray(axis).reshape(-1)]
    n = t.ndim
    return sorted({a + n if a < 0 else a for a in axes})

