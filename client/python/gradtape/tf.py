"""TensorFlow's eager API over gradtape: ``import gradtape.tf as tf``.

A TF2 eager training script ports by changing its import::

    import gradtape.tf as tf               # was: import tensorflow as tf
    tf.connect("127.0.0.1:50051")          # or GRADTAPE_ADDRESS=host:port

    x, y = tf.constant([[2.0, 3.0], [1.0, 4.0]]), tf.constant([[1.0], [-1.0]])
    w = tf.Variable([[0.5], [-0.25]], name="w")
    opt = tf.keras.optimizers.SGD(learning_rate=0.01)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    grads = tape.gradient(loss, [w])
    opt.apply_gradients(zip(grads, [w]))

Everything runs on the server of the *default session*: the one given to
``tf.connect(address, **connect_kwargs)`` or ``gradtape.set_default_session``,
else one connected on first use from the environment variable
``GRADTAPE_ADDRESS``.

What is here, with TensorFlow's semantics (names, arguments, dtype
inference of Python values: floats float32, ints int32):
  constant, Variable, Tensor, GradientTape, convert_to_tensor, identity,
  zeros, ones, zeros_like, ones_like, fill, reduce_sum, reduce_mean,
  reduce_max, reduce_min, reduce_prod, reduce_logsumexp, matmul, add, subtract, multiply,
  divide, negative, square, sqrt, exp, log, sin, cos, tan, tanh, sigmoid,
  abs, maximum, minimum, pow (needs the server's Pow), where, cast,
  reshape, transpose, shape, stop_gradient, add_n, custom_gradient,
  math.* (the above plus log1p, expm1, reciprocal, softplus, sign,
  squared_difference, log_sigmoid), nn.* (relu, relu6, elu, selu,
  softplus, softsign, softmax, log_softmax, sigmoid, tanh,
  sparse_softmax_cross_entropy_with_logits,
  softmax_cross_entropy_with_logits, l2_loss, bias_add),
  autodiff.ForwardAccumulator, keras.optimizers.SGD / Adam,
  train.Checkpoint (named variables), UnconnectedGradients, the dtypes
  float32, float64, int32, int64, bool, complex64, complex128 (numpy
  dtypes: ``x.dtype == tf.float32`` works).

Not here: float16 and bfloat16 (gradtape has no such dtype), random ops,
tf.function (gradtape is eager by construction; ``tf.function`` is the
identity decorator here), Keras layers and models, tf.data, string ops,
slicing and ``**`` beyond 2 and 0.5 (the Tensor protocol, gradtape.Tensor),
``softmax`` over an axis other than the last, ``where`` with one argument,
``Adam(amsgrad=True)``.

Differences that remain, and why: ``custom_gradient``'s ``grad`` is traced
once into a server program (gradtape._custom: ops only, no ``.numpy()``);
a ForwardAccumulator keeps the handles of the ops run inside its block
alive until it exits (gradtape._forward). tests/python/test_tf_reference.py
runs each case with TensorFlow and with this module.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from gradtape import _custom, _default, _dtypes, _forward, _tape, optimizers as _optimizers
from gradtape._default import get_default_session, set_default_session
from gradtape._tensor import Tensor, Variable as _Variable
from gradtape.session import Session, connect as _connect

__all__ = [
    "GradientTape",
    "Tensor",
    "UnconnectedGradients",
    "Variable",
    "connect",
    "get_default_session",
    "set_default_session",
]

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


# -- arithmetic ------------------------------------------------------------

add = _binary("AddV2")
subtract = _binary("Sub")
multiply = _binary("Mul")
maximum = _binary("Maximum")
minimum = _binary("Minimum")
squared_difference = _binary("SquaredDifference")
negative = _unary("Neg")
square = _unary("Square")
sqrt = _unary("Sqrt")
exp = _unary("Exp")
log = _unary("Log")
sin = _unary("Sin")
cos = _unary("Cos")
tan = _unary("Tan")
tanh = _unary("Tanh")
sigmoid = _unary("Sigmoid")
abs = _unary("Abs")  # noqa: A001 (TensorFlow's name)
sign = _unary("Sign")
log1p = _unary("Log1p")
expm1 = _unary("Expm1")
reciprocal = _unary("Reciprocal")
softplus = _unary("Softplus")
real = _unary("Real")
imag = _unary("Imag")
conj = _unary("Conj")


def divide(x: TensorLike, y: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.divide (x / y): integers are divided as float64, as TF does."""
    a, b = _operands(x, y)
    if a.dtype.kind in "iu":
        a, b = cast(a, float64), cast(b, float64)
    return _run("RealDiv", [a, b])


truediv = divide


def divide_no_nan(x: TensorLike, y: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.math.divide_no_nan: 0 where y == 0."""
    a, b = _operands(x, y)
    zero = _run("Equal", [b, zeros_like(b)])
    return where(zero, zeros_like(a), _run("RealDiv", [a, where(zero, ones_like(b), b)]))


def pow(x: TensorLike, y: TensorLike, name: Optional[str] = None) -> Tensor:  # noqa: A001
    """tf.pow (the server's Pow)."""
    a, b = _operands(x, y)
    if not a.session.has_op("Pow"):
        raise NotImplementedError("tf.pow: this gradtape server has no Pow op")
    return _run("Pow", [a, b])


def add_n(inputs: Sequence[TensorLike], name: Optional[str] = None) -> Tensor:
    ts = [convert_to_tensor(t) for t in inputs]
    if not ts:
        raise ValueError("add_n: inputs must be a non-empty list")
    out = ts[0]
    for t in ts[1:]:
        out = _run("AddV2", [out, t])
    return out if len(ts) > 1 else identity(out)


def log_sigmoid(x: TensorLike, name: Optional[str] = None) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x)."""
    return negative(softplus(negative(x)))


def clip_by_value(t: TensorLike, clip_value_min: TensorLike, clip_value_max: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.clip_by_value = minimum(maximum(t, min), max)."""
    x, lo, hi = _operands(t, clip_value_min, clip_value_max)
    return _run("Minimum", [_run("Maximum", [x, lo]), hi])


def clip_by_norm(t: TensorLike, clip_norm: TensorLike, axes: Any = None, name: Optional[str] = None) -> Tensor:
    """tf.clip_by_norm: t * clip_norm / max(l2norm(t), clip_norm) (TF's
    formula, with a zero norm kept safe)."""
    x, c = _operands(t, clip_norm)
    l2sum = reduce_sum(multiply(x, x), axis=axes, keepdims=True)
    positive = _run("Greater", [l2sum, zeros_like(l2sum)])
    safe = where(positive, l2sum, ones_like(l2sum))
    l2norm = where(positive, sqrt(safe), l2sum)
    return divide(multiply(x, c), maximum(l2norm, c))


def where(condition: TensorLike, x: Optional[TensorLike] = None, y: Optional[TensorLike] = None, name: Optional[str] = None) -> Tensor:
    """tf.where(condition, x, y) (TF2: numpy broadcasting of all three)."""
    if x is None or y is None:
        raise NotImplementedError("tf.where with one argument (coordinates) is not in gradtape.tf")
    c = convert_to_tensor(condition)
    a, b = _operands(x, y)
    if c._shape is None or a._shape is None or b._shape is None:
        return _run("Select", [c, a, b])  # shapes unknown (traced): no broadcasting
    target = tuple(np.broadcast_shapes(c.shape, a.shape, b.shape))

    def widen(t: Tensor) -> Tensor:
        return t if tuple(t.shape) == target else _run("BroadcastTo", [t], {"shape": list(target)})

    return _run("Select", [widen(c), widen(a), widen(b)])


def matmul(
    a: TensorLike,
    b: TensorLike,
    transpose_a: Any = False,
    transpose_b: Any = False,
    adjoint_a: Any = False,
    adjoint_b: Any = False,
    name: Optional[str] = None,
) -> Tensor:
    """tf.linalg.matmul: MatMul for matrices, BatchMatMulV2 above.

    As TensorFlow builds it: MatMul's transpose_* only transposes, so an
    adjoint of a complex matrix conjugates first; BatchMatMulV2's adj_*
    conjugates, so a plain transpose of a complex batch conjugates first.
    """
    x, y = _operands(a, b)
    ta, tb = builtins_bool(transpose_a or adjoint_a), builtins_bool(transpose_b or adjoint_b)
    matrices = x.ndim == 2 and y.ndim == 2
    # Which flag needs a conj in front: adjoint_* for MatMul, transpose_*
    # for BatchMatMulV2 (conj twice is no conj).
    conj_a = builtins_bool(adjoint_a) if matrices else builtins_bool(transpose_a) and not builtins_bool(adjoint_a)
    conj_b = builtins_bool(adjoint_b) if matrices else builtins_bool(transpose_b) and not builtins_bool(adjoint_b)
    if conj_a and x.dtype.kind == "c":
        x = conj(x)
    if conj_b and y.dtype.kind == "c":
        y = conj(y)
    if matrices:
        return _run("MatMul", [x, y], {"transpose_a": ta, "transpose_b": tb})
    return _run("BatchMatMulV2", [x, y], {"adj_x": ta, "adj_y": tb})


def builtins_bool(v: Any) -> Any:
    return v is True or (v is not False and v is not None and v != 0)


# -- reductions ------------------------------------------------------------


def _axes(t: Tensor, axis: Any) -> List[int]:
    if axis is None:
        return list(range(t.ndim))
    if isinstance(axis, (Tensor, _Variable)):
        axis = np.asarray(axis)
    axes = [int(a) for a in np.asarray(axis).reshape(-1)]
    n = t.ndim
    return sorted({a + n if a < 0 else a for a in axes})


def _reduce(op: str) -> Callable[..., Tensor]:
    def fn(input_tensor: TensorLike, axis: Any = None, keepdims: Any = False, name: Optional[str] = None) -> Tensor:
        t = convert_to_tensor(input_tensor)
        axes = _axes(t, axis)
        if not axes:
            return identity(t)
        out = _run(op, [t], {"axis": axes, "keep_dims": builtins_bool(keepdims)})
        if t._shape is not None:
            keep = builtins_bool(keepdims)
            out._shape = tuple(1 if i in axes else d for i, d in enumerate(t._shape) if keep or i not in axes)
        return out

    fn.__name__ = op
    fn.__doc__ = f"tf.reduce_* over `axis` (None: all) by the server's {op}."
    return fn


reduce_sum = _reduce("Sum")
reduce_mean = _reduce("Mean")
reduce_prod = _reduce("Prod")


def reduce_max(input_tensor: TensorLike, axis: Any = None, keepdims: Any = False, name: Optional[str] = None) -> Tensor:
    """tf.reduce_max; the gradient is shared equally among ties (TF's rule),
    by UnsortedSegmentMax over the reduced axes moved to the front."""
    t = convert_to_tensor(input_tensor)
    axes = _axes(t, axis)
    if not axes:
        return identity(t)
    shape_ = tuple(t.shape)
    kept = [i for i in range(len(shape_)) if i not in axes]
    moved = transpose(t, axes + kept) if axes + kept != list(range(len(shape_))) else t
    n = int(np.prod([shape_[i] for i in axes]))
    rest = [shape_[i] for i in kept]
    flat = reshape(moved, [n] + rest)
    ids = _session().constant(np.zeros([n], dtype=np.int32))
    out = _run("UnsortedSegmentMax", [flat, ids], {"num_segments": 1})
    final = [1 if i in axes else shape_[i] for i in range(len(shape_))] if builtins_bool(keepdims) else rest
    return reshape(out, final)


def reduce_min(input_tensor: TensorLike, axis: Any = None, keepdims: Any = False, name: Optional[str] = None) -> Tensor:
    """tf.reduce_min = -reduce_max(-x) (same tie rule)."""
    return negative(reduce_max(negative(input_tensor), axis=axis, keepdims=keepdims))


def reduce_logsumexp(input_tensor: TensorLike, axis: Any = None, keepdims: Any = False, name: Optional[str] = None) -> Tensor:
    """tf.reduce_logsumexp, from primitives as TensorFlow builds it: the max
    over `axis` (under stop_gradient) is subtracted before Exp and added
    back after Log, so large values do not overflow; the gradient is
    exp(x - result). Unlike TF, an infinite max is not replaced by 0 first
    (gradtape has no IsFinite op): an all -inf row gives NaN, not -inf."""
    t = convert_to_tensor(input_tensor)
    m = stop_gradient(reduce_max(t, axis=axis, keepdims=True))
    s = reduce_sum(exp(subtract(t, m)), axis=axis, keepdims=keepdims)
    return add(log(s), reduce_sum(m, axis=axis, keepdims=keepdims))  # the sum drops m's size-1 axes


# -- nn ----------------------------------------------------------------------


def _last_axis(fn_name: str, t: Tensor, axis: int) -> None:
    if axis not in (-1, t.ndim - 1):
        raise NotImplementedError(f"tf.nn.{fn_name}: gradtape supports the last axis only, got axis={axis}")


def softmax(logits: TensorLike, axis: Optional[int] = None, name: Optional[str] = None) -> Tensor:
    t = convert_to_tensor(logits)
    _last_axis("softmax", t, -1 if axis is None else axis)
    return _run("Softmax", [t])


def log_softmax(logits: TensorLike, axis: Optional[int] = None, name: Optional[str] = None) -> Tensor:
    t = convert_to_tensor(logits)
    _last_axis("log_softmax", t, -1 if axis is None else axis)
    return _run("LogSoftmax", [t])


def sparse_softmax_cross_entropy_with_logits(labels: TensorLike, logits: TensorLike, name: Optional[str] = None) -> Tensor:
    lg = convert_to_tensor(logits)
    lb = convert_to_tensor(labels)
    s = lg.session
    return s.execute("SparseSoftmaxCrossEntropyWithLogits", [lg, lb])[0]


def softmax_cross_entropy_with_logits(labels: TensorLike, logits: TensorLike, axis: int = -1, name: Optional[str] = None) -> Tensor:
    """-sum(labels * log_softmax(logits), axis) (gradients to both, as TF)."""
    lg = convert_to_tensor(logits)
    _last_axis("softmax_cross_entropy_with_logits", lg, axis)
    lb = convert_to_tensor(labels, dtype_hint=lg.dtype)
    return negative(reduce_sum(multiply(lb, log_softmax(lg)), axis=-1))


def l2_loss(t: TensorLike, name: Optional[str] = None) -> Tensor:
    return _run("L2Loss", [convert_to_tensor(t)])


def bias_add(value: TensorLike, bias: TensorLike, data_format: Optional[str] = None, name: Optional[str] = None) -> Tensor:
    v, b = _operands(value, bias)
    return _run("BiasAdd", [v, b], {"data_format": data_format or "NHWC"})


relu = _unary("Relu")
relu6 = _unary("Relu6")
elu = _unary("Elu")
selu = _unary("Selu")
softsign = _unary("Softsign")


class _Namespace:
    """A TensorFlow sub-namespace (tf.math, tf.nn, ...)."""

    def __init__(self, name: str, **members: Any) -> None:
        self.__name__ = name
        self.__dict__.update(members)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"gradtape.tf.{self.__name__} has no {name!r} (see gradtape.tf's docstring)")


_MATH_NAMES = [
    "add", "subtract", "multiply", "divide", "truediv", "negative", "square", "sqrt", "exp", "log",
    "sin", "cos", "tan", "tanh", "sigmoid", "abs", "maximum", "minimum", "pow", "sign", "log1p",
    "expm1", "reciprocal", "softplus", "squared_difference", "reduce_sum", "reduce_mean",
    "reduce_max", "reduce_min", "reduce_prod", "reduce_logsumexp", "log_sigmoid", "add_n", "real", "imag", "conj",
    "divide_no_nan",
]
math = _Namespace("math", **{n: globals()[n] for n in _MATH_NAMES})
nn = _Namespace(
    "nn",
    relu=relu,
    relu6=relu6,
    elu=elu,
    selu=selu,
    softplus=softplus,
    softsign=softsign,
    softmax=softmax,
    log_softmax=log_softmax,
    sigmoid=sigmoid,
    tanh=tanh,
    sparse_softmax_cross_entropy_with_logits=sparse_softmax_cross_entropy_with_logits,
    softmax_cross_entropy_with_logits=softmax_cross_entropy_with_logits,
    l2_loss=l2_loss,
    bias_add=bias_add,
)
linalg = _Namespace("linalg", matmul=matmul)


# -- forward mode, custom gradients ----------------------------------------


class ForwardAccumulator(_forward.ForwardAccumulator):
    """tf.autodiff.ForwardAccumulator; Python tangents take the primal's dtype."""

    def __init__(self, primals: Any, tangents: Any) -> None:
        flat_p, flat_t = _tape._flatten(primals), _tape._flatten(tangents)
        if len(flat_p) == len(flat_t):
            converted = [
                t if isinstance(t, Tensor) or not isinstance(p, Tensor)
                else _session().constant(np.asarray(t, dtype=p.dtype))
                for p, t in zip(flat_p, flat_t)
            ]
            tangents = _tape._pack_like(tangents, converted) if isinstance(tangents, (list, tuple, dict)) else converted[0]
        super().__init__(primals, tangents)


autodiff = _Namespace("autodiff", ForwardAccumulator=ForwardAccumulator)


def custom_gradient(f: Optional[Callable[..., Any]] = None) -> Any:
    """tf.custom_gradient (see gradtape._custom for how grad is traced)."""
    if f is None:
        return custom_gradient
    import functools

    @functools.wraps(f)
    def decorated(*args: Any, **kwargs: Any) -> Any:
        return _custom.call_with_custom_gradient(f, args, kwargs, _session(), convert_to_tensor)

    return decorated


def function(f: Optional[Callable[..., Any]] = None, **kwargs: Any) -> Any:
    """tf.function: the identity decorator (gradtape is eager)."""
    if f is None:
        return lambda g: g
    return f


# -- optimizers and checkpoints -----------------------------------------------


class _SGD(_optimizers.SGD):
    """tf.keras.optimizers.SGD (None gradients are skipped, as Keras does)."""

    def __init__(self, learning_rate: float = 0.01, momentum: float = 0.0, nesterov: Any = False, name: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, momentum=momentum, nesterov=builtins_bool(nesterov))


class _Adam(_optimizers.Adam):
    """tf.keras.optimizers.Adam."""

    def __init__(
        self,
        learning_rate: float = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        amsgrad: Any = False,
        name: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        if amsgrad:
            raise NotImplementedError("tf.keras.optimizers.Adam(amsgrad=True) is not in gradtape.tf")
        super().__init__(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon)


keras = _Namespace("keras", optimizers=_Namespace("keras.optimizers", SGD=_SGD, Adam=_Adam))


class Checkpoint:
    """tf.train.Checkpoint over the server's checkpoints: the keyword
    arguments are Variables (or lists / dicts of them), each with a distinct
    ``name=`` (the server matches variables by name). ``save(name)`` /
    ``write(name)`` and ``restore(name)`` / ``read(name)`` are wait points;
    `name` is a checkpoint name in the server's --checkpoint_dir
    ([A-Za-z0-9._-]; a path's last component is taken)."""

    def __init__(self, **objects: Any) -> None:
        self._variables: List[_Variable] = [
            v for v in _tape._flatten(list(objects.values())) if isinstance(v, _Variable)
        ]
        for v in self._variables:
            if not v.name:
                raise ValueError(
                    "tf.train.Checkpoint: every variable needs a name (Variable(..., name='w')): "
                    "the server matches checkpoint entries by name"
                )

    def _name(self, prefix: str) -> str:
        return os.path.basename(str(prefix)) or str(prefix)

    def save(self, file_prefix: str, options: Any = None) -> str:
        _session().save_checkpoint(self._name(file_prefix), self._variables)
        return self._name(file_prefix)

    write = save

    def restore(self, save_path: str, options: Any = None) -> "Checkpoint":
        _session().restore_checkpoint(self._name(save_path), self._variables)
        return self

    read = restore


train = _Namespace("train", Checkpoint=Checkpoint)


def _get_default() -> Optional[Session]:
    return _default._default
