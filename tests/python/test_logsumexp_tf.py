"""gradtape.tf.reduce_logsumexp (built from primitives) against
tf.reduce_logsumexp: float64 values and gradients for several axes, with
and without keepdims, and large values that overflow a naive exp."""

from typing import Any, Iterator

import numpy as np
import pytest


@pytest.fixture(scope="module")
def tf() -> Any:
    import tensorflow  # heavy: imported only when these tests run

    return tensorflow


@pytest.fixture
def gtf(server_address: str) -> Iterator[Any]:
    import gradtape
    import gradtape.tf as gtf_module

    session = gtf_module.connect(server_address, timeout=10)
    try:
        yield gtf_module
    finally:
        gradtape.set_default_session(None)
        session.close()


@pytest.mark.parametrize("axis", [None, 0, 1, -1, [0, 2]])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduce_logsumexp_matches_tensorflow(gtf: Any, tf: Any, axis: Any, keepdims: bool) -> None:
    x = np.random.default_rng(5).normal(scale=3.0, size=(2, 3, 4))
    x[0, 1, 2] = 800.0  # exp overflows float64 without the max shift
    w = np.random.default_rng(6).normal(size=np.asarray(tf.reduce_logsumexp(x, axis=axis, keepdims=keepdims)).shape)

    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        yt = tf.reduce_logsumexp(xt, axis=axis, keepdims=keepdims)
        lt = tf.reduce_sum(yt * w)
    gt_ = tape.gradient(lt, xt)

    xg = gtf.constant(x)
    with gtf.GradientTape() as tape:
        tape.watch(xg)
        yg = gtf.reduce_logsumexp(xg, axis=axis, keepdims=keepdims)
        lg = gtf.reduce_sum(yg * w)
    gg = tape.gradient(lg, xg)

    assert yg.numpy().shape == yt.numpy().shape
    np.testing.assert_allclose(yg.numpy(), yt.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gg.numpy(), gt_.numpy(), rtol=1e-10, atol=1e-14)
    assert np.isfinite(yg.numpy()).all()
    assert gtf.math.reduce_logsumexp is gtf.reduce_logsumexp
