"""GradientTape semantics against TensorFlow as the reference (issue 15,
classes 2 to 6, the tape part): each case is written once for TensorFlow and
once for gradtape, both run, and their results compared: values, None-ness,
dtypes and exception classes.

TensorFlow (tensorflow-cpu, tests/python/requirements.txt) is imported
lazily by the `tf` fixture, so the other test modules do not pay for it.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any, Callable, List, Tuple

import numpy as np
import pytest

import gradtape
from gradtape import optimizers

F32 = np.float32


@pytest.fixture(scope="module")
def tf() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow

    return tensorflow


# -- running a case both ways ---------------------------------------------


def _plain(x: Any) -> Any:
    """A result as numpy values (None stays None), structure kept."""
    if x is None or isinstance(x, (bool, str, type)):
        return x
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(v) for v in x)
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (int, float, np.ndarray, np.generic)):
        return np.asarray(x)
    return np.asarray(x.numpy())


def _run(fn: Callable[[Any], Any], api: Any) -> Any:
    try:
        return _plain(fn(api))
    except Exception as e:  # compared by class
        return ("raises", type(e))


def _raised(x: Any) -> bool:
    return isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str) and x[0] == "raises"


def _assert_same(got: Any, want: Any, where: str = "result") -> None:
    if _raised(want):
        assert _raised(got), f"{where}: TF raised {want[1]}, gradtape gave {got!r}"
        assert issubclass(got[1], want[1]), f"{where}: TF raised {want[1]}, gradtape {got[1]}"
        return
    assert not _raised(got), f"{where}: gradtape raised {got[1]}, TF gave {want!r}"
    if want is None:
        assert got is None, f"{where}: TF gives None, gradtape {got!r}"
        return
    assert got is not None, f"{where}: TF gives {want!r}, gradtape None"
    if isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), f"{where}: {got!r} vs {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_same(g, w, f"{where}[{i}]")
        return
    if isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), f"{where}: keys {got!r} vs {want!r}"
        for k in want:
            _assert_same(got[k], want[k], f"{where}[{k!r}]")
        return
    if isinstance(want, (bool, str)):
        assert got == want, f"{where}: {got!r} vs {want!r}"
        return
    assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} vs TF's {want.dtype}"
    assert got.shape == want.shape, f"{where}: shape {got.shape} vs TF's {want.shape}"
    np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=where)


CASES: List[Tuple[str, Callable[[Any], Any], Callable[[Any], Any]]] = []


def case(name: str) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    """Registers a pair: the decorated TensorFlow version, then `.gt`."""

    def register(tf_fn: Callable[[Any], Any]) -> Any:
        def with_gt(gt_fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
            CASES.append((name, tf_fn, gt_fn))
            return gt_fn

        tf_fn.gt = with_gt  # type: ignore[attr-defined]
        return tf_fn

    return register


# -- class 2: unconnected gradients are None ------------------------------


@case("unwatched_constant")
def _(tf: Any) -> Any:
    x, c = tf.constant(3.0), tf.constant(2.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * c
    return t.gradient(y, [x, c])


@_.gt
def _(gt: Any) -> Any:
    x, c = gt.constant(F32(3.0)), gt.constant(F32(2.0))
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * c
    return t.gradient(y, [x, c])


@case("nothing_watched")
def _(tf: Any) -> Any:
    x = tf.constant(3.0)
    with tf.GradientTape() as t:
        y = x * 2.0
    return t.gradient(y, x)


@_.gt
def _(gt: Any) -> Any:
    x = gt.constant(F32(3.0))
    with gt.GradientTape() as t:
        y = x * 2.0
    return t.gradient(y, x)


@case("watch_accessed_variables_false")
def _(tf: Any) -> Any:
    v, w = tf.Variable(2.0), tf.Variable(3.0)
    with tf.GradientTape(watch_accessed_variables=False) as t:
        t.watch(w)
        y = v * 2.0 + w * w
    return t.gradient(y, [v, w])


@_.gt
def _(gt: Any) -> Any:
    v, w = gt.Variable(F32(2.0)), gt.Variable(F32(3.0))
    with gt.GradientTape(watch_accessed_variables=False) as t:
        t.watch(w)
        y = v * 2.0 + w * w
    return t.gradient(y, [v, w])


@case("integer_target")
def _(tf: Any) -> Any:
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        i = tf.cast(x * 2.0, tf.int32)
        q = tf.cast(i, tf.float32) * x
    return t.gradient(i, x), t.gradient(q, [x, i])


@_.gt
def _(gt: Any) -> Any:
    x = gt.constant(F32(3.0))
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        i = gt.ops.cast(x * 2.0, DstT=np.int32)
        q = gt.ops.cast(i, DstT=np.float32) * x
    return t.gradient(i, x), t.gradient(q, [x, i])


@case("replaced_variable")
def _(tf: Any) -> Any:
    v = tf.Variable(1.0)
    with tf.GradientTape() as t:
        y = v * v
    v = tf.Variable(2.0)
    return t.gradient(y, v)


@_.gt
def _(gt: Any) -> Any:
    v = gt.Variable(F32(1.0))
    with gt.GradientTape() as t:
        y = v * v
    v = gt.Variable(F32(2.0))
    return t.gradient(y, v)


@case("read_but_unused_variable")
def _(tf: Any) -> Any:
    v, w, u = tf.Variable(2.0), tf.Variable(3.0), tf.Variable(4.0)
    with tf.GradientTape() as t:
        a = w * 1.0  # read, watched, not in y
        y = v * 2.0
    return t.gradient(y, [v, w, u]), len(t.watched_variables())


@_.gt
def _(gt: Any) -> Any:
    v, w, u = gt.Variable(F32(2.0)), gt.Variable(F32(3.0)), gt.Variable(F32(4.0))
    with gt.GradientTape() as t:
        a = w * 1.0  # noqa: F841
        y = v * 2.0
    return t.gradient(y, [v, w, u]), len(t.watched_variables())


@case("nested_sources")
def _(tf: Any) -> Any:
    x, c = tf.constant(3.0), tf.constant(1.0)
    v = tf.Variable(2.0)
    with tf.GradientTape() as t:
        y = v * 2.0
    return t.gradient(y, {"a": [v, c], "b": (x,)})


@_.gt
def _(gt: Any) -> Any:
    x, c = gt.constant(F32(3.0)), gt.constant(F32(1.0))
    v = gt.Variable(F32(2.0))
    with gt.GradientTape() as t:
        y = v * 2.0
    return t.gradient(y, {"a": [v, c], "b": (x,)})


@case("unconnected_zero")
def _(tf: Any) -> Any:
    x, c = tf.constant([1.0, 2.0]), tf.constant([5.0])
    v = tf.Variable([1.0, 1.0, 1.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * 2.0
    return t.gradient(y, [x, c, v], unconnected_gradients="zero")


@_.gt
def _(gt: Any) -> Any:
    x, c = gt.constant(np.array([1.0, 2.0], F32)), gt.constant(np.array([5.0], F32))
    v = gt.Variable(np.ones(3, F32))
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * 2.0
    return t.gradient(y, [x, c, v], unconnected_gradients="zero")


@case("unconnected_jacobian")
def _(tf: Any) -> Any:
    v, w = tf.constant([1.0, 2.0]), tf.constant([1.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch([v, w])
        y = v * 2.0
    return t.jacobian(y, [v, w]), t.jacobian(y, w, unconnected_gradients="zero")


@_.gt
def _(gt: Any) -> Any:
    v, w = gt.constant(np.array([1.0, 2.0], F32)), gt.constant(np.array([1.0], F32))
    with gt.GradientTape(persistent=True) as t:
        t.watch([v, w])
        y = v * 2.0
    return t.jacobian(y, [v, w]), t.jacobian(y, w, unconnected_gradients="zero")


@case("intermediate_sources")
def _(tf: Any) -> Any:
    x, c = tf.constant(3.0), tf.constant(2.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * c
        z = y * 2.0
        other = x * 5.0
    return t.gradient(z, [y, x, c, other]), t.gradient(x, x), t.gradient(c, c)


@_.gt
def _(gt: Any) -> Any:
    x, c = gt.constant(F32(3.0)), gt.constant(F32(2.0))
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * c
        z = y * 2.0
        other = x * 5.0
    return t.gradient(z, [y, x, c, other]), t.gradient(x, x), t.gradient(c, c)


@case("second_derivative_of_a_linear_function")
def _(tf: Any) -> Any:
    x = tf.constant(3.0)
    with tf.GradientTape() as t2:
        t2.watch(x)
        with tf.GradientTape() as t1:
            t1.watch(x)
            y = x * 2.0
        dy = t1.gradient(y, x)
    return dy, t2.gradient(dy, x)


@_.gt
def _(gt: Any) -> Any:
    x = gt.constant(F32(3.0))
    with gt.GradientTape() as t2:
        t2.watch(x)
        with gt.GradientTape() as t1:
            t1.watch(x)
            y = x * 2.0
        dy = t1.gradient(y, x)
    return dy, t2.gradient(dy, x)


@case("hessian_by_nested_tapes")
def _(tf: Any) -> Any:
    v = tf.Variable([1.5, -2.0])
    with tf.GradientTape() as t2:
        with tf.GradientTape() as t1:
            y = tf.reduce_sum(v * v * v)
        dy = t1.gradient(y, v)
    return dy, t2.jacobian(dy, v)


@_.gt
def _(gt: Any) -> Any:
    v = gt.Variable(np.array([1.5, -2.0], F32))
    with gt.GradientTape() as t2:
        with gt.GradientTape() as t1:
            y = gt.ops.sum(v * v * v)
        dy = t1.gradient(y, v)
    return dy, t2.jacobian(dy, v)


@case("gradient_inside_a_persistent_tape")
def _(tf: Any) -> Any:
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x * x
        dy = t.gradient(y, x)
    return dy, t.gradient(dy, x)


@_.gt
def _(gt: Any) -> Any:
    x = gt.constant(F32(3.0))
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x * x
        dy = t.gradient(y, x)
    return dy, t.gradient(dy, x)


@case("gradient_inside_a_non_persistent_tape_stops_it")
def _(tf: Any) -> Any:
    x = tf.constant(3.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x * x
        dy = t.gradient(y, x)
        z = x * 5.0  # not recorded: the tape stopped
    with tf.GradientTape() as t2:
        t2.watch(x)
        with t2.stop_recording():
            w = x * 4.0
    return dy, t2.gradient(w, x)


@_.gt
def _(gt: Any) -> Any:
    x = gt.constant(F32(3.0))
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * x * x
        dy = t.gradient(y, x)
        z = x * 5.0  # noqa: F841
    assert not t._recording
    with gt.GradientTape() as t2:
        t2.watch(x)
        with t2.stop_recording():
            w = x * 4.0
    return dy, t2.gradient(w, x)


# -- classes 4 and 5: watching ints, variables, stop / reset --------------


@case("watch_int_and_bool")
def _(tf: Any) -> Any:
    i, b, x = tf.constant(3), tf.constant(True), tf.constant(2.0)
    with tf.GradientTape() as t:
        t.watch([i, b, x])
        y = tf.cast(i, tf.float32) * x
    return t.gradient(y, [i, b, x])


@_.gt
def _(gt: Any) -> Any:
    i, b, x = gt.constant(np.int32(3)), gt.constant(np.bool_(True)), gt.constant(F32(2.0))
    with gt.GradientTape() as t:
        t.watch([i, b, x])
        y = gt.ops.cast(i, DstT=np.float32) * x
    return t.gradient(y, [i, b, x])


@case("integer_variable")
def _(tf: Any) -> Any:
    v = tf.Variable(3)
    with tf.GradientTape() as t:
        y = v * 2
    return t.gradient(y, v), len(t.watched_variables())


@_.gt
def _(gt: Any) -> Any:
    v = gt.Variable(np.int32(3))
    with gt.GradientTape() as t:
        y = v * 2
    return t.gradient(y, v), len(t.watched_variables())


@case("watched_variables_in_creation_order")
def _(tf: Any) -> Any:
    a, b = tf.Variable(1.0, name="a"), tf.Variable(2.0, name="b")
    c = tf.Variable(3.0, name="c", trainable=False)
    d = tf.Variable(4.0, name="d", trainable=False)
    with tf.GradientTape() as t:
        t.watch(c)
        y = b * a + c + d  # d: not trainable, not watched
    return [v.name.split(":")[0] for v in t.watched_variables()], t.gradient(y, [a, b, c, d])


@_.gt
def _(gt: Any) -> Any:
    a, b = gt.Variable(F32(1.0), name="a"), gt.Variable(F32(2.0), name="b")
    c = gt.Variable(F32(3.0), name="c", trainable=False)
    d = gt.Variable(F32(4.0), name="d", trainable=False)
    with gt.GradientTape() as t:
        t.watch(c)
        y = b * a + c + d
    return [v.name for v in t.watched_variables()], t.gradient(y, [a, b, c, d])


@case("stop_recording_of_one_tape")
def _(tf: Any) -> Any:
    x = tf.constant(3.0)
    with tf.GradientTape() as t2:
        t2.watch(x)
        with tf.GradientTape() as t1:
            t1.watch(x)
            with t1.stop_recording():
                y = x * x
            z = x * 3.0
        return t1.gradient(y + z, x), t2.gradient(y, x)


@_.gt
def _(gt: Any) -> Any:
    x = gt.constant(F32(3.0))
    with gt.GradientTape() as t2:
        t2.watch(x)
        with gt.GradientTape() as t1:
            t1.watch(x)
            with t1.stop_recording():
                y = x * x
            z = x * 3.0
        return t1.gradient(y + z, x), t2.gradient(y, x)


@case("entering_a_tape_again")
def _(tf: Any) -> Any:
    x = tf.constant(3.0)
    t = tf.GradientTape(persistent=True)
    with t:
        t.watch(x)
        y = x * x
    z = x * 5.0  # between the blocks: not recorded
    with t:
        w = x * 2.0
    return t.gradient(y + z + w, x)


@_.gt
def _(gt: Any) -> Any:
    x = gt.constant(F32(3.0))
    t = gt.GradientTape(persistent=True)
    with t:
        t.watch(x)
        y = x * x
    z = x * 5.0
    with t:
        w = x * 2.0
    return t.gradient(y + z + w, x)


@case("gradient_inside_stop_recording")
def _(tf: Any) -> Any:
    x = tf.constant(3.0)
    with tf.GradientTape() as t2:
        t2.watch(x)
        with tf.GradientTape() as t1:
            t1.watch(x)
            y = x * x * x
            with t1.stop_recording():
                dy = t1.gradient(y, x)
        return dy, t2.gradient(dy, x)


@_.gt
def _(gt: Any) -> Any:
    x = gt.constant(F32(3.0))
    with gt.GradientTape() as t2:
        t2.watch(x)
        with gt.GradientTape() as t1:
            t1.watch(x)
            y = x * x * x
            with t1.stop_recording():
                dy = t1.gradient(y, x)
        return dy, t2.gradient(dy, x)


@case("reset")
def _(tf: Any) -> Any:
    x, w = tf.constant(3.0), tf.Variable(1.0)
    with tf.GradientTape() as t:
        t.watch(x)
        a = x * x * w
        t.reset()
        b = x * w * 4.0
    return t.gradient(a + b, [x, w]), len(t.watched_variables())


@_.gt
def _(gt: Any) -> Any:
    x, w = gt.constant(F32(3.0)), gt.Variable(F32(1.0))
    with gt.GradientTape() as t:
        t.watch(x)
        a = x * x * w
        t.reset()
        b = x * w * 4.0
    return t.gradient(a + b, [x, w]), len(t.watched_variables())


# -- class 6: errors TensorFlow raises on the client -----------------------


def _second_call(api: Any, make: Callable[[Any], Any], second: str) -> Any:
    x = make(3.0)
    with api.GradientTape() as t:
        t.watch(x)
        y = x * x
    t.gradient(y, x)
    return getattr(t, second)(y, x)


@case("non_persistent_gradient_twice")
def _(tf: Any) -> Any:
    return _second_call(tf, tf.constant, "gradient")


@_.gt
def _(gt: Any) -> Any:
    return _second_call(gt, lambda v: gt.constant(F32(v)), "gradient")


@case("non_persistent_gradient_then_jacobian")
def _(tf: Any) -> Any:
    return _second_call(tf, tf.constant, "jacobian")


@_.gt
def _(gt: Any) -> Any:
    return _second_call(gt, lambda v: gt.constant(F32(v)), "jacobian")


@case("batch_jacobian_rank_1")
def _(tf: Any) -> Any:
    v = tf.constant([1.0, 2.0])
    with tf.GradientTape() as t:
        t.watch(v)
        y = v * v
    return t.batch_jacobian(y, v)


@_.gt
def _(gt: Any) -> Any:
    v = gt.constant(np.array([1.0, 2.0], F32))
    with gt.GradientTape() as t:
        t.watch(v)
        y = v * v
    return t.batch_jacobian(y, v)


def _bad_target(api: Any, make: Callable[[float], Any], target: Any) -> Any:
    x = make(3.0)
    with api.GradientTape() as t:
        t.watch(x)
        y = x * x  # noqa: F841
    return t.gradient(target, x)


@case("float_target")
def _(tf: Any) -> Any:
    return _bad_target(tf, tf.constant, 3.0)


@_.gt
def _(gt: Any) -> Any:
    return _bad_target(gt, lambda v: gt.constant(F32(v)), 3.0)


@case("string_target")
def _(tf: Any) -> Any:
    return _bad_target(tf, tf.constant, "abc")


@_.gt
def _(gt: Any) -> Any:
    return _bad_target(gt, lambda v: gt.constant(F32(v)), "abc")


@case("none_target")
def _(tf: Any) -> Any:
    return _bad_target(tf, tf.constant, None)


@_.gt
def _(gt: Any) -> Any:
    return _bad_target(gt, lambda v: gt.constant(F32(v)), None)


@case("watch_a_numpy_array")
def _(tf: Any) -> Any:
    with tf.GradientTape() as t:
        t.watch(np.array(3.0))


@_.gt
def _(gt: Any) -> Any:
    with gt.GradientTape() as t:
        t.watch(np.array(3.0))


@case("reset_outside_the_block")
def _(tf: Any) -> Any:
    t = tf.GradientTape()
    with t:
        pass
    t.reset()


@_.gt
def _(gt: Any) -> Any:
    t = gt.GradientTape()
    with t:
        pass
    t.reset()


@case("stop_recording_outside_the_block")
def _(tf: Any) -> Any:
    t = tf.GradientTape()
    with t.stop_recording():
        pass


@_.gt
def _(gt: Any) -> Any:
    t = gt.GradientTape()
    with t.stop_recording():
        pass


@pytest.mark.parametrize("name,tf_fn,gt_fn", CASES, ids=[c[0] for c in CASES])
def test_like_tensorflow(tf: Any, gt: Any, name: str, tf_fn: Callable[[Any], Any], gt_fn: Callable[[Any], Any]) -> None:
    want = _run(tf_fn, tf)
    got = _run(gt_fn, gt)
    _assert_same(got, want, name)
    gt.sync()  # and nothing failed on the server


# -- what the client knows without a round trip -----------------------------


def test_none_gradients_need_no_round_trip(gt: Any) -> None:
    x, c = gt.constant(F32(3.0)), gt.constant(F32(2.0))
    v = gt.Variable(F32(1.0))
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * c
    gt.flush()
    before = gt.counters["batches_sent"]
    assert t.gradient(y, [c, v]) == [None, None]
    assert t.gradient(y, {"c": c}) == {"c": None}
    assert t.jacobian(y, v) is None
    assert t.gradient(c * 2.0, x) is None
    assert gt.counters["batches_sent"] == before  # nothing waited, nothing sent


def test_int_watch_logs_tensorflows_warning(gt: Any, caplog: Any) -> None:
    i = gt.constant(np.int32(3))
    with caplog.at_level(logging.WARNING, logger="gradtape"):
        with gt.GradientTape() as t:
            t.watch(i)
    assert "The dtype of the watched tensor must be floating" in caplog.text
    assert "int32" in caplog.text
    gt.sync()  # the server was not asked to watch it (it refuses ints)


# -- class 3: temporaries live until the command that reads them ------------


def test_temporaries_outlive_the_gradient_command(gt: Any) -> None:
    x = gt.constant(np.array([1.0, 2.0], F32))
    v = gt.Variable(np.array([3.0, 4.0], F32))
    with gt.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * v
    # numpy output gradients, converted inside gradient()
    g = t.gradient(y, x, output_gradients=np.array([10.0, 100.0], F32))
    # a Variable as the target: its read lives until the command is sent
    gv = t.gradient(v, v)
    gt.sync()
    np.testing.assert_array_equal(g.numpy(), [30.0, 400.0])
    assert gv is None or gv.numpy().shape == (2,)
    # values converted inside jacobian() and watch()
    with gt.GradientTape() as t2:
        t2.watch(gt.constant(np.ones(2, F32)))
        z = v * 2.0
    jac = t2.jacobian(z, v)
    gt.sync()
    np.testing.assert_array_equal(jac.numpy(), np.diag([2.0, 2.0]))


def test_client_side_errors_release_nothing_never_created(gt: Any) -> None:
    x = gt.constant(F32(3.0))
    with gt.GradientTape() as t:
        t.watch(x)
        y = x * x
    with pytest.raises(AttributeError):
        t.gradient(y, [x, 3.0])
    with pytest.raises(ValueError):
        t.gradient(y, x, output_gradients=[None, None])
    with pytest.raises(TypeError):
        gt.constant(np.array([1, 2], dtype=np.uint8))  # no such dtype
    with pytest.raises(TypeError):
        gt.constant(np.array(["a"]))
    gt.sync()  # no NOT_FOUND for a release of an id never created
    np.testing.assert_allclose(t.gradient(y, x).numpy(), 6.0)


# -- optimizers ----------------------------------------------------------------


def test_optimizers_skip_none_like_keras(gt: Any) -> None:
    w, unused = gt.Variable(np.array([1.0, 2.0], F32), name="w"), gt.Variable(F32(5.0), name="unused")
    opt = optimizers.SGD(learning_rate=0.5)
    assert opt.iterations == 0
    with gt.GradientTape() as t:
        loss = gt.ops.sum(w * w)
    grads = t.gradient(loss, [w, unused])
    assert grads[1] is None
    with pytest.warns(UserWarning, match=r"Gradients do not exist for variables \['unused'\] when minimizing"):
        opt.apply_gradients(zip(grads, [w, unused]))
    np.testing.assert_allclose(w.numpy(), [0.0, 0.0])
    np.testing.assert_allclose(unused.numpy(), 5.0)
    it = opt.iterations
    assert isinstance(it, gradtape.Variable) and it.dtype == np.int64 and not it.trainable
    assert int(it.numpy()) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.apply_gradients([(gt.constant(np.ones(2, F32)), w)])
    assert int(opt.iterations.numpy()) == 2  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="No gradients provided for any variable"):
        opt.apply_gradients([(None, w)])
    assert int(opt.iterations.numpy()) == 2  # type: ignore[union-attr]


def test_optimizer_matches_keras_with_a_none_gradient(tf: Any, gt: Any) -> None:
    def tf_run() -> Any:
        w, u = tf.Variable([1.0, -2.0]), tf.Variable(3.0)
        opt = tf.keras.optimizers.Adam(learning_rate=0.1)
        for _ in range(3):
            with tf.GradientTape() as t:
                loss = tf.reduce_sum(w * w * w)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                opt.apply_gradients(zip(t.gradient(loss, [w, u]), [w, u]))
        return w.numpy(), u.numpy(), int(opt.iterations.numpy())

    def gt_run() -> Any:
        w, u = gt.Variable(np.array([1.0, -2.0], F32)), gt.Variable(F32(3.0))
        opt = optimizers.Adam(learning_rate=0.1)
        for _ in range(3):
            with gt.GradientTape() as t:
                loss = gt.ops.sum(w * w * w)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                opt.apply_gradients(zip(t.gradient(loss, [w, u]), [w, u]))
        return w.numpy(), u.numpy(), int(opt.iterations.numpy())  # type: ignore[union-attr]

    (tw, tu, ti), (gw, gu, gi) = tf_run(), gt_run()
    np.testing.assert_allclose(gw, tw, rtol=1e-5)
    np.testing.assert_allclose(gu, tu)
    assert gi == ti == 3
