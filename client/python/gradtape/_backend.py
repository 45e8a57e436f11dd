"""The contract between the Python API and the transport behind it (internal).

A Session talks to its server through a *backend*: the pipelined command
stream (ids, buffer, batches, the reader thread, resume, chunking, errors).
There are two implementations of one interface, ``Backend`` below:

* ``gradtape._native`` (the compiled extension over the C++ client's
  SessionCore, client/src), used when it was built;
* ``gradtape._core.StreamCore`` (pure Python over grpcio), used otherwise
  or when asked for (``connect(native=False)``, ``GRADTAPE_NATIVE=0``).

The Python layer (tensors, variables, tapes, ops) is the same for both, so
every behaviour above the transport is shared and the test suite runs
against each (tests/python/conftest.py).

The hot path is ``execute``: one call per op, no protobuf built in Python.
Attrs arrive already encoded by their declared type (``encode_attrs``):
a list of ``(name, kind, value)`` with the kinds below. Everything rarer
(tapes, gradients, forward mode, stats, checkpoints) is a ``pb.Command``
built in Python and passed to ``enqueue`` / ``call``.

Errors: wait points (``fetch``, ``call``, ``sync``, ``flush`` of a lost
session, ``close``) raise ``GradtapeError`` (``SessionLostError`` once the
session is lost) for the earliest failed command not reported yet, with its
seq. Nothing else waits or raises for a server-side failure.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from gradtape.v1 import tape_service_pb2 as pb

# Attr kinds of encode_attrs' triples (name, kind, value).
ATTR_BOOL = 0  # value: bool
ATTR_INT = 1  # value: int
ATTR_FLOAT = 2  # value: float
ATTR_STRING = 3  # value: str
ATTR_TYPE = 4  # value: int (a gradtape.v1.DataType)
ATTR_INTS = 5  # value: list of int
EncodedAttr = Tuple[str, int, Any]
# gRPC call metadata: (key, value) pairs, as grpcio takes them.
Metadata = Tuple[Tuple[str, str], ...]


class Backend(Protocol):
    """One session's connection to its server."""

    # Read-only for the Python layer (plain attributes or properties).
    @property
    def session_id(self) -> str: ...
    @property
    def keep_alive_seconds(self) -> int: ...
    @property
    def metadata(self) -> Sequence[Tuple[str, str]]:
        """What every call of the session carries: gradtape-session-id,
        gradtape-session-token (and the API key's authorization, if any).
        Raw stubs beside the client use it (the tests do)."""
        ...
    @property
    def closed(self) -> bool: ...
    @property
    def chunk_bytes(self) -> int: ...
    @property
    def commands_sent(self) -> int: ...
    @property
    def batches_sent(self) -> int: ...

    # -- ids (chosen by the client, never reused within a session) ---------
    def new_id(self) -> int: ...
    def new_tape_id(self) -> int: ...

    # -- buffered commands (never wait, except for max_unacked_bytes) ------
    def execute(
        self,
        op: str,
        input_ids: Sequence[int],
        num_outputs: int,
        attrs: Optional[List[EncodedAttr]],
    ) -> int:
        """Buffers ExecuteOp(op, input_ids, attrs) with `num_outputs` new
        consecutive output ids; returns the first (0 when num_outputs is 0).
        A closed session buffers nothing (the ids are still returned)."""
        ...
    def put(self, tensor_id: int, array: np.ndarray) -> None:
        """Buffers a put of `array` at `tensor_id` (chunked when larger than
        chunk_bytes)."""
        ...
    def release(self, tensor_id: int) -> None:
        """Buffers the release of `tensor_id`: sent before the next command
        buffered after this call. Safe in finalizers (never blocks)."""
        ...
    def delete_tape(self, tape_id: int, pop_first: bool = False) -> None:
        """Buffers DeleteTape (after PopTape if pop_first). Finalizer-safe."""
        ...
    def enqueue(self, command: pb.Command) -> int:
        """Buffers any other command (its seq is set here); returns the seq."""
        ...
    def flush(self) -> None: ...

    # -- wait points -------------------------------------------------------
    def fetch(self, tensor_id: int) -> np.ndarray:
        """The value at `tensor_id` (chunked when large)."""
        ...
    def call(self, command: pb.Command) -> pb.CommandResult:
        """Buffers `command`, flushes and returns its result."""
        ...
    def sync(self, timeout: Optional[float] = None) -> None: ...
    def list_ops(self) -> pb.ListOpsResponse: ...
    def keep_alive(self) -> None: ...
    def close(self) -> None: ...

    # -- introspection -----------------------------------------------------
    def last_seq(self) -> int: ...
    def transport_stats(self) -> Dict[str, int]: ...


def to_pb_attr(out: pb.AttrValue, kind: int, value: Any) -> None:
    """Fills `out` from one encoded attr (the pure backend's encoder)."""
    if kind == ATTR_BOOL:
        out.b = value
    elif kind == ATTR_INT:
        out.i = value
    elif kind == ATTR_FLOAT:
        out.f = value
    elif kind == ATTR_STRING:
        out.s = value
    elif kind == ATTR_TYPE:
        out.type = value
    elif kind == ATTR_INTS:
        out.ints.values.extend(value)
    else:
        raise ValueError(f"unknown attr kind {kind}")


# -- which implementation ------------------------------------------------

def native_unavailable() -> Optional[str]:
    """None when the compiled extension imports; else why it does not."""
    global _NATIVE_ERROR
    if _NATIVE_ERROR == "":
        try:
            from gradtape import _native_core  # noqa: F401 (imports gradtape._native)

            _NATIVE_ERROR = None
        except ImportError as e:
            _NATIVE_ERROR = f"{type(e).__name__}: {e}"
    return _NATIVE_ERROR


_NATIVE_ERROR: Optional[str] = ""  # "": not tried yet


def use_native(native: Optional[bool], has_grpc_credentials: bool) -> bool:
    """Whether connect() uses the extension: `native` True (required: an
    ImportError says why it cannot), False (never), None (the default: when
    it is built, unless a grpc.ChannelCredentials object is given, which
    only grpcio understands). With native None the environment decides
    first: GRADTAPE_NATIVE=0 never, GRADTAPE_NATIVE=1 required (the tests
    use it to run each case on each implementation)."""
    import os

    if native is False:
        return False
    if native is None:
        env = os.environ.get("GRADTAPE_NATIVE", "")
        if env == "0" or has_grpc_credentials:
            return False
        if env != "1":
            return native_unavailable() is None
    if has_grpc_credentials:
        raise ValueError(
            "connect(native=True): the native client takes PEM bytes (root_certificates, "
            "private_key, certificate_chain), not a grpc.ChannelCredentials object"
        )
    why = native_unavailable()
    if why is not None:
        raise ImportError(f"connect(native=True): gradtape's native extension is not available: {why}")
    return True
