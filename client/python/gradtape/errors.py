"""The exceptions the client raises for server and stream errors, and how a
failed call's status is classified (the server's own, or a transport
failure)."""

from __future__ import annotations

import re
from typing import Optional, Sequence, Tuple

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


LAST_APPLIED_SEQ_TRAILER = "gradtape-last-applied-seq"
SERVER_STATUS_TRAILER = "gradtape-server-status"
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


# The proxy's verdict (deploy/k8s/nginx/proxy.conf; docs/RELIABILITY.md "A replica lost
# behind the proxy"): a status the proxy answers because it cannot reach the
# replica the session id routes to carries this trailer with this value.
PROXY_VERDICT_TRAILER = "gradtape-proxy-verdict"
REPLICA_UNREACHABLE_VERDICT = "replica-unreachable"


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
