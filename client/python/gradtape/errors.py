"""The exception the client raises for server and stream errors."""

from __future__ import annotations

import re
from typing import Optional

import grpc

_CODES = {code.value[0]: code for code in grpc.StatusCode}
_OP_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*) \(command \d+")


def status_code(value: int) -> grpc.StatusCode:
    """The grpc.StatusCode for a numeric google.rpc.Code (UNKNOWN if unknown)."""
    return _CODES.get(value, grpc.StatusCode.UNKNOWN)


class GradtapeError(Exception):
    """A failed command, stream or call of a gradtape session.

    Raised at the point that waits (``Tensor.numpy()``, ``Session.sync()``,
    ``GradientTape.gradient_values()``, closing the session, ...) for the
    earliest error the session had not reported yet; later errors are counted
    in the message.

    Attributes:
      code: the ``grpc.StatusCode`` the server (or gRPC) reported.
      seq: the sequence number of the failed command ("command <seq>" in the
        server's message), or None for stream / RPC failures.
      op: the op of the failed command as the client sent it (e.g.
        ``"MatMul"``; the command kind such as ``"Gradient"`` or
        ``"FetchTensor"`` for other commands), or None for stream / RPC
        failures.
      message: the server's message (it names the op, the command's sequence
        number and the offending ids or shapes).
      last_applied_seq: for a stream the server stopped because its deadline
        passed or it was cancelled (DEADLINE_EXCEEDED / CANCELLED), the last
        command seq it applied (its trailer ``gradtape-last-applied-seq``);
        None otherwise, or when the client's own deadline fired first.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        seq: Optional[int] = None,
        op: Optional[str] = None,
        last_applied_seq: Optional[int] = None,
    ):
        self.code = code
        self.message = message
        self.seq = seq
        self.last_applied_seq = last_applied_seq
        if op is None:
            match = _OP_RE.match(message)
            op = match.group(1) if match else None
        self.op: Optional[str] = op
        super().__init__(f"{code.name}: {message}")


LAST_APPLIED_SEQ_TRAILER = "gradtape-last-applied-seq"


def last_applied_seq_of(error: grpc.RpcError) -> Optional[int]:
    """The trailer gradtape-last-applied-seq of a failed call, or None."""
    trailers = getattr(error, "trailing_metadata", None)
    if trailers is None:
        return None
    try:
        for key, value in trailers() or ():
            if key == LAST_APPLIED_SEQ_TRAILER:
                return int(value)
    except (TypeError, ValueError):
        return None
    return None
