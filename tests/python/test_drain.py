"""Graceful drain of the real gradtape-server binary on SIGTERM.

A long batch in flight when SIGTERM arrives finishes (its last command
assigns a variable, so the checkpoint shows it ran); the process exits 0
well within --shutdown_grace_seconds; with --checkpoint_on_drain the
session's variables are restored by a second server process from
drain-<session_id>; an open Python client session reports the drain as
UNAVAILABLE "server draining; reconnect ...".
"""

import queue
import signal
import threading
import time

import grpc
import numpy as np
import pytest

TIMEOUT_S = 20
GRACE_S = 15


def f64(pb, array):
    array = np.asarray(array, dtype="<f8")
    return pb.pb2.TensorValue(dtype=2, shape=list(array.shape), data=array.tobytes())


class Raw:
    """A session driven by unary Run calls on the generated stubs."""

    def __init__(self, pb, address):
        self.pb = pb
        self.channel = grpc.insecure_channel(address)
        self.stub = pb.pb2_grpc.TapeServiceStub(self.channel)
        response = self.stub.CreateSession(pb.pb2.CreateSessionRequest(), timeout=TIMEOUT_S)
        self.id = response.session_id
        self.metadata = [
            ("gradtape-session-id", response.session_id),
            ("gradtape-session-token", response.token),
        ]
        self.seq = 0
        self.commands = []

    def add(self, **kind):
        self.seq += 1
        self.commands.append(self.pb.pb2.Command(seq=self.seq, **kind))
        return self.seq

    def put(self, tensor_id, array):
        return self.add(put=self.pb.pb2.PutTensor(id=tensor_id, value=f64(self.pb, array)))

    def execute(self, op, inputs, outputs, attrs=None):
        e = self.pb.pb2.ExecuteOp(op=op, input_ids=inputs, output_ids=outputs)
        for name, value in (attrs or {}).items():
            e.attrs[name].CopyFrom(value)
        return self.add(execute=e)

    def var(self, handle, name, n):
        attr = self.pb.pb2.AttrValue
        return self.execute(
            "VarHandleOp",
            [],
            [handle],
            {
                "dtype": attr(type=2),
                "shape": attr(ints=self.pb.pb2.IntList(values=[n])),
                "shared_name": attr(s=name),
            },
        )

    def fetch(self, tensor_id):
        return self.add(fetch=self.pb.pb2.FetchTensor(id=tensor_id))

    def run(self):
        batch = self.pb.pb2.CommandBatch(commands=self.commands)
        self.commands = []
        return self.stub.Run(batch, metadata=self.metadata, timeout=TIMEOUT_S)


def values(result):
    assert result.WhichOneof("kind") != "error", result.error.message
    return np.frombuffer(result.tensor.data, dtype="<f8")


def long_batch(session, n, count):
    """Chained n x n identity MatMuls, then w := [4, 5, 6]; returns the seq
    of the final fetch of w."""
    session.put(100, np.eye(n))
    for k in range(count):
        session.execute("MatMul", [100 + k, 100], [101 + k])
    session.put(20, [4.0, 5.0, 6.0])
    session.execute("AssignVariableOp", [1, 20], [])
    session.execute("ReadVariableOp", [1], [21])
    return session.fetch(21)


def matmuls_lasting(pb, address, seconds):
    """How many chained 512 x 512 MatMuls take about `seconds` here."""
    probe = Raw(pb, address)
    probe.put(100, np.eye(512))
    for k in range(8):
        probe.execute("MatMul", [100 + k, 100], [101 + k])
    start = time.monotonic()
    probe.run()
    each = (time.monotonic() - start) / 8
    return int(min(2000, max(8, seconds / each)))


@pytest.mark.no_client  # raw stubs
def test_sigterm_finishes_in_flight_work_checkpoints_and_exits_0(pb, servers, tmp_path):
    first = servers(
        f"--checkpoint_dir={tmp_path}",
        "--checkpoint_on_drain",
        f"--shutdown_grace_seconds={GRACE_S}",
    )
    trained = Raw(pb, first.address)
    trained.var(1, "w", 3)
    trained.put(10, [1.0, 2.0, 3.0])
    trained.execute("AssignVariableOp", [1, 10], [])
    trained.run()
    count = matmuls_lasting(pb, first.address, 2.0)
    fetch = long_batch(trained, 512, count)

    replies = queue.Queue()
    threading.Thread(target=lambda: replies.put(trained.run()), daemon=True).start()
    time.sleep(0.3)  # the batch is running
    signalled = time.monotonic()
    first.proc.send_signal(signal.SIGTERM)
    reply = replies.get(timeout=TIMEOUT_S)  # the batch finished, over the same call
    assert reply.last_seq == fetch
    np.testing.assert_array_equal(values({r.seq: r for r in reply.results}[fetch]), [4, 5, 6])
    assert first.proc.wait(timeout=GRACE_S + 5) == 0
    took = time.monotonic() - signalled
    assert took < GRACE_S / 2, f"drain took {took:.1f} s of a {GRACE_S} s grace"
    output = first.output()
    assert "draining" in output
    assert "saved 1 checkpoint(s) (1 variable(s)" in output, output
    assert trained.metadata[1][1] not in output  # the token is never printed
    name = f"drain-{trained.id}"
    assert [p.name for p in tmp_path.iterdir()] == [name]

    second = servers(f"--checkpoint_dir={tmp_path}")
    restored = Raw(pb, second.address)
    restored.var(1, "w", 3)
    restore = restored.add(restore_checkpoint=pb.pb2.RestoreCheckpoint(name=name))
    restored.execute("ReadVariableOp", [1], [2])
    read = restored.fetch(2)
    results = {r.seq: r for r in restored.run().results}
    assert results[restore].WhichOneof("kind") != "error", results[restore].error.message
    np.testing.assert_array_equal(values(results[read]), [4, 5, 6])


def test_python_client_reports_the_drain(servers):
    import gradtape

    server = servers(f"--shutdown_grace_seconds={GRACE_S}")
    with grpc.insecure_channel(server.address) as channel:
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        health = health_pb2_grpc.HealthStub(channel)
        check = health_pb2.HealthCheckRequest(service="gradtape.v1.TapeService")
        assert health.Check(check, timeout=TIMEOUT_S).status == health_pb2.HealthCheckResponse.SERVING
    session = gradtape.connect(server.address, timeout=10)
    try:
        x = session.constant(np.array([1.0, 2.0]))
        np.testing.assert_array_equal(x.numpy(), [1.0, 2.0])
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=GRACE_S + 5) == 0
        with pytest.raises(gradtape.GradtapeError) as caught:
            session.constant(np.array([3.0])).numpy()
        assert caught.value.code == grpc.StatusCode.UNAVAILABLE
        assert "server draining; reconnect" in caught.value.message
    finally:
        try:
            session.close()
        except gradtape.GradtapeError:
            pass  # the server is gone


@pytest.mark.no_client  # raw stubs
def test_second_signal_exits_at_once(pb, servers):
    server = servers(f"--shutdown_grace_seconds={GRACE_S}")
    busy = Raw(pb, server.address)
    busy.var(1, "w", 3)
    long_batch(busy, 512, matmuls_lasting(pb, server.address, 4.0))
    threading.Thread(target=lambda: pytest.raises(grpc.RpcError, busy.run), daemon=True).start()
    time.sleep(0.3)  # the batch is running: the drain waits for it
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert server.proc.poll() is None, "the drain should still wait for the batch"
    second = time.monotonic()
    server.proc.send_signal(signal.SIGINT)
    assert server.proc.wait(timeout=GRACE_S) == 1
    assert time.monotonic() - second < 1.5
    assert "again, exiting now" in server.output()
