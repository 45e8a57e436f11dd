"""Error mapping and session isolation, through the Python client."""

import threading

import grpc
import numpy as np
import pytest

import gradtape  # noqa: E402  (pip install ./client/python)
from gradtape.v1 import tape_service_pb2 as pb  # noqa: E402
from gradtape.v1 import tape_service_pb2_grpc as pb_grpc  # noqa: E402


def _shape_unknown_to_the_client(gt, array):
    """`array` on the server behind an op whose output shape the client
    does not predict (Tile has no shape rule), so that only the server can
    refuse what is done with it."""
    return gt.ops.tile(gt.constant(array), [1] * np.ndim(array))


def test_bad_op_raises_at_the_wait_point_with_code_seq_and_op(gt):
    a = _shape_unknown_to_the_client(gt, np.ones((2, 3)))
    bad = gt.ops.mat_mul(a, a)  # buffered: no error yet
    seq = gt.last_seq
    later = gt.ops.exp(bad)  # uses the poisoned output
    with pytest.raises(gradtape.GradtapeError) as info:
        later.numpy()
    e = info.value
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT
    assert e.seq == seq
    assert e.op == "MatMul"
    assert "MatMul" in e.message and f"command {seq}" in e.message
    assert "[2,3]" in e.message
    assert "later command error" in e.message  # the poisoned Exp and the fetch
    # The session still works, and the poison is reported once.
    np.testing.assert_array_equal(gt.ops.mat_mul(a, a, transpose_b=True).numpy(), np.full((2, 2), 3.0))
    gt.sync()


def test_poisoned_input_is_failed_precondition_naming_the_first_failure(gt):
    a = _shape_unknown_to_the_client(gt, np.ones((2, 3)))
    bad = gt.ops.reshape(a, shape=[5])
    reshape_seq = gt.last_seq
    with pytest.raises(gradtape.GradtapeError):
        gt.sync()
    with pytest.raises(gradtape.GradtapeError) as info:
        gt.ops.exp(bad).numpy()
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert info.value.op == "Exp"
    assert f"Reshape (command {reshape_seq}" in info.value.message


@pytest.mark.parametrize(
    "run, code, needle",
    [
        (lambda s, a: s.execute("NoSuchOp", [a])[0], grpc.StatusCode.NOT_FOUND, "NoSuchOp"),
        (lambda s, a: s.ops.sum(a, axis=[5]), grpc.StatusCode.INVALID_ARGUMENT, "Sum"),
        (lambda s, a: s.ops.add_v2(s.ops.cast(a, DstT=np.int32), a), grpc.StatusCode.INVALID_ARGUMENT, "AddV2"),
        (lambda s, a: s.ops.read_variable_op(a), grpc.StatusCode.INVALID_ARGUMENT, "ReadVariableOp"),
    ],
)
def test_error_codes(gt, run, code, needle):
    a = gt.constant(np.ones((2, 3)))
    out = run(gt, a)
    with pytest.raises(gradtape.GradtapeError) as info:
        out.numpy()
    assert info.value.code == code
    assert needle in info.value.message
    np.testing.assert_array_equal((a * 2.0).numpy(), np.full((2, 3), 2.0))


def test_non_persistent_tape_refuses_a_second_gradient(gt):
    x = gt.constant(np.array([1.0, 2.0]))
    with gt.GradientTape() as tape:
        tape.watch(x)
        y = gt.ops.sum(x * x)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [2.0, 4.0])
    with pytest.raises(RuntimeError, match="non-persistent GradientTape can only be used"):
        tape.gradient(y, x)  # TensorFlow's RuntimeError, at the call
    gt.sync()  # nothing was sent


def test_unconnected_gradient_is_none(gt):
    x, z = gt.constant(np.ones(2)), gt.constant(np.ones(2))
    with gt.GradientTape() as tape:
        tape.watch([x, z])
        y = gt.ops.sum(x * 3.0)
    dx, dz = tape.gradient(y, [x, z])
    np.testing.assert_array_equal(dx.numpy(), [3.0, 3.0])
    assert dz is None  # known on the client (TensorFlow's None)


def test_local_misuse_raises_immediately(gt):
    with pytest.raises(TypeError):
        gt.ops.cast(gt.constant(np.ones(2)), DstT=np.int32) * 1.5  # a float on an int tensor (TF: TypeError)
    with pytest.raises(TypeError):
        gt.ops.sum(gt.constant(np.ones(2)), axiss=[0])  # an unknown attr (TF: TypeError at the call)
    with pytest.raises(TypeError):
        gt.ops.mat_mul(gt.constant(np.ones((1, 1))))  # missing input
    with gt.GradientTape() as tape:
        assert tape.gradient(gt.constant(1.0), []) == []  # TensorFlow: no sources, no gradients
    with pytest.raises(ValueError):
        with gt.GradientTape() as tape:
            tape.gradient(gt.constant(1.0), gt.constant(1.0), unconnected_gradients="sometimes")
    gt.sync()


def test_unreachable_server_is_an_error():
    with pytest.raises(gradtape.GradtapeError) as info:
        gradtape.connect("127.0.0.1:1", timeout=0.5)
    assert info.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def test_closed_session_refuses_wait_points(server_address):
    s = gradtape.connect(server_address)
    t = s.constant(np.ones(2))
    s.close()
    s.close()  # idempotent
    with pytest.raises(gradtape.GradtapeError) as info:
        t.numpy()
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION


# -- isolation --------------------------------------------------------------


def test_two_sessions_with_the_same_tensor_ids_do_not_see_each_other(server_address):
    with gradtape.connect(server_address) as a, gradtape.connect(server_address) as b:
        assert a.id != b.id
        ta = a.constant(np.array([1.0, 2.0]))
        tb = b.constant(np.array([[7, 8, 9]], dtype=np.int32))
        assert ta.id == tb.id  # ids are per session, chosen by each client
        np.testing.assert_array_equal(ta.numpy(), [1.0, 2.0])
        np.testing.assert_array_equal(tb.numpy(), [[7, 8, 9]])
        # Handles do not cross sessions.
        with pytest.raises(ValueError):
            a.ops.neg(tb)
        # Poison in one session does not leak into the other.
        bad = a.ops.reshape(_shape_unknown_to_the_client(a, np.array([1.0, 2.0])), shape=[3])
        with pytest.raises(gradtape.GradtapeError):
            bad.numpy()
        b.sync()
        np.testing.assert_array_equal((-tb).numpy(), [[-7, -8, -9]])
        # Tapes are per session too: the same tape id 1 in both.
        xa, xb = a.constant(np.array(2.0)), b.constant(np.array(5.0))
        with a.GradientTape() as tape_a, b.GradientTape() as tape_b:
            assert tape_a.id == tape_b.id
            tape_a.watch(xa)
            tape_b.watch(xb)
            ya, yb = xa * xa, xb * xb * xb
        assert float(tape_a.gradient(ya, xa)) == 4.0
        assert float(tape_b.gradient(yb, xb)) == 75.0
        stats_b = b.stats()
        del ta
        a.sync()
        assert b.stats().live_tensors == stats_b.live_tensors


def test_a_closed_session_leaves_others_working(server_address):
    with gradtape.connect(server_address) as b:
        x = b.constant(np.arange(3.0))
        with gradtape.connect(server_address) as a:
            a.constant(np.arange(3.0))
        np.testing.assert_array_equal((x + 1.0).numpy(), [1.0, 2.0, 3.0])


def test_a_token_only_opens_its_own_session(server_address):
    with gradtape.connect(server_address) as a, gradtape.connect(server_address) as b, \
            grpc.insecure_channel(server_address) as channel:
        raw = pb_grpc.TapeServiceStub(channel)
        a.constant(np.ones(1))
        a.sync()
        # The session's own metadata opens it (so the raw calls are right) ...
        alive = raw.KeepAlive(pb.KeepAliveRequest(), metadata=a._core.metadata, timeout=10)
        assert alive.last_applied_seq == a.last_seq
        # ... another session's token does not.
        token_b = dict(b._core.metadata)["gradtape-session-token"]
        mixed = [("gradtape-session-id", a.id), ("gradtape-session-token", token_b)]
        batch = pb.CommandBatch(commands=[pb.Command(seq=1000, fetch=pb.FetchTensor(id=1))])
        with pytest.raises(grpc.RpcError) as info:
            raw.Run(batch, metadata=mixed, timeout=10)
        assert info.value.code() in (
            grpc.StatusCode.UNAUTHENTICATED,
            grpc.StatusCode.PERMISSION_DENIED,
        )


def test_concurrent_sessions_get_distinct_ids(server_address):
    ids, errors = [], []

    def work():
        try:
            with gradtape.connect(server_address) as s:
                t = s.constant(np.full(4, len(s.id), dtype=np.float64))
                assert (t.numpy() == 32).all()
                ids.append(s.id)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert len(ids) == 16 and len(set(ids)) == 16
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


class _FakeStoppedCall(grpc.RpcError):
    """A failed call as grpc reports it, with trailing metadata."""

    def __init__(self, trailers):
        self._trailers = trailers

    def trailing_metadata(self):
        return self._trailers


@pytest.mark.no_client  # errors.py on a stand-in call
def test_last_applied_seq_is_read_from_the_trailer():
    from gradtape.errors import last_applied_seq_of

    assert last_applied_seq_of(_FakeStoppedCall((("gradtape-last-applied-seq", "17"),))) == 17
    assert last_applied_seq_of(_FakeStoppedCall((("other", "1"),))) is None
    assert last_applied_seq_of(_FakeStoppedCall(None)) is None
    bad = _FakeStoppedCall((("gradtape-last-applied-seq", "x"),))
    assert last_applied_seq_of(bad) is None
    error = gradtape.GradtapeError(
        grpc.StatusCode.DEADLINE_EXCEEDED, "stopped", last_applied_seq=17
    )
    assert error.last_applied_seq == 17


@pytest.mark.parametrize(
    "other, run, needle",
    [
        ((2, 3), lambda s, a, b: s.ops.mat_mul(a, b), "inner dimensions 3 and 2 differ"),
        ((2, 3), lambda s, a, b: s.ops.reshape(a, shape=[5]), "cannot reshape [2, 3] (6 elements) to [5]"),
        ((2, 3), lambda s, a, b: s.ops.reshape(a, shape=[-1, 4]), "cannot reshape [2, 3] (6 elements) to [-1, 4]"),
        ((4,), lambda s, a, b: a + b, "shapes [2, 3] and [4] do not broadcast"),
        ((3, 2), lambda s, a, b: s.ops.mul(a, b), "shapes [2, 3] and [3, 2] do not broadcast"),
    ],
)
def test_what_the_client_sees_will_fail_raises_at_the_call(gt, other, run, needle):
    """Known shapes that the server is sure to refuse raise
    InvalidArgumentError at the call, as TensorFlow eager does: nothing is
    sent, nothing is poisoned, a try/except around the op catches it."""
    a = gt.constant(np.ones((2, 3)))
    b = gt.constant(np.ones(other))
    gt.sync()
    before = gt.last_seq
    with pytest.raises(gradtape.errors.InvalidArgumentError) as info:
        run(gt, a, b)
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in info.value.message and f"input ids [{a.id}" in info.value.message, info.value.message
    assert gt.last_seq == before  # not sent
    np.testing.assert_array_equal((a * 2.0).numpy(), np.full((2, 3), 2.0))
