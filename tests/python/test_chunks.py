"""Tensors larger than one chunk through the Python client (gradtape/_chunks.py).

A server with --max_message_mb=1 takes no message above 1 MiB, so a 3 MiB
tensor can only travel in chunks; the client's chunk_bytes is small so the
tests cross many chunk boundaries, at sizes that are not a multiple of it.
"""

import numpy as np
import pytest

import gradtape
from conftest import running_server

CHUNK = 200_000  # bytes; not a divisor of the sizes below


@pytest.fixture(scope="module")
def small_server():
    with running_server("--max_message_mb=1", "--session_memory_limit_mb=16") as address:
        yield address


@pytest.fixture
def session(small_server):
    with gradtape.connect(small_server, timeout=10, chunk_bytes=CHUNK) as s:
        yield s


@pytest.mark.parametrize(
    "shape, dtype",
    [
        (((3 << 18) + 3,), np.float32),  # 3 MiB + 12 bytes
        ((1000, 333), np.float64),  # 2664000 bytes: 14 chunks, the last short
        ((CHUNK // 4,), np.float32),  # exactly one chunk: the plain path
        ((CHUNK // 4 + 1,), np.int32),  # one element more
        ((700_001,), np.bool_),
        ((70_000, 5), np.int64),
    ],
)
def test_round_trip_above_one_chunk(session, shape, dtype):
    rng = np.random.default_rng(14)
    if dtype == np.bool_:
        value = rng.random(shape) < 0.5
    else:
        value = (rng.standard_normal(shape) * 1000).astype(dtype)
    sent_before = session.counters["batches_sent"]
    t = session.constant(value)
    back = t.numpy()
    assert back.dtype == value.dtype and back.shape == value.shape
    np.testing.assert_array_equal(back, value)
    chunks = -(-value.nbytes // CHUNK)
    # Each chunk is a batch of its own, both ways.
    assert session.counters["batches_sent"] - sent_before >= (2 * chunks if chunks > 1 else 1)


def test_ops_read_a_chunked_tensor(session):
    value = np.arange(1 << 19, dtype=np.float64)  # 4 MiB
    t = session.constant(value)
    assert float(session.ops.sum(t).numpy()) == float(value.sum())
    np.testing.assert_array_equal((t * 2.0).numpy(), value * 2.0)


def test_begin_over_the_memory_limit_fails_before_the_first_chunk(session):
    t = session.constant(np.zeros(5 << 20, dtype=np.float32))  # 20 MiB > 16 MiB
    with pytest.raises(gradtape.GradtapeError) as e:
        session.sync()
    assert e.value.code.name == "RESOURCE_EXHAUSTED"
    assert "PutTensorBegin" in e.value.message
    assert "session memory limit exceeded" in e.value.message
    stats = session.stats()
    assert stats.live_tensors == 0
    assert stats.bytes_in_use < 1 << 20  # nothing was stored
    with pytest.raises(gradtape.GradtapeError) as read:
        t.numpy()
    assert read.value.code.name == "FAILED_PRECONDITION"
    np.testing.assert_array_equal(session.constant(np.ones(3)).numpy(), np.ones(3))


def test_without_chunks_the_server_refuses_a_tensor_larger_than_a_message(small_server):
    # The control: one 3 MiB PutTensor does not fit a 1 MiB message.
    s = gradtape.connect(small_server, timeout=10, chunk_bytes=64 << 20)
    try:
        s.constant(np.zeros(3 << 18, dtype=np.float32))
        with pytest.raises(gradtape.GradtapeError) as e:
            s.sync()
        assert e.value.code.name == "RESOURCE_EXHAUSTED"
    finally:
        try:
            s.close()
        except gradtape.GradtapeError:
            pass  # the stream died with the refusal


def test_chunk_bytes_below_one_is_refused(small_server):
    with pytest.raises(ValueError, match="chunk_bytes"):
        gradtape.connect(small_server, timeout=10, chunk_bytes=0)
