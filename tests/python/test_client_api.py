"""The Python client's API: tensors, ops from ListOps, tapes, variables,
optimizers, pipelining and handle release."""

import gc

import numpy as np
import pytest

import gradtape  # noqa: E402  (pip install ./client/python)
from gradtape import optimizers  # noqa: E402


@pytest.mark.no_client  # a pure function
def test_snake_case_follows_tensorflow():
    cases = {
        "MatMul": "mat_mul",
        "AddV2": "add_v2",
        "Conv2D": "conv2d",
        "Conv3DBackpropInputV2": "conv3d_backprop_input_v2",
        "DepthwiseConv2dNative": "depthwise_conv2d_native",
        "L2Loss": "l2_loss",
        "MaxPool3DGrad": "max_pool3d_grad",
        "Relu6Grad": "relu6_grad",
        "SparseSoftmaxCrossEntropyWithLogits": "sparse_softmax_cross_entropy_with_logits",
        "BiasAddV1": "bias_add_v1",
        "VarHandleOp": "var_handle_op",
    }
    assert {k: gradtape.snake_case(k) for k in cases} == cases


def test_every_listed_op_has_a_function(gt):
    names = [op.name for op in gt.list_ops()]
    assert "MatMul" in names and len(names) > 50
    for name in names:
        fn = getattr(gt.ops, gradtape.snake_case(name))
        assert fn is gt.ops[name]
        assert name in fn.__doc__
    assert "transpose_b" in gt.ops.mat_mul.__doc__


def test_operators_match_numpy(gt):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    m = rng.normal(size=(4, 2))
    ta, tb, tm = gt.constant(a), gt.constant(b), gt.constant(m)
    cases = [
        (ta + tb, a + b),
        (ta - tb, a - b),
        (ta * tb, a * b),
        (ta / (tb * tb + 1.0), a / (b * b + 1.0)),
        (ta @ tm, a @ m),
        (-ta, -a),
        (2.0 * ta - 1, 2.0 * a - 1),
        (1.0 / (ta * ta + 1.0), 1.0 / (a * a + 1.0)),
        (np.float64(3.0) * ta, 3.0 * a),
        (ta ** 2, a**2),
        (gt.ops.mat_mul(ta, tb, transpose_b=True), a @ b.T),
        (gt.ops.sum(ta, axis=[1], keep_dims=True), a.sum(axis=1, keepdims=True)),
    ]
    for got, want in cases:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    np.testing.assert_array_equal((ta < tb).numpy(), a < b)
    np.testing.assert_allclose(np.asarray(ta + 1.0), a + 1.0)


def test_python_numbers_take_the_tensor_dtype(gt):
    x = gt.constant(np.array([1.0, 2.0], dtype=np.float32))
    y = 2 * x + 0.5
    assert y.dtype == np.float32
    assert y.numpy().dtype == np.float32
    np.testing.assert_array_equal(y.numpy(), np.array([2.5, 4.5], dtype=np.float32))
    i = gt.constant(np.array([3, 4], dtype=np.int32))
    assert (i * 2).numpy().dtype == np.int32


def test_several_outputs_are_a_named_tuple(gt):
    logits = np.array([[2.0, 1.0, 0.1], [0.5, 2.5, 0.3]])
    labels = np.array([0, 1], dtype=np.int64)
    out = gt.ops.sparse_softmax_cross_entropy_with_logits(gt.constant(logits), gt.constant(labels))
    loss, backprop = out
    assert out.loss is loss and out.backprop is backprop
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(loss.numpy(), -np.log(p[[0, 1], labels]), rtol=1e-12)


def test_inputs_by_name(gt):
    a = gt.constant(np.ones((2, 3)))
    b = gt.constant(np.ones((3, 2)))
    np.testing.assert_array_equal(gt.ops.mat_mul(a=a, b=b).numpy(), np.full((2, 2), 3.0))


def test_commands_are_pipelined(gt):
    x = gt.constant(np.ones(4))
    before = gt.counters["batches_sent"]
    y = x
    for _ in range(300):
        y = y + 1.0
    assert gt.counters["batches_sent"] - before <= 1  # 300 ops + 300 puts: 600 commands, batch 512
    np.testing.assert_array_equal(y.numpy(), np.full(4, 301.0))
    assert gt.counters["batches_sent"] - before <= 2


def test_released_handles_free_server_tensors(gt):
    gt.sync()
    base = gt.stats().live_tensors
    keep = gt.constant(np.ones(3))
    temps = [keep * float(i) for i in range(50)]
    assert gt.stats().live_tensors >= base + 50
    del temps
    gc.collect()
    assert gt.stats().live_tensors <= base + 1 + 1  # keep, and a cached nothing
    del keep


def test_gradient_tape_basics(gt):
    x = gt.constant(np.array([0.5, -1.0, 2.0]))
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.ops.sum(gt.ops.tanh(x) * x)
    dx = tape.gradient(y, x)
    t = np.tanh([0.5, -1.0, 2.0])
    np.testing.assert_allclose(dx.numpy(), t + np.array([0.5, -1.0, 2.0]) * (1 - t**2), rtol=1e-12)


def test_persistent_tape_output_gradients_and_structures(gt):
    x = gt.constant(np.array([1.0, 2.0]))
    z = gt.constant(np.array([3.0]))
    with gt.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * x
    g1 = tape.gradient(y, x)
    g2 = tape.gradient(y, x, output_gradients=[gt.constant(np.array([10.0, 100.0]))])
    np.testing.assert_array_equal(g1.numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(g2.numpy(), [20.0, 400.0])
    grads = tape.gradient(y, {"x": x, "z": [z]}, unconnected_gradients="zero")
    np.testing.assert_array_equal(grads["x"].numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(grads["z"][0].numpy(), [0.0])
    assert tape.gradient_values(y, [x, z]) [1] is None
    gx, gz = tape.gradient_values(y, (x, z), unconnected_gradients=gradtape.UnconnectedGradients.ZERO)
    np.testing.assert_array_equal(gz, [0.0])


def test_stop_recording(gt):
    x = gt.constant(np.array([1.0, 2.0]))
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = x * 3.0
        with gt.stop_recording():
            z = x * x  # not recorded
        loss = gt.ops.sum(y + z)
    np.testing.assert_array_equal(tape.gradient(loss, x).numpy(), [3.0, 3.0])


def test_nested_tapes_give_second_derivatives(gt):
    x = gt.constant(np.array([1.5, -2.0]))
    with gt.GradientTape() as outer:
        outer.watch(x)
        with gt.GradientTape() as inner:
            inner.watch(x)
            y = x * x * x
        dy = inner.gradient(y, x)
    d2y = outer.gradient(dy, x)
    np.testing.assert_allclose(dy.numpy(), 3 * np.array([1.5, -2.0]) ** 2)
    np.testing.assert_allclose(d2y.numpy(), 6 * np.array([1.5, -2.0]))


def test_jacobian_and_batch_jacobian_are_server_commands(gt):
    x = gt.constant(np.array([1.0, 2.0]))
    with gt.GradientTape() as tape:  # a non-persistent tape computes one Jacobian
        tape.watch(x)
        y = x * gt.constant(np.array([2.0, 3.0]))
    before = gt.counters["batches_sent"]
    jac = tape.jacobian(y, x)
    assert gt.counters["batches_sent"] == before  # buffered, no wait
    np.testing.assert_array_equal(jac.numpy(), np.diag([2.0, 3.0]))
    with pytest.raises(RuntimeError, match="non-persistent GradientTape"):
        tape.jacobian(y, x)  # TensorFlow's error, at the call

    rng = np.random.default_rng(3)
    xb, w = rng.normal(size=(4, 3)), rng.normal(size=(3, 2))
    xs = gt.constant(xb)
    with gt.GradientTape(persistent=True) as tape:
        tape.watch(xs)
        yb = gt.ops.tanh(xs @ gt.constant(w))
    got = tape.batch_jacobian(yb, xs).numpy()
    full = tape.jacobian(yb, xs).numpy()  # [4, 2, 4, 3]
    assert got.shape == (4, 2, 3) and full.shape == (4, 2, 4, 3)
    for b in range(4):
        want = (1 - np.tanh(xb[b] @ w) ** 2)[:, None] * w.T
        np.testing.assert_allclose(got[b], want, rtol=1e-12)
        np.testing.assert_allclose(full[b, :, b, :], want, rtol=1e-12)
    z = gt.constant(np.ones(2))
    none_or_zero = tape.jacobian(yb, [z], unconnected_gradients="zero")[0]
    np.testing.assert_array_equal(none_or_zero.numpy(), np.zeros((4, 2, 2)))


def test_variables(gt):
    v = gt.Variable(np.array([1.0, 2.0]), name="v")
    assert v.shape == (2,) and v.dtype == np.float64
    before = v.read_value()
    v.assign(np.array([5.0, 6.0]))
    np.testing.assert_array_equal(before.numpy(), [1.0, 2.0])  # read before the assign
    np.testing.assert_array_equal(v.numpy(), [5.0, 6.0])
    v.assign_add(np.array([1.0, 1.0]))
    v.assign_sub(gt.constant(np.array([0.5, 0.5])))
    np.testing.assert_array_equal(v.numpy(), [5.5, 6.5])
    np.testing.assert_array_equal((v * 2.0).numpy(), [11.0, 13.0])
    w = gt.Variable(np.ones((2, 2), dtype=np.float32))
    assert w.dtype == np.float32


def test_gradients_with_respect_to_variables(gt):
    w = gt.Variable(np.array([[1.0, 2.0], [3.0, 4.0]]))
    x = gt.constant(np.array([[1.0, -1.0]]))
    with gt.GradientTape() as tape:
        loss = gt.ops.sum(x @ w)
    np.testing.assert_array_equal(tape.gradient(loss, w).numpy(), [[1.0, 1.0], [-1.0, -1.0]])
    with gt.GradientTape(watch_accessed_variables=False) as tape:
        loss = gt.ops.sum(x @ w)
    assert tape.gradient_values(loss, w) is None
    with gt.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(w)
        loss = gt.ops.sum(x @ w)
    np.testing.assert_array_equal(tape.gradient(loss, w).numpy(), [[1.0, 1.0], [-1.0, -1.0]])


def _quadratic_steps(gt, opt, dtype, steps=3):
    """Three steps on loss = sum(w * w * c); returns w after each step."""
    c = np.array([1.0, 2.0, -0.5], dtype=dtype)
    w = gt.Variable(np.array([0.3, -1.2, 2.0], dtype=dtype))
    cs = gt.constant(c)
    values = []
    for _ in range(steps):
        with gt.GradientTape() as tape:
            loss = gt.ops.sum(w * w * cs)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        values.append(w.numpy())
    return c, values


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("use_server_op", [False, None])
def test_sgd_matches_the_formula(gt, dtype, use_server_op):
    c, got = _quadratic_steps(gt, optimizers.SGD(0.1, use_server_op=use_server_op), dtype)
    w = np.array([0.3, -1.2, 2.0], dtype=np.float64)
    for g in got:
        w = w - 0.1 * (2 * w * c)
        np.testing.assert_allclose(g, w, rtol=1e-6 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_matches_the_formula(gt, nesterov):
    opt = optimizers.SGD(0.1, momentum=0.9, nesterov=nesterov, use_server_op=False)
    c, got = _quadratic_steps(gt, opt, np.float64)
    w, accum = np.array([0.3, -1.2, 2.0]), np.zeros(3)
    for g in got:
        grad = 2 * w * c
        accum = 0.9 * accum + grad
        w = w - 0.1 * (grad + 0.9 * accum if nesterov else accum)
        np.testing.assert_allclose(g, w, rtol=1e-12)


def adam_reference(w, c, steps, lr=0.01, b1=0.9, b2=0.999, eps=1e-7):
    m, v, out = np.zeros_like(w), np.zeros_like(w), []
    for t in range(1, steps + 1):
        g = 2 * w * c
        lr_t = lr * np.sqrt(1 - b2**t) / (1 - b1**t)
        m = m + (g - m) * (1 - b1)
        v = v + (g * g - v) * (1 - b2)
        w = w - lr_t * m / (np.sqrt(v) + eps)
        out.append(w)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("use_server_op", [False, None])
def test_adam_matches_tensorflow_formula(gt, dtype, use_server_op):
    opt = optimizers.Adam(learning_rate=0.01, use_server_op=use_server_op)
    c, got = _quadratic_steps(gt, opt, dtype)
    want = adam_reference(np.array([0.3, -1.2, 2.0]), c.astype(np.float64), 3)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_server_side_adam_is_used_when_registered(gt):
    if not gt.has_op("ResourceApplyAdam"):
        pytest.skip("this server does not register ResourceApplyAdam yet")
    opt = optimizers.Adam(learning_rate=0.01, use_server_op=True)
    c, got = _quadratic_steps(gt, opt, np.float64)
    for g, w in zip(got, adam_reference(np.array([0.3, -1.2, 2.0]), c, 3)):
        np.testing.assert_allclose(g, w, rtol=1e-12)
