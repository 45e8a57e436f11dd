"""Reconnecting after a transport failure (internal): the backoff, the
bounded retry of unary calls, and the one clear error a lost session raises.

How a session resumes (StreamCore, _core.py): every batch sent stays in the
client until a reply acknowledges it (a reply acknowledges its batch and
every earlier one). When the Stream ends in transport (UNAVAILABLE, INTERNAL
or UNKNOWN without the server's `gradtape-server-status` trailer), the
reader thread probes the session with KeepAlive, with exponential backoff
and jitter, until it answers or `reconnect_timeout` seconds have passed
since the last reply; it then opens a new Stream on the same session and
sends again every unacknowledged batch, with its original seqs. The server
skips the commands it already applied and answers them from its kept
results (proto: "Exactly-once application"). A probe the proxy answers
with its replica-unreachable verdict (errors.is_replica_unreachable) is
retried too, but once probes in a row have carried it for
REPLICA_UNREACHABLE_GRACE_S the session is lost (ReplicaVerdicts),
whatever remains of `reconnect_timeout`. Any other status is final: the
session is lost and every wait point raises one SessionLostError.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Callable, Optional, TypeVar

import grpc

from gradtape.errors import (
    GradtapeError,
    SessionLostError,
    is_server_status,
    is_transport_failure,
    last_applied_seq_of,
)

T = TypeVar("T")

# Backoff between reconnect attempts: the first at once, then 50 ms doubling
# to at most 1 s, each delay jittered to [50%, 100%] of its value.
INITIAL_DELAY_S = 0.05
MAX_DELAY_S = 1.0
# The clock of an outage (reconnect_timeout) runs from the first failure
# after the last reply; an idle stream (nothing unacknowledged) that stayed
# up this long also ends the outage.
STABLE_STREAM_S = 1.0
# gRPC's own reconnect backoff (its default starts at 1 s and grows to
# 120 s), set to match unless the caller gave channel options for it.
CHANNEL_BACKOFF_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


# How long reconnect probes in a row must carry the proxy's
# replica-unreachable verdict before the session is lost. Waiting longer
# does not help: a replica that restarts comes back without the session
# (NOT_FOUND), and one the proxy cannot reach for this long is taken as
# gone. A failure without the verdict (the proxy itself unreachable) keeps
# the whole reconnect_timeout.
REPLICA_UNREACHABLE_GRACE_S = 2.0


class ReplicaVerdicts:
    """The reconnect probes in a row that carried the proxy's
    replica-unreachable verdict (one reconnect loop: not thread-safe)."""

    def __init__(self) -> None:
        self._first: Optional[float] = None
        self._count = 0

    def record(self, verdict: bool, now: Optional[float] = None) -> bool:
        """Records a probe that failed in transport (at monotonic time
        `now`), with the verdict or without (which starts the count again);
        True once the verdict is final: at least two probes in a row carried
        it, the first at least the grace before the last."""
        now = time.monotonic() if now is None else now
        if not verdict:
            self._first, self._count = None, 0
            return False
        if self._first is None:
            self._first = now
        self._count += 1
        return self._count >= 2 and now - self._first >= REPLICA_UNREACHABLE_GRACE_S

    def cap(self, delay: float, now: Optional[float] = None) -> float:
        """`delay`, shortened so that the next probe comes by the grace's
        end (at least 1 ms from now) while verdicts are being counted."""
        if self._first is None:
            return delay
        now = time.monotonic() if now is None else now
        return min(delay, max(self._first + REPLICA_UNREACHABLE_GRACE_S - now, 0.001))


class Backoff:
    """Delays before successive attempts, bounded by a deadline."""

    def __init__(self, timeout: float, rng: Optional[random.Random] = None) -> None:
        self.start = time.monotonic()
        self.deadline = self.start + max(timeout, 0.0)
        self.attempts = 0
        self._next = 0.0
        self._rng = rng or random.Random()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def next_delay(self) -> Optional[float]:
        """The delay before the next attempt (0 for the first, at most the
        time left), or None once the deadline passed (at once for a timeout
        of 0). Counts the attempt."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            return None
        # The last attempt comes at the deadline, not before it.
        delay = min(self._next * self._rng.uniform(0.5, 1.0), remaining)
        self._next = INITIAL_DELAY_S if self._next == 0 else min(self._next * 2, MAX_DELAY_S)
        self.attempts += 1
        return delay


def describe(error: BaseException) -> str:
    """"CODE: details" of a failed call (or the exception's text)."""
    if isinstance(error, grpc.RpcError) and callable(getattr(error, "code", None)):
        code = error.code()
        return f"{code.name if code else 'UNKNOWN'}: {error.details()}"
    if isinstance(error, GradtapeError):
        return str(error)
    return f"{type(error).__name__}: {error}"


def unreachable(
    session_id: str, address: str, backoff: Backoff, last: BaseException
) -> SessionLostError:
    seconds = backoff.elapsed()
    return SessionLostError(
        grpc.StatusCode.UNAVAILABLE,
        f"session {session_id}: server {address} unreachable for {seconds:.1f} s "
        f"({backoff.attempts} reconnect attempts): {describe(last)}",
        session_id=session_id,
        address=address,
        reason="unreachable",
        attempts=backoff.attempts,
        seconds=seconds,
    )


def final(
    session_id: str, address: str, error: grpc.RpcError, backoff: Optional[Backoff] = None
) -> SessionLostError:
    """The SessionLostError for a status that is not retried."""
    # A stand-in error (not grpc's own) may answer None despite the stubs.
    status: Optional[grpc.StatusCode] = error.code()
    code = grpc.StatusCode.UNKNOWN if status is None else status
    details = error.details() or ""
    if code == grpc.StatusCode.NOT_FOUND:
        reason = "not_found"
        message = (
            f"session {session_id}: the server no longer has this session (it restarted, "
            f"drained, or its lease ran out): {details}"
        )
    elif code == grpc.StatusCode.UNAVAILABLE and is_server_status(error):
        reason = "draining"
        message = (
            f"session {session_id}: server {address} is draining and ended the session's "
            f"stream (not retried): restore the drain checkpoint in a new session: {details}"
        )
    else:
        reason = "ended"
        message = f"session {session_id}: the command stream ended: {code.name}: {details}"
    return SessionLostError(
        code,
        message,
        session_id=session_id,
        address=address,
        reason=reason,
        attempts=backoff.attempts if backoff else 0,
        seconds=backoff.elapsed() if backoff else 0.0,
        last_applied_seq=last_applied_seq_of(error),
    )


def attempt_timeout(backoff: Backoff, per_call_timeout: float) -> float:
    """A call's deadline: `per_call_timeout` for a first call, and for a
    retry also bounded by the time left (at least 100 ms)."""
    if backoff.attempts == 0:
        return per_call_timeout
    return max(0.1, min(per_call_timeout, backoff.remaining()))


def retry_unary(
    call: Callable[[float], T],
    backoff: Backoff,
    per_call_timeout: float,
    stop: Optional[threading.Event] = None,
) -> T:
    """Runs `call(timeout_s)` until it succeeds, retrying transport failures
    (is_transport_failure) after `backoff`'s delays until its deadline;
    raises any other failure at once and the last transport failure once
    the deadline passed (or `stop` was set: the session is closing)."""
    while True:
        try:
            return call(attempt_timeout(backoff, per_call_timeout))
        except grpc.RpcError as e:
            if not is_transport_failure(e):
                raise
            delay = backoff.next_delay()
            if delay is None or (stop is not None and stop.is_set()):
                raise
            if stop is not None:
                stop.wait(delay)
            else:
                time.sleep(delay)
