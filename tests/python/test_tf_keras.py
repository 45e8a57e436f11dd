"""gradtape.tf.keras (layers, Sequential, initializers, optimizers,
schedules) and gradtape.tf.Module against TensorFlow 2.21 / Keras 3: the
same weights (set_weights) give the same outputs and gradients; the
optimizers' steps and the schedules' values agree in float32 tolerance;
Module's traversal gives TF's variables in TF's order."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import numpy as np
import pytest

TOL = 1e-5


LAYERS: Dict[str, Any] = {
    "dense": (lambda k: k.layers.Dense(4, activation="relu"), (3, 5)),
    "dense_rank3_gelu": (lambda k: k.layers.Dense(3, activation="gelu", use_bias=False), (2, 4, 5)),
    "embedding": (lambda k: k.layers.Embedding(7, 3), None),
    "layer_norm": (lambda k: k.layers.LayerNormalization(), (3, 6)),
    "layer_norm_axes": (lambda k: k.layers.LayerNormalization(axis=[1, 2], epsilon=1e-5), (2, 3, 4)),
    "dropout_inference": (lambda k: k.layers.Dropout(0.5, seed=1), (3, 4)),
    "conv2d_same": (lambda k: k.layers.Conv2D(4, 3, padding="same", activation="tanh"), (2, 6, 5, 3)),
    "conv2d_valid_strides": (lambda k: k.layers.Conv2D(2, (2, 3), strides=2), (2, 7, 7, 3)),
    "conv2d_dilated": (lambda k: k.layers.Conv2D(2, 2, dilation_rate=2), (1, 6, 6, 2)),
    "max_pooling": (lambda k: k.layers.MaxPooling2D(), (2, 6, 5, 3)),
    "average_pooling_same": (lambda k: k.layers.AveragePooling2D(3, strides=2, padding="same"), (2, 6, 5, 3)),
    "flatten": (lambda k: k.layers.Flatten(), (2, 3, 4, 2)),
}


def _layer_run(m: Any, make: Callable[[Any], Any], x: np.ndarray, weights: Any) -> Dict[str, Any]:
    layer = make(m.keras)
    layer(x)
    if weights is None:
        weights = [w + 0.1 for w in layer.get_weights()]  # not the initial values
    layer.set_weights(weights)
    xv = m.Variable(x) if x.dtype == np.float32 else x
    with m.GradientTape() as tape:
        y = layer(xv, training=False)
        loss = m.reduce_sum(y * y * 0.5 + y)
    sources = list(layer.trainable_variables) + ([xv] if x.dtype == np.float32 else [])
    grads = tape.gradient(loss, sources)
    dense = [np.asarray(m.convert_to_tensor(g)) if g is not None else None for g in grads]
    return {"weights": weights, "y": np.asarray(y), "grads": dense, "names": [v.name.split("/")[-1].split(":")[0] for v in layer.trainable_variables]}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_same_as_keras(name: str, tf: Any, gtf: Any) -> None:
    make, shape = LAYERS[name]
    rng = np.random.default_rng(len(name))
    x = rng.integers(0, 7, (3, 4)).astype(np.int32) if shape is None else rng.standard_normal(shape).astype(np.float32)
    # Keras draws the reference's weights: seeded, so a draw whose ReLUs
    # are all off (every gradient 0, refused below) cannot come by chance.
    tf.keras.utils.set_random_seed(len(name))
    want = _layer_run(tf, make, x, None)
    got = _layer_run(gtf, make, x, [w.copy() for w in want["weights"]])
    assert got["names"] == want["names"]
    np.testing.assert_allclose(got["y"], want["y"], rtol=TOL, atol=TOL)
    assert len(got["grads"]) == len(want["grads"]) and any(np.any(g != 0) for g in want["grads"] if g is not None)
    for g, w in zip(got["grads"], want["grads"]):
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL)


def test_dropout_training(tf: Any, gtf: Any) -> None:
    x = np.ones((40, 50), np.float32)
    layer = gtf.keras.layers.Dropout(0.25, seed=3)
    a, b = layer(x, training=True).numpy(), layer(x, training=True).numpy()
    assert set(np.unique(a).tolist()) == {0.0, np.float32(1 / 0.75)}
    assert not np.array_equal(a, b)  # a fresh mask per call, as Keras
    assert 0.15 < np.mean(a == 0) < 0.35
    again = gtf.keras.layers.Dropout(0.25, seed=3)  # a seeded layer repeats its masks
    np.testing.assert_array_equal(again(x, training=True).numpy(), a)
    np.testing.assert_array_equal(layer(x).numpy(), x)  # training None: inference
    assert gtf.keras.layers.Dropout(0.25, seed=3)(x, training=False) is not None


def test_initializers_distributions_and_seeds(tf: Any, gtf: Any) -> None:
    k = gtf.keras
    dense = k.layers.Dense(300)
    dense(np.zeros((1, 200), np.float32))
    w, b = dense.get_weights()
    limit = np.sqrt(6 / (200 + 300))
    assert w.shape == (200, 300) and np.abs(w).max() <= limit and np.abs(w).max() > 0.95 * limit
    assert abs(w.mean()) < 0.01 and np.array_equal(b, np.zeros(300, np.float32))
    conv = k.layers.Conv2D(8, 3)
    conv(np.zeros((1, 5, 5, 4), np.float32))
    kernel = conv.get_weights()[0]
    assert kernel.shape == (3, 3, 4, 8) and np.abs(kernel).max() <= np.sqrt(6 / (36 + 72))
    emb = k.layers.Embedding(100, 20)
    emb(np.zeros((1,), np.int32))
    e = emb.get_weights()[0]
    assert np.abs(e).max() <= 0.05 and e.std() > 0.02
    ln = k.layers.LayerNormalization()
    ln(np.zeros((2, 3), np.float32))
    assert [a.tolist() for a in ln.get_weights()] == [[1.0] * 3, [0.0] * 3]
    seeded = [k.initializers.GlorotUniform(seed=5)((4, 3)).numpy() for _ in range(2)]
    np.testing.assert_array_equal(seeded[0], seeded[1])  # Keras 3: a seeded initializer repeats
    assert not np.array_equal(seeded[0], k.initializers.GlorotUniform(seed=6)((4, 3)).numpy())
    keras_kernel = tf.keras.initializers.GlorotUniform(seed=5)((4, 3))
    assert tuple(keras_kernel.shape) == seeded[0].shape
    i = k.initializers
    assert np.array_equal(i.Zeros()((2, 3)).numpy(), np.zeros((2, 3), np.float32))
    assert np.array_equal(i.Ones()((2,)).numpy(), np.ones(2, np.float32))
    u = i.RandomUniform(-0.5, 0.25, seed=1)((400,)).numpy()
    assert u.min() >= -0.5 and u.max() < 0.25 and u.max() - u.min() > 0.7
    n = i.RandomNormal(1.0, 0.1, seed=2)((2000,)).numpy()
    assert abs(n.mean() - 1.0) < 0.01 and abs(n.std() - 0.1) < 0.01
    assert np.array_equal(i.RandomNormal(seed=2)((5,)).numpy(), i.RandomNormal(seed=2)((5,)).numpy())


def test_aliases_and_activation_layer_match_keras(tf: Any, gtf: Any) -> None:
    """MaxPool2D / AvgPool2D are Keras' aliases; Activation applies a named
    activation (values against Keras)."""
    x = np.random.default_rng(4).standard_normal((2, 4, 4, 3)).astype(np.float32)
    for name, args in (("MaxPool2D", ()), ("AvgPool2D", (2,))):
        np.testing.assert_allclose(
            getattr(gtf.keras.layers, name)(*args)(x).numpy(), getattr(tf.keras.layers, name)(*args)(x).numpy(), rtol=1e-6, atol=1e-6
        )
    with pytest.raises(TypeError):
        gtf.keras.layers.AveragePooling2D()  # Keras 3: pool_size is required
    for act in ("relu", "tanh", "gelu", "sigmoid"):
        np.testing.assert_allclose(
            gtf.keras.layers.Activation(act)(x).numpy(), tf.keras.layers.Activation(act)(x).numpy(), rtol=1e-5, atol=1e-6
        )


def _sequential(m: Any) -> Any:
    k = m.keras
    return k.Sequential([
        k.layers.Conv2D(3, 3, padding="same", activation="relu"),
        k.layers.MaxPooling2D(),
        k.layers.Flatten(),
        k.layers.Dense(6, activation="tanh"),
        k.layers.LayerNormalization(),
        k.layers.Dense(2),
    ])


def test_sequential_variables_and_weights(tf: Any, gtf: Any) -> None:
    x = np.random.default_rng(0).standard_normal((2, 4, 4, 2)).astype(np.float32)
    models = [_sequential(tf), _sequential(gtf)]
    for model in models:
        model(x)
    want = [(v.name.split(":")[0].split("/")[-1], tuple(v.shape)) for v in models[0].trainable_variables]
    got = [(v.name.split("/")[-1], tuple(v.shape)) for v in models[1].trainable_variables]
    assert got == want
    models[1].set_weights(models[0].get_weights())
    np.testing.assert_allclose(models[1](x).numpy(), models[0](x).numpy(), rtol=TOL, atol=TOL)
    assert len(models[1].layers) == 6 and len(models[1].weights) == len(models[0].weights)
    with pytest.raises(ValueError):
        models[1].set_weights(models[0].get_weights()[:-1])


SCHEDULES: List[Callable[[Any], Any]] = [
    lambda s: s.ExponentialDecay(0.1, 3, 0.5),
    lambda s: s.ExponentialDecay(0.1, 2, 0.7, staircase=True),
    lambda s: s.InverseTimeDecay(0.1, 2, 0.5, staircase=True),
    lambda s: s.PiecewiseConstantDecay([2, 4], [0.1, 0.05, 0.01]),
    lambda s: s.PolynomialDecay(0.1, 4, end_learning_rate=0.01, power=2.0),
    lambda s: s.PolynomialDecay(0.1, 3, cycle=True),
    lambda s: s.CosineDecay(0.1, 5, alpha=0.1),
    lambda s: s.CosineDecay(0.05, 4, warmup_target=0.2, warmup_steps=2),
]


@pytest.mark.parametrize("index", range(len(SCHEDULES)))
def test_schedules_same_as_keras(index: int, tf: Any, gtf: Any) -> None:
    want = SCHEDULES[index](tf.keras.optimizers.schedules)
    got = SCHEDULES[index](gtf.keras.optimizers.schedules)
    for step in range(9):
        np.testing.assert_allclose(float(got(step)), float(want(step)), rtol=1e-6, atol=1e-7)


OPTIMIZERS = {
    "AdamW": {"weight_decay": 0.1},
    "RMSprop": {},
    "RMSprop_centered_momentum": {"momentum": 0.8, "centered": True, "rho": 0.8},
    "Adagrad": {"initial_accumulator_value": 0.5},
    "Adam": {},
    "SGD_nesterov": {"momentum": 0.9, "nesterov": True},
}


def _optimizer_steps(m: Any, name: str, schedule: bool) -> List[np.ndarray]:
    cls = getattr(m.keras.optimizers, name.split("_")[0])
    lr: Any = m.keras.optimizers.schedules.ExponentialDecay(0.05, 2, 0.5) if schedule else 0.05
    opt = cls(learning_rate=lr, **OPTIMIZERS[name])
    w, b = m.Variable([0.3, -1.2, 2.0]), m.Variable([[0.7, -0.4]])
    out = []
    for _ in range(5):
        with m.GradientTape() as tape:
            loss = m.reduce_sum(w * w * w) + m.reduce_sum(m.sin(b))
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        out += [w.numpy(), b.numpy()]
    return out


@pytest.mark.parametrize("schedule", [False, True])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizers_same_as_keras(name: str, schedule: bool, tf: Any, gtf: Any) -> None:
    want = _optimizer_steps(tf, name, schedule)
    got = _optimizer_steps(gtf, name, schedule)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL)


def test_optimizer_defaults_and_callable_learning_rate(tf: Any, gtf: Any) -> None:
    for name in ("AdamW", "RMSprop", "Adagrad"):
        got, want = getattr(gtf.keras.optimizers, name)(), getattr(tf.keras.optimizers, name)()
        for attr in ("epsilon", "rho", "momentum", "weight_decay", "initial_accumulator_value", "beta_1", "beta_2"):
            if getattr(want, attr, None) is not None:
                assert getattr(got, attr) == pytest.approx(float(getattr(want, attr))), (name, attr)
        assert got.learning_rate == pytest.approx(float(want.learning_rate))
    v = gtf.Variable([1.0])
    gtf.keras.optimizers.SGD(learning_rate=lambda: 0.5).apply_gradients([(gtf.constant([2.0]), v)])
    np.testing.assert_allclose(v.numpy(), [0.0])
    with pytest.raises(NotImplementedError, match="clipnorm"):
        gtf.keras.optimizers.Adam(clipnorm=1.0)


# -- tf.Module --------------------------------------------------------------------


def _module_tree(m: Any) -> Any:
    class Leaf(m.Module):
        def __init__(self, n: int, name: Any = None) -> None:
            super().__init__(name=name)
            self.w = m.Variable(np.full([n], float(n), np.float32), name="w")
            self.frozen = m.Variable(0.0, trainable=False, name="frozen")

    class Tree(m.Module):
        def __init__(self) -> None:
            super().__init__()
            shared = Leaf(1, name="shared")
            self.z_leaf = Leaf(2)
            self.blocks = [Leaf(3), (shared, Leaf(4))]
            self.table = {"b": Leaf(5), "a": shared}
            self.bias = m.Variable([9.0], name="bias")
            self.again = self.bias

        @m.Module.with_name_scope
        def __call__(self, x: Any) -> Any:
            return x * self.bias

    return Tree()


def test_module_traversal_is_tensorflows(tf: Any, gtf: Any) -> None:
    want, got = _module_tree(tf), _module_tree(gtf)
    for attr in ("variables", "trainable_variables", "non_trainable_variables"):
        w = [v.numpy().tolist() for v in getattr(want, attr)]
        g = [v.numpy().tolist() for v in getattr(got, attr)]
        assert g == w, attr
    assert [s.name for s in got.submodules] == [s.name for s in want.submodules]
    assert got.name == want.name == "tree"
    assert got.name_scope.name == want.name_scope.name
    assert np.asarray(got(2.0)).tolist() == np.asarray(want(2.0)).tolist() == [18.0]
    with pytest.raises(ValueError):
        gtf.Module(name="not valid")


def _custom_layer(m: Any) -> Any:
    class Block(m.keras.layers.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.inner = m.keras.layers.Dense(3)
            self.norm = m.keras.layers.LayerNormalization()

        def build(self, input_shape: Any) -> None:
            self.count = self.add_weight(shape=(), initializer="zeros", trainable=False, name="count")
            self.scale = self.add_weight(shape=(3,), initializer="ones", name="scale")

        def call(self, x: Any) -> Any:
            return self.norm(self.inner(x)) * self.scale

    return Block()


def test_custom_layer_weights_order_and_freezing(tf: Any, gtf: Any) -> None:
    x = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    layers = [_custom_layer(tf), _custom_layer(gtf)]
    for layer in layers:
        layer(x)

    def names(ws: Any) -> List[Any]:
        return [(w.name.split("/")[-1].split(":")[0], tuple(w.shape)) for w in ws]

    for attr in ("weights", "trainable_weights", "non_trainable_weights"):
        assert names(getattr(layers[1], attr)) == names(getattr(layers[0], attr)), attr
    layers[1].set_weights(layers[0].get_weights())
    np.testing.assert_allclose(layers[1](x).numpy(), layers[0](x).numpy(), rtol=TOL, atol=TOL)
    for layer in layers:
        layer.inner.trainable = False
    assert names(layers[1].trainable_weights) == names(layers[0].trainable_weights)
    xv = gtf.constant(x)
    with gtf.GradientTape() as tape:
        y = layers[1](xv)
    grads = tape.gradient(y, [layers[1].inner.kernel, layers[1].scale])
    assert grads[0] is None and grads[1] is not None  # a frozen layer's variables are not watched
