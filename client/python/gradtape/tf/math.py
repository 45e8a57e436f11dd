"""tf.math: elementwise arithmetic, reductions, matmul, and where
(the ones TensorFlow also has at the top level are re-exported there)."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Sequence

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
_abs = _unary("Abs")
sign = _unary("Sign")
log1p = _unary("Log1p")
expm1 = _unary("Expm1")
reciprocal = _unary("Reciprocal")
softplus = _unary("Softplus")
_real = _unary("Real")
_imag = _unary("Imag")
_conj = _unary("Conj")


def real(input: TensorLike, name: Optional[str] = None) -> Tensor:  # noqa: A002
    """tf.math.real: Real of a complex tensor; a real one is returned as is
    (TF's rule)."""
    t = convert_to_tensor(input)
    return _real(t) if t.dtype.kind == "c" else t


def imag(input: TensorLike, name: Optional[str] = None) -> Tensor:  # noqa: A002
    """tf.math.imag: Imag of a complex tensor; zeros for a real one (TF)."""
    t = convert_to_tensor(input)
    return _imag(t) if t.dtype.kind == "c" else zeros_like(t)


def conj(x: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.math.conj: Conj of a complex tensor; a real one is returned as is
    (TF's rule)."""
    t = convert_to_tensor(x)
    return _conj(t) if t.dtype.kind == "c" else t


def abs(x: TensorLike, name: Optional[str] = None) -> Tensor:  # noqa: A001 (TensorFlow's name)
    """tf.math.abs: Abs; of a complex tensor the modulus (TF's ComplexAbs),
    composed as sqrt(re^2 + im^2) with TF's zero gradient at 0 (it may
    overflow where ComplexAbs's hypot does not, above ~1e19 in complex64)."""
    t = convert_to_tensor(x)
    if t.dtype.kind != "c":
        return _abs(t)
    re, im = _real(t), _imag(t)
    sq = add(multiply(re, re), multiply(im, im))
    positive = _run("Greater", [sq, zeros_like(sq)])
    return where(positive, sqrt(where(positive, sq, ones_like(sq))), zeros_like(sq))


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
    """tf.where(condition, x, y) (TF2: numpy broadcasting of all three, by
    SelectV2; Select with BroadcastTo on a server without SelectV2)."""
    if x is None and y is None:
        raise NotImplementedError("tf.where with one argument (coordinates) is not in gradtape.tf")
    if x is None or y is None:
        raise ValueError("x and y must both be non-None or both be None.")
    c = convert_to_tensor(condition)
    a, b = _operands(x, y)
    if c.session.has_op("SelectV2"):
        out = _run("SelectV2", [c, a, b])
        if out._shape is None and None not in (c._shape, a._shape, b._shape):
            out._shape = tuple(np.broadcast_shapes(c._shape, a._shape, b._shape))  # type: ignore[arg-type]
        return out
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
    a_is_sparse: Any = False,
    b_is_sparse: Any = False,
    output_type: Any = None,
    grad_a: Any = False,
    grad_b: Any = False,
    name: Optional[str] = None,
) -> Tensor:
    """tf.linalg.matmul: MatMul for matrices, BatchMatMulV2 above, SparseMatMul
    for float32 matrices with a_is_sparse / b_is_sparse (the same product).

    As TensorFlow builds it: MatMul's transpose_* only transposes, so an
    adjoint of a complex matrix conjugates first; BatchMatMulV2's adj_*
    conjugates, so a plain transpose of a complex batch conjugates first.
    An output_type other than the inputs' dtype (TF's BatchMatMulV3 with
    mixed dtypes) is not here: NotImplementedError.
    """
    if transpose_a and adjoint_a or transpose_b and adjoint_b:
        raise ValueError("Only one of `transpose_a` and `adjoint_a` (`transpose_b` and `adjoint_b`) can be True.")
    x, y = _operands(a, b)
    if output_type is not None and (np.dtype(output_type) != x.dtype or np.dtype(output_type) != y.dtype):
        raise NotImplementedError("tf.linalg.matmul: output_type other than the inputs' dtype (mixed-dtype BatchMatMulV3)")
    ta, tb = builtins_bool(transpose_a or adjoint_a), builtins_bool(transpose_b or adjoint_b)
    sparse = builtins_bool(a_is_sparse) or builtins_bool(b_is_sparse)
    matrices = sparse or (x.ndim == 2 and y.ndim == 2)
    # Which flag needs a conj in front: adjoint_* for MatMul, transpose_*
    # for BatchMatMulV2 (conj twice is no conj).
    conj_a = builtins_bool(adjoint_a) if matrices else builtins_bool(transpose_a) and not builtins_bool(adjoint_a)
    conj_b = builtins_bool(adjoint_b) if matrices else builtins_bool(transpose_b) and not builtins_bool(adjoint_b)
    if conj_a and x.dtype.kind == "c":
        x = conj(x)
    if conj_b and y.dtype.kind == "c":
        y = conj(y)
    if sparse and x.dtype == np.float32 and y.dtype == np.float32:
        attrs = {"transpose_a": ta, "transpose_b": tb, "a_is_sparse": builtins_bool(a_is_sparse), "b_is_sparse": builtins_bool(b_is_sparse)}
        return _run("SparseMatMul", [x, y], attrs)
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


def _reduce_extreme(op: str, t: Tensor, axis: Any, keepdims: Any) -> Tensor:
    """Max / Min over `axis` (an int32 input), the output's shape set from
    known shapes."""
    axes = _axes(t, axis)
    if not axes:
        return identity(t)
    keep = builtins_bool(keepdims)
    out = _run(op, [t, t.session.constant(np.asarray(axes, dtype=np.int32))], {"keep_dims": keep})
    if t._shape is not None:
        out._shape = tuple(1 if i in axes else d for i, d in enumerate(t._shape) if keep or i not in axes)
    return out


def reduce_max(input_tensor: TensorLike, axis: Any = None, keepdims: Any = False, name: Optional[str] = None) -> Tensor:
    """tf.reduce_max: the server's Max; the gradient is shared equally among
    ties (TF's rule). On a server without Max: UnsortedSegmentMax over the
    reduced axes moved to the front (the same values and gradients)."""
    t = convert_to_tensor(input_tensor)
    if t.session.has_op("Max"):
        return _reduce_extreme("Max", t, axis, keepdims)
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
    """tf.reduce_min: the server's Min (same tie rule); -reduce_max(-x) on a
    server without Min."""
    t = convert_to_tensor(input_tensor)
    if t.session.has_op("Min"):
        return _reduce_extreme("Min", t, axis, keepdims)
    return negative(reduce_max(negative(t), axis=axis, keepdims=keepdims))


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


# -- elementwise: rounding, special functions, comparisons ------------------

erf = _unary("Erf")
erfc = _unary("Erfc")
floor = _unary("Floor")
ceil = _unary("Ceil")
rsqrt = _unary("Rsqrt")
equal = _binary("Equal")
not_equal = _binary("NotEqual")
greater = _binary("Greater")
greater_equal = _binary("GreaterEqual")
less = _binary("Less")
less_equal = _binary("LessEqual")


def round(x: TensorLike, name: Optional[str] = None) -> Tensor:  # noqa: A001
    """tf.math.round: half to even (Round); integers unchanged."""
    t = convert_to_tensor(x)
    return identity(t) if t.dtype.kind in "iu" else _run("Round", [t])


def atan2(y: TensorLike, x: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.math.atan2(y, x): the angle of (x, y) (Atan2)."""
    return _run("Atan2", _operands(y, x))


def reduce_variance(input_tensor: TensorLike, axis: Any = None, keepdims: Any = False, name: Optional[str] = None) -> Tensor:
    """tf.math.reduce_variance, composed as TF: the mean of the squared
    deviations from the (kept-dims) mean."""
    t = convert_to_tensor(input_tensor)
    means = reduce_mean(t, axis=axis, keepdims=True)
    return reduce_mean(square(subtract(t, means)), axis=axis, keepdims=keepdims)


def reduce_std(input_tensor: TensorLike, axis: Any = None, keepdims: Any = False, name: Optional[str] = None) -> Tensor:
    """tf.math.reduce_std = sqrt(reduce_variance)."""
    return sqrt(reduce_variance(input_tensor, axis=axis, keepdims=keepdims))


# -- arg reductions, scans, top_k --------------------------------------------


def _index_scalar(t: Tensor, value: int) -> Tensor:
    return t.session.constant(np.asarray(value, dtype=np.int32))


def argmax(input: TensorLike, axis: Any = None, output_type: Any = np.int64, name: Optional[str] = None) -> Tensor:  # noqa: A002
    """tf.math.argmax: ArgMax along `axis` (None: 0, as TF2); the first
    index on ties."""
    t = convert_to_tensor(input)
    a = 0 if axis is None else int(np.asarray(axis))
    return _run("ArgMax", [t, _index_scalar(t, a)], {"output_type": np.dtype(output_type)})


def argmin(input: TensorLike, axis: Any = None, output_type: Any = np.int64, name: Optional[str] = None) -> Tensor:  # noqa: A002
    """tf.math.argmin: ArgMin along `axis` (None: 0, as TF2)."""
    t = convert_to_tensor(input)
    a = 0 if axis is None else int(np.asarray(axis))
    return _run("ArgMin", [t, _index_scalar(t, a)], {"output_type": np.dtype(output_type)})


def _scan(op: str, x: TensorLike, axis: Any, exclusive: Any, reverse: Any) -> Tensor:
    t = convert_to_tensor(x)
    attrs = {"axis": int(np.asarray(axis)), "exclusive": builtins_bool(exclusive), "reverse": builtins_bool(reverse)}
    out = _run(op, [t], attrs)
    if out._shape is None:
        out._shape = t._shape
    return out


def cumsum(x: TensorLike, axis: Any = 0, exclusive: Any = False, reverse: Any = False, name: Optional[str] = None) -> Tensor:
    """tf.math.cumsum: Cumsum (`exclusive`, `reverse` as TF)."""
    return _scan("Cumsum", x, axis, exclusive, reverse)


def cumprod(x: TensorLike, axis: Any = 0, exclusive: Any = False, reverse: Any = False, name: Optional[str] = None) -> Tensor:
    """tf.math.cumprod: Cumprod (`exclusive`, `reverse` as TF)."""
    return _scan("Cumprod", x, axis, exclusive, reverse)


class TopKV2(NamedTuple):
    values: Tensor
    indices: Tensor


def top_k(input: TensorLike, k: Any = 1, sorted: Any = True, index_type: Any = np.int32, name: Optional[str] = None) -> TopKV2:  # noqa: A002
    """tf.math.top_k: TopKV2 over the last axis, (values, indices); ties
    take the lower index first. With sorted=False the server still returns
    them in descending order (one of the orders TF allows)."""
    t = convert_to_tensor(input)
    kk = t.session.constant(np.asarray(int(np.asarray(k)), dtype=np.int32))
    values, indices = t.session.execute("TopKV2", [t, kk], {"sorted": builtins_bool(sorted), "index_type": np.dtype(index_type)})
    n = int(np.asarray(k))
    if t._shape is not None and t._shape and 0 <= n <= t._shape[-1]:
        for out in (values, indices):
            out._shape = out._shape or tuple(t._shape[:-1]) + (n,)
    return TopKV2(values, indices)


# -- segments -----------------------------------------------------------------


def _segment(op: str) -> Callable[..., Tensor]:
    def fn(data: TensorLike, segment_ids: TensorLike, name: Optional[str] = None) -> Tensor:
        return _run(op, [convert_to_tensor(data), convert_to_tensor(segment_ids)])

    fn.__name__ = op
    fn.__doc__ = f"tf.math.segment_*: the server's {op} (sorted ids)."
    return fn


segment_sum = _segment("SegmentSum")
segment_mean = _segment("SegmentMean")
segment_min = _segment("SegmentMin")
segment_max = _segment("SegmentMax")
segment_prod = _segment("SegmentProd")


def _unsorted(op: str, attr: bool) -> Callable[..., Tensor]:
    def fn(data: TensorLike, segment_ids: TensorLike, num_segments: Any, name: Optional[str] = None) -> Tensor:
        d, ids = convert_to_tensor(data), convert_to_tensor(segment_ids)
        n = int(np.asarray(num_segments))
        if attr:
            return _run(op, [d, ids], {"num_segments": n})
        return _run(op, [d, ids, ids.session.constant(np.asarray(n, dtype=ids.dtype))])

    fn.__name__ = op
    fn.__doc__ = f"tf.math.unsorted_segment_*: the server's {op} (negative ids drop their rows)."
    return fn


unsorted_segment_sum = _unsorted("UnsortedSegmentSum", True)
unsorted_segment_max = _unsorted("UnsortedSegmentMax", True)
unsorted_segment_min = _unsorted("UnsortedSegmentMin", False)
unsorted_segment_prod = _unsorted("UnsortedSegmentProd", False)


def _unsorted_segment_n(data: Tensor, ids: Tensor, n: int) -> Tensor:
    """TF's _unsorted_segment_N: the rows per segment (at least 1), shaped
    to broadcast against the per-segment sums."""
    counts = unsorted_segment_sum(ones_like(ids if data.dtype == ids.dtype else cast(ids, data.dtype)), ids, n)
    counts = reshape(counts, [n] + [1] * (data.ndim - ids.ndim))
    return maximum(counts, 1)


def unsorted_segment_mean(data: TensorLike, segment_ids: TensorLike, num_segments: Any, name: Optional[str] = None) -> Tensor:
    """tf.math.unsorted_segment_mean, composed as TF: the sums over the
    counts (at least 1)."""
    d, ids = convert_to_tensor(data), convert_to_tensor(segment_ids)
    n = int(np.asarray(num_segments))
    return _run("RealDiv", [unsorted_segment_sum(d, ids, n), _unsorted_segment_n(d, ids, n)])


def unsorted_segment_sqrt_n(data: TensorLike, segment_ids: TensorLike, num_segments: Any, name: Optional[str] = None) -> Tensor:
    """tf.math.unsorted_segment_sqrt_n, composed as TF: the sums over the
    square roots of the counts (at least 1)."""
    d, ids = convert_to_tensor(data), convert_to_tensor(segment_ids)
    n = int(np.asarray(num_segments))
    return _run("RealDiv", [unsorted_segment_sum(d, ids, n), sqrt(_unsorted_segment_n(d, ids, n))])


# -- complex ------------------------------------------------------------------


def complex(real: TensorLike, imag: TensorLike, name: Optional[str] = None) -> Tensor:  # noqa: A001
    """tf.complex: Complex (float32 -> complex64, float64 -> complex128)."""
    r, i = convert_to_tensor(real), convert_to_tensor(imag)
    if r.dtype != i.dtype:
        raise TypeError(f"tf.complex: real and imag must have the same dtype, got {r.dtype.name} and {i.dtype.name}")
    return _run("Complex", [r, i])


def angle(input: TensorLike, name: Optional[str] = None) -> Tensor:  # noqa: A002
    """tf.math.angle: Angle of a complex tensor; of a real one pi where it
    is negative, else 0 (TF's composition)."""
    t = convert_to_tensor(input)
    if t.dtype.kind == "c":
        return _run("Angle", [t])
    zeros = zeros_like(t)
    return where(less(t, zeros), multiply(ones_like(t), np.pi), zeros)


# -- sort, argsort (TF composes them from top_k) ------------------------------


def _sort(values: TensorLike, axis: Any, direction: str, argsort: bool) -> Tensor:
    """TF's sort_ops: a descending sort is top_k over the whole axis (moved
    last by a transposition that is its own inverse); an ascending one sorts
    -x (floats) or -x - 1 (ints) descending."""
    t = convert_to_tensor(values)
    if direction not in ("ASCENDING", "DESCENDING"):
        raise ValueError(f'`direction` should be one of {{"ASCENDING", "DESCENDING"}}. Received: direction={direction}')
    n = t.ndim
    a = int(np.asarray(axis))
    a = a + n if a < 0 else a
    if not 0 <= a < n:
        raise ValueError(f"axis {axis} is out of range for a tensor of rank {n}")
    ascending = direction == "ASCENDING"
    flip = t.dtype.kind in "iu"
    key = t
    if ascending:
        key = subtract(negative(t), 1) if flip else negative(t)
    perm = list(range(n))
    perm[a], perm[-1] = perm[-1], perm[a]
    moved = key if a == n - 1 else transpose(key, perm)
    top = top_k(moved, k=moved.shape[-1])
    out = top.indices if argsort else top.values
    out = out if a == n - 1 else transpose(out, perm)
    if argsort or not ascending:
        return out
    return subtract(negative(out), 1) if flip else negative(out)


def sort(values: TensorLike, axis: Any = -1, direction: str = "ASCENDING", name: Optional[str] = None) -> Tensor:
    """tf.sort, composed from TopKV2 as TF composes it."""
    return _sort(values, axis, direction, False)


def argsort(values: TensorLike, axis: Any = -1, direction: str = "ASCENDING", stable: Any = False, name: Optional[str] = None) -> Tensor:
    """tf.argsort, composed from TopKV2 as TF composes it (ties: the lower
    index first, so it is also stable)."""
    return _sort(values, axis, direction, True)


# -- predicates, logical ops, counts (composed from comparisons and Select) ---


def is_nan(x: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.math.is_nan: x != x."""
    t = convert_to_tensor(x)
    return _run("NotEqual", [t, t])


def is_inf(x: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.math.is_inf: |x| == inf."""
    t = convert_to_tensor(x)
    return _run("Equal", [abs(t), t.session.constant(np.asarray(np.inf, dtype=t.dtype))])


def is_finite(x: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.math.is_finite: |x| < inf (False for NaN)."""
    t = convert_to_tensor(x)
    return _run("Less", [abs(t), t.session.constant(np.asarray(np.inf, dtype=t.dtype))])


def _bools(x: TensorLike, y: TensorLike) -> Sequence[Tensor]:
    a, b = convert_to_tensor(x, dtype=np.bool_), convert_to_tensor(y, dtype=np.bool_)
    return a, b


def logical_not(x: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.math.logical_not: x == False."""
    t = convert_to_tensor(x, dtype=np.bool_)
    return _run("Equal", [t, t.session.constant(np.asarray(False))])


def logical_and(x: TensorLike, y: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.math.logical_and: where(x, y, False) (broadcasting)."""
    a, b = _bools(x, y)
    return where(a, b, False)


def logical_or(x: TensorLike, y: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.math.logical_or: where(x, True, y) (broadcasting)."""
    a, b = _bools(x, y)
    return where(a, True, b)


def logical_xor(x: TensorLike, y: TensorLike, name: Optional[str] = "LogicalXor") -> Tensor:
    """tf.math.logical_xor: x != y."""
    a, b = _bools(x, y)
    return _run("NotEqual", [a, b])


def reduce_all(input_tensor: TensorLike, axis: Any = None, keepdims: Any = False, name: Optional[str] = None) -> Tensor:
    """tf.math.reduce_all: the Min of the values as int32, as bool."""
    t = cast(convert_to_tensor(input_tensor, dtype=np.bool_), np.int32)
    return cast(reduce_min(t, axis=axis, keepdims=keepdims), np.bool_)


def reduce_any(input_tensor: TensorLike, axis: Any = None, keepdims: Any = False, name: Optional[str] = None) -> Tensor:
    """tf.math.reduce_any: the Max of the values as int32, as bool."""
    t = cast(convert_to_tensor(input_tensor, dtype=np.bool_), np.int32)
    return cast(reduce_max(t, axis=axis, keepdims=keepdims), np.bool_)


def count_nonzero(input: TensorLike, axis: Any = None, keepdims: Any = None, dtype: Any = np.int64, name: Optional[str] = None) -> Tensor:  # noqa: A002
    """tf.math.count_nonzero, as TF composes it: the sum of (x != 0) as
    int64, cast to `dtype`."""
    t = convert_to_tensor(input)
    zero = t.session.constant(np.zeros((), dtype=t.dtype))
    nonzero = cast(_run("NotEqual", [t, zero]), np.int64)
    return cast(reduce_sum(nonzero, axis=axis, keepdims=builtins_bool(keepdims)), dtype)


def atan(x: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.math.atan = atan2(x, 1) (the same values and gradient)."""
    t = convert_to_tensor(x)
    return _run("Atan2", [t, ones_like(t)])


def scalar_mul(scalar: TensorLike, x: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.math.scalar_mul: scalar * x (the scalar must be a scalar)."""
    s, t = _operands(scalar, x)
    if s.ndim != 0:
        raise ValueError(f"The input scalar must be a 0-D value. Received shape {tuple(s.shape)}.")
    return _run("Mul", [s, t])



def reduce_euclidean_norm(input_tensor: TensorLike, axis: Any = None, keepdims: Any = False, name: Optional[str] = None) -> Tensor:
    """tf.math.reduce_euclidean_norm = sqrt(sum(x * x)) over `axis` (the
    values of TF's EuclideanNorm; its gradient, x / norm, is NaN at 0 in
    both)."""
    t = convert_to_tensor(input_tensor)
    sq = multiply(t, conj(t)) if t.dtype.kind == "c" else multiply(t, t)
    return sqrt(reduce_sum(sq, axis=axis, keepdims=keepdims))


def polyval(coeffs: Sequence[TensorLike], x: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.math.polyval, composed as TF: Horner's rule, highest power first."""
    t = convert_to_tensor(x)
    if not isinstance(coeffs, (list, tuple)):
        raise ValueError(f"Argument coeffs must be list type found {type(coeffs)}.")
    p = zeros_like(t)
    for c in coeffs:
        p = add(c, multiply(p, t))
    return p


# tf.math's names for tf.nn functions: nn imports this module, so they are
# looked up on first use (PEP 562).
_NN_ALIASES = frozenset({"log_softmax", "softmax", "l2_normalize", "softsign"})


def __getattr__(name: str) -> Any:
    if name in _NN_ALIASES:
        from gradtape.tf import nn

        return getattr(nn, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
