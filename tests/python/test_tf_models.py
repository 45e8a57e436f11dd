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


def _train(tf: Any, params: Any, opt: Any, loss_fn: Callable[[], Any], steps: int = 3) -> Dict[str, Any]:
    """`steps` steps of loss_fn's gradient applied by `opt` (IndexedSlices
    made dense first, as gradtape gives them); the losses, gradients and
    final weights."""
    out: Dict[str, Any] = {}
    for step in range(steps):
        with tf.GradientTape() as tape:
            loss = loss_fn()
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, params)]
        opt.apply_gradients(zip(grads, params))
        out[f"loss{step}"] = loss
        out[f"grads{step}"] = grads
    out["weights"] = list(params)
    return out


@program()
def causal_attention_block(tf: Any) -> Dict[str, Any]:
    """A pre-norm transformer block: layer norm from tf.nn.moments, a fused
    QKV projection cut by tf.split, two heads by reshape / transpose, scores
    by tf.einsum, a causal mask from tf.range and tf.newaxis applied with a
    broadcasting tf.where, softmax, a GELU MLP, residuals; AdamW after
    tf.clip_by_global_norm."""
    b, t, d, h = 2, 5, 8, 2
    x = tf.constant(fixed((b, t, d), 40, 1.0))
    target = tf.constant(fixed((b, t, d), 41, 1.0))
    wqkv = tf.Variable(fixed((d, 3 * d), 42), name="wqkv")
    wo = tf.Variable(fixed((d, d), 43), name="wo")
    w1 = tf.Variable(fixed((d, 4 * d), 44), name="w1")
    b1 = tf.Variable(np.zeros(4 * d, np.float32), name="b1")
    w2 = tf.Variable(fixed((4 * d, d), 45), name="w2")
    g1, g2 = tf.Variable(np.ones(d, np.float32)), tf.Variable(np.ones(d, np.float32))
    n1, n2 = tf.Variable(np.zeros(d, np.float32)), tf.Variable(np.zeros(d, np.float32))
    params = [wqkv, wo, w1, b1, w2, g1, n1, g2, n2]
    causal = tf.range(t)[:, tf.newaxis] >= tf.range(t)[tf.newaxis, :]

    def layer_norm(v: Any, gamma: Any, beta: Any) -> Any:
        mean, variance = tf.nn.moments(v, axes=[-1], keepdims=True)
        return (v - mean) * tf.math.rsqrt(variance + 1e-5) * gamma + beta

    def heads(v: Any) -> Any:
        return tf.transpose(tf.reshape(v, [b, t, h, d // h]), [0, 2, 1, 3])

    def loss_fn() -> Any:
        q, k, v = tf.split(tf.matmul(tf.reshape(layer_norm(x, g1, n1), [b * t, d]), wqkv), 3, axis=-1)
        q, k, v = heads(q), heads(k), heads(v)
        scores = tf.einsum("bhqd,bhkd->bhqk", q, k) * (1.0 / float(np.sqrt(d // h)))
        att = tf.nn.softmax(tf.where(causal, scores, -1e9), axis=-1)
        o = tf.reshape(tf.transpose(tf.einsum("bhqk,bhkd->bhqd", att, v), [0, 2, 1, 3]), [b * t, d])
        h1 = x + tf.reshape(tf.matmul(o, wo), [b, t, d])
        f = tf.nn.gelu(tf.matmul(tf.reshape(layer_norm(h1, g2, n2), [b * t, d]), w1) + b1)
        y = h1 + tf.reshape(tf.matmul(f, w2), [b, t, d])
        return tf.reduce_mean(tf.square(y - target))

    out: Dict[str, Any] = {}
    opt = tf.keras.optimizers.AdamW(learning_rate=0.01, weight_decay=0.01)
    for step in range(3):
        with tf.GradientTape() as tape:
            loss = loss_fn()
        grads = tape.gradient(loss, params)
        clipped, norm = tf.clip_by_global_norm(grads, 0.5)
        opt.apply_gradients(zip(clipped, params))
        out[f"loss{step}"], out[f"norm{step}"], out[f"grads{step}"] = loss, norm, grads
    out["weights"] = params
    return out


@program()
def unrolled_lstm(tf: Any) -> Dict[str, Any]:
    """An LSTM unrolled over tf.unstack(x, axis=1) (tf.concat, tf.split
    into four gates), a dense head, one-hot softmax cross-entropy, an argmax
    accuracy; SGD with momentum."""
    b, t, n_in, n_h, n_c = 3, 4, 5, 6, 3
    x = tf.constant(fixed((b, t, n_in), 50, 1.0))
    labels = tf.constant(np.array([0, 2, 1], np.int32))
    w = tf.Variable(fixed((n_in + n_h, 4 * n_h), 51), name="w")
    bias = tf.Variable(np.zeros(4 * n_h, np.float32), name="b")
    wy = tf.Variable(fixed((n_h, n_c), 52), name="wy")
    by = tf.Variable(np.zeros(n_c, np.float32), name="by")
    logits_of: Dict[str, Any] = {}

    def loss_fn() -> Any:
        h = tf.zeros([b, n_h])
        c = tf.zeros([b, n_h])
        for x_t in tf.unstack(x, axis=1):
            i, f, g, o = tf.split(tf.matmul(tf.concat([x_t, h], axis=1), w) + bias, 4, axis=1)
            c = tf.sigmoid(f + 1.0) * c + tf.sigmoid(i) * tf.tanh(g)
            h = tf.sigmoid(o) * tf.tanh(c)
        logits = logits_of["last"] = tf.matmul(h, wy) + by
        return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=tf.one_hot(labels, n_c), logits=logits))

    out = _train(tf, [w, bias, wy, by], tf.keras.optimizers.SGD(learning_rate=0.5, momentum=0.9), loss_fn)
    predicted = tf.argmax(logits_of["last"], axis=1, output_type=tf.int32)
    out["accuracy"] = tf.reduce_mean(tf.cast(tf.equal(predicted, labels), tf.float32))
    return out


@program()
def embedding_bag(tf: Any) -> Dict[str, Any]:
    """Bags of ids with repeats: tf.nn.embedding_lookup + reduce_mean, and
    a ragged bag by tf.gather + tf.math.unsorted_segment_sum; a tanh head;
    Adam."""
    ids = tf.constant(np.array([[1, 3, 3, 0], [2, 2, 5, 4], [0, 1, 6, 6]], np.int32))
    flat_ids = tf.constant(np.array([1, 3, 3, 0, 2, 5, 4, 6], np.int32))
    segments = tf.constant(np.array([0, 0, 0, 1, 1, 1, 2, 2], np.int32))
    table = tf.Variable(fixed((7, 4), 60), name="table")
    w = tf.Variable(fixed((8, 2), 61), name="w")
    target = tf.constant(fixed((3, 2), 62, 1.0))

    def loss_fn() -> Any:
        bag = tf.reduce_mean(tf.nn.embedding_lookup(table, ids), axis=1)
        ragged = tf.math.unsorted_segment_sum(tf.gather(table, flat_ids), segments, num_segments=3)
        y = tf.tanh(tf.matmul(tf.concat([bag, ragged], axis=1), w))
        return tf.reduce_mean(tf.square(y - target))

    return _train(tf, [table, w], tf.keras.optimizers.Adam(learning_rate=0.05), loss_fn)


@program()
def pad_tile_squeeze_concat(tf: Any) -> Dict[str, Any]:
    """tf.pad (CONSTANT with a value, REFLECT, SYMMETRIC), tf.tile,
    tf.expand_dims, tf.squeeze, tf.concat, tf.stack; SGD."""
    v = tf.Variable(fixed((2, 3), 70), name="v")
    weights = fixed((91,), 71)

    def loss_fn() -> Any:
        parts = [
            tf.pad(v, [[1, 0], [0, 2]], constant_values=0.5),
            tf.pad(v, [[1, 1], [2, 0]], mode="REFLECT"),
            tf.pad(v, [[0, 2], [1, 1]], mode="SYMMETRIC"),
            tf.tile(tf.expand_dims(v, 0), [2, 1, 2]),
            tf.squeeze(tf.expand_dims(v, -1), axis=-1),
            tf.stack([v[0], v[1] * 2.0]),
        ]
        flat = tf.concat([tf.reshape(p, [-1]) for p in parts], axis=0)
        return tf.reduce_sum(tf.square(flat) * weights)

    return _train(tf, [v], tf.keras.optimizers.SGD(learning_rate=0.05), loss_fn)


@program()
def slicing_reverse_newaxis(tf: Any) -> Dict[str, Any]:
    """Indexing with negative steps, tf.newaxis and Ellipsis, tf.reverse,
    tf.slice, tf.strided_slice; SGD."""
    v = tf.Variable(fixed((3, 4), 80), name="v")

    def loss_fn() -> Any:
        a = v[::-1, 1:]
        b = v[tf.newaxis, :, ::2] * 2.0
        c = tf.reverse(v, axis=[1])[..., tf.newaxis]
        d = tf.slice(v, [1, 0], [2, 3])
        e = tf.strided_slice(v, [0, 3], [3, 0], [2, -1])
        return tf.reduce_sum(a * a) + tf.reduce_sum(b) + tf.reduce_sum(c * c * c) + tf.reduce_sum(d) * tf.reduce_sum(e)

    return _train(tf, [v], tf.keras.optimizers.SGD(learning_rate=0.01), loss_fn)


@program()
def gathers_and_scatters(tf: Any) -> Dict[str, Any]:
    """tf.gather with axis and batch_dims, tf.gather_nd, tf.scatter_nd;
    RMSprop."""
    p = tf.Variable(fixed((2, 5, 3), 90), name="p")
    u = tf.Variable(fixed((2, 3), 91), name="u")
    indices = tf.constant(np.array([[4, 0, 4, 2], [1, 1, 3, 0]], np.int32))
    nd = tf.constant(np.array([[0, 1], [1, 4], [0, 1]], np.int32))

    def loss_fn() -> Any:
        g = tf.gather(p, indices, axis=1, batch_dims=1)
        n = tf.gather_nd(p, nd)
        s = tf.scatter_nd(tf.constant([[1], [3]]), u, [5, 3])
        return tf.reduce_sum(tf.square(g)) + tf.reduce_sum(n * n * n) + tf.reduce_sum(s * p[0])

    return _train(tf, [p, u], tf.keras.optimizers.RMSprop(learning_rate=0.01), loss_fn)


@program()
def range_cumsum_top_k(tf: Any) -> Dict[str, Any]:
    """tf.range (float and int), tf.math.cumsum (exclusive, reverse),
    tf.math.cumprod, tf.math.top_k; Adagrad."""
    v = tf.Variable(fixed((3, 4), 100), name="v")

    def loss_fn() -> Any:
        r = tf.cast(tf.range(1, 9, 2), tf.float32) * tf.range(0.5, 2.5, 0.5)
        c = tf.math.cumsum(v * r, axis=1, exclusive=True) + tf.math.cumsum(v, axis=0, reverse=True)
        values, _ = tf.math.top_k(c + 0.1 * tf.math.cumprod(v, axis=1), k=2)
        return tf.reduce_sum(tf.square(values))

    return _train(tf, [v], tf.keras.optimizers.Adagrad(learning_rate=0.1), loss_fn)


@program()
def elementwise_mix(tf: Any) -> Dict[str, Any]:
    """tf.nn.leaky_relu, tf.clip_by_value, tf.math.erf, tf.math.atan2,
    tf.pow; Adam."""
    v = tf.Variable(fixed((4, 3), 110), name="v")
    u = tf.Variable(fixed((4, 3), 111) + 1.0, name="u")

    def loss_fn() -> Any:
        a = tf.nn.leaky_relu(v, alpha=0.1) + tf.clip_by_value(u, -0.3, 0.8)
        b = tf.math.erf(v * u) + tf.math.atan2(v, u) + tf.pow(tf.abs(u) + 0.5, 1.5)
        return tf.reduce_mean(tf.square(a - b))

    return _train(tf, [v, u], tf.keras.optimizers.Adam(learning_rate=0.05), loss_fn)


@program()
def avg_pool_log_softmax_axis1(tf: Any) -> Dict[str, Any]:
    """tf.nn.avg_pool2d, then log_softmax over axis 1 of the NHWC result;
    SGD."""
    x = tf.constant(fixed((2, 6, 6, 3), 120, 1.0))
    w = tf.Variable(fixed((3, 3, 3, 4), 121), name="w")

    def loss_fn() -> Any:
        h = tf.nn.avg_pool2d(tf.nn.conv2d(x, w, 1, "SAME"), ksize=3, strides=2, padding="VALID")
        return -tf.reduce_mean(tf.nn.log_softmax(h, axis=1)[:, 0])

    return _train(tf, [w], tf.keras.optimizers.SGD(learning_rate=0.1), loss_fn)


# ---------------------------------------------------------------------------
# The runner


@program()
def tf_function_keras_step(tf: Any) -> Dict[str, Any]:
    """The Keras Sequential of keras_sequential trained five steps by a
    step under @tf.function, as a TF script writes it (loss, gradient and
    AdamW's update in one function; the batch an argument). The first call
    builds AdamW's slots; with gradtape the later calls run as one captured
    program each (test_tf_function_steps_are_captured checks that)."""
    ids = tf.constant(np.array([[1, 4, 0], [10, 3, 5]], np.int32))
    model = _keras_model(tf)
    model(ids)
    model.set_weights([fixed(w.shape, 40 + i) for i, w in enumerate(model.get_weights())])
    opt = tf.keras.optimizers.AdamW(learning_rate=0.01, weight_decay=0.05)

    @tf.function
    def step(targets: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(ids, training=False) - targets))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    out: Dict[str, Any] = {}
    for i in range(5):
        out[f"loss{i}"] = step(tf.constant(fixed((2, 4), 50 + i, 1.0)))
    out["weights"] = model.get_weights()
    return out


@program()
def tf_function_cnn_step(tf: Any) -> Dict[str, Any]:
    """cnn's model and RMSprop with clip_by_global_norm, the step under
    @tf.function taking the images and labels, five steps."""
    w1 = tf.Variable(fixed((3, 3, 2, 4), 2), name="w1")
    wd = tf.Variable(fixed((4 * 4 * 4, 3), 5), name="wd")
    bd = tf.Variable(np.zeros(3, np.float32), name="bd")
    params = [w1, wd, bd]
    opt = tf.keras.optimizers.RMSprop(learning_rate=0.01, momentum=0.5)

    @tf.function
    def step(x: Any, labels: Any) -> Any:
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.nn.conv2d(x, w1, strides=1, padding="SAME"))
            h = tf.nn.max_pool2d(h, ksize=2, strides=2, padding="VALID")
            logits = tf.matmul(tf.reshape(h, [4, -1]), wd) + bd
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        grads = tape.gradient(loss, params)
        clipped, _ = tf.clip_by_global_norm(grads, 1.0)
        opt.apply_gradients(zip(clipped, params))
        return loss

    out: Dict[str, Any] = {}
    for i in range(5):
        x = tf.constant(fixed((4, 8, 8, 2), 60 + i, 1.0))
        labels = tf.constant(np.array([i % 3, 2, 1, (i + 1) % 3], np.int32))
        out[f"loss{i}"] = step(x, labels)
    out["weights"] = params
    return out


def test_tf_function_steps_are_captured(gtf: Any) -> None:
    """With gradtape.tf, the @tf.function steps above run as programs: the
    session holds one per step function, called for every step after the
    recorded ones."""
    import gradtape

    session = gradtape.get_default_session()
    for name in ("tf_function_keras_step", "tf_function_cnn_step"):
        before = {p.program_id for p in session.programs()}
        run(PROGRAMS[name], gtf)
        new = [p for p in session.programs() if p.program_id not in before]
        assert len(new) == 1, (name, new)
        assert new[0].calls >= 3, (name, new[0])


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


def test_readme_porting_example_runs(server_address: str) -> None:
    """README.md's "Porting from TensorFlow" model, as written (three steps
    instead of 100, this test's server): it trains."""
    import gradtape
    import gradtape.tf

    from conftest import REPO_ROOT

    text = (REPO_ROOT / "README.md").read_text()
    section = text[text.index("## Porting from TensorFlow"):]
    code = section[section.index("```python\n") + len("```python\n"):]
    code = code[: code.index("```")]
    assert "range(100)" in code and 'tf.connect("127.0.0.1:50051")' in code
    code = code.replace("range(100)", "range(3)").replace('"127.0.0.1:50051"', repr(server_address))
    scope: Dict[str, Any] = {}
    try:
        exec(compile(code, "README.md (Porting from TensorFlow)", "exec"), scope)
        assert np.isfinite(float(scope["loss"])) and len(scope["model"].trainable_variables) == 4
    finally:
        session = gradtape.tf._get_default()
        gradtape.set_default_session(None)
        if session is not None:
            session.close()
