"""The stateless random ops, GatherNd / ScatterNd and ResourceGather through
the server against TensorFlow (tensorflow-cpu, imported lazily by the `tf`
fixture): the same numbers bit for bit for the same shape, seed (or key and
counter) and dtype. TensorFlow's uint64 key and counter are sent as int64
tensors with the same bits."""

from typing import Any

import numpy as np
import pytest

SHAPES = [(5,), (2, 3), (7,), (0,), ()]


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


def _bits(a: Any) -> np.ndarray:
    a = np.asarray(a)
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


@pytest.mark.parametrize("op", ["StatelessRandomUniformV2", "StatelessRandomNormalV2", "StatelessTruncatedNormalV2"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_v2_matches_tensorflow_bits(gt, tf, op, dtype, shape):
    key, counter = np.array([2**64 - 3], np.uint64), np.array([5, 2**40 + 1], np.uint64)
    want = getattr(tf.raw_ops, op)(
        shape=list(shape), key=tf.constant(key), counter=tf.constant(counter), alg=1, dtype=tf.as_dtype(dtype)
    ).numpy()
    got = gt.ops[op](
        gt.constant(np.array(shape, np.int32)),
        gt.constant(key.view(np.int64)),
        gt.constant(counter.view(np.int64)),
        gt.constant(np.int32(3)),
        dtype=dtype,
    ).numpy()
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("op", ["StatelessRandomUniform", "StatelessRandomNormal", "StatelessTruncatedNormal"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", [[1, 2], [-7, 2**33]])
def test_v1_matches_tensorflow_bits(gt, tf, op, dtype, seed):
    seed64 = np.array(seed, np.int64)
    want = getattr(tf.raw_ops, op)(shape=[3, 3], seed=tf.constant(seed64), dtype=tf.as_dtype(dtype)).numpy()
    got = gt.ops[op](gt.constant(np.array([3, 3], np.int32)), gt.constant(seed64), dtype=dtype).numpy()
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_threefry_is_refused(gt):
    with pytest.raises(Exception, match="ThreeFry"):
        gt.ops["StatelessRandomUniformV2"](
            gt.constant(np.array([2], np.int32)),
            gt.constant(np.array([1], np.int64)),
            gt.constant(np.array([0, 0], np.int64)),
            gt.constant(np.int32(2)),
        ).numpy()


def test_gather_scatter_nd_match_tensorflow(gt, tf):
    params = np.arange(24.0).reshape(2, 3, 4)
    idx = np.array([[[1, 2], [0, 0]], [[1, 0], [1, 2]]], np.int32)
    want = tf.gather_nd(params, idx).numpy()
    np.testing.assert_array_equal(gt.ops["GatherNd"](gt.constant(params), gt.constant(idx)).numpy(), want)
    updates = np.arange(16.0).reshape(2, 2, 4)
    want = tf.scatter_nd(idx, updates, [2, 3, 4]).numpy()
    got = gt.ops["ScatterNd"](gt.constant(idx), gt.constant(updates), gt.constant(np.array([2, 3, 4], np.int32)))
    np.testing.assert_array_equal(got.numpy(), want)


def test_resource_gather_gradient_matches_tensorflow(gt, tf):
    w0 = np.arange(6.0).reshape(3, 2)
    idx = np.array([2, 0, 2], np.int32)
    tw = tf.Variable(w0)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(tf.gather(tw, idx)))
    want = tf.convert_to_tensor(tape.gradient(loss, tw)).numpy()  # IndexedSlices -> dense
    w = gt.Variable(w0)
    with gt.GradientTape() as gtape:
        y = gt.ops["ResourceGather"](w, gt.constant(idx))
        gloss = gt.ops.sum(y * y)
    np.testing.assert_allclose(gtape.gradient(gloss, w).numpy(), want, rtol=1e-12)
