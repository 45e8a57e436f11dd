"""gradtape.tf.nn, tf.random and clipping against TensorFlow 2.21
(tensorflow-cpu, imported lazily by the `tf` fixture).

Each case in CASES is written once as ``fn(tf, *variables)`` and run with
TensorFlow and with gradtape.tf on the same random inputs: the values, the
first-order gradients of ``sum(y * w)`` (w fixed random weights) wrt every
input, and, for the cases marked second-order, the gradient of the squared
norm of the first input's gradient (TF's own second-order rules), in
float32 tolerance (1e-5 relative and absolute, unless a case says why it
needs more)."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence

import numpy as np
import pytest

RTOL = ATOL = 1e-5


class Case(NamedTuple):
    fn: Callable[..., Any]
    shapes: Sequence[Any]  # an input's shape, or a fixed numpy array
    second_order: bool = False
    tol: float = RTOL


CASES: Dict[str, Case] = {}


def case(name: str, fn: Callable[..., Any], *shapes: Any, second_order: bool = False, tol: float = RTOL) -> None:
    assert name not in CASES, name
    CASES[name] = Case(fn, shapes, second_order, tol)


X4 = (2, 6, 7, 3)
# -- activations and softmax ---------------------------------------------------------
case("leaky_relu", lambda tf, x: tf.nn.leaky_relu(x), X4, second_order=True)
case("leaky_relu_alpha", lambda tf, x: tf.nn.leaky_relu(x, alpha=0.05), (3, 4))
case("gelu_exact", lambda tf, x: tf.nn.gelu(x), X4, second_order=True)
case("gelu_approximate", lambda tf, x: tf.nn.gelu(x, approximate=True), X4, second_order=True)
case("silu", lambda tf, x: tf.nn.silu(x), (4, 5), second_order=True)
case("swish_beta", lambda tf, x: tf.nn.swish(x, beta=1.5) if hasattr(tf.nn, "swish") else None, (4, 5))
case("relu", lambda tf, x: tf.nn.relu(x), (3, 4))
case("relu6", lambda tf, x: tf.nn.relu6(x * 4.0), (3, 4))
case("elu", lambda tf, x: tf.nn.elu(x), (3, 4), second_order=True)
case("selu", lambda tf, x: tf.nn.selu(x), (3, 4))
case("softplus", lambda tf, x: tf.nn.softplus(x), (3, 4), second_order=True)
case("softsign", lambda tf, x: tf.nn.softsign(x), (3, 4))
case("sigmoid", lambda tf, x: tf.nn.sigmoid(x), (3, 4), second_order=True)
case("tanh", lambda tf, x: tf.nn.tanh(x), (3, 4))
for _axis in (-1, 0, 1, 2, -3):
    case(f"softmax_axis{_axis}", lambda tf, x, a=_axis: tf.nn.softmax(x, axis=a), (2, 3, 4), second_order=True)
    case(f"log_softmax_axis{_axis}", lambda tf, x, a=_axis: tf.nn.log_softmax(x, axis=a), (2, 3, 4), second_order=True)
case("softmax_cross_entropy_axis0", lambda tf, l, x: tf.nn.softmax_cross_entropy_with_logits(tf.nn.softmax(l, axis=0), x, axis=0), (4, 3), (4, 3))
case("sigmoid_cross_entropy", lambda tf, z, x: tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.sigmoid(z), logits=x * 3.0), (3, 5), (3, 5), second_order=True)
case("l2_normalize_all", lambda tf, x: tf.nn.l2_normalize(x), (3, 4), second_order=True)
case("l2_normalize_axis", lambda tf, x: tf.nn.l2_normalize(x, axis=[0, 2]), (3, 4, 2))
case("l2_normalize_epsilon", lambda tf, x: tf.nn.l2_normalize(x * 1e-2, axis=1, epsilon=1e-3), (3, 4))
case("bias_add", lambda tf, x, b: tf.nn.bias_add(x, b), X4, (3,))
case("bias_add_nchw", lambda tf, x, b: tf.nn.bias_add(x, b, data_format="NCHW"), (2, 3, 4, 5), (3,))

# -- convolution -----------------------------------------------------------------
W4 = (3, 3, 3, 4)
case("conv2d_same", lambda tf, x, w: tf.nn.conv2d(x, w, 1, "SAME"), X4, W4, second_order=True)
case("conv2d_valid_strides", lambda tf, x, w: tf.nn.conv2d(x, w, [2, 1], "VALID"), X4, W4)
case("conv2d_strides4", lambda tf, x, w: tf.nn.conv2d(x, w, [1, 2, 2, 1], "SAME"), X4, W4)
case("conv2d_explicit", lambda tf, x, w: tf.nn.conv2d(x, w, 2, [[0, 0], [1, 2], [0, 1], [0, 0]]), X4, W4)
case("conv2d_dilated", lambda tf, x, w: tf.nn.conv2d(x, w, 1, "SAME", dilations=2), X4, W4)
case("conv1d_nwc", lambda tf, x, w: tf.nn.conv1d(x, w, 2, "SAME"), (2, 9, 3), (3, 3, 4))
case("conv1d_dilated", lambda tf, x, w: tf.nn.conv1d(x, w, 1, "VALID", dilations=2), (2, 9, 3), (2, 3, 4))
case("conv3d", lambda tf, x, w: tf.nn.conv3d(x, w, [1, 1, 2, 1, 1], "SAME"), (1, 4, 5, 4, 2), (2, 2, 2, 2, 3))
case("conv3d_valid", lambda tf, x, w: tf.nn.conv3d(x, w, [1, 1, 1, 1, 1], "VALID"), (1, 4, 5, 4, 2), (2, 3, 2, 2, 3))
case("depthwise_conv2d", lambda tf, x, w: tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME"), X4, (3, 3, 3, 2))
case("depthwise_conv2d_strided", lambda tf, x, w: tf.nn.depthwise_conv2d(x, w, [1, 2, 2, 1], "VALID"), X4, (2, 2, 3, 2))
case("depthwise_conv2d_dilated", lambda tf, x, w: tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "VALID", dilations=[2, 2]), X4, (2, 2, 3, 1))
case("conv2d_transpose", lambda tf, x, w: tf.nn.conv2d_transpose(x, w, [2, 12, 14, 5], 2), X4, (3, 3, 5, 3))
case("conv2d_transpose_valid", lambda tf, x, w: tf.nn.conv2d_transpose(x, w, [2, 13, 15, 2], 2, "VALID"), X4, (3, 3, 2, 3))
case("dilation2d", lambda tf, x, w: tf.nn.dilation2d(x, w, [1, 1, 1, 1], "SAME", "NHWC", [1, 1, 1, 1]), X4, (2, 2, 3))
case("dilation2d_rates", lambda tf, x, w: tf.nn.dilation2d(x, w, [1, 2, 1, 1], "VALID", "NHWC", [1, 2, 1, 1]), X4, (2, 2, 3))

case("convolution_1d", lambda tf, x, w: tf.nn.convolution(x, w, strides=2, padding="SAME"), (2, 9, 3), (3, 3, 4))
case("convolution_2d", lambda tf, x, w: tf.nn.convolution(x, w, padding="VALID", dilations=2), X4, (2, 2, 3, 2))
case("convolution_3d", lambda tf, x, w: tf.nn.convolution(x, w, strides=[1, 2, 1], padding="SAME", data_format="NDHWC"), (1, 4, 5, 4, 2), (2, 2, 2, 2, 3))
case("separable_conv2d", lambda tf, x, d, p: tf.nn.separable_conv2d(x, d, p, [1, 1, 1, 1], "SAME"), X4, (3, 3, 3, 2), (1, 1, 6, 4))
case("separable_conv2d_strided", lambda tf, x, d, p: tf.nn.separable_conv2d(x, d, p, [1, 2, 2, 1], "VALID"), X4, (2, 2, 3, 1), (1, 1, 3, 2))
case("weighted_cross_entropy", lambda tf, z, x: tf.nn.weighted_cross_entropy_with_logits(tf.sigmoid(z), x * 3.0, 2.5), (3, 4), (3, 4), second_order=True)

# -- pooling -----------------------------------------------------------------------
# Max pooling's second-order gradient wrt its input is zero: TF gives zeros,
# gradtape None (the max's position is not differentiable), so first order only.
case("max_pool2d_same", lambda tf, x: tf.nn.max_pool2d(x, 2, 2, "SAME"), X4)
case("max_pool2d_explicit", lambda tf, x: tf.nn.max_pool2d(x, 3, 1, [[0, 0], [1, 1], [1, 0], [0, 0]]), X4)
case("avg_pool2d_same", lambda tf, x: tf.nn.avg_pool2d(x, [2, 3], 2, "SAME"), X4, second_order=True)
case("avg_pool2d_valid", lambda tf, x: tf.nn.avg_pool2d(x, 3, [1, 2], "VALID"), X4)
case("max_pool_1d", lambda tf, x: tf.nn.max_pool(x, 2, 2, "VALID"), (2, 7, 3))
case("avg_pool_1d", lambda tf, x: tf.nn.avg_pool1d(x, 3, 1, "SAME"), (2, 7, 3))
case("max_pool1d", lambda tf, x: tf.nn.max_pool1d(x, 3, 2, "SAME"), (2, 7, 3))
case("max_pool_2d", lambda tf, x: tf.nn.max_pool(x, [1, 3, 3, 1], [1, 2, 2, 1], "SAME"), X4)
case("avg_pool_3d", lambda tf, x: tf.nn.avg_pool(x, 2, 1, "SAME", "NDHWC"), (1, 4, 5, 4, 2))
case("max_pool3d", lambda tf, x: tf.nn.max_pool3d(x, 2, 2, "SAME"), (1, 4, 5, 4, 2))
case("avg_pool3d", lambda tf, x: tf.nn.avg_pool3d(x, [2, 2, 1], 2, "VALID"), (1, 4, 5, 4, 2))
case("max_pool_with_argmax", lambda tf, x: tf.nn.max_pool_with_argmax(x, 2, 2, "SAME")[0], X4)

# -- normalization, embedding ----------------------------------------------------
case("moments_mean", lambda tf, x: tf.nn.moments(x, [0, 1, 2])[0], X4, second_order=True)
case("moments_variance", lambda tf, x: tf.nn.moments(x, [0, 1, 2])[1], X4, second_order=True)
case("moments_keepdims_int_axis", lambda tf, x: tf.nn.moments(x, 1, keepdims=True)[1], (3, 4, 2))


def _batch_norm(tf: Any, x: Any, scale: Any, offset: Any) -> Any:
    mean, variance = tf.nn.moments(x, [0, 1, 2])
    return tf.nn.batch_normalization(x, mean, variance, offset, scale, 1e-3)


case("batch_normalization", _batch_norm, X4, (3,), (3,), second_order=True)
case("batch_normalization_no_scale", lambda tf, x, m: tf.nn.batch_normalization(x, m, tf.square(m) + 0.5, None, None, 1e-3), (4, 3), (3,))


def _fused(tf: Any, x: Any, scale: Any, offset: Any) -> Any:
    fused = tf.compat.v1.nn.fused_batch_norm if hasattr(tf, "compat") else tf.nn.fused_batch_norm
    return fused(x, scale, offset)[0]


case("fused_batch_norm_training", _fused, X4, (3,), (3,))
case("lrn", lambda tf, x: tf.nn.local_response_normalization(x, 2, 1.0, 0.5, 0.75), X4)
case("lrn_defaults", lambda tf, x: tf.nn.lrn(x), (1, 2, 2, 12))
case("embedding_lookup_variable", lambda tf, e: tf.nn.embedding_lookup(e, np.array([[1, 4], [0, 1]])), (5, 3))
case("embedding_lookup_tensor", lambda tf, e: tf.nn.embedding_lookup(tf.identity(e), [3, 3, 0]), (5, 3))
case("stateless_dropout", lambda tf, x: tf.nn.experimental.stateless_dropout(x, 0.3, seed=[4, 9]), (6, 5))
case("stateless_dropout_noise_shape", lambda tf, x: tf.nn.experimental.stateless_dropout(x, 0.5, seed=[1, 2], noise_shape=[1, 5]), (6, 5))

# -- clipping ------------------------------------------------------------------------
case("clip_by_norm_axes", lambda tf, x: tf.clip_by_norm(x, 1.5, axes=[1]), (3, 4))
case("clip_by_global_norm", lambda tf, a, b: tf.clip_by_global_norm([a, None, b], 2.0)[0][2], (3, 4), (5,))
case("clip_by_global_norm_norm", lambda tf, a, b: tf.clip_by_global_norm([a, b], 0.5)[1], (3, 4), (5,))
case("clip_by_global_norm_unclipped", lambda tf, a, b: tf.clip_by_global_norm([a, b], 100.0)[0][0], (3, 4), (5,))
case("global_norm", lambda tf, a, b: tf.linalg.global_norm([a, b]) if not hasattr(tf, "_clip") else tf._clip.global_norm([a, b]), (3,), (2, 2))


def _inputs(shapes: Sequence[Any], seed: int) -> List[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [s if isinstance(s, np.ndarray) else rng.standard_normal(s).astype(np.float32) for s in shapes]


def _dense(tf: Any, g: Any) -> Optional[np.ndarray]:
    if g is None:
        return None
    return np.asarray(tf.convert_to_tensor(g)) if hasattr(g, "indices") else np.asarray(g)


def _run(tf: Any, c: Case, arrays: List[np.ndarray], weights: Optional[np.ndarray]) -> Dict[str, Any]:
    vs = [tf.Variable(a) for a in arrays]
    with tf.GradientTape() as outer:
        with tf.GradientTape(persistent=True) as tape:
            y = c.fn(tf, *vs)
            w = weights if weights is not None else np.ones(np.shape(np.asarray(y)), np.float32)
            loss = tf.reduce_sum(y * tf.constant(w))
        grads = tape.gradient(loss, vs)
        if c.second_order:
            g0 = grads[0]
            gg = tf.reduce_sum(g0 * g0)
    out: Dict[str, Any] = {"y": np.asarray(y), "grads": [_dense(tf, g) for g in grads]}
    if c.second_order:
        out["second"] = [_dense(tf, g) for g in outer.gradient(gg, vs)]
    return out


def _close(name: str, want: Any, got: Any, tol: float) -> None:
    if want is None or got is None:
        assert want is None and got is None, f"{name}: TF {want}, gradtape {got}"
        return
    assert want.shape == got.shape, f"{name}: shape TF {want.shape}, gradtape {got.shape}"
    assert want.dtype == got.dtype, f"{name}: dtype TF {want.dtype}, gradtape {got.dtype}"
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_as_tensorflow(name: str, tf: Any, gtf: Any) -> None:
    c = CASES[name]
    arrays = _inputs(c.shapes, seed=len(name))
    probe = c.fn(tf, *[tf.constant(a) for a in arrays])
    if probe is None:
        pytest.skip("TensorFlow has no such function")
    weights = np.random.default_rng(7).standard_normal(np.shape(np.asarray(probe))).astype(np.float32)
    want = _run(tf, c, arrays, weights)
    got = _run(gtf, c, arrays, weights)
    _close(f"{name}: value", want["y"], got["y"], c.tol)
    # A gradient that is identically zero would make the test unable to fail.
    assert any(g is not None and np.any(g != 0) for g in want["grads"]), name
    for i, (w, g) in enumerate(zip(want["grads"], got["grads"])):
        _close(f"{name}: gradient {i}", w, g, c.tol)
    if c.second_order:
        for i, (w, g) in enumerate(zip(want["second"], got["second"])):
            _close(f"{name}: second-order gradient {i}", w, g, 10 * c.tol)


# -- tf.random ---------------------------------------------------------------------------


def _bits(a: Any) -> np.ndarray:
    a = np.asarray(a)
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


@pytest.mark.parametrize("fn", ["stateless_uniform", "stateless_normal", "stateless_truncated_normal"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_stateless_random_is_tensorflows_bit_for_bit(tf: Any, gtf: Any, fn: str, dtype: str) -> None:
    kwargs: Dict[str, Any] = {"minval": -2.0, "maxval": 3.0} if fn == "stateless_uniform" else {"mean": 1.5, "stddev": 0.25}
    for seed, shape in (([3, 7], [4, 5]), ([-1, 2**31 - 1], [9])):
        want = getattr(tf.random, fn)(shape, seed=seed, dtype=getattr(tf, dtype), **kwargs).numpy()
        got = getattr(gtf.random, fn)(shape, seed=seed, dtype=getattr(gtf, dtype), **kwargs).numpy()
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(_bits(got), _bits(want))
    plain_want = getattr(tf.random, fn)([6], seed=[1, 1]).numpy()
    np.testing.assert_array_equal(_bits(getattr(gtf.random, fn)([6], seed=[1, 1]).numpy()), _bits(plain_want))


def test_stateless_dropout_is_tensorflows_bit_for_bit(tf: Any, gtf: Any) -> None:
    x = np.random.default_rng(3).standard_normal((20, 30)).astype(np.float32)
    want = tf.nn.experimental.stateless_dropout(x, rate=0.4, seed=[5, 6]).numpy()
    got = gtf.nn.experimental.stateless_dropout(x, rate=0.4, seed=[5, 6]).numpy()
    np.testing.assert_array_equal(_bits(got), _bits(want))
    assert 0 < np.count_nonzero(got) < got.size


def _draws(gtf: Any) -> List[np.ndarray]:
    return [
        gtf.random.uniform([3, 4]).numpy(),
        gtf.random.uniform([3, 4]).numpy(),
        gtf.random.normal([5], seed=7).numpy(),
        gtf.random.normal([5], seed=7).numpy(),
        gtf.random.truncated_normal([1000], mean=1.0, stddev=2.0, dtype=gtf.float64, seed=1).numpy(),
        gtf.random.uniform([50], minval=-3, maxval=4, dtype=gtf.int32, seed=2).numpy(),
        gtf.nn.dropout(np.ones((8, 8), np.float32), 0.5, seed=3).numpy(),
    ]


def test_seeded_stateful_random_follows_tensorflows_rules(tf: Any, gtf: Any) -> None:
    gtf.random.set_seed(1234)
    first = _draws(gtf)
    gtf.random.set_seed(1234)
    again = _draws(gtf)
    for a, b in zip(first, again):  # the same program gives the same numbers
        np.testing.assert_array_equal(a, b)
    u1, u2, n1, n2, t, ints, drop = first
    assert not np.array_equal(u1, u2) and not np.array_equal(n1, n2)  # a stream continues
    assert u1.dtype == np.float32 and u1.shape == (3, 4) and np.all((u1 >= 0) & (u1 < 1))
    assert t.dtype == np.float64 and np.all(np.abs(t - 1.0) <= 4.0) and abs(t.mean() - 1.0) < 0.3
    assert ints.dtype == np.int32 and ints.min() >= -3 and ints.max() < 4 and len(set(ints.tolist())) > 3
    assert set(np.unique(drop).tolist()) == {0.0, 2.0}
    gtf.random.set_seed(99)
    assert not np.array_equal(gtf.random.uniform([3, 4]).numpy(), u1)
    # As TF: with no global seed an op seed alone is deterministic too.
    gtf.random.set_seed(None)
    a = gtf.random.normal([4], seed=5).numpy()
    gtf.random.set_seed(None)
    np.testing.assert_array_equal(gtf.random.normal([4], seed=5).numpy(), a)
    # and TF's shapes and dtypes
    for fn in ("uniform", "normal", "truncated_normal"):
        want = getattr(tf.random, fn)([2, 3], dtype=tf.float64, seed=1)
        got = getattr(gtf.random, fn)([2, 3], dtype=gtf.float64, seed=1)
        assert got.numpy().dtype == want.numpy().dtype and got.numpy().shape == tuple(want.shape)


def test_refusals_and_errors_as_tensorflow(tf: Any, gtf: Any) -> None:
    x = np.ones((1, 4, 4, 2), np.float32)
    for m in (tf, gtf):
        with pytest.raises(ValueError):
            m.random.uniform([2], dtype=m.int32)  # no maxval
        with pytest.raises(ValueError):
            m.nn.dropout(x, rate=1.0)
        with pytest.raises(ValueError):
            m.nn.dilation2d(x, np.ones((2, 2, 2), np.float32), [1, 1, 1, 1], "SAME", "NCHW", [1, 1, 1, 1])
        with pytest.raises(m.errors.InvalidArgumentError):
            m.nn.softmax(m.constant([1.0, 2.0]), axis=3).numpy()
    with pytest.raises(NotImplementedError, match="stateless_uniform"):
        gtf.random.stateless_uniform([2], seed=[1, 2], dtype=gtf.int32, minval=0, maxval=3)
    with pytest.raises(NotImplementedError, match="alg"):
        gtf.random.stateless_normal([2], seed=[1, 2], alg="threefry")


def test_max_pool_with_argmax_and_fused_batch_norm_statistics(tf: Any, gtf: Any) -> None:
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 5, 6, 3)).astype(np.float32)
    for include in (False, True):
        want = tf.nn.max_pool_with_argmax(x, 2, 2, "SAME", include_batch_in_index=include)
        got = gtf.nn.max_pool_with_argmax(x, 2, 2, "SAME", include_batch_in_index=include)
        np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
        assert got[1].numpy().dtype == np.int64
    scale, offset = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    mean, var = rng.standard_normal(3).astype(np.float32), rng.random(3).astype(np.float32) + 0.5
    for kwargs in ({}, {"mean": mean, "variance": var, "is_training": False}, {"mean": mean, "variance": var, "exponential_avg_factor": 0.3}):
        want = tf.compat.v1.nn.fused_batch_norm(x, scale, offset, epsilon=1e-6, **kwargs)
        got = gtf.nn.fused_batch_norm(x, scale, offset, epsilon=1e-6, **kwargs)
        for w, g in zip(want, got):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-5)


def _nchw(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(a, -1, 1))


CHANNELS_FIRST = {
    "conv2d": (lambda m, x, w, f: m.nn.conv2d(x, w, [1, 2], "SAME", data_format=f, dilations=1), (3, 3, 3, 4)),
    "conv2d_explicit": (lambda m, x, w, f: m.nn.conv2d(x, w, 1, [[0, 0], [1, 0], [2, 1], [0, 0]] if f == "NHWC" else [[0, 0], [0, 0], [1, 0], [2, 1]], data_format=f), (2, 3, 3, 2)),
    "depthwise_conv2d": (lambda m, x, w, f: m.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "VALID", data_format=f), (2, 2, 3, 2)),
    "avg_pool2d": (lambda m, x, w, f: m.nn.avg_pool2d(x, 2, 2, "SAME", data_format=f), None),
    "bias_add": (lambda m, x, w, f: m.nn.bias_add(x, w, data_format=f), (3,)),
}


@pytest.mark.parametrize("name", sorted(CHANNELS_FIRST))
def test_channels_first_as_tensorflows_channels_last(name: str, tf: Any, gtf: Any) -> None:
    """NCHW through the server equals TF's NHWC (TF's CPU kernels refuse
    most NCHW ops), transposed: values and gradients."""
    fn, w_shape = CHANNELS_FIRST[name]
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 5, 6, 3)).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32) if w_shape else np.zeros(1, np.float32)
    results = []
    for m, xa, f in ((tf, x, "NHWC"), (gtf, _nchw(x), "NCHW")):
        xv, wv = m.Variable(xa), m.Variable(w)
        with m.GradientTape() as tape:
            y = fn(m, xv, wv, f)
            loss = m.reduce_sum(y * y)
        gx, gw = tape.gradient(loss, [xv, wv])
        results.append((np.asarray(y), np.asarray(gx), None if gw is None else np.asarray(gw)))
    (y0, gx0, gw0), (y1, gx1, gw1) = results
    np.testing.assert_allclose(y1, _nchw(y0), rtol=RTOL, atol=RTOL)
    np.testing.assert_allclose(gx1, _nchw(gx0), rtol=RTOL, atol=RTOL)
    if w_shape:
        np.testing.assert_allclose(gw1, gw0, rtol=RTOL, atol=RTOL)


def test_window_op_shapes_are_known_without_a_round_trip(gtf: Any) -> None:
    """Conv, pooling, einsum and squeeze outputs get their shape from the
    client's rules (gradtape/_shapes.py), so a Keras CNN's Flatten does not
    wait for the server each step; each prediction equals the real shape."""
    tf = gtf
    x = tf.constant(np.random.default_rng(0).random((2, 8, 8, 3)).astype(np.float32))
    w = tf.constant(np.ones((3, 3, 3, 4), np.float32))
    outputs = [
        tf.nn.conv2d(x, w, 1, "SAME"),
        tf.nn.conv2d(x, w, 2, "VALID"),
        tf.nn.conv2d(tf.transpose(x, [0, 3, 1, 2]), w, 1, "VALID", data_format="NCHW", dilations=2),
        tf.nn.conv2d(x, w, 2, [[0, 0], [1, 2], [0, 1], [0, 0]]),
        tf.nn.depthwise_conv2d(x, tf.ones([2, 2, 3, 2]), [1, 1, 1, 1], "VALID"),
        tf.nn.conv3d(tf.reshape(x, [1, 2, 8, 8, 3]), tf.ones([2, 2, 2, 3, 5]), [1, 1, 2, 2, 1], "SAME"),
        tf.nn.max_pool2d(x, 2, 2, "VALID"),
        tf.nn.avg_pool2d(x, 3, 2, "SAME"),
        tf.nn.max_pool3d(tf.reshape(x, [1, 2, 8, 8, 3]), 2, 1, "SAME"),
        tf.einsum("bhwc,cd->bhwd", x, tf.ones([3, 5])),
        tf.nn.moments(x, axes=[0, 1, 2])[0],
        tf.keras.layers.Flatten()(tf.keras.layers.MaxPooling2D()(tf.keras.layers.Conv2D(4, 3)(x))),
    ]
    for i, t in enumerate(outputs):
        assert t._shape is not None, f"output {i}: shape not predicted"
        assert t._shape == t.numpy().shape, f"output {i}: predicted {t._shape}, real {t.numpy().shape}"
