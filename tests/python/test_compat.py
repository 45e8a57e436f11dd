"""gradtape.tf's own behaviour beyond the TensorFlow reference
(test_tf_reference.py): the default session, checkpoints, stop_gradient,
the limits of custom gradients and forward mode's client-side None."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from conftest import running_server


@pytest.fixture
def gtf(server_address):
    import gradtape
    import gradtape.tf as tf

    session = tf.connect(server_address, timeout=10)
    try:
        yield tf
    finally:
        gradtape.set_default_session(None)
        session.close()


@pytest.mark.no_client
def test_no_default_session_names_both_ways(monkeypatch):
    import gradtape
    import gradtape.tf as tf

    monkeypatch.delenv("GRADTAPE_ADDRESS", raising=False)
    gradtape.set_default_session(None)
    with pytest.raises(RuntimeError) as e:
        tf.constant(1.0)
    assert "gradtape.tf.connect" in str(e.value) and "GRADTAPE_ADDRESS" in str(e.value)


def test_default_session_from_environment(monkeypatch, server_address):
    import gradtape
    import gradtape.tf as tf

    monkeypatch.setenv("GRADTAPE_ADDRESS", server_address)
    gradtape.set_default_session(None)
    try:
        x = tf.constant([1.0, 2.0])
        assert tf.reduce_sum(x * x).numpy() == pytest.approx(5.0)
        assert gradtape.get_default_session() is x.session
    finally:
        gradtape.get_default_session().close()
        gradtape.set_default_session(None)


def test_python_values_take_tensorflow_dtypes(gtf):
    tf = gtf
    assert tf.constant(3.0).dtype == tf.float32
    assert tf.constant(10).dtype == tf.int32
    assert tf.constant(2**40).dtype == tf.int64
    assert tf.constant(np.array([1.0])).dtype == tf.float64
    assert tf.Variable(3.0).dtype == tf.float32
    with pytest.raises(TypeError):
        tf.constant(1.5, dtype=tf.int32)


def test_session_checkpoint_round_trip(tmp_path):
    import gradtape

    with running_server(f"--checkpoint_dir={tmp_path}") as address:
        with gradtape.connect(address, timeout=10) as s:
            w = s.Variable(np.array([1.0, 2.0], dtype=np.float32), name="w")
            b = s.Variable(np.array(3.0, dtype=np.float32), name="b")
            info = s.save_checkpoint("ckpt-1", [w, b])
            assert sorted(info.variable_names) == ["b", "w"] and info.file_bytes > 0
            w.assign(np.array([9.0, 9.0], dtype=np.float32))
            b.assign(np.array(0.0, dtype=np.float32))
            restored = s.restore_checkpoint("ckpt-1")
            assert sorted(restored.variable_names) == ["b", "w"]
            np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])
            assert b.numpy() == 3.0
        # a new session restores what another saved
        with gradtape.connect(address, timeout=10) as s2:
            w2 = s2.Variable(np.zeros(2, dtype=np.float32), name="w")
            s2.restore_checkpoint("ckpt-1", [w2])
            np.testing.assert_array_equal(w2.numpy(), [1.0, 2.0])
            with pytest.raises(gradtape.GradtapeError) as e:
                s2.restore_checkpoint("no-such-checkpoint", [w2])
            assert "RestoreCheckpoint" in str(e.value)


def test_tf_train_checkpoint(tmp_path):
    import gradtape
    import gradtape.tf as tf

    with running_server(f"--checkpoint_dir={tmp_path}") as address:
        session = tf.connect(address, timeout=10)
        try:
            w = tf.Variable([1.0, 2.0], name="w")
            ckpt = tf.train.Checkpoint(model={"w": w})
            assert ckpt.save(str(tmp_path / "step-3")) == "step-3"
            w.assign([5.0, 5.0])
            ckpt.restore("step-3")
            np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])
            with pytest.raises(ValueError, match="needs a name"):
                tf.train.Checkpoint(v=tf.Variable(1.0))
        finally:
            gradtape.set_default_session(None)
            session.close()


def test_stop_gradient_gives_no_gradient(gt):
    x = gt.constant(np.array([1.0, 2.0]))
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.stop_gradient(x * x) * x
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [1.0, 4.0])


def test_custom_gradient_inputs_of_any_shape_and_dtype(gtf):
    """Inputs that neither have the output's shape nor broadcast to it (a
    matrix-vector product) get their traced gradients, float64 too."""
    tf = gtf

    @tf.custom_gradient
    def matvec(m, v, s):
        def grad(dy):
            return tf.matmul(dy, v, transpose_b=True) * 2.0, tf.matmul(m, dy, transpose_a=True), None

        return tf.matmul(m, v), grad

    m = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    v = tf.constant(np.array([[1.0], [2.0], [3.0]], dtype=np.float32))
    s = tf.constant(np.array([1.0, 2.0, 3.0, 4.0, 5.0]))  # float64, [5]: no gradient asked
    w = tf.constant(np.array([[1.0], [-2.0]], dtype=np.float32))
    with tf.GradientTape() as tape:
        tape.watch([m, v, s])
        y = tf.reduce_sum(matvec(m, v, s) * w)
    dm, dv, ds = tape.gradient(y, [m, v, s])
    np.testing.assert_allclose(y.numpy(), float(np.sum((np.arange(6).reshape(2, 3) @ [[1], [2], [3]]) * [[1], [-2]])))
    np.testing.assert_allclose(dm.numpy(), 2.0 * np.array([[1.0], [-2.0]]) @ np.array([[1.0, 2.0, 3.0]]))
    np.testing.assert_allclose(dv.numpy(), np.arange(6).reshape(2, 3).T @ np.array([[1.0], [-2.0]]))
    assert ds is None


def test_custom_gradient_float64_input_float32_output(gtf):
    tf = gtf

    @tf.custom_gradient
    def f(x64, x32):
        def grad(dy):
            return tf.cast(tf.reduce_sum(dy, axis=0) * 3.0, tf.float64), dy * 2.0

        return tf.cast(x64, tf.float32) * x32, grad

    a = tf.constant(np.array([1.0, 2.0]))
    b = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    with tf.GradientTape() as tape:
        tape.watch([a, b])
        y = tf.reduce_sum(f(a, b))
    da, db = tape.gradient(y, [a, b])
    assert da.dtype == np.float64
    np.testing.assert_allclose(da.numpy(), [9.0, 9.0])
    np.testing.assert_allclose(db.numpy(), np.full((3, 2), 2.0))


def test_custom_gradient_grad_cannot_read_values(gtf):
    tf = gtf

    @tf.custom_gradient
    def f(x):
        def grad(dy):
            return dy * float(dy.numpy())

        return tf.identity(x), grad

    with pytest.raises(RuntimeError, match="traced"):
        f(tf.constant(1.0))
    # nothing half-sent: the session still works
    assert tf.constant(2.0).numpy() == 2.0


def test_custom_gradient_failure_releases_no_traced_placeholder(gtf):
    """A failed trace's placeholders (negative ids) may outlive it in the
    exception's frames; dropping them later sends no release (a release of
    id -1 failed the session's next wait with NOT_FOUND)."""
    tf = gtf

    @tf.custom_gradient
    def f(x):
        def grad(dy):
            return dy * float(dy.numpy())

        return tf.identity(x), grad

    with pytest.raises(RuntimeError, match="traced") as info:
        f(tf.constant(1.0))
    del info  # the frames holding the traced upstream go now, tracer uninstalled
    gc.collect()
    assert tf.constant(3.0).numpy() == 3.0
    tf.get_default_session().sync()


def test_custom_gradient_leaves_no_stray_releases(gtf):
    tf = gtf

    @tf.custom_gradient
    def f(x):
        def grad(dy):
            return dy * tf.constant(0.5) + tf.zeros_like(dy)

        return x * 2.0, grad

    x = tf.constant([1.0, 2.0])
    for _ in range(3):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        np.testing.assert_allclose(tape.gradient(y, x).numpy(), [0.5, 0.5])
    x.session.sync()  # raises if a release named an id the server never had


def test_custom_gradient_recorded_only_through_links(gtf):
    """The forward's own ops are not recorded: with grad returning zeros
    the gradient is zeros, whatever f computes."""
    tf = gtf

    @tf.custom_gradient
    def f(x):
        def grad(dy):
            return tf.zeros_like(dy)

        return tf.exp(x) * x, grad

    x = tf.constant([0.5, 1.5])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    np.testing.assert_allclose(y.numpy(), np.exp([0.5, 1.5]) * [0.5, 1.5], rtol=1e-6)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [0.0, 0.0])


def test_jvp_none_without_a_round_trip(gtf, monkeypatch):
    tf = gtf
    x = tf.constant([1.0, 2.0])
    z = tf.constant([3.0, 4.0])
    with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 1.0])) as acc:
        y = z * z
        w = x * x
        n = tf.shape(w)
    core = x.session._core
    sent = []
    for name in ("enqueue", "call"):
        original = getattr(core, name)

        def spy(command, _original=original, _name=name):
            sent.append((_name, command.WhichOneof("kind")))
            return _original(command)

        monkeypatch.setattr(core, name, spy)
    assert acc.jvp(y) is None
    assert acc.jvp(n) is None
    assert sent == []  # the client knew: no FetchJvp
    j = acc.jvp(w)  # connected: a handle, buffered, no wait
    assert sent == [("enqueue", "fetch_jvp")]
    np.testing.assert_allclose(j.numpy(), [2.0, 4.0])


def test_forward_accumulator_variable_primal(gtf):
    tf = gtf
    v = tf.Variable([1.0, 3.0])
    with tf.autodiff.ForwardAccumulator(v, tf.constant([1.0, 0.5])) as acc:
        y = tf.reduce_sum(v * v)
    assert acc.jvp(y).numpy() == pytest.approx(2 * 1.0 * 1.0 + 2 * 3.0 * 0.5)
    np.testing.assert_array_equal(acc.jvp(v).numpy(), [1.0, 0.5])
    # after the block, reads of v have no tangent
    assert acc.jvp(v * 2.0) is None


def test_session_level_custom_gradient_and_accumulator(gt):
    """The same pieces without gradtape.tf: gradtape.custom_gradient and
    gradtape.ForwardAccumulator on a session's tensors."""
    import gradtape

    @gradtape.custom_gradient
    def clip(x):
        def grad(dy):
            return gt.ops.minimum(gt.ops.maximum(dy, gt.scalar(-1.0, np.float64)), gt.scalar(1.0, np.float64))

        return gt.ops.identity(x), grad

    x = gt.constant(np.array([1.0, 2.0]))
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.ops.sum(clip(x) * gt.constant(np.array([5.0, -0.5])), axis=[])
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [1.0, -0.5])
    with gradtape.ForwardAccumulator(x, np.array([1.0, 0.0])) as acc:
        z = gt.ops.exp(x)
    np.testing.assert_allclose(acc.jvp(z).numpy(), [np.e, 0.0])
