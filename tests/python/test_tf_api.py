"""gradtape.tf's functional API (array, math, linalg, segment, einsum,
complex, raw_ops) against TensorFlow 2.21.

Each case is written once as a function of a namespace ``tf`` and runs with
``tensorflow`` and with ``gradtape.tf`` on the test server (both client
implementations). Inputs are random with a fixed numpy seed; ``_grads``
returns a function's value, its first-order gradients (of the sum of the
output times fixed weights, so that each output element counts
differently) and, where asked, second-order ones. Values, dtypes, shapes,
None-ness and the class of an exception raised must agree (float32
rtol/atol 1e-5, float64 1e-10).
"""

from __future__ import annotations

import builtins
from typing import Any, Callable, Dict, List

import numpy as np
import pytest

CASES: Dict[str, Callable[[Any], Any]] = {}


def case(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    assert fn.__name__ not in CASES, fn.__name__
    CASES[fn.__name__] = fn
    return fn


def _rand(*shape: int, seed: int = 0, dtype: Any = np.float32, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, size=shape).astype(dtype)


def _weights(tf: Any, y: Any) -> Any:
    """Fixed weights of y's shape and dtype (the same in both modules)."""
    shape = tuple(int(d) for d in y.shape)
    n = int(np.prod(shape)) if shape else 1
    w = (np.cos(np.arange(n) * 0.7) + 1.5).reshape(shape)
    return tf.constant(w.astype(np.dtype(y.dtype.name if hasattr(y.dtype, "name") else y.dtype)))


def _grads(tf: Any, f: Callable[..., Any], *arrays: Any, second: bool = False) -> List[Any]:
    """[f(*xs), d sum(w * f) / d xs..., (second order: d sum(v * grads) / d xs...)]
    for constants xs of `arrays`; int arrays are passed but not watched."""
    xs = [tf.constant(a) for a in arrays]
    watched = [x for x, a in zip(xs, arrays) if np.asarray(a).dtype.kind in "fc"]
    with tf.GradientTape(persistent=True) as outer:
        outer.watch(watched)
        with tf.GradientTape() as inner:
            inner.watch(watched)
            y = f(*xs)
            loss = tf.reduce_sum(y * _weights(tf, y))
        g = inner.gradient(loss, watched)
        if second:
            z = tf.add_n([tf.reduce_sum(gi * _weights(tf, gi)) for gi in g if gi is not None])
    out = [y] + list(g)
    if second:
        out += list(outer.gradient(z, watched))
    return out


# -- unary, binary, comparisons ---------------------------------------------


@case
def erf_erfc(tf):
    return _grads(tf, lambda x: tf.math.erf(x) + 2.0 * tf.math.erfc(x), _rand(3, 4), second=True)


@case
def rsqrt_reciprocal(tf):
    return _grads(tf, lambda x: tf.math.rsqrt(x) - tf.math.reciprocal(x), _rand(2, 5, low=0.5, high=3.0), second=True)


@case
def truediv_divide_no_nan(tf):
    y = _rand(3, 4, seed=5)
    y[0, 1] = 0.0  # divide_no_nan: 0 there, and no gradient through it
    return _grads(tf, lambda a, b: tf.math.truediv(a, b + 3.0) + tf.math.divide_no_nan(a, b), _rand(3, 4), y)


@case
def rsqrt_float64(tf):
    return _grads(tf, tf.math.rsqrt, _rand(4, seed=3, dtype=np.float64, low=0.5, high=3.0), second=True)


@case
def atan2_broadcast(tf):
    return _grads(tf, lambda y, x: tf.math.atan2(y, x), _rand(3, 1, seed=1), _rand(1, 4, seed=2), second=True)


@case
def atan2_top_level(tf):
    return tf.atan2(tf.constant([1.0, -1.0, 0.5]), 2.0)


@case
def floor_ceil_round_values_and_no_gradient(tf):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49, 2.51, -3.7], np.float32)
    return _grads(tf, lambda t: tf.stack([tf.floor(t), tf.math.ceil(t), tf.round(t), tf.math.round(t)]), x)


@case
def round_int_is_identity(tf):
    return tf.math.round(tf.constant([1, -2, 3]))


@case
def comparisons_broadcast(tf):
    a = tf.constant(_rand(3, 1, seed=4).round())
    b = tf.constant(_rand(1, 4, seed=5).round())
    return [
        tf.equal(a, b), tf.not_equal(a, b), tf.greater(a, b), tf.greater_equal(a, b),
        tf.less(a, b), tf.less_equal(a, b), tf.math.equal(a, 1), tf.math.less(2, tf.constant([1, 3])),
    ]


@case
def where_broadcasts_all_three(tf):
    c = tf.constant(np.array([[True], [False], [True]]))
    return _grads(tf, lambda x, y: tf.where(c, x, y), _rand(1, 4, seed=6), _rand(3, 1, seed=7), second=True)


@case
def where_python_scalar(tf):
    return _grads(tf, lambda x: tf.where(x > 0.0, x, 0.5), _rand(2, 3, seed=8), second=True)


@case
def where_one_of_x_y(tf):
    return tf.where(tf.constant([True]), tf.constant([1.0]), None)


# -- reductions, scans, top_k ---------------------------------------------------


@case
def argmax_argmin(tf):
    x = tf.constant(np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]], np.float32))
    return [
        tf.argmax(x), tf.math.argmax(x, axis=1), tf.argmin(x, 1, output_type=tf.int32),
        tf.math.argmin(x), tf.argmax(x, axis=-1), tf.argmax(tf.constant([3, 1, 4, 1, 5])),
    ]


@case
def cumsum_modes(tf):
    return _grads(
        tf,
        lambda x: tf.stack([
            tf.cumsum(x), tf.math.cumsum(x, axis=1), tf.cumsum(x, exclusive=True),
            tf.cumsum(x, reverse=True), tf.math.cumsum(x, axis=-1, exclusive=True, reverse=True),
        ]),
        _rand(3, 3, seed=9),
    )


@case
def cumprod_modes(tf):
    return _grads(
        tf,
        lambda x: tf.stack([
            tf.math.cumprod(x), tf.math.cumprod(x, axis=1), tf.math.cumprod(x, exclusive=True),
            tf.math.cumprod(x, reverse=True), tf.math.cumprod(x, axis=1, exclusive=True, reverse=True),
        ]),
        _rand(3, 3, seed=10),
        second=True,
    )


@case
def cumsum_int(tf):
    return tf.cumsum(tf.constant([[1, 2], [3, 4]]), axis=1)


@case
def top_k_values_indices_grads(tf):
    def f(x):
        r = tf.math.top_k(x, k=3)
        return r.values * tf.cast(r.indices + 1, tf.float32)

    out = _grads(tf, f, _rand(2, 6, seed=11), second=True)
    r = tf.math.top_k(tf.constant([[1.0, 4.0, 4.0, 2.0]]), 2)
    return out + [r.values, r.indices, tf.math.top_k(tf.constant([5, 1, 7]), k=1, index_type=tf.int64)[1]]


@case
def top_k_unsorted_same_set(tf):
    """TF leaves the order of sorted=False open: the same set, and indices
    that point at the values."""
    x = _rand(2, 7, seed=12)
    r = tf.math.top_k(tf.constant(x), k=4, sorted=False)
    v, i = r.values.numpy(), r.indices.numpy()
    assert np.array_equal(np.take_along_axis(x, i, axis=-1), v)
    return np.sort(v, axis=-1)


@case
def reduce_variance_std(tf):
    return _grads(
        tf,
        lambda x: tf.math.reduce_variance(x, axis=1) + tf.math.reduce_std(x, axis=1),
        _rand(3, 4, seed=13),
        second=True,
    )


@case
def reduce_max_min_ties(tf):
    x = np.array([[1.0, 5.0, 5.0], [2.0, 2.0, -1.0]], np.float32)
    return _grads(tf, lambda t: tf.reduce_max(t, axis=1) + tf.reduce_min(t, axis=[0, 1]), x, second=True)


@case
def reduce_max_min_keepdims_negative_axis(tf):
    x = _rand(2, 3, 4, seed=55).round(1)
    return _grads(
        tf,
        lambda t: tf.reduce_max(t, axis=-1, keepdims=True) * tf.math.reduce_min(t, axis=[0, 2], keepdims=True),
        x,
        second=True,
    )


@case
def reduce_max_int(tf):
    x = tf.constant([[3, -1, 7], [2, 2, 0]])
    return [tf.reduce_max(x), tf.reduce_min(x, axis=1), tf.reduce_max(x, 0, keepdims=True)]


@case
def sort_argsort(tf):
    x = np.array([[3.0, 1.0, 2.0, 1.0], [0.5, -1.0, 0.5, 4.0]], np.float32)
    out = _grads(tf, lambda t: tf.sort(t) + 2.0 * tf.sort(t, axis=0, direction="DESCENDING")[:, ::-1], x, second=True)
    i = tf.constant([[5, -3, 5, 0], [2, 9, -7, 2]])
    return out + [
        tf.argsort(tf.constant(x)), tf.argsort(tf.constant(x), axis=0, direction="DESCENDING"),
        tf.sort(i), tf.sort(i, direction="DESCENDING"), tf.argsort(i, stable=True), tf.argsort(i, axis=0),
    ]


@case
def sort_bad_direction(tf):
    return tf.sort(tf.constant([1.0, 2.0]), direction="UP")


# -- concat, stack, split ---------------------------------------------------------


@case
def concat_axes(tf):
    return _grads(
        tf,
        lambda a, b: tf.concat([a, b, a], axis=-1) + tf.concat([b, a, a], 1),
        _rand(2, 3, seed=14),
        _rand(2, 3, seed=15),
    )


@case
def concat_one_and_lists(tf):
    return [tf.concat([tf.constant([1.0, 2.0])], 0), tf.concat([[1, 2], [3]], axis=0)]


@case
def stack_unstack(tf):
    def f(a, b):
        s = tf.stack([a, b], axis=1)
        parts = tf.unstack(s, axis=2)
        return tf.stack(parts[::-1], axis=0) * 2.0

    return _grads(tf, f, _rand(2, 3, seed=16), _rand(2, 3, seed=17), second=True)


@case
def unstack_default_axis(tf):
    return tf.unstack(tf.constant([[1, 2], [3, 4], [5, 6]]))


@case
def split_num_and_sizes(tf):
    def f(x):
        a, b, c = tf.split(x, 3, axis=1)
        d, e, g = tf.split(x, [2, -1, 1], 1)
        h, i = tf.split(x, num_or_size_splits=2, axis=1)
        return tf.concat([a * 2.0, b, c * 3.0, d, e * e, g, h, i * 4.0], axis=1)

    return _grads(tf, f, _rand(4, 6, seed=18), second=True)


# -- layout ---------------------------------------------------------------------


@case
def expand_dims_squeeze(tf):
    def f(x):
        y = tf.expand_dims(x, -1)
        z = tf.expand_dims(y, axis=0)
        return tf.squeeze(z, axis=[0, 3]) * 2.0 + tf.squeeze(tf.expand_dims(x, 1))

    return _grads(tf, f, _rand(3, 4, seed=19), second=True)


@case
def tile_broadcast_to(tf):
    return _grads(tf, lambda x: tf.tile(x, [2, 3]) + tf.reshape(tf.broadcast_to(x, [2, 3, 3]), [6, 3]), _rand(3, 1, seed=20), second=True)


@case
def fill_gradient_to_value(tf):
    return _grads(tf, lambda v: tf.fill([2, 3], v) * tf.fill((2, 1), 2.0), np.float32(1.5), second=True)


@case
def range_dtypes(tf):
    return [
        tf.range(5), tf.range(5.0), tf.range(1, 5, 0.5), tf.range(tf.constant(3, tf.int64)),
        tf.range(3, dtype=tf.float64), tf.range(10, 2, -3), tf.range(start=2, limit=7, delta=2),
        tf.range(0, 1.0, 0.25), tf.range(tf.constant(2.0, tf.float64), 4),
    ]


@case
def reverse_axes(tf):
    return _grads(tf, lambda x: tf.reverse(x, [0, 2]) + tf.reverse(x, axis=[-1]), _rand(2, 3, 4, seed=21), second=True)


@case
def pad_constant(tf):
    return _grads(
        tf,
        lambda x: tf.pad(x, [[1, 0], [2, 1]]) + tf.pad(x, tf.constant([[1, 0], [2, 1]]), constant_values=2.5),
        _rand(2, 3, seed=22),
        second=True,
    )


@case
def pad_reflect_symmetric(tf):
    return _grads(
        tf,
        lambda x: tf.pad(x, [[1, 1], [2, 0]], mode="REFLECT") * tf.pad(x, [[1, 1], [2, 0]], "symmetric"),
        _rand(3, 4, seed=23),
        second=True,
    )


@case
def pad_bad_mode(tf):
    return tf.pad(tf.constant([1.0]), [[1, 1]], mode="EDGE")


@case
def one_hot_variants(tf):
    idx = tf.constant([[0, 2], [3, -1]])
    return [
        tf.one_hot(idx, 3), tf.one_hot(idx, 4, on_value=5, off_value=-1), tf.one_hot(idx, 3, axis=0),
        tf.one_hot(idx, depth=3, axis=1, dtype=tf.float64), tf.one_hot([1, 0], 2, on_value=2.0),
        tf.one_hot(tf.constant([1, 2], tf.int64), 3, off_value=0.5),
    ]


# -- gather, scatter, slices -------------------------------------------------------


@case
def gather_axis_batch_dims(tf):
    def f(p):
        a = tf.gather(p, [2, 0, 2])
        b = tf.gather(p, tf.constant([[1, 0], [3, 3]]), axis=1)
        c = tf.gather(p, [[0, 3], [1, 1], [2, 0]], batch_dims=1)
        d = tf.gather(p, [[0], [1], [2]], axis=-1, batch_dims=-1)
        return tf.reduce_sum(a) + tf.reduce_sum(b * b) + tf.reduce_sum(c * 3.0) + tf.reduce_sum(d)

    return _grads(tf, f, _rand(3, 4, seed=24), second=True)


@case
def gather_batch_dims_axis2(tf):
    idx = np.array([[1, 0], [2, 2]], np.int32)
    return _grads(tf, lambda p, i: tf.gather(p, i, axis=2, batch_dims=1), _rand(2, 3, 4, seed=25), idx, second=True)


@case
def gather_nd_plain(tf):
    idx = np.array([[[0, 1], [2, 3]], [[1, 1], [0, 0]]], np.int32)
    return _grads(tf, lambda p, i: tf.gather_nd(p, i) + tf.gather_nd(p, [[1, 2], [1, 2]])[0], _rand(3, 4, seed=26), idx, second=True)


@case
def gather_nd_batch_dims(tf):
    idx = np.array([[[1], [0], [1]], [[2], [2], [0]]], np.int64)
    idx2 = np.array([[[0, 1]], [[2, 0]]], np.int32)
    return _grads(
        tf,
        lambda p: tf.concat([tf.reshape(tf.gather_nd(p, idx, batch_dims=1), [-1]), tf.reshape(tf.gather_nd(p, idx2, batch_dims=1), [-1])], 0),
        _rand(2, 3, 2, seed=27),
    )


@case
def scatter_nd_duplicates(tf):
    idx = np.array([[0, 1], [2, 0], [0, 1]], np.int32)
    return _grads(tf, lambda u: tf.scatter_nd(idx, u, [3, 2]), _rand(3, seed=28), second=False) + [
        tf.scatter_nd(tf.constant([[1], [3]]), tf.constant([[1.0, 2.0], [3.0, 4.0]]), tf.constant([4, 2]))
    ]


@case
def tensor_scatter_nd_add_sub(tf):
    idx = np.array([[0, 1], [2, 0], [0, 1]], np.int32)
    return _grads(
        tf,
        lambda t, u: tf.tensor_scatter_nd_add(t, idx, u) * tf.tensor_scatter_nd_sub(t, idx[:2], u[:2] * 2.0),
        _rand(3, 2, seed=82),
        _rand(3, seed=83),
        second=True,
    )


@case
def euclidean_norm_polyval(tf):
    return _grads(
        tf,
        lambda x: tf.math.reduce_euclidean_norm(x, axis=1) + tf.math.polyval([2.0, -1.0, tf.constant(0.5)], x)[:, 0],
        _rand(3, 4, seed=84),
        second=True,
    )


@case
def slice_and_strided_slice(tf):
    def f(x):
        a = tf.slice(x, [1, 0, 1], [2, -1, 2])
        b = tf.strided_slice(x, [0, 3, 0], [3, 0, 4], [2, -1, 3], end_mask=1, shrink_axis_mask=0)
        c = tf.strided_slice(x, [1, 0], [2, 0], begin_mask=0, end_mask=2, shrink_axis_mask=1)
        d = tf.strided_slice(x, [0, 1], [0, 3], [1, 1], ellipsis_mask=1, new_axis_mask=0)
        e = tf.strided_slice(x, [0, 0], [1, 1], new_axis_mask=1, shrink_axis_mask=2)
        return tf.reduce_sum(a) + tf.reduce_sum(b * 2.0) + tf.reduce_sum(c * c) + tf.reduce_sum(d) + tf.reduce_sum(e * 5.0)

    return _grads(tf, f, _rand(3, 4, 4, seed=29), second=True)


@case
def indexing_newaxis_and_negative_strides(tf):
    def f(x):
        return tf.concat([
            tf.reshape(x[tf.newaxis], [-1]), tf.reshape(x[..., None] * 2.0, [-1]), tf.reshape(x[::-1], [-1]),
            tf.reshape(x[3:0:-2, ::-2], [-1]), tf.reshape(x[:, tf.newaxis, -1], [-1]),
        ], 0)

    return _grads(tf, f, _rand(4, 3, seed=30), second=True)


# -- linalg, einsum ---------------------------------------------------------------


@case
def einsum_two_operands(tf):
    return _grads(
        tf,
        lambda a, b: tf.einsum("ij,jk->ik", a, b) + tf.linalg.einsum("ij,jk", a, b) + tf.einsum("ik,kj -> ij", a, b),
        _rand(2, 3, seed=31),
        _rand(3, 2, seed=32),
        second=True,
    )


@case
def einsum_batch_ellipsis_one_operand(tf):
    def f(a, b):
        p = tf.einsum("...ij,...jk->...ik", a, b)
        return tf.einsum("bii->bi", p) + tf.einsum("bij->b", a)[:, None] + tf.einsum("bij", a)[:, 0, :2]

    return _grads(tf, f, _rand(3, 2, 4, seed=33), _rand(3, 4, 2, seed=34), second=True)


@case
def einsum_three_and_four_operands(tf):
    def f(a, b, c, v):
        x = tf.einsum("ij,jk,kl->il", a, b, c)
        y = tf.einsum("bij,jk,k->bi", tf.stack([a, a * 2.0]), b, v)
        z = tf.einsum("ij,jk,kl,l", a, b, c, v)
        w = tf.einsum("...j,jk,k->...", a, b, v)
        return tf.concat([tf.reshape(x, [-1]), tf.reshape(y, [-1]), tf.reshape(z, [-1]), w], 0)

    return _grads(tf, f, _rand(3, 3, seed=78), _rand(3, 3, seed=79), _rand(3, 3, seed=80), _rand(3, seed=81), second=True)


@case
def einsum_repeated_output_label(tf):
    return tf.einsum("ij->ii", tf.ones([2, 2]))


@case
def cross_matvec(tf):
    return _grads(
        tf,
        lambda a, b, m: tf.linalg.cross(a, b) + tf.linalg.matvec(m, a[0]) + tf.linalg.matvec(m, b[1], transpose_a=True),
        _rand(2, 3, seed=35),
        _rand(2, 3, seed=36),
        _rand(3, 3, seed=37),
        second=True,
    )


@case
def matvec_batched(tf):
    return _grads(tf, lambda m, v: tf.linalg.matvec(m, v), _rand(2, 3, 4, seed=38), _rand(2, 4, seed=39), second=True)


@case
def matmul_flags(tf):
    def f(a, b, c):
        return tf.stack([
            tf.matmul(a, b, a_is_sparse=True), tf.linalg.matmul(a, b, transpose_a=True, b_is_sparse=True),
            tf.matmul(a, b, output_type=tf.float32), tf.matmul(a, b, adjoint_b=True),
            tf.reduce_sum(tf.matmul(c, c, transpose_b=True), 0),
        ])

    return _grads(tf, f, _rand(3, 3, seed=58), _rand(3, 3, seed=59), _rand(2, 3, 3, seed=60), second=True)


@case
def matmul_transpose_and_adjoint(tf):
    m = tf.constant([[1.0]])
    return tf.matmul(m, m, transpose_a=True, adjoint_a=True)


@case
def tensordot_axes(tf):
    def f(a, b, c):
        x = tf.tensordot(a, b, axes=1)
        y = tf.tensordot(a, c, axes=[[0, 2], [1, 0]])
        z = tf.linalg.tensordot(a, a, 0)
        return tf.reduce_sum(x * 2.0) + tf.reduce_sum(y * y) + tf.reduce_sum(z) + tf.reduce_sum(tf.tensordot(a, a, 3))

    return _grads(tf, f, _rand(2, 3, 4, seed=40), _rand(4, 2, seed=41), _rand(4, 2, seed=42), second=True)


@case
def matrix_transpose_trace_diag(tf):
    def f(x):
        return tf.linalg.matrix_transpose(x) * 2.0 + tf.linalg.trace(x)[:, None, None] + tf.linalg.diag_part(x)[:, :, None]

    return _grads(tf, f, _rand(2, 3, 3, seed=43), second=True)


@case
def adjoint_complex(tf):
    c = tf.complex(tf.constant(_rand(2, 3, seed=44)), tf.constant(_rand(2, 3, seed=45)))
    return [tf.linalg.adjoint(c), tf.linalg.matrix_transpose(c, conjugate=True), tf.linalg.matmul(c, c, adjoint_b=True)]


@case
def norms(tf):
    def f(x):
        return tf.stack([
            tf.norm(x), tf.norm(x, ord=1), tf.norm(x, ord=np.inf), tf.norm(x, ord=3), tf.linalg.norm(x, ord="fro", axis=[0, 1]),
            tf.norm(x, ord=1, axis=(0, 1)), tf.norm(x, ord=np.inf, axis=[-2, -1]), tf.reduce_sum(tf.norm(x, axis=1)),
            tf.reduce_sum(tf.norm(x, ord=2, axis=0, keepdims=True)), tf.norm(x, ord="euclidean", axis=[1, 0]),
        ])

    return _grads(tf, f, _rand(3, 4, seed=56), second=True)


# -- segments -------------------------------------------------------------------------


@case
def segment_sorted(tf):
    ids = np.array([0, 0, 1, 3, 3], np.int32)

    def f(d):
        return tf.concat([
            tf.math.segment_sum(d, ids), tf.math.segment_mean(d, ids), tf.math.segment_min(d, ids),
            tf.math.segment_max(d, ids), tf.math.segment_prod(d, ids),
        ], 0)

    return _grads(tf, f, _rand(5, 2, seed=46), second=True)


@case
def segment_unsorted(tf):
    ids = np.array([2, 0, -1, 2, 1, 0], np.int32)

    def f(d):
        return tf.concat([
            tf.math.unsorted_segment_sum(d, ids, 4), tf.math.unsorted_segment_max(d, ids, num_segments=3),
            tf.math.unsorted_segment_min(d, ids, tf.constant(3)), tf.math.unsorted_segment_prod(d, ids, 3),
            tf.math.unsorted_segment_mean(d, ids, 4), tf.math.unsorted_segment_sqrt_n(d, ids, 4),
        ], 0)

    return _grads(tf, f, _rand(6, 3, seed=47), second=True)


@case
def segment_unsorted_2d_ids(tf):
    ids = np.array([[0, 1], [1, 1]], np.int64)
    return _grads(tf, lambda d: tf.math.unsorted_segment_mean(d, ids, 3), _rand(2, 2, 3, seed=48), second=True)


@case
def segment_sparse(tf):
    idx = np.array([0, 2, 2, 3], np.int32)
    ids = np.array([0, 0, 1, 3], np.int32)

    def f(d):
        return tf.concat([
            tf.sparse.segment_sum(d, idx, ids), tf.sparse.segment_mean(d, idx, ids), tf.sparse.segment_sqrt_n(d, idx, ids),
            tf.sparse.segment_sum(d, idx, ids, num_segments=5), tf.sparse.segment_mean(d, idx, ids, 5),
            tf.sparse.segment_sqrt_n(d, idx, ids, num_segments=6),
        ], 0)

    return _grads(tf, f, _rand(4, 2, seed=49), second=True)


@case
def unsorted_segment_sum_top_level_absent(tf):
    return hasattr(tf, "unsorted_segment_sum"), hasattr(tf, "segment_sum"), hasattr(tf.math, "segment_sum")


# -- complex ----------------------------------------------------------------------------


@case
def complex_and_angle(tf):
    def f(a, b):
        c = tf.complex(a, b)
        return tf.math.real(c * tf.math.conj(c)) + tf.math.angle(c) + tf.math.imag(c * c)

    return _grads(tf, f, _rand(3, seed=50), _rand(3, seed=51), second=True)


@case
def complex_abs(tf):
    a = np.array([3.0, 0.0, -1.5, 0.25], np.float32)
    b = np.array([4.0, 0.0, 2.0, -0.5], np.float32)
    out = _grads(tf, lambda x, y: tf.abs(tf.complex(x, y)) * 2.0 + tf.math.abs(x), a, b)
    c = tf.complex(tf.constant([1.0, -2.0], tf.float64), tf.constant([2.0, 0.5], tf.float64))
    return out + [tf.abs(c)]


@case
def real_imag_conj_of_real(tf):
    x = tf.constant([1.0, -2.0])
    out = _grads(tf, lambda t: tf.math.real(t) * 2.0 + tf.math.imag(t) + tf.math.conj(t) * t, _rand(3, seed=77), second=True)
    return out + [tf.math.real(x), tf.math.imag(x), tf.math.conj(tf.constant([1, 2]))]


@case
def angle_of_real(tf):
    return [tf.math.angle(tf.constant([1.0, -2.0, 0.0])), tf.complex(tf.constant([1.0], tf.float64), tf.constant([2.0], tf.float64))]


@case
def complex_dtype_mismatch(tf):
    return tf.complex(tf.constant([1.0]), tf.constant([1.0], tf.float64))


# -- raw_ops -------------------------------------------------------------------------------


@case
def raw_ops_by_keyword(tf):
    a, b = tf.constant(_rand(3, 2, seed=52)), tf.constant(_rand(3, 4, seed=53))
    r = tf.raw_ops
    top = r.TopKV2(input=b, k=2, sorted=True)
    return [
        r.MatMul(a=a, b=b, transpose_a=True),
        r.GatherV2(params=b, indices=tf.constant([3, 0]), axis=tf.constant(1), batch_dims=0),
        r.Sum(input=b, axis=tf.constant([0]), keep_dims=True),
        r.ConcatV2(values=[a, a], axis=tf.constant(0)),
        r.Reshape(tensor=b, shape=tf.constant([4, 3])),
        r.Transpose(x=b, perm=tf.constant([1, 0])),
        r.UnsortedSegmentSum(data=b, segment_ids=tf.constant([1, 0, 1]), num_segments=tf.constant(2)),
        top.values, top.indices,
        r.Unpack(value=a, num=2, axis=1),
        r.AddV2(x=a, y=a, name="add"),
        r.Cast(x=a, DstT=tf.int32),
    ]


@case
def raw_ops_gradient(tf):
    return _grads(tf, lambda a: tf.raw_ops.Cumprod(x=a, axis=1, exclusive=True), _rand(2, 3, seed=54), second=True)


@case
def raw_ops_positional_refused(tf):
    return tf.raw_ops.Neg(tf.constant(1.0))


# -- composed: predicates, logical ops, repeat, roll, meshgrid, sequence_mask, eye --------


@case
def predicates_and_logical(tf):
    x = tf.constant([1.0, np.nan, np.inf, -np.inf, 0.0])
    a = tf.constant([[True, False, True]])
    b = tf.constant([[True], [False]])
    return [
        tf.math.is_nan(x), tf.math.is_inf(x), tf.math.is_finite(x), tf.logical_not(a), tf.logical_and(a, b),
        tf.logical_or(a, b), tf.math.logical_xor(a, b), tf.reduce_all(b), tf.reduce_any(a, axis=1),
        tf.math.reduce_all(tf.constant([[True, True], [False, True]]), axis=0, keepdims=True),
        tf.math.count_nonzero(tf.constant([[0.0, 1.5], [2.0, 0.0]])), tf.math.count_nonzero([[0, 3], [1, 1]], axis=1, dtype=tf.int32),
        tf.math.count_nonzero(tf.constant([[0, 3]]), keepdims=True),
    ]


@case
def atan_scalar_mul(tf):
    return _grads(tf, lambda x: tf.atan(x) + tf.math.scalar_mul(3.0, x) * tf.math.atan(x * 2.0), _rand(3, 2, seed=63), second=True)


@case
def repeat_roll(tf):
    def f(x):
        return tf.concat([
            tf.reshape(tf.repeat(x, 2), [-1]), tf.reshape(tf.repeat(x, [1, 0, 3], axis=0), [-1]),
            tf.reshape(tf.repeat(x, repeats=[2, 1], axis=-1), [-1]), tf.reshape(tf.roll(x, 1, axis=0), [-1]),
            tf.reshape(tf.roll(x, shift=[-1, 3, 1], axis=[1, 0, 1]), [-1]),
        ], 0)

    return _grads(tf, f, _rand(3, 2, seed=64), second=True)


@case
def meshgrid_both_indexings(tf):
    def f(a, b, c):
        xy = tf.meshgrid(a, b, c)
        ij = tf.meshgrid(a, b, c, indexing="ij")
        return tf.stack([tf.reduce_sum(t * float(i + 1)) for i, t in enumerate(xy + ij)])

    out = _grads(tf, f, _rand(3, seed=65), _rand(2, seed=66), _rand(4, seed=67), second=True)
    return out + tf.meshgrid([1, 2, 3], [4, 5]) + tf.meshgrid(tf.constant([1.0, 2.0]), indexing="ij")


@case
def sequence_mask_variants(tf):
    return [
        tf.sequence_mask([1, 3, 2]), tf.sequence_mask([[1, 0], [4, 2]], maxlen=3), tf.sequence_mask(tf.constant([2, 0]), 4, dtype=tf.float32),
        tf.sequence_mask(tf.constant([1, 2], tf.int64), maxlen=tf.constant(3, tf.int64), dtype=tf.int32),
    ]


@case
def eye_and_diag(tf):
    out = _grads(tf, lambda v: tf.linalg.diag(v) * 2.0 + tf.eye(3), _rand(2, 3, seed=68), second=True)
    return out + [tf.eye(2, 3), tf.eye(2, batch_shape=[2], dtype=tf.int32), tf.linalg.eye(3, num_columns=1, dtype=tf.float64)]


# -- dtype inference and argument forms ----------------------------------------------


@case
def dtypes_of_python_values(tf):
    x = tf.constant([[1.0, 2.0]])
    c = tf.constant([True, False])
    return [
        tf.concat([x, [[3.0]]], axis=-1), tf.where(c, 1, 0), tf.where(c, 1.5, tf.constant([0.0, 1.0])),
        tf.fill([2], 7), tf.fill([1, 2], 0.5), tf.stack([1, 2]), tf.stack([[1.0], [2.0]], axis=1),
        tf.pad(tf.constant([1, 2]), [[1, 1]], constant_values=9), tf.reverse(tf.constant([1, 2, 3]), [0]),
        tf.tile([1.0, 2.0], [2]), tf.expand_dims([1, 2], axis=tf.constant(0)), tf.squeeze([[1.5]]),
        tf.broadcast_to(3, [2]), tf.gather([4, 5, 6], tf.constant([2, 0], tf.int64)), tf.one_hot([1], 2, on_value=tf.constant(3.0)),
        tf.stack([1.5, tf.constant(2.0, tf.float64)]), tf.concat([[1.5], tf.constant([2.0], tf.float64)], 0),
        tf.stack([tf.constant(1, tf.int64), 2]),
    ]


@case
def tensor_arguments(tf):
    x = tf.constant(_rand(4, 6, seed=61))
    return [
        tf.split(x, 2, axis=tf.constant(1)), tf.split(x, tf.constant([1, 3]), axis=0),
        tf.cumsum(x, axis=tf.constant(1)), tf.math.top_k(x, k=tf.constant(2)).values, tf.argmax(x, tf.constant(1)),
        tf.range(tf.constant(1), tf.constant(7), tf.constant(2)), tf.range(0), tf.range(3.0, 0.0, -0.5),
        tf.reduce_max(x, axis=tf.constant([0])), tf.tile(x, tf.constant([1, 2])), tf.reshape(x, tf.constant([3, 8])),
        tf.concat([x, x], axis=-2), tf.unstack(x, num=6, axis=-1)[5], tf.squeeze(tf.reshape(x, [1, 4, 1, 6]), [-2]),
    ]


@case
def squeeze_non_unit_dim(tf):
    return tf.squeeze(tf.ones([2, 3]), axis=0)


@case
def gather_out_of_range(tf):
    return tf.gather(tf.ones([3]), [5])


@case
def split_uneven(tf):
    return tf.split(tf.ones([5]), 2)


@case
def raw_ops_lists_and_errors(tf):
    x = tf.constant(_rand(4, 2, seed=62))
    r = tf.raw_ops
    parts = r.Split(axis=tf.constant(0), value=x, num_split=2)
    v = r.SplitV(value=x, size_splits=tf.constant([1, 3]), axis=tf.constant(0), num_split=2)
    return [
        parts, v, r.Pack(values=[x, x], axis=1), r.ArgMax(input=x, dimension=1, output_type=tf.int32),
        r.Select(condition=tf.constant([True, False, True, False]), x=x, y=-x),
        r.ExpandDims(input=x, axis=1), r.Squeeze(input=tf.ones([1, 2, 1]), axis=[0]),
        r.Equal(x=x, y=x, incompatible_shape_error=True), r.Cast(x=x, DstT=tf.float64, Truncate=False),
        r.MatMul(a=x, b=x, transpose_b=True, grad_a=False), r.Complex(real=x, imag=x, Tout=tf.complex64),
        r.OneHot(indices=tf.constant([0, 2]), depth=tf.constant(3), on_value=tf.constant(2.0), off_value=tf.constant(-1.0)),
        r.OneHot(indices=tf.constant([1]), depth=2, on_value=tf.constant(2.0, tf.float64), off_value=tf.constant(0.0, tf.float64)),
    ]


@case
def raw_ops_unknown_argument(tf):
    return tf.raw_ops.Neg(x=tf.constant(1.0), y=2)


@case
def raw_ops_missing_input(tf):
    return tf.raw_ops.MatMul(a=tf.ones([2, 2]))


# -- small model programs: three SGD steps, losses, gradients, final weights ---------


def _train(tf: Any, variables: List[Any], loss_fn: Callable[[], Any], steps: int = 3, lr: float = 0.1) -> List[Any]:
    out: List[Any] = []
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = loss_fn()
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]  # TF: IndexedSlices of a gather
        out += [loss] + grads
        for v, g in zip(variables, grads):
            v.assign_sub(lr * g)
    return out + [tf.identity(v) for v in variables]


@case
def model_embedding_bag_one_hot_ce(tf):
    emb = tf.Variable(_rand(10, 4, seed=70) * 0.5)
    w = tf.Variable(_rand(4, 3, seed=71) * 0.5)
    ids = tf.constant([1, 4, 4, 9, 0, 2, 7])
    bags = tf.constant([0, 0, 1, 1, 1, 2, 3])
    labels = tf.constant([2, 0, 1, 1])

    def loss():
        rows = tf.gather(emb, ids)
        pooled = tf.math.unsorted_segment_mean(rows, bags, 4) + tf.math.segment_max(rows, bags) * 0.5
        logits = tf.matmul(pooled, w)
        ce = -tf.reduce_sum(tf.one_hot(labels, 3) * tf.nn.log_softmax(logits), axis=-1)
        return tf.reduce_mean(ce)

    out = _train(tf, [emb, w], loss)
    logits = tf.matmul(tf.math.unsorted_segment_mean(tf.gather(emb, ids), bags, 4), w)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32), labels), tf.float32))
    return out + [accuracy]


@case
def model_pad_tile_window_einsum(tf):
    k = tf.Variable(_rand(3, 2, 4, seed=72) * 0.3)
    x = tf.constant(_rand(2, 6, 2, seed=73))

    def loss():
        p = tf.pad(x, [[0, 0], [1, 1], [0, 0]], mode="REFLECT")
        windows = tf.stack([p[:, i:i + 6] for i in range(3)], axis=2)  # [2, 6, 3, 2]
        h = tf.einsum("btkc,kcf->btf", windows, k)
        h = tf.concat([h, tf.tile(tf.expand_dims(tf.reduce_mean(h, 1), 1), [1, 6, 1])], axis=-1)
        h = tf.squeeze(tf.expand_dims(h, 0), 0)
        top = tf.math.top_k(tf.math.cumsum(h, axis=1, reverse=True), k=2).values
        return tf.reduce_mean(tf.square(top)) + tf.reduce_sum(tf.math.erf(h[:, ::-1, tf.newaxis, :2]))

    return _train(tf, [k], loss, lr=0.05)


@case
def model_gathers_scatter(tf):
    table = tf.Variable(_rand(2, 5, 3, seed=74))
    q = tf.Variable(_rand(2, 3, seed=75))
    idx = tf.constant([[4, 0, 2], [1, 1, 3]])
    nd = tf.constant([[0, 4], [1, 2], [0, 0]])

    def loss():
        picked = tf.gather(table, idx, axis=1, batch_dims=1)  # [2, 3, 3]
        scores = tf.linalg.matvec(picked, q)  # [2, 3]
        att = tf.nn.softmax(scores)
        ctx = tf.reduce_sum(picked * att[..., None], axis=1)
        rows = tf.gather_nd(table, nd)  # [3, 3]
        back = tf.scatter_nd(tf.constant([[1], [0], [1]]), rows, [2, 3])
        by_batch = tf.gather_nd(table, tf.constant([[[1], [3]], [[0], [0]]]), batch_dims=1)
        return tf.reduce_sum(tf.square(ctx - back)) + tf.reduce_mean(by_batch * tf.math.atan2(by_batch, 1.5))

    return _train(tf, [table, q], loss)


@case
def model_range_cumsum_top_k_split(tf):
    w = tf.Variable(_rand(8, seed=76))

    def loss():
        pos = tf.cast(tf.range(8), tf.float32) / 8.0
        a, b = tf.split(w * pos, 2)
        c = tf.concat([tf.math.cumprod(a, exclusive=True), tf.cumsum(b)], 0)
        vals = tf.math.top_k(tf.reshape(c, [2, 4]), k=3).values
        return tf.reduce_sum(vals * tf.constant([1.0, 0.5, 0.25])) + tf.reduce_sum(tf.sort(w)[:3] ** 2)

    return _train(tf, [w], loss)


# ---------------------------------------------------------------------------
# Running the cases.


def _error_class(e: BaseException) -> str:
    names = [c.__name__ for c in type(e).__mro__]
    if "OpError" in names or "GradtapeError" in names:
        return "OpError"
    for c in type(e).__mro__:
        if getattr(builtins, c.__name__, None) is c:
            return c.__name__
    return type(e).__name__


def _normalize(result: Any) -> Any:
    if result is None:
        return None
    if isinstance(result, (list, tuple)):
        return [_normalize(r) for r in result]
    if isinstance(result, (bool, int, float, np.bool_, np.number)):
        return ("py", result.item() if isinstance(result, np.generic) else result)
    known = getattr(result, "_shape", None)  # gradtape: the shape set without a round trip
    array = np.asarray(result if isinstance(result, np.ndarray) else result.numpy())
    if known is not None and tuple(known) != array.shape:
        return ("wrong static shape", tuple(known), array.shape)
    return ("tensor", array.dtype.name, tuple(array.shape), array)


def _run_case(fn: Callable[[Any], Any], tf: Any) -> Any:
    try:
        return ("ok", _normalize(fn(tf)))
    except Exception as e:  # noqa: BLE001 (the class is what is compared)
        return ("raises", _error_class(e), str(e)[:300])


def _compare(expected: Any, actual: Any, path: str = "result") -> List[str]:
    if expected is None or actual is None:
        return [] if expected is None and actual is None else [f"{path}: TF {_short(expected)}, gradtape {_short(actual)}"]
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{path}: TF {_short(expected)}, gradtape {_short(actual)}"]
        return [m for i, (e, a) in enumerate(zip(expected, actual)) for m in _compare(e, a, f"{path}[{i}]")]
    if not isinstance(actual, tuple) or actual[0] != expected[0]:
        return [f"{path}: TF {_short(expected)}, gradtape {_short(actual)}"]
    if expected[0] == "py":
        return [] if expected[1] == actual[1] else [f"{path}: TF {expected[1]!r}, gradtape {actual[1]!r}"]
    _, e_dtype, e_shape, e_value = expected
    _, a_dtype, a_shape, a_value = actual
    if (e_dtype, e_shape) != (a_dtype, a_shape):
        return [f"{path}: TF {e_dtype}{list(e_shape)}, gradtape {a_dtype}{list(a_shape)}"]
    if e_value.dtype.kind in "fc":
        tol = 1e-5 if e_dtype in ("float32", "complex64") else 1e-10
        if not np.allclose(e_value, a_value, rtol=tol, atol=tol, equal_nan=True):
            return [f"{path}: values TF {e_value.tolist()}, gradtape {a_value.tolist()}"]
    elif not np.array_equal(e_value, a_value):
        return [f"{path}: values TF {e_value.tolist()}, gradtape {a_value.tolist()}"]
    return []


def _short(x: Any) -> str:
    if isinstance(x, tuple) and x and x[0] == "tensor":
        return f"tensor {x[1]}{list(x[2])}"
    text = repr(x)
    return text if len(text) < 120 else text[:117] + "..."


# Cases where TensorFlow raises and gradtape must raise the same class.
RAISING = {
    "where_one_of_x_y", "pad_bad_mode", "einsum_repeated_output_label", "complex_dtype_mismatch",
    "raw_ops_positional_refused", "sort_bad_direction", "raw_ops_unknown_argument", "matmul_transpose_and_adjoint",
    "squeeze_non_unit_dim", "gather_out_of_range", "split_uneven", "raw_ops_missing_input",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_as_tensorflow(name: str, tf: Any, gtf: Any) -> None:
    expected = _run_case(CASES[name], tf)
    actual = _run_case(CASES[name], gtf)
    assert (expected[0] == "raises") == (name in RAISING), f"TF {expected[:3]}"
    if expected[0] == "raises" or actual[0] == "raises":
        assert expected[:2] == actual[:2], f"TF {expected}, gradtape {actual}"
        return
    problems = _compare(expected[1], actual[1])
    assert not problems, "\n".join(problems)


def test_documented_refusals(gtf: Any) -> None:
    """Where gradtape.tf cannot do what TF does it says so
    (NotImplementedError naming the function), never computes something
    else; each of these works in TF."""
    tf = gtf
    m = tf.constant(_rand(2, 2, seed=57))
    refusals = {
        "tf.norm": lambda: tf.norm(m, ord=2, axis=[0, 1]),
        "tf.where": lambda: tf.where(tf.constant([True, False])),
        "tf.sparse.segment_sum": lambda: tf.sparse.segment_sum(m, [0, 1], [0, 0], sparse_gradient=True),
        "tf.linalg.diag_part": lambda: tf.linalg.diag_part(m, k=1),
        "tf.linalg.diag": lambda: tf.linalg.diag([1.0, 2.0], k=1),
        "tf.linalg.matmul": lambda: tf.matmul(m, m, output_type=tf.float64),
        "tf.raw_ops.Cast": lambda: tf.raw_ops.Cast(x=m, DstT=tf.int32, Truncate=True),
    }
    for fn_name, call in refusals.items():
        with pytest.raises(NotImplementedError, match=fn_name.replace(".", r"\.")):
            call()
