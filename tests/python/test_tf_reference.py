"""TensorFlow as the reference for gradtape.tf.

Each case is written once, as a function of a namespace ``tf``, after an
example of TensorFlow's autodiff guide, advanced autodiff guide or the
GradientTape / ForwardAccumulator / custom_gradient / tf.math / tf.nn API
docs (our own code for each), and runs twice: with ``tensorflow``
(tensorflow-cpu, tests/python/requirements.txt) and with ``gradtape.tf``
on the test server. What it returns is compared: values (float tolerance),
None-ness, dtypes, shapes, and the class of an exception raised.

A case that fails because another part of issue 15 has not landed yet is
marked xfail(strict=True) with the part's name, so that it fails (XPASS)
once that part is merged and the mark must go.
"""

from __future__ import annotations

import builtins
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import pytest

CASES: Dict[str, Tuple[Callable[[Any], Any], Optional[str]]] = {}


def case(needs: Optional[str] = None) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    """Registers a case; `needs`: the part of issue 15 it waits for."""

    def register(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        assert fn.__name__ not in CASES, fn.__name__
        CASES[fn.__name__] = (fn, needs)
        return fn

    return register


def add_case(name: str, fn: Callable[[Any], Any], needs: Optional[str] = None) -> None:
    assert name not in CASES, name
    CASES[name] = (fn, needs)


# ---------------------------------------------------------------------------
# Errors the client can see from known shapes raise at the call, as in TF
# eager, so a try/except around the op catches them (inside a tape too).


@case()
def caught_shape_errors_inside_a_tape(tf):
    x = tf.constant([[1.0, 2.0]])
    caught = []
    with tf.GradientTape() as tape:
        tape.watch(x)
        for bad in (lambda: tf.reshape(x, [3]), lambda: tf.matmul(x, x), lambda: x + tf.constant([1.0, 2.0, 3.0])):
            try:
                bad()
                caught.append(False)
            except tf.errors.InvalidArgumentError:
                caught.append(True)
        y = tf.reduce_sum(tf.matmul(x, tf.transpose(x)))
    return caught, tape.gradient(y, x)


# ---------------------------------------------------------------------------
# The autodiff guide ("Introduction to gradients and automatic differentiation")


@case()
def guide_variable_square(tf):
    x = tf.Variable(3.0)
    with tf.GradientTape() as tape:
        y = x**2
    return tape.gradient(y, x)


@case()
def guide_variable_square_by_mul(tf):
    x = tf.Variable(3.0)
    with tf.GradientTape() as tape:
        y = x * x
    return tape.gradient(y, x)


def _w_b(tf):
    w = tf.Variable(np.array([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]], dtype=np.float32), name="w")
    b = tf.Variable(tf.zeros(2, dtype=tf.float32), name="b")
    return w, b


@case()
def guide_dense_loss_list(tf):
    w, b = _w_b(tf)
    x = [[1.0, 2.0, 3.0]]
    with tf.GradientTape(persistent=True) as tape:
        y = x @ w + b
        loss = tf.reduce_mean(y**2)
    return tape.gradient(loss, [w, b])


@case()
def guide_dense_loss_dict(tf):
    w, b = _w_b(tf)
    x = tf.constant([[1.0, 2.0, 3.0]])
    with tf.GradientTape() as tape:
        y = tf.matmul(x, w) + b
        loss = tf.reduce_mean(y * y)
    grad = tape.gradient(loss, {"w": w, "b": b})
    return grad["b"], grad["w"]


@case()
def guide_dense_relu(tf):
    w, b = _w_b(tf)
    x = tf.constant([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]])
    with tf.GradientTape() as tape:
        y = tf.nn.relu(tf.matmul(x, w) + b)
        loss = tf.reduce_mean(y * y)
    return tape.gradient(loss, [w, b])


@case()
def guide_watch_trainable_and_constants(tf):
    x0 = tf.Variable(3.0, name="x0")
    x1 = tf.Variable(3.0, name="x1", trainable=False)
    x2 = tf.Variable(2.0, name="x2") + 1.0
    x3 = tf.constant(3.0, name="x3")
    with tf.GradientTape() as tape:
        y = (x0**2) + (x1**2) + (x2**2)
    return tape.gradient(y, [x0, x1, x2, x3])


@case()
def guide_untrainable_variable_none(tf):
    x0 = tf.Variable(3.0, name="x0")
    x1 = tf.Variable(3.0, name="x1", trainable=False)
    with tf.GradientTape() as tape:
        y = x0 * x0 + x1 * x1
    return tape.gradient(y, [x0, x1])


@case()
def guide_constant_unwatched_none(tf):
    x = tf.constant(3.0)
    with tf.GradientTape() as tape:
        y = x * x
    return tape.gradient(y, x)


@case()
def guide_watched_variables(tf):
    x0 = tf.Variable(3.0, name="x0")
    x1 = tf.Variable(2.0, name="x1")
    with tf.GradientTape() as tape:
        y = x0 * x1
    return len(tape.watched_variables())


@case()
def guide_watch_constant(tf):
    x = tf.constant(3.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = x**2
    return tape.gradient(y, x)


@case()
def guide_watch_accessed_variables_false(tf):
    x0 = tf.Variable(0.0)
    x1 = tf.Variable(10.0)
    with tf.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(x1)
        y0 = tf.math.sin(x0)
        y1 = tf.nn.softplus(x1)
        y = y0 + y1
        ys = tf.reduce_sum(y)
    grad = tape.gradient(ys, {"x0": x0, "x1": x1})
    return grad["x0"], grad["x1"]


@case()
def guide_watch_accessed_variables_false_watched(tf):
    x0 = tf.Variable(0.0)
    x1 = tf.Variable(10.0)
    with tf.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(x1)
        y = tf.math.sin(x0) + tf.nn.softplus(x1)
    return tape.gradient(y, x1)


@case()
def guide_intermediate_result(tf):
    x = tf.constant(3.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = x * x
        z = y * y
    return tape.gradient(z, y)


@case()
def guide_persistent_two_gradients(tf):
    x = tf.constant([1, 3.0])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * x
        z = y * y
    return tape.gradient(z, x), tape.gradient(y, x)


@case()
def guide_dict_target_variable(tf):
    x = tf.Variable(2.0)
    with tf.GradientTape() as tape:
        y0 = x**2
        y1 = 1 / x
    return tape.gradient({"y0": y0, "y1": y1}, x)


@case()
def guide_list_target_summed(tf):
    x = tf.Variable(2.0)
    with tf.GradientTape() as tape:
        y0 = x * x
        y1 = tf.math.reciprocal(x)
    return tape.gradient([y0, y1], x)


@case()
def guide_vector_target_summed(tf):
    x = tf.Variable(2.0)
    with tf.GradientTape() as tape:
        y = x * [3.0, 4.0]
    return tape.gradient(y, x)


@case()
def guide_sigmoid_curve(tf):
    x = tf.constant(np.linspace(-10.0, 10.0, 21, dtype=np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.nn.sigmoid(x)
    return tape.gradient(y, x)


@case()
def guide_control_flow(tf):
    x = tf.constant(1.0)
    v0 = tf.Variable(2.0)
    v1 = tf.Variable(2.0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        if x > 0.0:
            result = v0
        else:
            result = v1**2
    return tape.gradient(result, [v0, v1])


@case()
def guide_none_unconnected_variable(tf):
    x = tf.Variable(2.0)
    y = tf.Variable(3.0)
    with tf.GradientTape() as tape:
        z = y * y
    return tape.gradient(z, x)


@case()
def guide_none_replaced_variable(tf):
    x = tf.Variable(2.0)
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            y = x + 1
        out.append(tape.gradient(y, x))
        x = x + 1
    return out


@case()
def guide_none_integer_source(tf):
    x = tf.constant(10)
    with tf.GradientTape() as g:
        g.watch(x)
        y = x * x
    return g.gradient(y, x)


@case()
def guide_none_stateful_assign(tf):
    x0 = tf.Variable(3.0)
    x1 = tf.Variable(0.0)
    with tf.GradientTape() as tape:
        x1.assign_add(x0)
        y = x1 * x1
    return tape.gradient(y, x0)


@case()
def guide_unconnected_zero(tf):
    x = tf.Variable([2.0, 2.0])
    y = tf.Variable(3.0)
    with tf.GradientTape() as tape:
        z = y * y
    return tape.gradient(z, x, unconnected_gradients=tf.UnconnectedGradients.ZERO)


# ---------------------------------------------------------------------------
# The advanced autodiff guide


@case()
def advanced_stop_recording(tf):
    x = tf.Variable(2.0)
    y = tf.Variable(3.0)
    with tf.GradientTape() as t:
        x_sq = x * x
        with t.stop_recording():
            y_sq = y * y
        z = x_sq + y_sq
    grad = t.gradient(z, {"x": x, "y": y})
    return grad["x"], grad["y"]


@case()
def advanced_reset(tf):
    x = tf.Variable(2.0)
    y = tf.Variable(3.0)
    with tf.GradientTape() as t:
        y_sq = y * y
        t.reset()
        z = x * x + y_sq
    grad = t.gradient(z, {"x": x, "y": y})
    return grad["x"], grad["y"]


@case()
def advanced_stop_gradient_none(tf):
    x = tf.Variable(2.0)
    y = tf.Variable(3.0)
    with tf.GradientTape() as t:
        y_sq = y * y
        z = x * x + tf.stop_gradient(y_sq)
    grad = t.gradient(z, {"x": x, "y": y})
    return grad["x"], grad["y"]


@case()
def advanced_stop_gradient_value(tf):
    x = tf.Variable(2.0)
    y = tf.Variable(3.0)
    with tf.GradientTape() as t:
        z = x * x + tf.stop_gradient(y * y)
    return z, t.gradient(z, x)


@case()
def advanced_stop_gradient_zero(tf):
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.stop_gradient(x * x) * x
    return t.gradient(y, x)


@case()
def advanced_clip_gradients_custom(tf):
    @tf.custom_gradient
    def clip_gradients(y):
        def backward(dy):
            return tf.clip_by_norm(dy, 0.5)

        return tf.identity(y), backward

    v = tf.Variable(2.0)
    with tf.GradientTape() as t:
        output = clip_gradients(v * v)
    return output, t.gradient(output, v)


@case()
def advanced_clip_gradients_vector(tf):
    @tf.custom_gradient
    def clip_gradients(y):
        def backward(dy):
            return tf.clip_by_norm(dy, 0.5)

        return tf.identity(y), backward

    x = tf.constant([3.0, 4.0])
    with tf.GradientTape() as t:
        t.watch(x)
        out = tf.reduce_sum(clip_gradients(x) * [1.0, 2.0])
    return t.gradient(out, x)


@case()
def advanced_multiple_tapes(tf):
    x0 = tf.constant(0.0)
    x1 = tf.constant(0.0)
    with tf.GradientTape() as tape0, tf.GradientTape() as tape1:
        tape0.watch(x0)
        tape1.watch(x1)
        y0 = tf.math.sin(x0)
        y1 = tf.nn.sigmoid(x1)
        y = y0 + y1
        ys = tf.reduce_sum(y)
    return tape0.gradient(ys, x0), tape1.gradient(ys, x1)


@case()
def advanced_second_order(tf):
    x = tf.Variable(1.0)
    with tf.GradientTape() as t2:
        with tf.GradientTape() as t1:
            y = x * x * x
        dy_dx = t1.gradient(y, x)
    d2y_dx2 = t2.gradient(dy_dx, x)
    return dy_dx, d2y_dx2


def _dense(tf, n_in, n_out, seed):
    rng = np.random.RandomState(seed)
    w = tf.Variable(rng.uniform(-1, 1, (n_in, n_out)).astype(np.float32))
    b = tf.Variable(rng.uniform(-0.5, 0.5, (n_out,)).astype(np.float32))
    return w, b


def _x(shape, seed=0):
    return np.random.RandomState(seed).uniform(-1, 1, shape).astype(np.float32)


@case()
def advanced_input_gradient_regularization(tf):
    x = tf.constant(_x([7, 5]))
    w, b = _dense(tf, 5, 10, 1)
    with tf.GradientTape() as t2:
        with tf.GradientTape() as t1:
            t1.watch(x)
            y = tf.tanh(tf.matmul(x, w) + b)
        g1 = t1.gradient(y, x)
        g1_mag = tf.reduce_sum(g1 * g1)
    return t2.gradient(g1_mag, [w, b])


@case()
def advanced_jacobian_scalar_source(tf):
    x = tf.constant(np.linspace(-10.0, 10.0, 11, dtype=np.float32))
    delta = tf.Variable(0.0)
    with tf.GradientTape() as tape:
        y = tf.nn.sigmoid(x + delta)
    return tape.jacobian(y, delta)


@case()
def advanced_jacobian_tensor_source(tf):
    x = tf.constant(_x([7, 5]))
    w, b = _dense(tf, 5, 10, 2)
    with tf.GradientTape(persistent=True) as tape:
        y = tf.nn.relu(tf.matmul(x, w) + b)
    j = tape.jacobian(y, w)
    g = tape.gradient(y, w)
    return j, tf.reduce_sum(j, axis=[0, 1]) - g


@case()
def advanced_hessian(tf):
    x = tf.constant(_x([2, 7]))
    w1, b1 = _dense(tf, 7, 8, 3)
    w2, b2 = _dense(tf, 8, 6, 4)
    with tf.GradientTape() as t2:
        with tf.GradientTape() as t1:
            h = tf.nn.elu(tf.matmul(x, w1) + b1)
            h = tf.nn.elu(tf.matmul(h, w2) + b2)
            loss = tf.reduce_mean(h * h)
        g = t1.gradient(loss, w1)
    return t2.jacobian(g, w1)


@case()
def advanced_batch_jacobian(tf):
    x = tf.constant(_x([2, 3]))
    w1, b1 = _dense(tf, 3, 5, 5)
    w2, b2 = _dense(tf, 5, 4, 6)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tf.nn.elu(tf.matmul(tf.nn.elu(tf.matmul(x, w1) + b1), w2) + b2)
    return tape.jacobian(y, x), tape.batch_jacobian(y, x)


@case()
def advanced_hvp_forward_over_backward(tf):
    x = tf.constant([1.0, 2.0, 0.5])
    v = tf.constant([1.0, -1.0, 2.0])
    with tf.autodiff.ForwardAccumulator(x, v) as acc:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(tf.sin(x) * x * x)
        grad = tape.gradient(y, x)
    return grad, acc.jvp(grad)


@case()
def advanced_hessian_vector_dense(tf):
    x = tf.constant(_x([2, 3]))
    w, b = _dense(tf, 3, 4, 7)
    tangent = tf.constant(_x([3, 4], seed=8))
    primal = tf.identity(w)
    with tf.autodiff.ForwardAccumulator(primal, tangent) as acc:
        with tf.GradientTape() as tape:
            tape.watch(primal)
            loss = tf.reduce_mean(tf.tanh(tf.matmul(x, primal) + b) ** 2)
        grad = tape.gradient(loss, primal)
    return acc.jvp(grad)


@case()
def advanced_backward_over_forward(tf):
    x = tf.constant([1.0, 2.0])
    v = tf.constant([1.0, 0.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        with tf.autodiff.ForwardAccumulator(x, v) as acc:
            y = tf.sin(x) * x
        jvp = acc.jvp(y)
    return jvp, tape.gradient(jvp, x)


# ---------------------------------------------------------------------------
# tf.GradientTape's API docs


@case()
def api_tape_basic(tf):
    x = tf.constant(3.0)
    with tf.GradientTape() as g:
        g.watch(x)
        y = x * x
    return g.gradient(y, x)


@case()
def api_tape_nested(tf):
    x = tf.constant(5.0)
    with tf.GradientTape() as g:
        g.watch(x)
        with tf.GradientTape() as gg:
            gg.watch(x)
            y = x * x
        dy_dx = gg.gradient(y, x)
    return dy_dx, g.gradient(dy_dx, x)


@case()
def api_tape_persistent(tf):
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as g:
        g.watch(x)
        y = x * x
        z = y * y
    return g.gradient(z, x), g.gradient(y, x)


@case()
def api_tape_twice_raises(tf):
    x = tf.constant(3.0)
    with tf.GradientTape() as g:
        g.watch(x)
        y = x * x
    g.gradient(y, x)
    return g.gradient(y, x)


@case()
def api_tape_watch_accessed_false_none(tf):
    a = tf.Variable(2.0)
    b = tf.Variable(3.0)
    with tf.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(a)
        y = a * b
    return tape.gradient(y, [a, b])


@case()
def api_tape_jacobian(tf):
    with tf.GradientTape() as g:
        x = tf.constant([1.0, 2.0])
        g.watch(x)
        y = x * x
    return g.jacobian(y, x)


@case()
def api_tape_batch_jacobian(tf):
    with tf.GradientTape() as g:
        x = tf.constant([[1.0, 2.0], [3.0, 4.0]], dtype=tf.float32)
        g.watch(x)
        y = x * x
    return g.batch_jacobian(y, x)


@case()
def api_tape_output_gradients(tf):
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape() as g:
        g.watch(x)
        y = x * x
    return g.gradient(y, x, output_gradients=tf.constant([1.0, 0.5, -1.0]))


@case()
def api_tape_output_gradients_numpy(tf):
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape() as g:
        g.watch(x)
        y = x * x
    return g.gradient(y, x, output_gradients=np.array([1.0, 0.5, -1.0], dtype=np.float32))


@case()
def api_tape_nested_sources(tf):
    a = tf.Variable(1.0)
    b = tf.Variable([2.0, 3.0])
    c = tf.Variable([[1.0], [2.0]])
    with tf.GradientTape() as g:
        y = a * tf.reduce_sum(b) + tf.reduce_sum(c * c)
    return g.gradient(y, {"a": a, "rest": [b, (c,)]})


@case()
def api_tape_gradient_in_persistent_block(tf):
    x = tf.constant(2.0)
    with tf.GradientTape(persistent=True) as g:
        g.watch(x)
        y = x * x * x
        dy = g.gradient(y, x)
    return dy, g.gradient(dy, x)


@case()
def api_tape_unconnected_jacobian_zero(tf):
    x = tf.constant([1.0, 2.0])
    z = tf.constant([3.0])
    with tf.GradientTape() as g:
        g.watch([x, z])
        y = x * x
    return g.jacobian(y, z, unconnected_gradients=tf.UnconnectedGradients.ZERO)


@case()
def api_tape_unconnected_jacobian_none(tf):
    x = tf.constant([1.0, 2.0])
    z = tf.constant([3.0])
    with tf.GradientTape() as g:
        g.watch([x, z])
        y = x * x
    return g.jacobian(y, z)


@case()
def api_tape_float64_gradient_dtype(tf):
    x = tf.constant([1.0, 2.0], dtype=tf.float64)
    with tf.GradientTape() as g:
        g.watch(x)
        y = tf.reduce_sum(tf.exp(x))
    return g.gradient(y, x)


@case()
def api_tape_cast_gradient(tf):
    x = tf.constant([1.5, -2.0], dtype=tf.float64)
    with tf.GradientTape() as g:
        g.watch(x)
        y = tf.reduce_sum(tf.cast(x, tf.float32) * 3.0)
    return g.gradient(y, x)


@case()
def api_tape_broadcast_gradient(tf):
    x = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    b = tf.constant([1.0, -1.0, 2.0])
    with tf.GradientTape() as g:
        g.watch(b)
        y = tf.reduce_sum(x * b)
    return g.gradient(y, b)


# ---------------------------------------------------------------------------
# tf.autodiff.ForwardAccumulator's API docs


@case()
def fwd_api_variable_hvp(tf):
    v = tf.Variable([1.0, 2.0])
    with tf.autodiff.ForwardAccumulator(v, tf.constant([1.0, 0.0])) as acc:
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(v * v * v)
        backward = tape.gradient(y, v)
    return backward, acc.jvp(backward)


@case()
def fwd_api_variable_hvp_pow(tf):
    v = tf.Variable([1.0, 2.0])
    with tf.autodiff.ForwardAccumulator(v, tf.constant([1.0, 0.0])) as acc:
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(v**3.0)
        backward = tape.gradient(y, v)
    return backward, acc.jvp(backward)


@case()
def fwd_api_dense_kernel_jvp(tf):
    x = tf.constant([[2.0, 3.0], [1.0, 4.0]])
    targets = tf.constant([[1.0], [-1.0]])
    kernel = tf.Variable([[0.5], [-0.25]])
    with tf.autodiff.ForwardAccumulator(primals=kernel, tangents=tf.constant([[1.0], [0.0]])) as acc:
        with tf.GradientTape() as tape:
            d = tf.matmul(x, kernel) - targets
            loss = tf.reduce_sum(d * d)
        jvp = acc.jvp(loss)
    backward = tape.gradient(loss, kernel)
    return jvp, backward


@case()
def fwd_api_jvp_of_primal(tf):
    x = tf.constant([1.0, 2.0])
    with tf.autodiff.ForwardAccumulator(x, tf.constant([0.5, -0.5])) as acc:
        pass
    return acc.jvp(x)


@case()
def fwd_api_jvp_unrelated_none(tf):
    x = tf.constant([1.0, 2.0])
    z = tf.constant([3.0, 4.0])
    with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 1.0])) as acc:
        y = z * z
    return acc.jvp(y)


@case()
def fwd_api_jvp_before_none(tf):
    x = tf.constant([1.0, 2.0])
    y = x * x
    with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 1.0])) as acc:
        pass
    return acc.jvp(y)


@case()
def fwd_api_jvp_unconnected_zero(tf):
    x = tf.constant([1.0, 2.0])
    z = tf.constant([3.0, 4.0])
    with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 1.0])) as acc:
        y = z * z
    return acc.jvp(y, unconnected_gradients=tf.UnconnectedGradients.ZERO)


@case()
def fwd_api_jvp_after_exit_none(tf):
    x = tf.constant([1.0, 2.0])
    with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 1.0])) as acc:
        y = x * 3.0
    z = x * 2.0
    return acc.jvp(y), acc.jvp(z)


@case()
def fwd_api_nested_structure(tf):
    a = tf.constant(2.0)
    b = tf.constant([1.0, 3.0])
    with tf.autodiff.ForwardAccumulator([a, b], [tf.constant(1.0), tf.constant([0.0, 2.0])]) as acc:
        y = a * b
        z = tf.reduce_sum(b * b)
    return acc.jvp({"y": y, "z": z})


@case()
def fwd_api_two_primals(tf):
    x = tf.constant(2.0)
    y = tf.constant(3.0)
    with tf.autodiff.ForwardAccumulator([x, y], [tf.constant(1.0), tf.constant(0.0)]) as acc:
        z = x * y + tf.sin(x)
    return acc.jvp(z)


@case()
def fwd_api_matmul_jvp(tf):
    a = tf.constant(_x([2, 3]))
    b = tf.constant(_x([3, 2], 1))
    with tf.autodiff.ForwardAccumulator(a, tf.constant(_x([2, 3], 2))) as acc:
        c = tf.matmul(a, b)
    return acc.jvp(c)


@case()
def fwd_api_softmax_jvp(tf):
    x = tf.constant(_x([2, 4]))
    with tf.autodiff.ForwardAccumulator(x, tf.ones_like(x)) as acc:
        y = tf.nn.softmax(x * [[1.0, 2.0, 3.0, 4.0]])
    return acc.jvp(y)


@case()
def fwd_api_reduce_jvp(tf):
    x = tf.constant(_x([3, 4]))
    with tf.autodiff.ForwardAccumulator(x, tf.constant(_x([3, 4], 5))) as acc:
        y = tf.reduce_mean(tf.tanh(x), axis=1)
    return acc.jvp(y)


@case()
def fwd_api_integer_output_none(tf):
    x = tf.constant([1.5, 2.5])
    with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 1.0])) as acc:
        s = tf.shape(x)
    return acc.jvp(s)


@case()
def fwd_api_nested_accumulators(tf):
    x = tf.constant(2.0)
    with tf.autodiff.ForwardAccumulator(x, tf.constant(1.0)) as outer:
        with tf.autodiff.ForwardAccumulator(x, tf.constant(1.0)) as inner:
            y = x * x * x
        dy = inner.jvp(y)
    return dy, outer.jvp(dy)


@case()
def fwd_api_jvp_vs_gradient(tf):
    x = tf.constant([0.3, -1.2, 2.0])
    t = tf.constant([1.0, 1.0, 1.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        with tf.autodiff.ForwardAccumulator(x, t) as acc:
            y = tf.reduce_sum(tf.exp(x) * tf.cos(x))
    return acc.jvp(y), tape.gradient(y, x)


@case()
def fwd_api_stop_gradient_no_tangent(tf):
    x = tf.constant([1.0, 2.0])
    with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 1.0])) as acc:
        y = tf.stop_gradient(x) * 2.0
    return acc.jvp(y)


@case()
def fwd_api_tangent_shape_mismatch_raises(tf):
    x = tf.constant([1.0, 2.0])
    return tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 2.0, 3.0]))


@case()
def fwd_custom_gradient_inside_accumulator(tf):
    @tf.custom_gradient
    def f(x):
        def grad(dy):
            return dy * 3.0

        return x * 3.0, grad

    x = tf.constant([1.0, 2.0])
    with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 1.0])) as acc:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(f(x) * x)
        g = tape.gradient(y, x)
    return y, g


@case()
def fwd_custom_gradient_jvp_is_forward(tf):
    @tf.custom_gradient
    def f(x):
        def grad(dy):
            return dy * 3.0

        return tf.sin(x) * 3.0, grad

    x = tf.constant([1.0, 2.0])
    with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 1.0])) as acc:
        y = f(x)
    return acc.jvp(y)


@case()
def fwd_hvp_through_chain_of_temporaries(tf):
    x = tf.constant([2.0, 1.0])
    with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 1.0])) as acc:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(tf.sin(tf.exp(x)) * x * x)
        g = tape.gradient(y, x)
    return acc.jvp(g)


# ---------------------------------------------------------------------------
# tf.custom_gradient's API docs


def _log1pexp(tf):
    @tf.custom_gradient
    def log1pexp(x):
        e = tf.exp(x)

        def grad(upstream):
            return upstream * (1 - 1 / (1 + e))

        return tf.math.log(1 + e), grad

    return log1pexp


@case()
def custom_log1pexp_at_100(tf):
    f = _log1pexp(tf)
    x = tf.constant(100.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    return tape.gradient(y, x)


@case()
def custom_log1pexp_at_0(tf):
    f = _log1pexp(tf)
    x = tf.constant(0.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    return y, tape.gradient(y, x)


@case()
def custom_log1pexp_vector(tf):
    f = _log1pexp(tf)
    x = tf.constant([-2.0, 0.0, 3.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(f(x) * [1.0, 2.0, 3.0])
    return tape.gradient(y, x)


@case()
def custom_log1pexp_unstable_plain(tf):
    x = tf.constant(100.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.math.log(1 + tf.exp(x))
    return tape.gradient(y, x)


@case()
def custom_two_inputs(tf):
    @tf.custom_gradient
    def mul(x, y):
        def grad(dz):
            return dz * y, dz * x

        return x * y, grad

    a = tf.constant([1.0, 2.0])
    b = tf.constant([3.0, -4.0])
    with tf.GradientTape() as tape:
        tape.watch([a, b])
        z = tf.reduce_sum(mul(a, b))
    return tape.gradient(z, [a, b])


@case()
def custom_scaled_gradient(tf):
    @tf.custom_gradient
    def scale_grad(x):
        def grad(dy):
            return dy * 0.5

        return tf.identity(x), grad

    x = tf.constant([1.0, -3.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(scale_grad(x) * x)
    return tape.gradient(y, x)


@case()
def custom_clip_by_value_gradient(tf):
    @tf.custom_gradient
    def clip_grad(x):
        def grad(dy):
            return tf.clip_by_value(dy, -1.0, 1.0)

        return tf.identity(x), grad

    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(clip_grad(x) * [0.5, 3.0, -7.0])
    return tape.gradient(y, x)


@case()
def custom_none_gradient_input(tf):
    @tf.custom_gradient
    def f(x, y):
        def grad(dz):
            return dz * 2.0, None

        return x * 2.0 + y * 0.0, grad

    a = tf.constant(1.0)
    b = tf.constant(2.0)
    with tf.GradientTape() as tape:
        tape.watch([a, b])
        z = f(a, b)
    return tape.gradient(z, a)


@case()
def custom_with_variables(tf):
    w = tf.Variable(2.0)

    @tf.custom_gradient
    def linear(x):
        def grad(upstream, variables=None):
            return upstream * w, [upstream * x * 10.0]

        return w * x, grad

    x = tf.constant(3.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = linear(x)
    return tape.gradient(y, [x, w])


@case()
def custom_with_variables_doc_poly(tf):
    weights = tf.Variable(tf.ones([2]))

    @tf.custom_gradient
    def linear_poly(x):
        poly = weights[1] * x + weights[0]

        def grad_fn(dpoly, variables):
            return dpoly * weights[1], [tf.reduce_sum(dpoly), tf.reduce_sum(dpoly * x)]

        return poly, grad_fn

    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        poly = linear_poly(x)
    return tape.gradient(poly, x), tape.gradient(poly, weights)


@case()
def custom_variables_without_kwarg_raises(tf):
    w = tf.Variable(2.0)

    @tf.custom_gradient
    def linear(x):
        def grad(upstream):
            return upstream * w

        return w * x, grad

    x = tf.constant(3.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = linear(x)
    return y


@case()
def custom_second_order(tf):
    @tf.custom_gradient
    def cube(x):
        def grad(dy):
            return dy * 3.0 * x * x

        return x * x * x, grad

    x = tf.constant(2.0)
    with tf.GradientTape() as t2:
        t2.watch(x)
        with tf.GradientTape() as t1:
            t1.watch(x)
            y = cube(x)
        dy = t1.gradient(y, x)
    return dy, t2.gradient(dy, x)


@case()
def custom_broadcast_input(tf):
    @tf.custom_gradient
    def add_bias(x, b):
        def grad(dy):
            return dy, tf.reduce_sum(dy, axis=0) * 2.0

        return x + b, grad

    x = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    b = tf.constant([0.5, -0.5])
    with tf.GradientTape() as tape:
        tape.watch([x, b])
        y = tf.reduce_sum(add_bias(x, b) * x)
    return tape.gradient(y, [x, b])


@case()
def custom_matmul_inputs_of_other_shapes(tf):
    @tf.custom_gradient
    def dense(x, w):
        def grad(dy):
            return tf.matmul(dy, w, transpose_b=True), tf.matmul(x, dy, transpose_a=True) * 0.5

        return tf.matmul(x, w), grad

    x = tf.constant(_x([4, 3]))
    w = tf.Variable(_x([3, 2], 1))
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(tf.tanh(dense(x, w)))
    return tape.gradient(loss, [x, w])


@case()
def custom_scalar_output_vector_input(tf):
    @tf.custom_gradient
    def norm2(x):
        def grad(dy):
            return dy * 2.0 * x

        return tf.reduce_sum(x * x), grad

    x = tf.constant([1.0, -2.0, 3.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = norm2(x) * 3.0
    return y, tape.gradient(y, x)


@case()
def custom_variables_matrix(tf):
    w = tf.Variable(_x([3, 2], 2))

    @tf.custom_gradient
    def layer(x):
        def grad(dy, variables=None):
            return tf.matmul(dy, w, transpose_b=True), [tf.matmul(x, dy, transpose_a=True)]

        return tf.matmul(x, w), grad

    x = tf.constant(_x([2, 3], 3))
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(layer(x) * [[1.0, 2.0]])
    return tape.gradient(y, w)


@case()
def custom_value_unchanged(tf):
    @tf.custom_gradient
    def f(x):
        def grad(dy):
            return dy * 0.0

        return tf.exp(x) - 1.0, grad

    x = tf.constant([-0.5, 0.0, 0.5])
    return f(x)


@case()
def custom_in_training_step(tf):
    @tf.custom_gradient
    def softsign_custom(x):
        def grad(dy):
            d = 1.0 + tf.abs(x)
            return dy / (d * d)

        return x / (1.0 + tf.abs(x)), grad

    w = tf.Variable([0.5, -1.5])
    opt = tf.keras.optimizers.SGD(learning_rate=0.1)
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(softsign_custom(w * 2.0))
        grads = tape.gradient(loss, [w])
        opt.apply_gradients(zip(grads, [w]))
    return tf.convert_to_tensor(w)


# ---------------------------------------------------------------------------
# Training as in the guides (optimizers)


@case()
def train_sgd_steps(tf):
    w = tf.Variable([[1.0, -1.0], [0.5, 2.0]])
    x = tf.constant([[1.0, 2.0]])
    opt = tf.keras.optimizers.SGD(learning_rate=0.1)
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(tf.matmul(x, w) - 1.0))
        grads = tape.gradient(loss, [w])
        opt.apply_gradients(zip(grads, [w]))
    return tf.convert_to_tensor(w)


@case()
def train_sgd_momentum(tf):
    w = tf.Variable([1.0, -2.0])
    opt = tf.keras.optimizers.SGD(learning_rate=0.05, momentum=0.9)
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * w)
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
    return tf.convert_to_tensor(w)


@case()
def train_adam_steps(tf):
    w = tf.Variable([1.0, -2.0, 0.5])
    opt = tf.keras.optimizers.Adam(learning_rate=0.1)
    for _ in range(5):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.exp(w) - w)
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
    return tf.convert_to_tensor(w)


@case()
def train_mlp_adam(tf):
    rng = np.random.RandomState(0)
    xs = tf.constant(rng.uniform(-1, 1, (16, 4)).astype(np.float32))
    labels = tf.constant(rng.randint(0, 3, 16).astype(np.int32))
    w1, b1 = _dense(tf, 4, 8, 10)
    w2, b2 = _dense(tf, 8, 3, 11)
    params = [w1, b1, w2, b2]
    opt = tf.keras.optimizers.Adam(learning_rate=0.05)
    losses = []
    for _ in range(15):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(xs, w1) + b1)
            logits = tf.matmul(h, w2) + b2
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        grads = tape.gradient(loss, params)
        opt.apply_gradients(zip(grads, params))
        losses.append(loss)
    return losses[0], losses[-1], [tf.convert_to_tensor(p) for p in params]


@case()
def train_skip_none_gradient(tf):
    w = tf.Variable([1.0, -2.0])
    unused = tf.Variable([3.0])
    opt = tf.keras.optimizers.SGD(learning_rate=0.1)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * w)
    grads = tape.gradient(loss, [w, unused])
    opt.apply_gradients(zip(grads, [w, unused]))
    return tf.convert_to_tensor(w), tf.convert_to_tensor(unused)


@case()
def train_linear_regression(tf):
    xs = tf.constant(np.linspace(-1, 1, 8, dtype=np.float32).reshape(8, 1))
    ys = xs * 3.0 + 0.5
    w = tf.Variable([[0.0]])
    b = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(learning_rate=0.2)
    for _ in range(10):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(xs, w) + b - ys))
        grads = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(grads, [w, b]))
    return tf.convert_to_tensor(w), tf.convert_to_tensor(b)


@case()
def train_weight_decay_literal(tf):
    w = tf.Variable([1.0, -2.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * w) * 0.5e-3
    g = tape.gradient(loss, w)
    return 0.1 * g


# ---------------------------------------------------------------------------
# Values, dtypes and shapes (tf.constant / tf.Variable / tf.math docs)


@case()
def value_constant_float_dtype(tf):
    return tf.constant(3.0), tf.constant([1.5, 2.5])


@case()
def value_constant_int_dtype(tf):
    return tf.constant(10), tf.constant([1, 2, 3])


@case()
def value_constant_numpy_float64(tf):
    return tf.constant(np.array([1.0, 2.0]))


@case()
def value_constant_shape_fill(tf):
    return tf.constant(7.0, shape=[2, 3])


@case()
def value_variable_float_dtype(tf):
    v = tf.Variable(3.0)
    return v.dtype == tf.float32, tf.convert_to_tensor(v)


@case()
def value_zeros_ones_fill(tf):
    return tf.zeros([2, 3]), tf.ones([3], dtype=tf.int32), tf.fill([2, 2], 9)


@case()
def value_zeros_like_ones_like(tf):
    x = tf.constant([[1.0, 2.0]], dtype=tf.float64)
    return tf.zeros_like(x), tf.ones_like(x)


@case()
def value_shape_op(tf):
    return tf.shape(tf.zeros([2, 5, 3]))


@case()
def value_reshape_transpose(tf):
    x = tf.constant(np.arange(6, dtype=np.float32))
    r = tf.reshape(x, [2, 3])
    return r, tf.transpose(r), tf.transpose(tf.reshape(x, [1, 2, 3]), perm=[2, 0, 1])


@case()
def value_cast(tf):
    return tf.cast(tf.constant([1.7, -2.2]), tf.int32), tf.cast(tf.constant([1, 0]), tf.float64)


@case()
def value_where(tf):
    return tf.where(tf.constant([True, False, True]), tf.constant([1.0, 2.0, 3.0]), tf.constant([-1.0, -2.0, -3.0]))


@case()
def value_where_broadcast(tf):
    c = tf.constant([[True], [False]])
    return tf.where(c, tf.constant([1.0, 2.0, 3.0]), tf.constant(0.0))


@case()
def value_reduce_axes(tf):
    x = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    return (
        tf.reduce_sum(x),
        tf.reduce_sum(x, axis=0),
        tf.reduce_mean(x, axis=1, keepdims=True),
        tf.reduce_prod(x, axis=-1),
        tf.reduce_max(x, axis=1),
        tf.reduce_min(x),
    )


@case()
def value_divide_ints(tf):
    return tf.divide(tf.constant([7, 8]), tf.constant([2, 3]))


@case()
def value_add_n(tf):
    return tf.add_n([tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0]), tf.constant([5.0, 6.0])])


@case()
def value_batch_matmul(tf):
    a = tf.constant(_x([2, 2, 3]))
    b = tf.constant(_x([2, 3, 4], 1))
    return tf.matmul(a, b), tf.matmul(a, a, transpose_b=True)


@case()
def value_softmax_cross_entropy(tf):
    logits = tf.constant([[4.0, 2.0, 1.0], [0.0, 5.0, 1.0]])
    labels = tf.constant([[1.0, 0.0, 0.0], [0.0, 0.8, 0.2]])
    return tf.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits)


@case()
def value_sparse_softmax_cross_entropy(tf):
    logits = tf.constant([[4.0, 2.0, 1.0], [0.0, 5.0, 1.0]])
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.constant([0, 2]), logits=logits)


@case()
def value_sparse_labels_python_list(tf):
    logits = tf.constant([[4.0, 2.0, 1.0], [0.0, 5.0, 1.0]])
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=[0, 2], logits=logits)


@case()
def value_slicing(tf):
    x = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    return x[:, 1]


@case()
def value_python_abs_and_pow(tf):
    x = tf.constant([-1.5, 2.0])
    return abs(x), x**3


@case()
def value_pow(tf):
    return tf.pow(tf.constant([2.0, 3.0]), tf.constant([3.0, 0.5]))


@case()
def value_identity_stop_gradient(tf):
    x = tf.constant([1.0, 2.0])
    return tf.identity(x), tf.stop_gradient(x)


# ---------------------------------------------------------------------------
# One gradient per op, at the API docs' sample points (tf.math.* / tf.nn.*)

_UNARY_POINTS = np.array([-1.3, -0.4, 0.2, 0.7, 1.9], dtype=np.float32)
_POSITIVE_POINTS = np.array([0.3, 0.9, 1.7, 2.5], dtype=np.float32)
_UNARY = {
    "math.sin": ("math", "sin", _UNARY_POINTS),
    "math.cos": ("math", "cos", _UNARY_POINTS),
    "math.tan": ("math", "tan", _UNARY_POINTS),
    "math.exp": ("math", "exp", _UNARY_POINTS),
    "math.expm1": ("math", "expm1", _UNARY_POINTS),
    "math.log": ("math", "log", _POSITIVE_POINTS),
    "math.log1p": ("math", "log1p", _POSITIVE_POINTS),
    "math.sqrt": ("math", "sqrt", _POSITIVE_POINTS),
    "math.square": ("math", "square", _UNARY_POINTS),
    "math.tanh": ("math", "tanh", _UNARY_POINTS),
    "math.sigmoid": ("math", "sigmoid", _UNARY_POINTS),
    "math.abs": ("math", "abs", _UNARY_POINTS),
    "math.negative": ("math", "negative", _UNARY_POINTS),
    "math.reciprocal": ("math", "reciprocal", _POSITIVE_POINTS),
    "math.softplus": ("math", "softplus", _UNARY_POINTS),
    "math.sign": ("math", "sign", _UNARY_POINTS),
    "math.log_sigmoid": ("math", "log_sigmoid", _UNARY_POINTS),
    "nn.relu": ("nn", "relu", _UNARY_POINTS),
    "nn.relu6": ("nn", "relu6", np.array([-1.0, 2.0, 5.5, 7.0], dtype=np.float32)),
    "nn.elu": ("nn", "elu", _UNARY_POINTS),
    "nn.selu": ("nn", "selu", _UNARY_POINTS),
    "nn.softsign": ("nn", "softsign", _UNARY_POINTS),
    "nn.sigmoid": ("nn", "sigmoid", _UNARY_POINTS),
    "nn.tanh": ("nn", "tanh", _UNARY_POINTS),
    "nn.softmax": ("nn", "softmax", _UNARY_POINTS.reshape(1, 5)),
    "nn.log_softmax": ("nn", "log_softmax", _UNARY_POINTS.reshape(1, 5)),
    "nn.l2_loss": ("nn", "l2_loss", _UNARY_POINTS),
}


def _unary_case(space: str, name: str, points: np.ndarray) -> Callable[[Any], Any]:
    def run(tf):
        x = tf.constant(points)
        weights = tf.constant(np.linspace(0.5, 1.5, points.size, dtype=np.float32).reshape(points.shape))
        fn = getattr(getattr(tf, space), name)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
            loss = tf.reduce_sum(y * weights) if name != "l2_loss" else y
        return y, tape.gradient(loss, x)

    return run


for _label, (_space, _name, _points) in _UNARY.items():
    add_case("op_grad_" + _label.replace(".", "_"), _unary_case(_space, _name, _points))


_BINARY = {
    "add": ([[1.0, 2.0], [3.0, 4.0]], [0.5, -1.0]),
    "subtract": ([[1.0, 2.0], [3.0, 4.0]], [0.5, -1.0]),
    "multiply": ([[1.0, 2.0], [3.0, 4.0]], [0.5, -1.0]),
    "divide": ([[1.0, 2.0], [3.0, 4.0]], [0.5, -1.5]),
    "maximum": ([[1.0, -2.0], [3.0, 0.1]], [0.5, -1.0]),
    "minimum": ([[1.0, -2.0], [3.0, 0.1]], [0.5, -1.0]),
    "squared_difference": ([[1.0, 2.0], [3.0, 4.0]], [0.5, -1.0]),
}


def _binary_case(name: str, a: Any, b: Any) -> Callable[[Any], Any]:
    def run(tf):
        x = tf.constant(np.asarray(a, dtype=np.float32))
        y = tf.constant(np.asarray(b, dtype=np.float32))
        with tf.GradientTape() as tape:
            tape.watch([x, y])
            z = getattr(tf.math, name)(x, y)
            loss = tf.reduce_sum(z * z)
        return z, tape.gradient(loss, [x, y])

    return run


for _name, (_a, _b) in _BINARY.items():
    add_case("op_grad_math_" + _name, _binary_case(_name, _a, _b))


_REDUCTIONS = {
    "sum_all": ("reduce_sum", None, False),
    "sum_axis0": ("reduce_sum", 0, False),
    "mean_axis1_keepdims": ("reduce_mean", 1, True),
    "prod_axis1": ("reduce_prod", 1, False),
    "max_all": ("reduce_max", None, False),
    "max_axis0": ("reduce_max", 0, False),
    "min_axis1": ("reduce_min", 1, False),
    "max_ties": ("reduce_max", 1, False),
}


def _reduce_case(fn: str, axis: Any, keepdims: bool, ties: bool) -> Callable[[Any], Any]:
    def run(tf):
        values = [[1.0, 3.0, 3.0], [4.0, -2.0, 0.5]] if ties else [[1.0, 2.5, -3.0], [4.0, -2.0, 0.5]]
        x = tf.constant(values)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = getattr(tf, fn)(x, axis=axis, keepdims=keepdims)
            loss = tf.reduce_sum(y * y)
        return y, tape.gradient(loss, x)

    return run


for _name, (_fn, _axis, _keep) in _REDUCTIONS.items():
    add_case("op_grad_" + _name, _reduce_case(_fn, _axis, _keep, _name == "max_ties"))


@case()
def op_grad_matmul_transpose(tf):
    a = tf.constant(_x([3, 2]))
    b = tf.constant(_x([4, 3], 1))
    with tf.GradientTape() as tape:
        tape.watch([a, b])
        y = tf.reduce_sum(tf.matmul(a, b, transpose_a=True, transpose_b=True))
    return tape.gradient(y, [a, b])


def _cx(shape, seed=0):
    r = np.random.RandomState(seed)
    return (r.uniform(-1, 1, shape) + 1j * r.uniform(-1, 1, shape)).astype(np.complex128)


def _complex_matmul_case(a_shape, b_shape, flags):
    """d(sum(Re(z) + 2 Im(z)))/d(a, b), z = tf.matmul(a, b, **flags), complex128."""

    def fn(tf):
        a = tf.constant(_cx(a_shape, 3))
        b = tf.constant(_cx(b_shape, 4))
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            z = tf.matmul(a, b, **flags)
            y = tf.reduce_sum(tf.math.real(z)) + 2.0 * tf.reduce_sum(tf.math.imag(z))
        return (z,) + tuple(tape.gradient(y, [a, b]))

    return fn


# MatMul (2-D) and BatchMatMulV2 (3-D, b broadcast) on complex128, with
# each of transpose_* and adjoint_* on each side.
for _flag, _ta, _tb in [("plain", False, False), ("transpose_a", True, False), ("adjoint_a", True, False),
                        ("transpose_b", False, True), ("adjoint_b", False, True)]:
    _flags = {} if _flag == "plain" else {_flag: True}
    _sa = [3, 2] if _ta else [2, 3]
    _sb = [4, 3] if _tb else [3, 4]
    add_case("op_grad_complex_matmul_" + _flag, _complex_matmul_case(_sa, _sb, _flags))
    add_case("op_grad_complex_batch_matmul_" + _flag, _complex_matmul_case([2] + _sa, [1] + _sb, _flags))


def _complex_prod_case(axis, keepdims, zero):
    """d(sum(Re(y) + 2 Im(y)))/dx, y = tf.reduce_prod(x, axis), complex128; `zero`: x[0, 1] = 0."""

    def fn(tf):
        values = _cx([2, 3], 5)
        if zero:
            values[0, 1] = 0
        x = tf.constant(values)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_prod(x, axis=axis, keepdims=keepdims)
            loss = tf.reduce_sum(tf.math.real(y)) + 2.0 * tf.reduce_sum(tf.math.imag(y))
        return y, tape.gradient(loss, x)

    return fn


# Prod on complex128 (TensorFlow's _ProdGrad conjugates). Cumprod and the
# segment products are not in gradtape.tf, and TensorFlow 2.21's complex
# gradients for them miss the conj (see core/ops/scan_ops.cc).
add_case("op_grad_complex_prod_all", _complex_prod_case(None, False, False))
add_case("op_grad_complex_prod_axis1", _complex_prod_case(1, False, False))
add_case("op_grad_complex_prod_axis0_keepdims_zero", _complex_prod_case(0, True, True))


@case()
def op_grad_bias_add(tf):
    x = tf.constant(_x([3, 4]))
    b = tf.constant(_x([4], 1))
    with tf.GradientTape() as tape:
        tape.watch([x, b])
        y = tf.nn.bias_add(x, b)
        loss = tf.reduce_sum(y * y)
    return tape.gradient(loss, [x, b])


@case()
def op_grad_sparse_softmax_cross_entropy(tf):
    logits = tf.constant([[4.0, 2.0, 1.0], [0.0, 5.0, 1.0]])
    labels = tf.constant([0, 2])
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    return tape.gradient(loss, logits)


@case()
def op_grad_softmax_cross_entropy(tf):
    logits = tf.constant([[4.0, 2.0, 1.0], [0.0, 5.0, 1.0]])
    labels = tf.constant([[1.0, 0.0, 0.0], [0.0, 0.8, 0.2]])
    with tf.GradientTape() as tape:
        tape.watch([logits, labels])
        loss = tf.reduce_sum(tf.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    return tape.gradient(loss, [logits, labels])


@case()
def op_grad_where(tf):
    x = tf.constant([1.0, -2.0, 3.0])
    y = tf.constant([4.0, 5.0, -6.0])
    with tf.GradientTape() as tape:
        tape.watch([x, y])
        z = tf.where(x > y, x, y)
        loss = tf.reduce_sum(z * z)
    return tape.gradient(loss, [x, y])


@case()
def op_grad_reshape_transpose(tf):
    x = tf.constant(_x([2, 3]))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.transpose(tf.reshape(x, [3, 2])) * [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
        loss = tf.reduce_sum(y)
    return tape.gradient(loss, x)


@case()
def op_grad_zeros_like_no_gradient(tf):
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = x * 2.0 + tf.zeros_like(x)
    return tape.gradient(y, x)


# ---------------------------------------------------------------------------
# The five guide snippets of issue 28 that differed


@case()
def snippet_gradient_of_no_sources(tf):
    x = tf.Variable(2.0)
    with tf.GradientTape() as tape:
        loss = x * x
    return [tape.gradient(loss, []), tape.gradient is not None]


@case()
def snippet_gradient_of_no_sources_uses_the_tape(tf):
    x = tf.Variable(2.0)
    with tf.GradientTape() as tape:
        loss = x * x
    tape.gradient(loss, [])
    return tape.gradient(loss, x)  # RuntimeError: a non-persistent tape is used up


@case()
def snippet_python_int_axis(tf):
    x = tf.constant(np.array([[[1.0, 2.0, 0.5], [3.0, -1.0, 0.0]]], dtype=np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.nn.softmax(x, axis=1) * tf.nn.log_softmax(x, 0) + tf.nn.softmax(x, 2)
        mean, variance = tf.nn.moments(x, axes=1)
        loss = tf.reduce_sum(y) + tf.reduce_sum(variance * mean) + tf.reduce_sum(tf.nn.l2_normalize(x, 2))
    return [y, mean, variance, tape.gradient(loss, x)]


@case()
def snippet_disabled_gradient_is_a_lookup_error(tf):
    x = tf.constant(2.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.raw_ops.PreventGradient(input=x) if hasattr(tf, "raw_ops") else tf.get_default_session().execute("PreventGradient", [x])[0]
    try:
        tape.gradient(y, x).numpy()
    except LookupError:
        return True
    return False


@case()
def snippet_undefined_gradient_is_a_lookup_error(tf):
    x = tf.constant(np.arange(1.0, 5.0, dtype=np.float32).reshape(1, 1, 1, 4))
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = tf.nn.local_response_normalization(x, depth_radius=1)
        g = inner.gradient(y, x)
    return outer.gradient(g, x)  # TF: LookupError (no gradient for LRNGrad)


@case()
def snippet_error_class_after_a_caught_client_error(tf):
    try:
        tf.constant(1.5, dtype=tf.int32)  # a client-side TypeError, caught
    except TypeError:
        pass
    try:
        tf.reshape(tf.constant([1.0, 2.0, 3.0]), [2, 2]).numpy()
    except tf.errors.OpError as e:
        return [isinstance(e, tf.errors.InvalidArgumentError), isinstance(e, tf.errors.UnimplementedError)]
    return False


@case()
def snippet_clip_by_norm(tf):
    x = tf.Variable(np.array([[3.0, 4.0], [0.0, 0.0]], dtype=np.float32))
    with tf.GradientTape() as tape:
        clipped = tf.clip_by_norm(x, 2.0, axes=1)
        loss = tf.reduce_sum(clipped * clipped)
    return [
        clipped,
        tape.gradient(loss, x),  # finite at the zero row
        tf.clip_by_norm(tf.constant([3.0, 4.0]), -1.0),  # a negative clip_norm counts as 0
        tf.clip_by_norm(tf.constant([3.0, 4.0]), tf.constant(-1.0)),
        tf.clip_by_norm(tf.constant([3.0, 4.0]), tf.constant(2.0, dtype=tf.float64)),  # cast to t's dtype
        tf.clip_by_norm([[3.0, 4.0], [1.0, 0.0]], [1.0, 2.0]),
    ]


@case()
def snippet_clip_by_norm_int_input(tf):
    return tf.clip_by_norm(tf.constant([3, 4]), 2)  # TF: InvalidArgumentError (Sqrt of int32)


@case()
def snippet_clip_by_global_norm(tf):
    a = tf.Variable(np.array([3.0, 4.0], dtype=np.float32))
    b = tf.Variable(np.array([[12.0]], dtype=np.float32))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(a * a) + tf.reduce_sum(b)
    grads = tape.gradient(loss, [a, b])
    clipped, norm = tf.clip_by_global_norm([grads[0], None, grads[1]], 5.0)
    return [clipped, norm]


# ---------------------------------------------------------------------------
# The runner


def _error_class(e: BaseException) -> str:
    """The exception's class as the comparison sees it: builtins by name,
    server / op errors as one class (TF's OpError, gradtape's GradtapeError)."""
    names = [c.__name__ for c in type(e).__mro__]
    if isinstance(e, LookupError):
        return "LookupError"  # TF: a disabled / undefined gradient (gradtape's is also an OpError)
    if "OpError" in names or "GradtapeError" in names:
        return "OpError"
    for c in type(e).__mro__:
        if getattr(builtins, c.__name__, None) is c:
            return c.__name__
    return type(e).__name__


class _Value:
    def __init__(self, array: np.ndarray) -> None:
        self.array = array


def _normalize(result: Any) -> Any:
    if result is None:
        return None
    if isinstance(result, (list, tuple)):
        return [_normalize(r) for r in result]
    if isinstance(result, dict):
        return {k: _normalize(result[k]) for k in sorted(result)}
    if isinstance(result, (bool, int, float, np.bool_, np.number)):
        return ("py", result if not isinstance(result, np.generic) else result.item())
    if hasattr(result, "numpy"):
        array = np.asarray(result.numpy())
        return ("tensor", array.dtype.name, tuple(array.shape), array)
    return ("object", type(result).__name__)


def _run_case(fn: Callable[[Any], Any], tf: Any) -> Any:
    try:
        return ("ok", _normalize(fn(tf)))
    except Exception as e:  # noqa: BLE001 (the class is what is compared)
        return ("raises", _error_class(e), str(e)[:300])


def _compare(expected: Any, actual: Any, path: str = "result") -> List[str]:
    if expected is None or actual is None:
        return [] if expected is None and actual is None else [f"{path}: TF {_short(expected)}, gradtape {_short(actual)}"]
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{path}: TF {_short(expected)}, gradtape {_short(actual)}"]
        return [m for i, (e, a) in enumerate(zip(expected, actual)) for m in _compare(e, a, f"{path}[{i}]")]
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or sorted(actual) != sorted(expected):
            return [f"{path}: TF {_short(expected)}, gradtape {_short(actual)}"]
        return [m for k in expected for m in _compare(expected[k], actual[k], f"{path}[{k!r}]")]
    if not isinstance(actual, tuple) or actual[0] != expected[0]:
        return [f"{path}: TF {_short(expected)}, gradtape {_short(actual)}"]
    if expected[0] == "py":
        ok = np.allclose(expected[1], actual[1]) if not isinstance(expected[1], bool) else expected[1] == actual[1]
        return [] if ok else [f"{path}: TF {expected[1]!r}, gradtape {actual[1]!r}"]
    if expected[0] == "object":
        return []  # both made an object (no value to compare)
    _, e_dtype, e_shape, e_value = expected
    _, a_dtype, a_shape, a_value = actual
    problems = []
    if e_dtype != a_dtype:
        problems.append(f"{path}: dtype TF {e_dtype}, gradtape {a_dtype}")
    if e_shape != a_shape:
        problems.append(f"{path}: shape TF {e_shape}, gradtape {a_shape}")
    elif e_value.dtype.kind in "fc" or a_value.dtype.kind in "fc":
        tol = 1e-4 if "float32" in (e_dtype, a_dtype) or "complex64" in (e_dtype, a_dtype) else 1e-9
        if not np.allclose(e_value, a_value, rtol=tol, atol=tol, equal_nan=True):
            problems.append(f"{path}: values TF {e_value.tolist()}, gradtape {a_value.tolist()}")
    elif not np.array_equal(e_value, a_value):
        problems.append(f"{path}: values TF {e_value.tolist()}, gradtape {a_value.tolist()}")
    return problems


def _short(x: Any) -> str:
    if isinstance(x, tuple) and x and x[0] == "tensor":
        return f"tensor {x[1]}{list(x[2])}"
    text = repr(x)
    return text if len(text) < 120 else text[:117] + "..."


@pytest.fixture(scope="module")
def tensorflow():
    import tensorflow as tensorflow_module  # lazily: only this module needs it (CI installs it)

    return tensorflow_module


@pytest.fixture
def gradtape_tf(server_address):
    import gradtape
    import gradtape.tf as gtf

    session = gradtape.connect(server_address, timeout=10)
    gradtape.set_default_session(session)
    try:
        yield gtf
    finally:
        gradtape.set_default_session(None)
        try:
            session.close()
        except gradtape.GradtapeError:
            pass  # an error a case left unread is that case's business


def _param(name: str) -> Any:
    fn, needs = CASES[name]
    marks = [pytest.mark.xfail(strict=True, reason=f"needs part {needs}")] if needs else []
    return pytest.param(name, id=name, marks=marks)


@pytest.mark.no_client
def test_there_are_at_least_100_cases() -> None:
    assert len(CASES) >= 100, len(CASES)


@pytest.mark.parametrize("name", [_param(n) for n in CASES])
def test_same_as_tensorflow(name: str, tensorflow: Any, gradtape_tf: Any) -> None:
    fn, _ = CASES[name]
    expected = _run_case(fn, _TFNamespace(tensorflow))
    actual = _run_case(fn, gradtape_tf)
    if expected[0] == "raises" or actual[0] == "raises":
        assert expected[:2] == actual[:2], f"TF {expected}, gradtape {actual}"
        return
    problems = _compare(expected[1], actual[1])
    assert not problems, "\n".join(problems)


class _TFNamespace:
    """tensorflow, plus the helpers the cases use that TF spells elsewhere."""

    def __init__(self, tf: Any) -> None:
        self._tf = tf

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tf, name)
