"""StridedSlice, StridedSliceGrad, Slice and Pow through the server against
TensorFlow (tensorflow-cpu from PyPI, imported lazily by the `tf` fixture):
the same values and float64 gradients (first and second order) for the raw
ops with the same inputs and attrs, and the same specs refused."""

from typing import Any, Dict, List, Tuple

import grpc
import numpy as np
import pytest

import gradtape

RTOL, ATOL = 1e-12, 1e-12


@pytest.fixture(scope="module")
def tf() -> Any:
    import tensorflow  # heavy: imported only when these tests run

    return tensorflow


# (input shape, begin, end, strides, masks): what TF's `x[...]` produces for
# numpy-style index expressions (the comment), written out as the raw op's
# inputs.
SPECS: List[Tuple[str, Tuple[int, ...], List[int], List[int], List[int], Dict[str, int]]] = [
    ("x[1:3, ::2]", (4, 5), [1, 0], [3, 0], [1, 2], {"begin_mask": 2, "end_mask": 2}),
    ("x[::-1]", (5, 2), [0], [0], [-1], {"begin_mask": 1, "end_mask": 1}),
    ("x[3:0:-2, 1:]", (5, 3), [3, 1], [0, 0], [-2, 1], {"end_mask": 2}),
    ("x[-10:10, 0:5:3]", (3, 5, 2), [-10, 0], [10, 5], [1, 3], {}),
    (
        "x[..., tf.newaxis, 1]",
        (2, 3, 4),
        [0, 0, 1],
        [0, 0, 2],
        [1, 1, 1],
        {"ellipsis_mask": 1, "new_axis_mask": 2, "shrink_axis_mask": 4},
    ),
    ("x[-1, 1:]", (3, 4), [-1, 1], [0, 0], [1, 1], {"end_mask": 2, "shrink_axis_mask": 1}),
    ("x[1, ..., 2]", (2, 3, 4), [1, 0, 2], [2, 0, 3], [1, 1, 1], {"ellipsis_mask": 2, "shrink_axis_mask": 5}),
    ("x[tf.newaxis, :, 2:-1]", (2, 5), [0, 0, 2], [0, 0, -1], [1, 1, 1], {"new_axis_mask": 1, "begin_mask": 2, "end_mask": 2}),
    ("x[3:1] (empty)", (5, 2), [3], [1], [1], {}),
]

# Specs TensorFlow refuses (InvalidArgumentError), refused here too.
BAD_SPECS: List[Tuple[str, Tuple[int, ...], List[int], List[int], List[int], Dict[str, int]]] = [
    ("stride 0", (2, 3), [0], [1], [0], {}),
    ("two ellipses", (2, 3), [0, 0], [0, 0], [1, 1], {"ellipsis_mask": 3}),
    ("shrink index out of range", (2, 3), [2], [3], [1], {"shrink_axis_mask": 1}),
    ("shrink with a negative stride", (2, 3), [1], [0], [-1], {"shrink_axis_mask": 1}),
    ("more entries than dims", (2, 3), [0, 0, 0], [1, 1, 1], [1, 1, 1], {}),
    ("lengths differ", (2, 3), [0, 0], [1], [1, 1], {}),
]


def _raw_slice_tf(tf: Any, x: Any, begin: List[int], end: List[int], strides: List[int], masks: Dict[str, int]) -> Any:
    return tf.raw_ops.StridedSlice(
        input=x,
        begin=tf.constant(begin, tf.int32),
        end=tf.constant(end, tf.int32),
        strides=tf.constant(strides, tf.int32),
        **masks,
    )


def _raw_slice_gt(gt: Any, x: Any, begin: List[int], end: List[int], strides: List[int], masks: Dict[str, int]) -> Any:
    const = gt.constant
    return gt.ops.strided_slice(
        x,
        const(np.array(begin, np.int32)),
        const(np.array(end, np.int32)),
        const(np.array(strides, np.int32)),
        **masks,
    )


@pytest.mark.parametrize("spec", SPECS, ids=[s[0] for s in SPECS])
def test_strided_slice_matches_tensorflow(gt: Any, tf: Any, spec: Any) -> None:
    _, shape, begin, end, strides, masks = spec
    rng = np.random.default_rng(11)
    x = rng.normal(size=shape)
    with tf.GradientTape() as ttape:
        tx = tf.constant(x)
        ttape.watch(tx)
        ty = _raw_slice_tf(tf, tx, begin, end, strides, masks)
        w = rng.normal(size=ty.shape)
        tloss = tf.reduce_sum(ty * w)
    tgrad = ttape.gradient(tloss, tx).numpy()

    gx = gt.constant(x)
    with gt.GradientTape() as tape:
        tape.watch(gx)
        gy = _raw_slice_gt(gt, gx, begin, end, strides, masks)
    (ggrad,) = tape.gradient_values(gy, [gx], output_gradients=[gt.constant(w)])
    got = gy.numpy()
    assert got.shape == tuple(ty.shape)
    np.testing.assert_array_equal(got, ty.numpy())
    np.testing.assert_allclose(ggrad, tgrad, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("spec", BAD_SPECS, ids=[s[0] for s in BAD_SPECS])
def test_strided_slice_refuses_what_tensorflow_refuses(gt: Any, tf: Any, spec: Any) -> None:
    _, shape, begin, end, strides, masks = spec
    x = np.zeros(shape)
    with pytest.raises(tf.errors.InvalidArgumentError):
        _raw_slice_tf(tf, tf.constant(x), begin, end, strides, masks)
    y = _raw_slice_gt(gt, gt.constant(x), begin, end, strides, masks)
    with pytest.raises(gradtape.GradtapeError) as err:
        y.numpy()
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.op == "StridedSlice"
    assert f"command {err.value.seq}" in err.value.message
    gt.sync()  # the session runs on
    np.testing.assert_array_equal(gt.constant(np.ones(2)).numpy(), np.ones(2))


def test_strided_slice_grad_and_slice_match_tensorflow(gt: Any, tf: Any) -> None:
    rng = np.random.default_rng(12)
    dy = rng.normal(size=(2, 3))
    kw = {"begin_mask": 2, "end_mask": 2}
    want = tf.raw_ops.StridedSliceGrad(
        shape=tf.constant([4, 5]), begin=tf.constant([1, 0]), end=tf.constant([3, 0]),
        strides=tf.constant([1, 2]), dy=tf.constant(dy), **kw,
    ).numpy()
    i32 = lambda v: gt.constant(np.array(v, np.int32))  # noqa: E731
    got = gt.ops.strided_slice_grad(i32([4, 5]), i32([1, 0]), i32([3, 0]), i32([1, 2]), gt.constant(dy), **kw)
    np.testing.assert_array_equal(got.numpy(), want)

    x = rng.normal(size=(3, 4, 2))
    with tf.GradientTape() as ttape:
        tx = tf.constant(x)
        ttape.watch(tx)
        ty = tf.raw_ops.Slice(input=tx, begin=tf.constant([1, 0, 1]), size=tf.constant([2, -1, 1]))
        w = rng.normal(size=ty.shape)
        tloss = tf.reduce_sum(ty * w)
    tgrad = ttape.gradient(tloss, tx).numpy()
    gx = gt.constant(x)
    with gt.GradientTape() as tape:
        tape.watch(gx)
        gy = gt.ops.slice(gx, i32([1, 0, 1]), i32([2, -1, 1]))
    (ggrad,) = tape.gradient_values(gy, [gx], output_gradients=[gt.constant(w)])
    np.testing.assert_array_equal(gy.numpy(), ty.numpy())
    np.testing.assert_allclose(ggrad, tgrad, rtol=RTOL, atol=ATOL)


# (label, x, y): broadcasting, non-positive bases (TF's dy = 0 there), a
# scalar exponent.
POW_CASES = [
    ("positive, broadcast row", np.array([[0.5, 1.5, 2.0], [1.2, 0.7, 3.0]]), np.array([-0.5, 2.0, 1.3])),
    ("non-positive bases, integer exponents", np.array([-2.0, 0.0, 2.0, -1.5]), np.array([3.0, 1.0, 3.0, 2.0])),
    ("scalar exponent", np.array([[0.5, 1.5], [2.5, 1.1]]), np.array(2.5)),
]


@pytest.mark.parametrize("case", POW_CASES, ids=[c[0] for c in POW_CASES])
def test_pow_matches_tensorflow_to_second_order(gt: Any, tf: Any, case: Any) -> None:
    _, x, y = case
    with tf.GradientTape(persistent=True) as outer:
        tx, ty = tf.constant(x), tf.constant(y)
        outer.watch([tx, ty])
        with tf.GradientTape() as inner:
            inner.watch([tx, ty])
            tz = tf.raw_ops.Pow(x=tx, y=ty)
        tdx, tdy = inner.gradient(tz, [tx, ty])
        tsum = tf.reduce_sum(tdx) + tf.reduce_sum(tdy)
    tddx, tddy = outer.gradient(tsum, [tx, ty])

    gx, gy = gt.constant(x), gt.constant(y)
    with gt.GradientTape(persistent=True) as gouter:
        gouter.watch([gx, gy])
        with gt.GradientTape() as ginner:
            ginner.watch([gx, gy])
            gz = gt.ops.pow(gx, gy)
        gdx, gdy = ginner.gradient(gz, [gx, gy])
        gsum = gt.ops.sum(gdx, axis=list(range(x.ndim))) + gt.ops.sum(gdy, axis=list(range(y.ndim)))
    gddx, gddy = gouter.gradient_values(gsum, [gx, gy])

    np.testing.assert_allclose(gz.numpy(), tz.numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(gdx.numpy(), tdx.numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(gdy.numpy(), tdy.numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(gddx, tddx.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(gddy, tddy.numpy(), rtol=1e-10, atol=1e-10)


def test_pow_of_integers_and_complex_match_tensorflow(gt: Any, tf: Any) -> None:
    xi, yi = np.array([2, -3, 0, 7], np.int32), np.array([10, 3, 0, 1], np.int32)
    np.testing.assert_array_equal(
        gt.ops.pow(gt.constant(xi), gt.constant(yi)).numpy(), tf.raw_ops.Pow(x=xi, y=yi).numpy()
    )
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.raw_ops.Pow(x=xi, y=np.array([1, -1, 1, 1], np.int32))
    bad = gt.ops.pow(gt.constant(xi), gt.constant(np.array([1, -1, 1, 1], np.int32)))
    with pytest.raises(gradtape.GradtapeError) as err:
        bad.numpy()
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "negative integer powers" in err.value.message

    rng = np.random.default_rng(13)
    xc = rng.uniform(0.5, 2, size=3) + 1j * rng.normal(size=3)
    yc = rng.normal(size=3) + 1j * rng.normal(size=3)
    with tf.GradientTape() as ttape:
        tx, ty = tf.constant(xc), tf.constant(yc)
        ttape.watch([tx, ty])
        tz = tf.raw_ops.Pow(x=tx, y=ty)
    tdx, tdy = ttape.gradient(tz, [tx, ty])
    gx, gy = gt.constant(xc), gt.constant(yc)
    with gt.GradientTape() as tape:
        tape.watch([gx, gy])
        gz = gt.ops.pow(gx, gy)
    gdx, gdy = tape.gradient_values(gz, [gx, gy])
    np.testing.assert_allclose(gz.numpy(), tz.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gdx, tdx.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gdy, tdy.numpy(), rtol=1e-12)


RANDOM_SPECS = 300


def _random_spec(rng: Any) -> Tuple[Tuple[int, ...], List[int], List[int], List[int], Dict[str, int]]:
    """A random input shape (rank 0-3, dims 0-4) and slice spec (0-4
    entries, indices in [-6, 6], strides in [-3, 3] with 0 sometimes, random
    masks, an ellipsis sometimes)."""
    shape = tuple(int(d) for d in rng.integers(0, 5, size=int(rng.integers(0, 4))))
    n = int(rng.integers(0, 5))
    begin = [int(v) for v in rng.integers(-6, 7, size=n)]
    end = [int(v) for v in rng.integers(-6, 7, size=n)]
    choices = [-3, -2, -1, 1, 1, 2, 3] + ([0] if rng.random() < 0.1 else [])
    strides = [int(v) for v in rng.choice(choices, size=n)]
    masks = {
        k: int(rng.integers(0, 1 << max(n, 1))) if rng.random() < 0.4 else 0
        for k in ["begin_mask", "end_mask", "new_axis_mask", "shrink_axis_mask"]
    }
    if n > 0 and rng.random() < 0.3:
        masks["ellipsis_mask"] = 1 << int(rng.integers(0, n))
    return shape, begin, end, strides, masks


def test_random_specs_match_tensorflow(gt: Any, tf: Any) -> None:
    """Random specs: TF and gradtape both refuse, or give the same values and
    the same StridedSliceGrad."""
    rng = np.random.default_rng(2026)
    refused = 0
    for case in range(RANDOM_SPECS):
        shape, begin, end, strides, masks = _random_spec(rng)
        n = len(begin)
        x = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
        spec_tf = [tf.constant(v, tf.int32, shape=[n]) for v in (begin, end, strides)]
        spec_gt = [gt.constant(np.array(v, np.int32).reshape([n])) for v in (begin, end, strides)]
        what = f"case {case}: x{shape}, {begin}, {end}, {strides}, {masks}"
        try:
            want = tf.raw_ops.StridedSlice(input=x, begin=spec_tf[0], end=spec_tf[1], strides=spec_tf[2], **masks)
        except tf.errors.InvalidArgumentError:
            want = None
        y = gt.ops.strided_slice(gt.constant(x), *spec_gt, **masks)
        if want is None:
            refused += 1
            with pytest.raises(gradtape.GradtapeError) as err:
                y.numpy()
            assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT, what
            continue
        got = y.numpy()
        assert got.shape == tuple(want.shape), what
        np.testing.assert_array_equal(got, want.numpy(), err_msg=what)
        dy = rng.normal(size=got.shape)
        dx_tf = tf.raw_ops.StridedSliceGrad(
            shape=tf.constant(shape, tf.int32, shape=[len(shape)]), begin=spec_tf[0], end=spec_tf[1],
            strides=spec_tf[2], dy=dy, **masks,
        )
        shape_gt = gt.constant(np.array(shape, np.int32).reshape([len(shape)]))
        dx = gt.ops.strided_slice_grad(shape_gt, *spec_gt, gt.constant(dy), **masks)
        np.testing.assert_array_equal(dx.numpy(), dx_tf.numpy(), err_msg=what)
    # Both kinds of case are exercised.
    assert 50 < refused < RANDOM_SPECS - 50
