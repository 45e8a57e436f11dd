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


@pytest.fixture(scope="module")
def tf() -> Any:
    # The native extension is loaded before TensorFlow's own libraries (the
    # other order crashes the native client's connect in this process).
    try:
        import gradtape._native_core  # noqa: F401
    except ImportError:
        pass
    import tensorflow  # heavy: imported only when these tests run

    return tensorflow


@pytest.fixture
def gtf(server_address: str) -> Any:
    import gradtape
    import gradtape.tf as gtf_module

    session = gradtape.connect(server_address, timeout=10)
    gradtape.set_default_session(session)
    try:
        yield gtf_module
    finally:
        gradtape.set_default_session(None)
        try:
            session.close()
        except gradtape.GradtapeError:
            pass


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

# -- pooling -----------------------------------------------------------------------
# Max pooling's second-order gradient wrt its input is zero: TF gives zeros,
# gradtape None (the max's position is not differentiable), so first order only.
case("max_pool2d_same", lambda tf, x: tf.nn.max_pool2d(x, 2, 2, "SAME"), X4)
case("max_pool2d_explicit", lambda tf, x: tf.nn.max_pool2d(x, 3, 1, [[0, 0], [1, 1], [1, 0], [0, 0]]), X4)
case("avg_pool2d_same", lambda tf, x: tf.nn.avg_pool2d(x, [2, 3], 2, "SAME"), X4, second_order=True)
case("avg_pool2d_valid", lambda tf, x: tf.nn.avg_pool2d(x, 3, [1, 2], "VALID"), X4)
case("max_pool_1d", lambda tf, x: tf.nn.max_pool(x, 2, 2, "VALID"), (2, 7, 3))
case("avg_pool_1d", lambda tf, x: tf.nn.avg_pool1d(x, 3, 1, "SAME"), (2, 7, 3))
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
