"""The Python client's seqs strictly increase within its session, also across
failed commands, local errors and wait points: the server (exactly-once
application) reports no duplicate, applied every command, and its last
applied seq is the client's last seq."""

import gc

import grpc
import numpy as np
import pytest

import gradtape
from gradtape.v1 import tape_service_pb2 as pb
from gradtape.v1 import tape_service_pb2_grpc as pb_grpc


def server_view(address, session):
    """(commands_applied, duplicate_commands) of the session, read with raw
    calls beside the client (a Stats command with a seq far above the
    client's, so nothing the client sends later is compared with it: call
    this last)."""
    with grpc.insecure_channel(address) as channel:
        raw = pb_grpc.TapeServiceStub(channel)
        metadata = session._core.metadata
        reply = raw.Run(
            pb.CommandBatch(commands=[pb.Command(seq=1 << 60, stats=pb.Stats())]),
            metadata=metadata,
            timeout=10,
        )
        stats = reply.results[0].stats
        alive = raw.KeepAlive(pb.KeepAliveRequest(), metadata=metadata, timeout=10)
    assert alive.last_applied_seq == 1 << 60
    return stats.commands_applied, stats.duplicate_commands


def test_seqs_increase_across_errors_and_wait_points(server_address):
    with gradtape.connect(server_address, timeout=10) as gt:
        a = gt.ops.tile(gt.constant(np.ones((2, 3))), [1, 1])  # a shape the client does not predict
        bad = gt.ops.mat_mul(a, a)  # fails on the server
        with pytest.raises(gradtape.GradtapeError):
            gt.ops.exp(bad).numpy()
        with pytest.raises(gradtape.GradtapeError) as info:  # an unknown op
            gt.execute("NoSuchOp", [a])[0].numpy()
        assert info.value.code == grpc.StatusCode.NOT_FOUND
        for _ in range(3):
            np.testing.assert_array_equal(gt.ops.add_v2(a, a).numpy(), np.full((2, 3), 2.0))
        # Handles kept only by reference cycles (the caught exceptions'
        # tracebacks) are released now, so that their ReleaseTensors goes
        # before server_view's far seq, not at close after it.
        del info
        gc.collect()
        gt.sync()
        last = gt.last_seq
        applied, duplicates = server_view(server_address, gt)
        assert duplicates == 0
        assert applied == last + 1  # every client command, and the Stats
