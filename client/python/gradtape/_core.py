"""The pipelined command stream behind a Session (internal).

How it works (the same scheme as the C++ client, client/src/session.cc):
every call that changes server state appends one ``Command`` to a buffer and
returns at once; ids of tensors and tapes are chosen here, so an op's outputs
are named before the server has run it. The buffer goes out as one
``CommandBatch`` on the session's bidi ``Stream`` when it holds
``batch_size`` commands or ``max_batch_bytes`` bytes, or at a *wait point*
(a fetch, gradient values, stats, sync, close). The sender never waits for
the reply to the previous batch; a reader thread collects the replies (one
per batch, in order), storing results by sequence number and errors in a
list. A wait point flushes, waits for the reply to the last batch sent and
raises the earliest unreported error as a GradtapeError.

Every batch stays in ``_unacked`` until a reply acknowledges it (a reply
acknowledges its batch and every earlier one); each batch tells the server,
in ``ack_seq``, up to which seq the client holds every result. When the
stream fails in transport, the reader thread reconnects and sends the
unacknowledged batches again with their seqs (_resume.py says how); wait
points meanwhile just wait. Once the session is lost for good every wait
point, and every later call, raises one SessionLostError.

Released ids (handles garbage-collected) and deleted tapes go into deques
without taking a lock (a finalizer may run anywhere, even while this thread
holds the lock) and are sent as one ReleaseTensors (and DeleteTape commands)
at the front of the next batch's tail.
"""

from __future__ import annotations

import collections
import itertools
import queue
import secrets
import threading
import time
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    Iterator,
    List,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    TypeVar,
)

import grpc
import numpy as np

from gradtape import _backend, _chunks, _resume
from gradtape._metadata import SESSION_ID_HEADER, SESSION_TOKEN_HEADER
from gradtape._transport import ConnectOptions
from gradtape.errors import (
    GradtapeError,
    SessionLostError,
    is_replica_unreachable,
    is_server_status,
    is_transport_failure,
    status_code,
)
from gradtape.v1 import tape_service_pb2 as pb
from gradtape.v1 import tape_service_pb2_grpc as pb_grpc

_END = None  # in an outbox: ends the request iterator
_ABORTED = grpc.StatusCode.ABORTED.value[0]
# The counters of transport_stats(), in the order they are shown.
TRANSPORT_COUNTERS = (
    "transport_failures",  # streams that ended in transport
    "reconnect_attempts",  # KeepAlive probes sent while reconnecting
    "reconnects",  # new streams opened on the session
    "batches_resent",
    "commands_resent",
    "resent_already_applied",  # of those, at or below the server's last applied seq
    "duplicate_results",  # results the server marked `duplicate`
    "refetches",  # fetches sent again: their result was no longer kept
)
T = TypeVar("T")
_RELEASE_BATCH = 16  # released ids per ReleaseTensors (enqueue)


class _ReplyStream(Protocol):
    """The Stream call as the reader thread sees it (grpc's call iterator)."""

    def __iter__(self) -> Iterator[pb.BatchReply]: ...
    def cancel(self) -> bool: ...


def _find_command(batch: Optional[pb.CommandBatch], seq: int) -> Optional[pb.Command]:
    if batch is None:
        return None
    for command in batch.commands:
        if command.seq == seq:
            return command
    return None


def _command_label(batch: Optional[pb.CommandBatch], seq: int) -> Optional[str]:
    """The op name (ExecuteOp) or command kind of command `seq` in `batch`."""
    command = _find_command(batch, seq)
    if command is None:
        return None
    kind = command.WhichOneof("kind")
    if kind == "execute":
        return command.execute.op
    if kind is None:
        return None
    # The command's message type: PutTensor, Gradient, Jacobian, ...
    message = command.DESCRIPTOR.fields_by_name[kind].message_type
    return None if message is None else message.name


def _requests(outbox: "queue.Queue[Optional[pb.CommandBatch]]") -> Iterator[pb.CommandBatch]:
    """One stream's request iterator: the batches put into `outbox`."""
    while True:
        item = outbox.get()
        if item is _END:
            return
        yield item


class StreamCore:
    """One session's connection: ids, buffer, stream, reader thread."""

    def __init__(self, address: str, options: ConnectOptions) -> None:
        self.chunk_bytes = options.chunk_bytes  # tensors larger move in chunks (_chunks.py)
        self.address = address
        self.batch_size = options.batch_size
        self.max_batch_bytes = options.max_batch_bytes
        self.timeout = options.timeout
        self.reconnect_timeout = float(options.reconnect_timeout)
        self.max_unacked_bytes = options.max_unacked_bytes
        channel_args: List[Tuple[str, Any]] = [
            ("grpc.max_send_message_length", -1),
            ("grpc.max_receive_message_length", -1),
        ]
        given = {name for name, _ in options.channel_options}
        channel_args += [o for o in _resume.CHANNEL_BACKOFF_OPTIONS if o[0] not in given]
        channel_args += list(options.channel_options)  # TLS name override, keepalive
        if options.tls is None:
            self.channel = grpc.insecure_channel(address, options=channel_args)
        else:
            self.channel = grpc.secure_channel(address, options.tls, options=channel_args)
        self.stub = pb_grpc.TapeServiceStub(self.channel)

        key_metadata = options.key_metadata()
        response = self._create_session(options.session_id, options.keep_alive_seconds, key_metadata)
        self.session_id: str = response.session_id
        self.keep_alive_seconds: int = response.keep_alive_seconds
        self.metadata: _backend.Metadata = (
            (SESSION_ID_HEADER, response.session_id),
            (SESSION_TOKEN_HEADER, response.token),
        ) + key_metadata
        self._init_state()

    def _init_state(self) -> None:
        """The ids, buffers and stream state of a new session, then the
        stream and its reader thread."""
        self._ids = itertools.count(1)  # tensor ids, taken under _id_lock
        self._id_lock = threading.Lock()  # for blocks of consecutive ids
        self._tape_ids = itertools.count(1)
        self._releases: Deque[int] = collections.deque()
        self._tape_deletes: Deque[Tuple[int, bool]] = collections.deque()

        self._lock = threading.Lock()  # everything below
        self._write_lock = threading.Lock()  # batches enter the stream in order
        self._cv = threading.Condition(self._lock)
        self._pending: List[pb.Command] = []
        self._pending_bytes = 0
        self._seq = 0
        self._last_batch_id = 0
        self._last_answered = 0
        self._errors: List[Tuple[int, GradtapeError]] = []
        self._results: Dict[int, pb.CommandResult] = {}
        # Sent, not acknowledged yet: batch id -> (batch, bytes), in order.
        self._unacked: "collections.OrderedDict[int, Tuple[pb.CommandBatch, int]]" = (
            collections.OrderedDict()
        )
        self._unacked_bytes = 0
        self._acked_seq = 0  # every result up to this seq was received
        self._redirects: Dict[int, int] = {}  # fetch seq -> seq of its re-fetch
        self._outage: Optional[_resume.Backoff] = None  # since the first failure after a reply
        self._stream_opened = time.monotonic()
        self._lost: Optional[SessionLostError] = None
        self._lost_reported = False
        self._closing = threading.Event()
        self._transport = dict.fromkeys(TRANSPORT_COUNTERS, 0)
        self.closed = False
        self.commands_sent = 0
        self.batches_sent = 0

        self._outbox: "queue.Queue[Optional[pb.CommandBatch]]" = queue.Queue()
        self._call = self._open_stream(self._outbox)
        self._reader = threading.Thread(
            target=self._read_loop, name=f"gradtape-{self.session_id[:8]}", daemon=True
        )
        self._reader.start()

    def _create_session(
        self, session_id: Optional[str], keep_alive_seconds: int, key_metadata: _backend.Metadata
    ) -> pb.CreateSessionResponse:
        """CreateSession. A transport failure (e.g. a proxy that cannot reach
        the replica the id hashes to) is retried with a NEW random id, within
        reconnect_timeout; a caller's own id is tried once."""
        backoff = _resume.Backoff(self.reconnect_timeout if session_id is None else 0.0)

        def create(timeout: float) -> pb.CreateSessionResponse:
            proposed = session_id or secrets.token_hex(16)
            return self.stub.CreateSession(
                pb.CreateSessionRequest(session_id=proposed, keep_alive_seconds=keep_alive_seconds),
                metadata=((SESSION_ID_HEADER, proposed),) + key_metadata,
                timeout=timeout,
                wait_for_ready=True,
            )

        try:
            return _resume.retry_unary(create, backoff, self.timeout)
        except grpc.RpcError as e:
            self.channel.close()
            tries = ""
            if backoff.attempts:
                tries = f" ({backoff.attempts + 1} attempts in {backoff.elapsed():.1f} s)"
            raise GradtapeError(
                e.code(), f"CreateSession at {self.address}{tries}: {e.details()}"
            ) from None

    # -- ids ---------------------------------------------------------------

    def new_id(self) -> int:
        with self._id_lock:
            return next(self._ids)

    def new_tape_id(self) -> int:
        return next(self._tape_ids)

    def _new_ids(self, n: int) -> int:
        with self._id_lock:  # n consecutive ids
            first = next(self._ids)
            for _ in range(n - 1):
                next(self._ids)
        return first

    # -- the Backend interface (_backend.py) -----------------------------

    def execute(
        self,
        op: str,
        input_ids: Sequence[int],
        num_outputs: int,
        attrs: Optional[List[_backend.EncodedAttr]],
    ) -> int:
        first = self._new_ids(num_outputs) if num_outputs else 0
        execute = pb.ExecuteOp(
            op=op, input_ids=input_ids, output_ids=range(first, first + num_outputs)
        )
        if attrs:
            for name, kind, value in attrs:
                _backend.to_pb_attr(execute.attrs[name], kind, value)
        self.enqueue(pb.Command(execute=execute))
        return first

    def put(self, tensor_id: int, array: np.ndarray) -> None:
        _chunks.put(self, tensor_id, array)

    def fetch(self, tensor_id: int) -> np.ndarray:
        return _chunks.fetch(self, tensor_id)

    def list_ops(self) -> pb.ListOpsResponse:
        return self.unary(
            "ListOps",
            lambda t: self.stub.ListOps(pb.ListOpsRequest(), metadata=self.metadata, timeout=t),
        )

    def release(self, tensor_id: int) -> None:
        """Buffers the release of `tensor_id` (lock-free: safe in finalizers)."""
        if not self.closed:
            self._releases.append(tensor_id)

    def delete_tape(self, tape_id: int, pop_first: bool = False) -> None:
        """Buffers a DeleteTape, after a PopTape if `pop_first` (lock-free:
        safe in finalizers)."""
        if not self.closed:
            self._tape_deletes.append((tape_id, pop_first))

    # -- buffering ---------------------------------------------------------

    def enqueue(self, command: pb.Command) -> int:
        """Appends `command` with the next sequence number (returned; 0 if the
        session is closed) and sends the buffer when it is full. Raises the
        SessionLostError of a lost session."""
        with self._lock:
            if self.closed:
                return 0
            self._raise_if_lost_locked()
            # Dropped handles are released in one ReleaseTensors before the
            # command once _RELEASE_BATCH of them wait, and before any
            # command that is not an op (a fetch, stats, ... see them
            # released): as the C++ client does (SessionCore::AppendLocked).
            if self._tape_deletes or (
                self._releases
                and (len(self._releases) >= _RELEASE_BATCH or not command.HasField("execute"))
            ):
                self._drain_finalized_locked()
            self._seq += 1
            command.seq = self._seq
            self._pending.append(command)
            self._pending_bytes += command.ByteSize()
            full = (
                len(self._pending) >= self.batch_size
                or self._pending_bytes >= self.max_batch_bytes
            )
            seq = self._seq
        if full:
            self.flush()
        return seq

    def _drain_finalized_locked(self) -> None:
        ids = []
        while self._releases:
            ids.append(self._releases.popleft())
        if ids:
            self._seq += 1
            self._pending.append(pb.Command(seq=self._seq, release=pb.ReleaseTensors(ids=ids)))
            self._pending_bytes += 8 * len(ids)
        while self._tape_deletes:
            tape_id, pop_first = self._tape_deletes.popleft()
            if pop_first:
                self._seq += 1
                self._pending.append(pb.Command(seq=self._seq, pop_tape=pb.PopTape(tape_id=tape_id)))
            self._seq += 1
            self._pending.append(
                pb.Command(seq=self._seq, delete_tape=pb.DeleteTape(tape_id=tape_id))
            )

    def flush(self) -> None:
        """Sends the buffered commands as one batch. Does not wait, unless
        the unacknowledged batches would pass max_unacked_bytes: then until
        replies make room. Raises the SessionLostError of a lost session
        (nothing buffered is dropped silently)."""
        with self._write_lock:
            with self._lock:
                if self.closed:
                    self._pending.clear()
                    self._pending_bytes = 0
                    return
                self._raise_if_lost_locked()
                while (
                    self._unacked
                    and self._unacked_bytes + self._pending_bytes > self.max_unacked_bytes
                    and self._lost is None
                ):
                    self._cv.wait()
                self._raise_if_lost_locked()
                self._drain_finalized_locked()
                if not self._pending:
                    return
                self._last_batch_id += 1
                batch = pb.CommandBatch(
                    batch_id=self._last_batch_id, commands=self._pending, ack_seq=self._acked_seq
                )
                self._unacked[batch.batch_id] = (batch, self._pending_bytes)
                self._unacked_bytes += self._pending_bytes
                self.commands_sent += len(self._pending)
                self.batches_sent += 1
                self._pending = []
                self._pending_bytes = 0
                self._outbox.put(batch)

    def last_seq(self) -> int:
        with self._lock:
            return self._seq

    def transport_stats(self) -> Dict[str, int]:
        """Counters of transport failures and resumes (TRANSPORT_COUNTERS)."""
        with self._lock:
            return dict(self._transport)

    # -- the stream --------------------------------------------------------

    def _open_stream(self, outbox: "queue.Queue[Optional[pb.CommandBatch]]") -> _ReplyStream:
        return self.stub.Stream(_requests(outbox), metadata=self.metadata)

    def _read_loop(self) -> None:
        """The reader thread: replies of the current stream; after a stream
        ends, reconnects or marks the session lost."""
        call: Optional[_ReplyStream] = self._call
        while call is not None:
            error: Optional[BaseException] = None
            try:
                for reply in call:
                    self._on_reply(reply)
            except grpc.RpcError as e:
                error = e
            except Exception as e:  # a client bug: fail the session, never hang a wait
                call.cancel()
                error = e
            call = self._after_stream(error)

    def _on_reply(self, reply: pb.BatchReply) -> None:
        with self._lock:
            batch = self._acknowledge_locked(reply.batch_id)
            for result in reply.results:
                self._store_result_locked(batch, result)
            self._last_answered = max(self._last_answered, reply.batch_id)
            self._outage = None  # the server answered: a later failure starts a new clock
            self._cv.notify_all()

    def _acknowledge_locked(self, batch_id: int) -> Optional[pb.CommandBatch]:
        """Forgets batch `batch_id` and every earlier one; returns it."""
        answered = None
        while self._unacked:
            first = next(iter(self._unacked))
            if first > batch_id:
                break
            batch, size = self._unacked.pop(first)
            self._unacked_bytes -= size
            if batch.commands:
                self._acked_seq = max(self._acked_seq, batch.commands[-1].seq)
            if first == batch_id:
                answered = batch
        return answered

    def _store_result_locked(
        self, batch: Optional[pb.CommandBatch], result: pb.CommandResult
    ) -> None:
        if result.duplicate:
            self._transport["duplicate_results"] += 1
        kind = result.WhichOneof("kind")
        if kind is None and result.duplicate:
            # A mark: applied before, its result delivered or not kept.
            # Nothing to store; a fetch waiting on it is read again.
            self._refetch_locked(batch, result.seq)
            return
        if kind != "error":
            self._results[result.seq] = result
            return
        no_longer_kept = result.duplicate and result.error.code == _ABORTED
        if no_longer_kept and self._refetch_locked(batch, result.seq):
            return
        self._errors.append(
            (
                result.seq,
                GradtapeError(
                    status_code(result.error.code),
                    result.error.message,
                    seq=result.seq,
                    op=_command_label(batch, result.seq),
                ),
            )
        )

    def _refetch_locked(self, batch: Optional[pb.CommandBatch], seq: int) -> bool:
        """A fetch the server applied but whose result it no longer keeps
        (ABORTED, duplicate) is a read: buffer it again with a new seq, for
        call() to wait on. False for any other command."""
        command = _find_command(batch, seq)
        if command is None or command.WhichOneof("kind") != "fetch":
            return False
        again = pb.Command()
        again.CopyFrom(command)
        self._seq += 1
        again.seq = self._seq
        self._pending.append(again)
        self._pending_bytes += again.ByteSize()
        self._redirects[seq] = again.seq
        self._transport["refetches"] += 1
        return True

    def _after_stream(self, error: Optional[BaseException]) -> Optional[_ReplyStream]:
        """The next stream after `error` ended one (None: it ended with OK),
        or None when the session is closing or lost."""
        with self._lock:
            self._outbox.put(_END)  # lets the old request iterator's thread end
        if self._closing.is_set() or self.closed:
            return None
        if error is None or not isinstance(error, grpc.RpcError):
            why = _resume.describe(error) if error else "the server ended the command stream"
            self._set_lost(
                SessionLostError(
                    grpc.StatusCode.UNAVAILABLE if error is None else grpc.StatusCode.INTERNAL,
                    f"session {self.session_id}: {why}",
                    session_id=self.session_id,
                    address=self.address,
                    reason="ended",
                )
            )
            return None
        if not is_transport_failure(error):
            self._set_lost(_resume.final(self.session_id, self.address, error))
            return None
        with self._lock:
            self._transport["transport_failures"] += 1
            stayed_up = time.monotonic() - self._stream_opened >= _resume.STABLE_STREAM_S
            if self._outage is not None and not self._unacked and stayed_up:
                self._outage = None  # an idle stream that worked: a new outage
            if self._outage is None:
                self._outage = _resume.Backoff(self.reconnect_timeout)
            outage = self._outage
        return self._reconnect(outage, error)

    def _reconnect(
        self, outage: _resume.Backoff, error: grpc.RpcError
    ) -> Optional[_ReplyStream]:
        """Probes the session with KeepAlive (backoff, bounded by `outage`),
        then opens a new stream and resends the unacknowledged batches."""
        last: grpc.RpcError = error
        verdicts = _resume.ReplicaVerdicts()
        while True:
            delay = outage.next_delay()
            if delay is None:
                self._set_lost(_resume.unreachable(self.session_id, self.address, outage, last))
                return None
            if self._closing.wait(verdicts.cap(delay)):
                return None
            with self._lock:
                self._transport["reconnect_attempts"] += 1
            try:
                alive = self.stub.KeepAlive(
                    pb.KeepAliveRequest(),
                    metadata=self.metadata,
                    timeout=_resume.attempt_timeout(outage, self.timeout),
                )
            except grpc.RpcError as e:
                # Our own deadline on the probe: the server did not answer.
                timed_out = e.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                if is_transport_failure(e) or (timed_out and not is_server_status(e)):
                    last = e
                    if verdicts.record(is_replica_unreachable(e)):
                        # The proxy's verdict held for the grace: lost.
                        lost = _resume.unreachable(self.session_id, self.address, outage, last)
                        self._set_lost(lost)
                        return None
                    continue
                self._set_lost(_resume.final(self.session_id, self.address, e, outage))
                return None
            return self._resend(alive.last_applied_seq)

    def _resend(self, last_applied_seq: int) -> Optional[_ReplyStream]:
        """A new stream on the session, with every unacknowledged batch first
        (original seqs; ack_seq brought up to date), in order."""
        with self._lock:
            if self.closed:
                return None
            outbox: "queue.Queue[Optional[pb.CommandBatch]]" = queue.Queue()
            for batch, _ in self._unacked.values():
                batch.ack_seq = self._acked_seq
                outbox.put(batch)
                self._transport["batches_resent"] += 1
                self._transport["commands_resent"] += len(batch.commands)
                self._transport["resent_already_applied"] += sum(
                    1 for c in batch.commands if c.seq <= last_applied_seq
                )
            self._transport["reconnects"] += 1
            self._stream_opened = time.monotonic()
            self._outbox = outbox
            self._call = self._open_stream(outbox)
            return self._call

    def _set_lost(self, error: SessionLostError) -> None:
        with self._lock:
            if self._lost is None:
                self._lost = error
            self._cv.notify_all()

    def _raise_if_lost_locked(self) -> None:
        if self._lost is not None:
            self._lost_reported = True
            raise self._lost.with_traceback(None)

    # -- wait points -------------------------------------------------------

    def _flush_for_wait(self) -> int:
        self.flush()
        with self._lock:
            return self._last_batch_id

    def _closed_error(self) -> GradtapeError:
        return GradtapeError(
            grpc.StatusCode.FAILED_PRECONDITION, f"gradtape session {self.session_id} is closed"
        )

    def _wait(self, batch_id: int, timeout: Optional[float] = None) -> None:
        """Waits until batch `batch_id` is acknowledged (through reconnects);
        raises the earliest unreported command error, else the session's
        SessionLostError if it is lost."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            if self.closed:
                raise self._closed_error()
            while self._last_answered < batch_id and self._lost is None:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise GradtapeError(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"gradtape session {self.session_id}: no reply to batch {batch_id} "
                        f"in time (last answered: {self._last_answered})",
                    )
                self._cv.wait(remaining)
            error = self._take_errors_locked()
            if error is not None:
                raise error
            self._raise_if_lost_locked()

    def _take_errors_locked(self) -> Optional[GradtapeError]:
        if not self._errors:
            return None
        self._errors.sort(key=lambda e: e[0])
        first = self._errors[0][1]
        if len(self._errors) > 1:
            first = GradtapeError(
                first.code,
                f"{first.message} [and {len(self._errors) - 1} later command error(s) "
                "in this session]",
                seq=first.seq,
                op=first.op,
            )
        self._errors.clear()
        return first

    def sync(self, timeout: Optional[float] = None) -> None:
        """Flushes and waits for every reply; raises the first unreported error."""
        self._wait(self._flush_for_wait(), timeout)

    def call(self, command: pb.Command) -> pb.CommandResult:
        """Enqueues a command that returns something, waits, returns its result."""
        return self.await_result(*self.send_for_result(command))

    def unary(self, what: str, call: Callable[[float], T]) -> T:
        """Runs a unary call of the session (`call(timeout_s)`), retrying
        transport failures within reconnect_timeout; GradtapeError on
        failure, the SessionLostError of a lost session at once."""
        with self._lock:
            self._raise_if_lost_locked()
        backoff = _resume.Backoff(self.reconnect_timeout)
        try:
            return _resume.retry_unary(call, backoff, self.timeout, self._closing)
        except grpc.RpcError as e:
            raise GradtapeError(
                e.code(), f"{what} (session {self.session_id}): {e.details()}"
            ) from None

    def keep_alive(self) -> None:
        self.unary(
            "KeepAlive",
            lambda t: self.stub.KeepAlive(pb.KeepAliveRequest(), metadata=self.metadata, timeout=t),
        )

    def close(self) -> None:
        """Waits for everything sent (bounded), ends the stream, closes the
        session on the server. Raises the first unreported error, if any (a
        SessionLostError only if no call raised it yet)."""
        if self.closed:
            return
        with self._lock:
            lost_reported = self._lost_reported
        first: Optional[GradtapeError] = None
        try:
            self._wait(self._flush_for_wait(), self.timeout)
        except GradtapeError as e:
            first = e
        with self._write_lock:
            with self._lock:
                self.closed = True
                self._pending.clear()
                self._outbox.put(_END)
                lost = self._lost
        self._closing.set()
        self._reader.join(self.timeout)
        if self._reader.is_alive():
            with self._lock:
                call = self._call
            call.cancel()
            self._reader.join(self.timeout)
        try:
            if lost is None:
                self.stub.CloseSession(
                    pb.CloseSessionRequest(), metadata=self.metadata, timeout=self.timeout
                )
        except grpc.RpcError as e:
            if first is None:
                first = GradtapeError(e.code(), f"CloseSession: {e.details()}")
        finally:
            self.channel.close()
        if first is not None and not (isinstance(first, SessionLostError) and lost_reported):
            raise first

    # -- chunked transfer (_chunks.py) -------------------------------------

    def send_for_result(self, command: pb.Command) -> Tuple[int, int]:
        """The first half of call(): enqueues `command` and sends it (with
        what is buffered) as a batch; returns (seq, batch id) for
        await_result. Several may be in flight."""
        seq = self.enqueue(command)
        if seq == 0:
            raise self._closed_error()
        return seq, self._flush_for_wait()

    def await_result(self, seq: int, batch_id: int) -> pb.CommandResult:
        """The second half of call(): waits for batch `batch_id` and returns
        the result of command `seq` (or raises the first unreported error).
        A fetch whose result the server no longer kept after a reconnect is
        sent again (_refetch_locked): then this waits for that one."""
        for _ in range(8):
            try:
                self._wait(batch_id)
            except GradtapeError:
                with self._lock:
                    self._results.pop(seq, None)
                raise
            with self._lock:
                result = self._results.pop(seq, None)
                again = self._redirects.pop(seq, None) if result is None else None
            if again is None:
                break
            seq, batch_id = again, self._flush_for_wait()
        if result is None:
            raise GradtapeError(
                grpc.StatusCode.INTERNAL,
                f"the server sent no result for command {seq} of session {self.session_id}",
                seq=seq,
            )
        return result
