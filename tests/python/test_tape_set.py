"""gradtape._tape.TapeSet alone (no server): the bookkeeping the tapes and
forward accumulators share, as the server's recording rule has it."""

from __future__ import annotations

from typing import Any, List

import numpy as np
import pytest

from gradtape._tape import CONNECTED, MAYBE, NOT_CONNECTED, TapeSet
from gradtape._tensor import Tensor
from gradtape.v1 import tape_service_pb2 as pb

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)


class _Core:
    def __init__(self) -> None:
        self.commands: List[Any] = []

    def release(self, tensor_id: int) -> None:
        pass

    def enqueue(self, command: Any) -> int:
        self.commands.append(command)
        return len(self.commands)


class _Session:
    def __init__(self) -> None:
        self._core = _Core()
        self._next = 0

    def tensor(self, dtype: np.dtype = F32) -> Tensor:
        self._next += 1
        return Tensor(self, self._next, dtype, ())  # type: ignore[arg-type]


def _ops() -> List[Any]:
    return [
        pb.OpInfo(name="Mul", input_names=["x", "y"], differentiable=True),
        pb.OpInfo(name="Less", input_names=["x", "y"], differentiable=False),
        pb.OpInfo(name="Loss", input_names=["logits", "labels"], differentiable=True, non_differentiable_inputs=[1]),
    ]


@pytest.mark.no_client
def test_accumulator_connection_follows_ops() -> None:
    s = _Session()
    tapes = TapeSet(None, _ops())
    acc = tapes.new_recorder("accumulator", 7)
    tapes.push(acc)
    assert tapes.active
    x, c = s.tensor(), s.tensor()
    assert tapes.watch(acc, [x, s.tensor(I32)]) == [x.id, None]  # ints: not watched
    y = s.tensor()
    tapes.on_execute("Mul", [x, c], [y])
    assert tapes.jvp_connection(acc, y) == CONNECTED
    assert tapes.jvp_connection(acc, c) == NOT_CONNECTED
    b = s.tensor(np.dtype(np.bool_))
    tapes.on_execute("Less", [y, c], [b])  # not differentiable: no tangent
    assert tapes.jvp_connection(acc, b) == NOT_CONNECTED
    loss = s.tensor()
    tapes.on_execute("Loss", [c, y], [loss])  # y only at a non-differentiable input
    assert tapes.jvp_connection(acc, loss) == NOT_CONNECTED
    tapes.pop(acc)
    assert not tapes.active
    z = s.tensor()
    tapes.on_execute("Mul", [y, y], [z])  # nothing records: nothing changes
    assert z._conn is None


@pytest.mark.no_client
def test_gradients_under_another_recorder_are_maybe_and_stop_all_stops() -> None:
    s = _Session()
    tapes = TapeSet(None, _ops())
    outer = tapes.new_recorder("tape", 1, persistent=True)
    inner = tapes.new_recorder("tape", 2)
    tapes.push(outer)
    tapes.push(inner)
    x, w = s.tensor(), s.tensor()
    tapes.watch(outer, [x])
    tapes.watch(inner, [x, w])
    y = s.tensor()
    tapes.on_execute("Mul", [x, x], [y])
    assert tapes.connection(inner, [y], x) == CONNECTED
    assert tapes.connection(inner, [y], w) == NOT_CONNECTED
    tapes.pop(inner)
    dy = s.tensor()
    tapes.on_gradient(inner, [y, x], [dy])
    assert tapes.connection(outer, [dy], x) == MAYBE  # depends on Mul's backward
    assert tapes.connection(inner, [dy], x) == NOT_CONNECTED  # suspended during its gradient
    tapes.stop_all()
    assert not tapes.active and tapes.stopped
    tapes.start_all()
    assert tapes.active


@pytest.mark.no_client
def test_deleted_recorders_free_their_bits_and_leave_their_sources() -> None:
    s = _Session()
    tapes = TapeSet(None, _ops())
    x = s.tensor()
    for k in range(500):  # bits are reused: masks stay bounded
        rec = tapes.new_recorder("tape", k + 1)
        tapes.push(rec)
        tapes.watch(rec, [x])
        tapes.delete(rec)
        assert x._conn is None
    assert tapes._next_bit < 300


@pytest.mark.no_client
def test_variables_read_under_a_tape_are_watched_before_the_read() -> None:
    class _Var:
        trainable = True

        def __init__(self, handle: Tensor) -> None:
            self.handle = handle

    s = _Session()
    tapes = TapeSet(s._core, _ops())  # type: ignore[arg-type]
    rec = tapes.new_recorder("tape", 3, watch_accessed_variables=True)
    tapes.push(rec)
    v = _Var(s.tensor(np.dtype([("resource", "<i8")])))
    tapes.on_read_variable(v)  # type: ignore[arg-type]
    tapes.on_read_variable(v)  # type: ignore[arg-type]
    watches = [c for c in s._core.commands if c.WhichOneof("kind") == "watch"]
    assert len(watches) == 1 and list(watches[0].watch.ids) == [v.handle.id]
    assert tapes.watched_variables(rec) == [v]
    frozen = _Var(s.tensor(np.dtype([("resource", "<i8")])))
    frozen.trainable = False
    tapes.on_read_variable(frozen)  # type: ignore[arg-type]
    assert len(s._core.commands) == 1
