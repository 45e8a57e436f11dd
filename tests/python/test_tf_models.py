"""Model programs written once against TensorFlow's API and run unchanged
with ``tensorflow`` and with ``gradtape.tf``: several training steps from
fixed weights, comparing the losses, gradients and final weights in
float32 tolerance.

The harness: a program is a function ``program(tf) -> dict`` of named
results (Tensors, Variables, numpy arrays, numbers, or lists of them);
``run(program, tf_module)`` runs it and gives a dict of numpy arrays
(lists are flattened to ``name[i]``; IndexedSlices gradients are made
dense). ``PROGRAMS`` lists them; add a program with ``@program``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict

import numpy as np
import pytest

RTOL = ATOL = 1e-5
Program = Callable[[Any], Dict[str, Any]]
PROGRAMS: Dict[str, Program] = {}
TOLERANCES: Dict[str, float] = {}


def program(tol: float = RTOL) -> Callable[[Program], Program]:
    def register(fn: Program) -> Program:
        assert fn.__name__ not in PROGRAMS, fn.__name__
        PROGRAMS[fn.__name__] = fn
        TOLERANCES[fn.__name__] = tol
        return fn

    return register


def _numpy(tf: Any, value: Any) -> np.ndarray:
    if hasattr(value, "indices") and hasattr(value, "values"):
        value = tf.convert_to_tensor(value)  # IndexedSlices: dense, as gradtape gives it
    return np.asarray(value)


def run(fn: Program, tf: Any) -> Dict[str, np.ndarray]:
    """Runs `fn` with the module `tf`; its results as numpy arrays."""
    out: Dict[str, np.ndarray] = {}
    for key, value in fn(tf).items():
        if isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                out[f"{key}[{i}]"] = _numpy(tf, v)
        else:
            out[key] = _numpy(tf, value)
    return out


def fixed(shape: Any, seed: int, scale: float = 0.5) -> np.ndarray:
    """A fixed float32 array (the same for both modules)."""
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


# ---------------------------------------------------------------------------
# The programs


@program()
def cnn(tf: Any) -> Dict[str, Any]:
    """conv2d + relu, max_pool2d, conv2d + bias_add, avg_pool2d, a dense
    head, sparse softmax cross-entropy, clip_by_global_norm and RMSprop
    (momentum) for three steps."""
    x = tf.constant(fixed((4, 8, 8, 2), 1, 1.0))
    labels = tf.constant(np.array([0, 2, 1, 2], np.int32))
    w1 = tf.Variable(fixed((3, 3, 2, 4), 2), name="w1")
    w2 = tf.Variable(fixed((3, 3, 4, 6), 3), name="w2")
    b2 = tf.Variable(fixed((6,), 4, 0.1), name="b2")
    wd = tf.Variable(fixed((2 * 2 * 6, 3), 5), name="wd")
    bd = tf.Variable(np.zeros(3, np.float32), name="bd")
    params = [w1, w2, b2, wd, bd]
    opt = tf.keras.optimizers.RMSprop(learning_rate=0.01, momentum=0.5)
    out: Dict[str, Any] = {}
    for step in range(3):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.nn.conv2d(x, w1, strides=1, padding="SAME"))
            h = tf.nn.max_pool2d(h, ksize=2, strides=2, padding="VALID")
            h = tf.nn.bias_add(tf.nn.conv2d(h, w2, strides=[1, 1], padding="SAME"), b2)
            h = tf.nn.avg_pool2d(tf.nn.leaky_relu(h), ksize=2, strides=2, padding="SAME")
            logits = tf.matmul(tf.reshape(h, [4, -1]), wd) + bd
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        grads = tape.gradient(loss, params)
        clipped, norm = tf.clip_by_global_norm(grads, 1.0)
        opt.apply_gradients(zip(clipped, params))
        out[f"loss{step}"] = loss
        out[f"norm{step}"] = norm
        out[f"grads{step}"] = grads
    out["weights"] = params
    return out


def _keras_model(tf: Any) -> Any:
    k = tf.keras
    return k.Sequential([
        k.layers.Embedding(11, 6),
        k.layers.Dense(8, activation="gelu"),
        k.layers.Dropout(0.3, seed=7),
        k.layers.LayerNormalization(),
        k.layers.Flatten(),
        k.layers.Dense(4),
    ])


@program()
def keras_sequential(tf: Any) -> Dict[str, Any]:
    """A Keras-layers Sequential (Embedding, Dense + gelu, Dropout with a
    seed at training=False, LayerNormalization, Flatten, Dense), its weights
    set from fixed values, trained three steps with AdamW and an
    ExponentialDecay schedule. The ids are distinct and the same at every
    step: Keras updates an embedding from TF's IndexedSlices gradient row by
    row (a repeated id is updated once per occurrence, an absent row's
    slots are not decayed), gradtape from the dense gradient."""
    ids = np.array([[1, 4, 0], [10, 3, 5]], np.int32)
    targets = tf.constant(fixed((2, 4), 9, 1.0))
    model = _keras_model(tf)
    model(ids)
    model.set_weights([fixed(w.shape, 20 + i) for i, w in enumerate(model.get_weights())])
    schedule = tf.keras.optimizers.schedules.ExponentialDecay(0.01, decay_steps=1, decay_rate=0.5)
    opt = tf.keras.optimizers.AdamW(learning_rate=schedule, weight_decay=0.05)
    out: Dict[str, Any] = {}
    for step in range(3):
        with tf.GradientTape() as tape:
            y = model(ids, training=False)
            loss = tf.reduce_mean(tf.square(y - targets))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        out[f"loss{step}"] = loss
        out[f"grads{step}"] = grads
    out["weights"] = model.get_weights()
    return out


@program()
def module_mlp(tf: Any) -> Dict[str, Any]:
    """A tf.Module MLP (submodules in a list, variables found by
    trainable_variables): gelu, moments + batch_normalization, stateless
    dropout, log_softmax over axis 0, Adagrad with a PiecewiseConstantDecay
    schedule, three steps."""

    class Linear(tf.Module):
        def __init__(self, n_in: int, n_out: int, seed: int) -> None:
            super().__init__()
            self.w = tf.Variable(fixed((n_in, n_out), seed), name="w")
            self.b = tf.Variable(np.zeros(n_out, np.float32), name="b")

        def __call__(self, x: Any) -> Any:
            return tf.matmul(x, self.w) + self.b

    class MLP(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="mlp")
            self.layers = [Linear(5, 8, 31), Linear(8, 3, 32)]
            self.gamma = tf.Variable(np.ones(8, np.float32), name="gamma")
            self.beta = tf.Variable(np.zeros(8, np.float32), name="beta")

        def __call__(self, x: Any) -> Any:
            h = tf.nn.gelu(self.layers[0](x), approximate=True)
            mean, variance = tf.nn.moments(h, axes=[0])
            h = tf.nn.batch_normalization(h, mean, variance, self.beta, self.gamma, 1e-3)
            h = tf.nn.experimental.stateless_dropout(h, rate=0.25, seed=[3, 4])
            return tf.nn.log_softmax(self.layers[1](h), axis=0)

    x = tf.constant(fixed((6, 5), 30, 1.0))
    model = MLP()
    schedule = tf.keras.optimizers.schedules.PiecewiseConstantDecay([1], [0.1, 0.05])
    opt = tf.keras.optimizers.Adagrad(learning_rate=schedule)
    out: Dict[str, Any] = {}
    for step in range(3):
        with tf.GradientTape() as tape:
            loss = -tf.reduce_mean(model(x) * fixed((6, 3), 33))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        out[f"loss{step}"] = loss
        out[f"grads{step}"] = grads
    out["weights"] = list(model.trainable_variables)
    return out


# ---------------------------------------------------------------------------
# The runner


@pytest.fixture(scope="module")
def tf() -> Any:
    try:
        import gradtape._native_core  # noqa: F401 (before TensorFlow: see test_random_tf.py)
    except ImportError:
        pass
    import tensorflow

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


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_model_program_same_as_tensorflow(name: str, tf: Any, gtf: Any) -> None:
    want = run(PROGRAMS[name], tf)
    got = run(PROGRAMS[name], gtf)
    assert sorted(got) == sorted(want)
    tol = TOLERANCES[name]
    for key in sorted(want):
        assert got[key].shape == want[key].shape and got[key].dtype == want[key].dtype, key
        np.testing.assert_allclose(got[key], want[key], rtol=tol, atol=tol, err_msg=f"{name}: {key}")
    # The steps changed the weights (a program that does not train cannot fail).
    assert not np.allclose(want["loss0"], want["loss2"])
