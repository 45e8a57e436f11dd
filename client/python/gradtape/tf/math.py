"""tf.math: elementwise arithmetic, reductions, matmul, and where
(the ones TensorFlow also has at the top level are re-exported there)."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from gradtape.tf._base import (
    TensorLike,
    _axes,
    _binary,
    _operands,
    _run,
    _session,
    _unary,
    builtins_bool,
    cast,
    convert_to_tensor,
    float64,
    identity,
    ones_like,
    reshape,
    stop_gradient,
    transpose,
    zeros_like,
)
from gradtape._tensor import Tensor

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


# -- reductions ------------------------------------------------------------


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
