"""The exceptions the client raises for server and stream errors, and how a
failed call's status is classified (the server's own, or a transport
failure)."""

from __future__ import annotations

import re
from typing import Dict, Optional, Sequence, Tuple

import grpc

from gradtape._metadata import (  # noqa: F401 (re-exported: public names)
    LAST_APPLIED_SEQ_TRAILER,
    PROXY_VERDICT_TRAILER,
    REPLICA_UNREACHABLE_VERDICT,
    SERVER_STATUS_TRAILER,
)

_CODES = {code.value[0]: code for code in grpc.StatusCode}
_OP_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*) \(command \d+")
# The server's message for a gradient that is disabled or not defined
# (PreventGradient, LRNGrad, ...): TensorFlow raises LookupError for these.
_NO_GRADIENT_RE = re.compile(r"the gradient of [A-Za-z0-9_]+ is not supported")


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

    def __new__(cls, code: grpc.StatusCode, message: str, *args: object, **kwargs: object) -> "GradtapeError":
        # GradtapeError(code, message) is an instance of the subclass named
        # after TensorFlow's class for the code (tf.errors.InvalidArgumentError,
        # ...), so that TF's ``except`` clauses work; a disabled / undefined
        # gradient is also a LookupError, as in TensorFlow.
        if cls is GradtapeError:
            if code == grpc.StatusCode.UNIMPLEMENTED and _NO_GRADIENT_RE.search(str(message)):
                cls = GradientUnsupportedError
            else:
                cls = _BY_CODE.get(code, GradtapeError)
        return super().__new__(cls)


class CancelledError(GradtapeError):
    """A GradtapeError with code CANCELLED (TensorFlow's tf.errors.CancelledError)."""


class UnknownError(GradtapeError):
    """A GradtapeError with code UNKNOWN (TensorFlow's tf.errors.UnknownError)."""


class InvalidArgumentError(GradtapeError):
    """A GradtapeError with code INVALID_ARGUMENT (TensorFlow's tf.errors.InvalidArgumentError)."""


class DeadlineExceededError(GradtapeError):
    """A GradtapeError with code DEADLINE_EXCEEDED (TensorFlow's tf.errors.DeadlineExceededError)."""


class NotFoundError(GradtapeError):
    """A GradtapeError with code NOT_FOUND (TensorFlow's tf.errors.NotFoundError)."""


class AlreadyExistsError(GradtapeError):
    """A GradtapeError with code ALREADY_EXISTS (TensorFlow's tf.errors.AlreadyExistsError)."""


class PermissionDeniedError(GradtapeError):
    """A GradtapeError with code PERMISSION_DENIED (TensorFlow's tf.errors.PermissionDeniedError)."""


class ResourceExhaustedError(GradtapeError):
    """A GradtapeError with code RESOURCE_EXHAUSTED (TensorFlow's tf.errors.ResourceExhaustedError)."""


class FailedPreconditionError(GradtapeError):
    """A GradtapeError with code FAILED_PRECONDITION (TensorFlow's tf.errors.FailedPreconditionError)."""


class AbortedError(GradtapeError):
    """A GradtapeError with code ABORTED (TensorFlow's tf.errors.AbortedError)."""


class OutOfRangeError(GradtapeError):
    """A GradtapeError with code OUT_OF_RANGE (TensorFlow's tf.errors.OutOfRangeError)."""


class UnimplementedError(GradtapeError):
    """A GradtapeError with code UNIMPLEMENTED (TensorFlow's tf.errors.UnimplementedError)."""


class InternalError(GradtapeError):
    """A GradtapeError with code INTERNAL (TensorFlow's tf.errors.InternalError)."""


class UnavailableError(GradtapeError):
    """A GradtapeError with code UNAVAILABLE (TensorFlow's tf.errors.UnavailableError)."""


class DataLossError(GradtapeError):
    """A GradtapeError with code DATA_LOSS (TensorFlow's tf.errors.DataLossError)."""


class UnauthenticatedError(GradtapeError):
    """A GradtapeError with code UNAUTHENTICATED (TensorFlow's tf.errors.UnauthenticatedError)."""


_BY_CODE: Dict[grpc.StatusCode, type] = {
    grpc.StatusCode.CANCELLED: CancelledError,
    grpc.StatusCode.UNKNOWN: UnknownError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.ABORTED: AbortedError,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRangeError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
    grpc.StatusCode.INTERNAL: InternalError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DATA_LOSS: DataLossError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
}


class GradientUnsupportedError(UnimplementedError, LookupError):
    """A gradient the server does not compute because it is disabled
    (PreventGradient) or not defined (as in TensorFlow, e.g. LRNGrad's):
    UNIMPLEMENTED, and a LookupError as TensorFlow raises."""


class SessionLostError(GradtapeError):
    """The session can no longer be used from this client: raised by every
    wait point (and every later call) once the session's command stream
    failed for good. One of:

    * ``UNAVAILABLE`` (``reason == "unreachable"``): the connection failed
      and reconnecting within ``connect(reconnect_timeout=...)`` did not
      succeed, or the proxy answered the reconnect probes for 2 s that the
      session's replica is unreachable (its ``gradtape-proxy-verdict``
      trailer): "session <id>: server <addr> unreachable for <T> s (<N>
      reconnect attempts): <last error>". The server may still hold the
      session: connecting again with the same session id and token is not
      possible from this client, so start a new session.
    * ``NOT_FOUND`` (``reason == "not_found"``): the server answered, but
      no longer has the session (it restarted, drained, or its lease ran
      out). Create a new session (and restore a checkpoint).
    * ``UNAVAILABLE`` (``reason == "draining"``): the server is draining
      and ended the stream; never retried: restore the drain checkpoint
      (``--checkpoint_on_drain``) in a new session on another replica or
      after the restart.
    * any other code (``reason == "ended"``): the server ended the stream
      with a status of its own (a malformed batch, a revoked key, ...).

    Commands that were buffered or unacknowledged when the session was lost
    may or may not have been applied.

    Attributes (beyond GradtapeError's): ``session_id``, ``address``,
    ``reason``, ``attempts`` (reconnect attempts made) and ``seconds``
    (time spent trying).
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        session_id: str,
        address: str,
        reason: str,
        attempts: int = 0,
        seconds: float = 0.0,
        last_applied_seq: Optional[int] = None,
    ):
        super().__init__(code, message, last_applied_seq=last_applied_seq)
        self.session_id = session_id
        self.address = address
        self.reason = reason
        self.attempts = attempts
        self.seconds = seconds


# A call that ends with one of these and without the server-status trailer
# failed in transport (proto: "Which statuses are the server's").
TRANSPORT_CODES = frozenset(
    (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
)


def _trailers(error: grpc.RpcError) -> Sequence[Tuple[str, str]]:
    trailers = getattr(error, "trailing_metadata", None)
    if trailers is None:
        return ()
    try:
        return tuple(trailers() or ())
    except (TypeError, ValueError):
        return ()


def is_server_status(error: grpc.RpcError) -> bool:
    """Whether the gradtape server itself sent this status (its trailer
    ``gradtape-server-status: 1``)."""
    return any(key == SERVER_STATUS_TRAILER for key, _ in _trailers(error))


def is_replica_unreachable(error: grpc.RpcError) -> bool:
    """Whether the proxy answered this call with its verdict that the
    session's replica is unreachable (still a transport failure)."""
    return any(
        key == PROXY_VERDICT_TRAILER and value == REPLICA_UNREACHABLE_VERDICT
        for key, value in _trailers(error)
    )


def is_transport_failure(error: grpc.RpcError) -> bool:
    """UNAVAILABLE, INTERNAL or UNKNOWN that the server did not send: a
    dropped connection, a proxy's RST_STREAM or 502. Worth a reconnect."""
    code = error.code() if callable(getattr(error, "code", None)) else None
    return code in TRANSPORT_CODES and not is_server_status(error)


def last_applied_seq_of(error: grpc.RpcError) -> Optional[int]:
    """The trailer gradtape-last-applied-seq of a failed call, or None."""
    for key, value in _trailers(error):
        if key == LAST_APPLIED_SEQ_TRAILER:
            try:
                return int(value)
            except (TypeError, ValueError):
                return None
    return None
