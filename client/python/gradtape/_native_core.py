"""The compiled backend (internal): ``NativeCore``, gradtape._native's
``Core`` (C++, over the C++ client's SessionCore: client/src) with the few
methods that parse protobuf messages in Python.

The hot methods (``execute``, ``release``, ``new_id``, ``fetch``, ...) are
the native class's own, so a call from Python reaches C++ with no Python
frame between. ``enqueue`` and ``call`` serialize their ``pb.Command`` here
and the extension parses it into the command buffer (rare commands: tapes,
gradients, stats, checkpoints). Behaviour, errors and counters are those of
``gradtape._core.StreamCore`` (see gradtape/_backend.py, the contract).

Importing this module raises ImportError when the extension is not built;
``gradtape._backend.native_unavailable()`` says why.
"""

from __future__ import annotations

import os
import sys
from typing import Dict, List, Mapping, Optional, Tuple

import grpc
import numpy as np

from gradtape import _backend, _dtypes, _transport
from gradtape._core import TRANSPORT_COUNTERS
from gradtape._transport import ConnectOptions, pem
from gradtape._metadata import (
    COMMAND_OP_PAYLOAD,
    COMMAND_SEQ_PAYLOAD,
    LAST_APPLIED_SEQ_TRAILER,
    LOST_ATTEMPTS_PAYLOAD,
    LOST_REASON_PAYLOAD,
    LOST_SECONDS_PAYLOAD,
    SESSION_ID_HEADER,
    SESSION_TOKEN_HEADER,
)


def _load_extension() -> None:
    """Imports gradtape._native with RTLD_DEEPBIND where the platform has it.
    TensorFlow's wheels export their own protobuf, absl and gRPC symbols;
    with TensorFlow imported first, those would resolve the extension's
    references meant for the system's gRPC C++ and protobuf, and the first
    connect crashed (segfault). Deep binding makes the extension and the
    libraries it brings prefer their own definitions."""
    deepbind = getattr(os, "RTLD_DEEPBIND", 0)
    flags = sys.getdlopenflags()
    if deepbind:
        sys.setdlopenflags(flags | deepbind)
    try:
        import gradtape._native  # noqa: F401 (ImportError when the extension is not built)
    finally:
        sys.setdlopenflags(flags)


_load_extension()
from gradtape._native import Core  # noqa: E402
from gradtape.errors import GradtapeError, SessionLostError, status_code
from gradtape.v1 import tape_service_pb2 as pb
from gradtape.v1 import tape_service_pb2_grpc as pb_grpc



def _int_or_none(value: Optional[str]) -> Optional[int]:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def make_error(
    code: int, message: str, payloads: Mapping[str, str], session_id: str, address: str
) -> GradtapeError:
    """The exception for a failed absl::Status of the extension (it raises
    what this returns): SessionLostError for a lost session, else a
    GradtapeError with the command's seq and op when it names one."""
    last_applied = _int_or_none(payloads.get(LAST_APPLIED_SEQ_TRAILER))
    reason = payloads.get(LOST_REASON_PAYLOAD)
    if reason is not None:
        return SessionLostError(
            status_code(code),
            message,
            session_id=session_id,
            address=address,
            reason=reason,
            attempts=_int_or_none(payloads.get(LOST_ATTEMPTS_PAYLOAD)) or 0,
            seconds=float(payloads.get(LOST_SECONDS_PAYLOAD) or 0.0),
            last_applied_seq=last_applied,
        )
    return GradtapeError(
        status_code(code),
        message,
        seq=_int_or_none(payloads.get(COMMAND_SEQ_PAYLOAD)),
        op=payloads.get(COMMAND_OP_PAYLOAD) or None,
        last_applied_seq=last_applied,
    )


class NativeCore(Core):
    """One session's connection, in C++ (gradtape._backend.Backend)."""

    metadata: List[Tuple[str, str]]

    def __init__(self, address: str, options: ConnectOptions) -> None:
        settings: Dict[str, object] = {
            "session_id": options.session_id,
            "keep_alive_seconds": options.keep_alive_seconds,
            "batch_size": options.batch_size,
            "max_batch_bytes": options.max_batch_bytes,
            "chunk_bytes": options.chunk_bytes,
            "max_unacked_bytes": options.max_unacked_bytes,
            "timeout": options.timeout,
            "reconnect_timeout": options.reconnect_timeout,
            "api_key": options.api_key or None,
            "keepalive_time": options.keepalive_time or None,
            "keepalive_timeout": options.keepalive_timeout,
            "keepalive_permit_without_calls": options.keepalive_permit_without_calls,
        }
        if options.tls is not None or options.server_name_override:
            settings.update(
                tls=True,
                root_certificates=_ascii(pem("root_certificates", options.root_certificates)),
                private_key=_ascii(pem("private_key", options.private_key)),
                certificate_chain=_ascii(pem("certificate_chain", options.certificate_chain)),
                server_name_override=options.server_name_override,
            )
        super().__init__(address, settings, make_error)
        self._stub: Optional[pb_grpc.TapeServiceStub] = None
        self._channel: Optional[grpc.Channel] = None
        self._channel_args = (options.tls, options.server_name_override)
        self.timeout = options.timeout
        self.reconnect_timeout = float(options.reconnect_timeout)
        self.metadata = [
            (SESSION_ID_HEADER, self.session_id),
            (SESSION_TOKEN_HEADER, self._token),
            *options.key_metadata(),
        ]

    @property
    def stub(self) -> pb_grpc.TapeServiceStub:
        """A grpcio stub to the session's server (its own channel, made on
        first use), for callers of raw RPCs with ``metadata``, as
        StreamCore.stub. The session itself never uses it."""
        if self._stub is None:
            tls, name = self._channel_args
            options = _transport.channel_options(server_name_override=name)
            if tls is None:
                self._channel = grpc.insecure_channel(self.address, options=options)
            else:
                self._channel = grpc.secure_channel(self.address, tls, options=options)
            self._stub = pb_grpc.TapeServiceStub(self._channel)
        return self._stub

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._channel is not None:
                self._channel.close()
                self._channel = None
                self._stub = None

    def put(self, tensor_id: int, array: np.ndarray) -> None:
        """Buffers the put of `array` (chunked above chunk_bytes): the
        extension copies it once, from the array's buffer."""
        dtype = _dtypes.to_pb_dtype(array.dtype)
        data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        self._put(tensor_id, dtype, array.shape, data)  # (ascontiguousarray makes 0-d 1-d)

    def enqueue(self, command: pb.Command) -> int:
        seq: int = self._enqueue(command.SerializeToString())
        command.seq = seq
        return seq

    def call(self, command: pb.Command) -> pb.CommandResult:
        return pb.CommandResult.FromString(self._call(command.SerializeToString()))

    def list_ops(self) -> pb.ListOpsResponse:
        return pb.ListOpsResponse.FromString(self._list_ops())

    def transport_stats(self) -> Dict[str, int]:
        """Counters of transport failures and resumes (TRANSPORT_COUNTERS)."""
        counters = self._counters()
        return {name: int(counters[name]) for name in TRANSPORT_COUNTERS}


def _ascii(value: Optional[bytes]) -> Optional[str]:
    return None if value is None else value.decode("ascii")
