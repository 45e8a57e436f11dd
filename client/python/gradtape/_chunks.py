"""Tensors larger than one chunk: chunked puts and fetches (internal).

The same scheme as the C++ client (client/src/chunks.cc). A put larger than
``chunk_bytes`` is one PutTensorBegin (the server charges the whole tensor
then) and PutTensorChunk commands in order, each flushed as a batch of its
own; like any put it does not wait. A fetch always asks for at most one
chunk (FetchTensor.max_bytes), so a small tensor still takes one round
trip; when the first chunk's total_bytes says there is more, the remaining
chunks are requested each in a batch of its own, up to ``_FETCH_WINDOW`` in
flight, and copied into one buffer as they arrive.
"""

from __future__ import annotations

import collections
from typing import Deque, Optional, Protocol, Sequence, Tuple, Union, cast

import grpc
import numpy as np

from gradtape import _dtypes
from gradtape.errors import GradtapeError
from gradtape.v1 import tape_service_pb2 as pb

_FETCH_WINDOW = 4


class Core(Protocol):
    """What chunked transfers need of a backend (StreamCore has it)."""

    chunk_bytes: int

    def enqueue(self, command: pb.Command) -> int: ...
    def flush(self) -> None: ...
    def call(self, command: pb.Command) -> pb.CommandResult: ...
    def send_for_result(self, command: pb.Command) -> Tuple[int, int]: ...
    def await_result(self, seq: int, batch_id: int) -> pb.CommandResult: ...


def put(core: Core, tensor_id: int, array: np.ndarray) -> None:
    """Buffers the put of `array` at `tensor_id`, in chunks if it is larger
    than core.chunk_bytes."""
    chunk = core.chunk_bytes
    if array.nbytes <= chunk:
        core.enqueue(pb.Command(put=pb.PutTensor(id=tensor_id, value=_dtypes.to_value(array))))
        return
    dtype = cast("pb.DType.ValueType", _dtypes.to_pb_dtype(array.dtype))
    data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
    core.enqueue(
        pb.Command(put_begin=pb.PutTensorBegin(id=tensor_id, dtype=dtype, shape=list(array.shape)))
    )
    for offset in range(0, len(data), chunk):
        core.flush()  # the chunk goes alone
        core.enqueue(
            pb.Command(
                put_chunk=pb.PutTensorChunk(
                    id=tensor_id, offset=offset, data=data[offset : offset + chunk]
                )
            )
        )
    core.flush()


def _fetch_command(tensor_id: int, offset: int, max_bytes: int) -> pb.Command:
    return pb.Command(fetch=pb.FetchTensor(id=tensor_id, offset=offset, max_bytes=max_bytes))


def _bad(tensor_id: int, seq: int, why: str) -> GradtapeError:
    return GradtapeError(
        grpc.StatusCode.INTERNAL,
        f"fetch of tensor id {tensor_id}: the server's result for command {seq} {why}",
        seq=seq,
    )


def _array(
    dtype: int, shape: Sequence[int], buffer: Union[bytes, bytearray], copy: bool = False
) -> np.ndarray:
    """`buffer`'s bytes as a writable array: a copy of immutable bytes
    (`copy`), none of a bytearray (as _dtypes.from_value decodes)."""
    if dtype == pb.DTYPE_RESOURCE:
        d = np.dtype("<i8")
    else:
        d = _dtypes.from_pb_dtype(dtype).newbyteorder("<")
    array = np.frombuffer(buffer, dtype=d).reshape(tuple(shape))
    return array.astype(d.newbyteorder("="), copy=copy)


def fetch(core: Core, tensor_id: int) -> np.ndarray:
    """Wait point: the value at `tensor_id`, in chunks of at most
    core.chunk_bytes."""
    chunk = core.chunk_bytes
    result = core.call(_fetch_command(tensor_id, 0, chunk))
    kind = result.WhichOneof("kind")
    if kind == "tensor":
        return _dtypes.from_value(result.tensor)
    if kind != "chunk":
        raise _bad(tensor_id, result.seq, "holds no tensor")
    head = result.chunk
    total = head.total_bytes
    if head.offset != 0 or len(head.data) != min(chunk, total):
        raise _bad(tensor_id, result.seq, "is not the tensor's first chunk")
    data = head.data  # one copy out of the message
    if total == len(data):
        return _array(head.dtype, head.shape, data, copy=True)
    buffer = bytearray(total)
    view = memoryview(buffer)
    view[: len(data)] = data
    in_flight: Deque[Tuple[Tuple[int, int], int]] = collections.deque()
    offset = chunk
    failure: Optional[GradtapeError] = None
    while offset < total or in_flight:
        while failure is None and offset < total and len(in_flight) < _FETCH_WINDOW:
            in_flight.append((core.send_for_result(_fetch_command(tensor_id, offset, chunk)), offset))
            offset += chunk
        if not in_flight:
            break
        sent, at = in_flight.popleft()
        try:
            part = core.await_result(*sent)
        except GradtapeError as e:
            failure = failure or e
            continue
        if failure is not None:
            continue  # collect what is in flight, then raise
        size = min(chunk, total - at)
        if (
            part.WhichOneof("kind") != "chunk"
            or part.chunk.offset != at
            or part.chunk.total_bytes != total
            or len(part.chunk.data) != size
        ):
            failure = _bad(tensor_id, part.seq, f"is not the chunk at offset {at} of {total} bytes")
            continue
        view[at : at + size] = part.chunk.data
    if failure is not None:
        raise failure
    return _array(head.dtype, head.shape, buffer)
