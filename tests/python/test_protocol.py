"""The wire protocol from Python: generated stubs only, no client library."""

import secrets

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

pytestmark = pytest.mark.no_client  # generated stubs only

TIMEOUT_S = 10

NP_TO_DTYPE = {
    np.dtype(np.float32): 1,  # DTYPE_FLOAT32
    np.dtype(np.float64): 2,
    np.dtype(np.int32): 3,
    np.dtype(np.int64): 4,
    np.dtype(np.bool_): 5,
}
DTYPE_TO_NP = {v: k for k, v in NP_TO_DTYPE.items()}


def to_value(pb, array):
    array = np.asarray(array)
    return pb.pb2.TensorValue(
        dtype=NP_TO_DTYPE[array.dtype],
        shape=list(array.shape),
        data=array.astype(array.dtype.newbyteorder("<")).tobytes(order="C"),
    )


def from_value(value):
    dtype = DTYPE_TO_NP[value.dtype].newbyteorder("<")
    return np.frombuffer(value.data, dtype=dtype).reshape(tuple(value.shape))


class Session:
    """A session plus helpers to build and run commands."""

    def __init__(self, pb, stub):
        self.pb, self.stub = pb, stub
        session_id = secrets.token_hex(16)  # client-proposed, 128 bits
        response = stub.CreateSession(
            pb.pb2.CreateSessionRequest(session_id=session_id),
            metadata=[("gradtape-session-id", session_id)],
            timeout=TIMEOUT_S,
        )
        assert response.session_id == session_id
        assert response.keep_alive_seconds == 60  # the server's default
        self.metadata = [
            ("gradtape-session-id", response.session_id),
            ("gradtape-session-token", response.token),
        ]

    def put(self, seq, tensor_id, array):
        return self.pb.pb2.Command(
            seq=seq, put=self.pb.pb2.PutTensor(id=tensor_id, value=to_value(self.pb, array))
        )

    def execute(self, seq, op, inputs, outputs, **attrs):
        command = self.pb.pb2.Command(
            seq=seq,
            execute=self.pb.pb2.ExecuteOp(op=op, input_ids=inputs, output_ids=outputs),
        )
        for name, value in attrs.items():
            attr = command.execute.attrs[name]
            if isinstance(value, bool):
                attr.b = value
            else:
                attr.ints.values.extend(value)
        return command

    def fetch(self, seq, tensor_id):
        return self.pb.pb2.Command(seq=seq, fetch=self.pb.pb2.FetchTensor(id=tensor_id))

    def run(self, *commands, batch_id=0):
        return self.stub.Run(
            self.pb.pb2.CommandBatch(batch_id=batch_id, commands=commands),
            metadata=self.metadata,
            timeout=TIMEOUT_S,
        )

    def close(self):
        self.stub.CloseSession(
            self.pb.pb2.CloseSessionRequest(), metadata=self.metadata, timeout=TIMEOUT_S
        )


@pytest.fixture
def session(pb, stub):
    s = Session(pb, stub)
    yield s
    s.close()


def results_by_seq(reply):
    return {r.seq: r for r in reply.results}


def test_calls_need_session_metadata(pb, stub):
    with pytest.raises(grpc.RpcError) as info:
        stub.Run(pb.pb2.CommandBatch(), timeout=TIMEOUT_S)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize(
    "array",
    [
        np.arange(6, dtype=np.float32).reshape(2, 3) / 7,
        np.array([np.pi, -1e300], dtype=np.float64),
        np.array([[-3, 2**31 - 1]], dtype=np.int32),
        np.array([-(2**62), 5], dtype=np.int64),
        np.array([True, False, True]),
        np.float64(2.5),
    ],
)
def test_put_fetch_round_trip(session, array):
    reply = session.run(session.put(1, 1, array), session.fetch(2, 1))
    (result,) = reply.results
    fetched = from_value(result.tensor)
    assert fetched.dtype == np.asarray(array).dtype
    assert fetched.shape == np.shape(array)
    np.testing.assert_array_equal(fetched, array)


def test_put_execute_fetch(session):
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(4, 3)), rng.normal(size=(3, 5))
    reply = session.run(
        session.put(1, 1, x),
        session.put(2, 2, w),
        session.execute(3, "MatMul", [1, 2], [3]),
        session.execute(4, "Tanh", [3], [4]),
        session.execute(5, "Sum", [4], [5], axis=[1]),
        session.fetch(6, 4),
        session.fetch(7, 5),
        batch_id=42,
    )
    assert reply.batch_id == 42
    assert reply.last_seq == 7
    results = results_by_seq(reply)
    np.testing.assert_allclose(from_value(results[6].tensor), np.tanh(x @ w), rtol=1e-12)
    np.testing.assert_allclose(
        from_value(results[7].tensor), np.tanh(x @ w).sum(axis=1), rtol=1e-12
    )


def test_stream_answers_each_batch_in_order(pb, session):
    batches = [
        pb.pb2.CommandBatch(batch_id=1, commands=[session.put(1, 1, np.array([1.0, 2.0]))]),
        pb.pb2.CommandBatch(batch_id=2, commands=[session.execute(2, "Square", [1], [2])]),
        pb.pb2.CommandBatch(batch_id=3, commands=[session.fetch(3, 2)]),
    ]
    replies = list(
        session.stub.Stream(iter(batches), metadata=session.metadata, timeout=TIMEOUT_S)
    )
    assert [r.batch_id for r in replies] == [1, 2, 3]
    assert [r.last_seq for r in replies] == [1, 2, 3]
    np.testing.assert_array_equal(from_value(replies[2].results[0].tensor), [1.0, 4.0])


def test_gradient_matches_numpy(pb, session):
    # loss = sum(tanh(x @ w)); dloss/dx = (1 - tanh^2) @ w^T, dloss/dw = x^T @ (1 - tanh^2).
    rng = np.random.default_rng(1)
    x, w = rng.normal(size=(2, 3)), rng.normal(size=(3, 4))
    reply = session.run(
        session.put(1, 1, x),
        session.put(2, 2, w),
        pb.pb2.Command(seq=3, push_tape=pb.pb2.PushTape(tape_id=1)),
        pb.pb2.Command(seq=4, watch=pb.pb2.Watch(tape_id=1, ids=[1, 2])),
        session.execute(5, "MatMul", [1, 2], [3]),
        session.execute(6, "Tanh", [3], [4]),
        session.execute(7, "Sum", [4], [5]),
        pb.pb2.Command(
            seq=8,
            gradient=pb.pb2.Gradient(
                tape_id=1,
                target_ids=[5],
                source_ids=[1, 2],
                result_ids=[6, 7],
                return_values=True,
            ),
        ),
    )
    (result,) = reply.results
    assert result.seq == 8
    assert result.WhichOneof("kind") == "gradient", result
    assert list(result.gradient.is_none) == [False, False]
    dy = 1 - np.tanh(x @ w) ** 2
    dx, dw = (from_value(v) for v in result.gradient.values)
    np.testing.assert_allclose(dx, dy @ w.T, rtol=1e-12)
    np.testing.assert_allclose(dw, x.T @ dy, rtol=1e-12)


def test_bad_matmul_is_a_per_command_error(session):
    reply = session.run(
        session.put(1, 1, np.ones((2, 3))),
        session.put(2, 2, np.ones((2, 3))),
        session.execute(3, "MatMul", [1, 2], [3]),
        session.execute(4, "Exp", [3], [4]),
        session.execute(5, "MatMul", [1, 2], [5], transpose_b=True),
        session.fetch(6, 5),
    )
    results = results_by_seq(reply)
    bad = results[3].error
    assert grpc.StatusCode.INVALID_ARGUMENT.value[0] == bad.code
    assert "MatMul" in bad.message and "3" in bad.message and "[2,3]" in bad.message
    poisoned = results[4].error
    assert grpc.StatusCode.FAILED_PRECONDITION.value[0] == poisoned.code
    assert "MatMul (command 3" in poisoned.message
    np.testing.assert_array_equal(from_value(results[6].tensor), np.full((2, 2), 3.0))


def test_list_ops_reports_elision(pb, stub):
    ops = {op.name: op for op in stub.ListOps(pb.pb2.ListOpsRequest(), timeout=TIMEOUT_S).ops}
    assert list(ops["MatMul"].saved_inputs) == [0, 1]
    assert list(ops["Exp"].saved_outputs) == [0]
    assert list(ops["Exp"].saved_inputs) == []


def test_health_check_serving(channel):
    response = health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT_S
    )
    assert response.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_tape_service(channel):
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    (response,) = list(stub.ServerReflectionInfo(iter([request]), timeout=TIMEOUT_S))
    names = {s.name for s in response.list_services_response.service}
    assert "gradtape.v1.TapeService" in names
    assert "grpc.health.v1.Health" in names


def test_run_past_its_deadline_names_the_last_applied_seq(session):
    # Issue 13: a batch stops before its next command at the call's deadline;
    # a big MatMul stops within a block. The status and the trailer
    # gradtape-last-applied-seq say where the session stands.
    session.run(
        session.put(1, 1, np.full((1, 1), 0.5, np.float32)),
        session.execute(2, "BroadcastTo", [1], [2], shape=[8192, 8192]),
    )
    batch = session.pb.pb2.CommandBatch(
        commands=[
            session.execute(3, "MatMul", [2, 2], [3]),
            session.execute(4, "MatMul", [3, 2], [4]),
        ]
    )
    with pytest.raises(grpc.RpcError) as info:
        session.stub.Run(batch, metadata=session.metadata, timeout=2.0)
    error = info.value
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "last applied seq 3" in error.details()
    trailers = dict(error.trailing_metadata())
    assert trailers.get("gradtape-last-applied-seq") == "3"
    # The session still works; seq 4 never ran.
    reply = session.run(session.fetch(5, 4), session.put(6, 9, np.ones(2)), session.fetch(7, 9))
    results = results_by_seq(reply)
    assert results[5].error.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert list(from_value(results[7].tensor)) == [1.0, 1.0]
