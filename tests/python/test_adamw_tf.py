"""AdamW (client/python/gradtape/optimizers.py) through the server against
Keras' own tf.keras.optimizers.AdamW: five steps on a small quadratic in
float32, from the same start, give the same variables (1e-6), with and
without the fused server Adam op, and with a variable excluded from the
weight decay."""

from typing import Any, List

import numpy as np
import pytest

from gradtape import optimizers

C = np.array([1.0, 2.0, -0.5], dtype=np.float32)
W0 = np.array([0.3, -1.2, 2.0], dtype=np.float32)
B0 = np.array([0.7, -0.4], dtype=np.float32)


@pytest.fixture(scope="module")
def tf() -> Any:
    import tensorflow  # heavy: imported only when these tests run

    return tensorflow


def _keras_steps(tf: Any, exclude: bool, steps: int = 5) -> List[List[np.ndarray]]:
    w, b = tf.Variable(W0), tf.Variable(B0)
    opt = tf.keras.optimizers.AdamW(learning_rate=0.05, weight_decay=0.1)
    if exclude:
        opt.exclude_from_weight_decay(var_list=[b])
    out = []
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * w * C) + tf.reduce_sum(b * b * b)
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        out.append([w.numpy(), b.numpy()])
    return out


def _gradtape_steps(gt: Any, exclude: bool, use_server_op: Any, steps: int = 5) -> List[List[np.ndarray]]:
    w, b = gt.Variable(W0), gt.Variable(B0)
    cs = gt.constant(C)
    opt = optimizers.AdamW(learning_rate=0.05, weight_decay=0.1, use_server_op=use_server_op)
    if exclude:
        opt.exclude_from_weight_decay(var_list=[b])
    out = []
    for _ in range(steps):
        with gt.GradientTape() as tape:
            loss = gt.ops.sum(w * w * cs) + gt.ops.sum(b * b * b)
        dw, db = tape.gradient(loss, [w, b])
        opt.apply_gradients([(dw, w), (db, b)])
        out.append([w.numpy(), b.numpy()])
    return out


@pytest.mark.parametrize("exclude", [False, True])
@pytest.mark.parametrize("use_server_op", [False, None])
def test_adamw_matches_keras(gt, tf, exclude, use_server_op):
    want = _keras_steps(tf, exclude)
    got = _gradtape_steps(gt, exclude, use_server_op)
    for (gw, gb), (ww, wb) in zip(got, want):
        np.testing.assert_allclose(gw, ww, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(gb, wb, rtol=1e-6, atol=1e-6)


def test_adamw_defaults_and_refusals(gt):
    opt = optimizers.AdamW()
    assert opt.weight_decay == 0.004 and opt.learning_rate == 0.001
    with pytest.raises(ValueError, match="weight_decay"):
        optimizers.AdamW(weight_decay=None)  # type: ignore[arg-type]
