"""An LSTM cell built from primitives (MatMul, BiasAdd, Split into the four
gates, Sigmoid, Tanh, Mul, AddV2), unrolled over 16 steps through the
server, against the same cell in TensorFlow: float64 gradients of a loss
over every step's output w.r.t. the inputs, the weights, the bias and the
initial state agree to 1e-10."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

import gradtape

STEPS, BATCH, FEATURES, UNITS = 16, 3, 5, 4
RTOL, ATOL = 1e-10, 1e-12


@pytest.fixture(scope="module")
def tf() -> Any:
    import tensorflow  # heavy: imported only when these tests run

    return tensorflow


def _values() -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(16)
    return {
        "x": rng.normal(size=(STEPS, BATCH, FEATURES)),
        "w": rng.normal(scale=0.5, size=(FEATURES, 4 * UNITS)),
        "u": rng.normal(scale=0.5, size=(UNITS, 4 * UNITS)),
        "b": rng.normal(scale=0.1, size=(4 * UNITS,)),
        "h0": rng.normal(scale=0.5, size=(BATCH, UNITS)),
        "c0": rng.normal(scale=0.5, size=(BATCH, UNITS)),
        "readout": rng.normal(size=(STEPS, BATCH, UNITS)),
    }


def _lstm(ops: Any, split: Any, x: List[Any], w: Any, u: Any, b: Any, h: Any, c: Any) -> List[Any]:
    """Keras's LSTM cell (gates i, f, c, o in that order); returns every h."""
    hs = []
    for xt in x:
        z = ops.bias_add(xt @ w + h @ u, b)
        i, f, g, o = split(z)
        c = ops.sigmoid(f) * c + ops.sigmoid(i) * ops.tanh(g)
        h = ops.sigmoid(o) * ops.tanh(c)
        hs.append(h)
    return hs


def _gradtape_grads(gt: gradtape.Session, v: Dict[str, np.ndarray]) -> Tuple[float, List[np.ndarray]]:
    ops = gt.ops
    x = [gt.constant(v["x"][t]) for t in range(STEPS)]
    params = [gt.constant(v[k]) for k in ("w", "u", "b", "h0", "c0")]

    def split(z: Any) -> List[Any]:
        return list(ops.split(1, z, num_split=4))

    with gt.GradientTape() as tape:
        for t in x + params:
            tape.watch(t)
        hs = _lstm(ops, split, x, *params)
        loss = sum(ops.sum(h * v["readout"][t], axis=[0, 1]) for t, h in enumerate(hs))
    grads = tape.gradient(loss, x + params)
    return float(loss), [g.numpy() for g in grads]


def _tf_grads(tf: Any, v: Dict[str, np.ndarray]) -> Tuple[float, List[np.ndarray]]:
    x = [tf.constant(v["x"][t]) for t in range(STEPS)]
    params = [tf.constant(v[k]) for k in ("w", "u", "b", "h0", "c0")]
    with tf.GradientTape() as tape:
        for t in x + params:
            tape.watch(t)
        h, c = params[3], params[4]
        hs = []
        for xt in x:
            z = tf.nn.bias_add(xt @ params[0] + h @ params[1], params[2])
            i, f, g, o = tf.split(z, 4, axis=1)
            c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
            h = tf.sigmoid(o) * tf.tanh(c)
            hs.append(h)
        loss = tf.add_n([tf.reduce_sum(h * v["readout"][t]) for t, h in enumerate(hs)])
    grads = tape.gradient(loss, x + params)
    return float(loss), [g.numpy() for g in grads]


def test_lstm_16_steps_float64_gradients_match_tensorflow(gt: gradtape.Session, tf: Any) -> None:
    v = _values()
    ours_loss, ours = _gradtape_grads(gt, v)
    theirs_loss, theirs = _tf_grads(tf, v)
    np.testing.assert_allclose(ours_loss, theirs_loss, rtol=RTOL)
    names = [f"x[{t}]" for t in range(STEPS)] + ["w", "u", "b", "h0", "c0"]
    for name, a, e in zip(names, ours, theirs):
        assert a.dtype == np.float64, name
        np.testing.assert_allclose(a, e, rtol=RTOL, atol=ATOL, err_msg=name)
    # Every step matters: the gradient of the first input is not negligible.
    assert np.abs(ours[0]).max() > 1e-3
