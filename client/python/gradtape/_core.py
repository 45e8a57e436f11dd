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
from typing import Dict, List, Optional, Sequence, Tuple

import grpc

from gradtape.errors import GradtapeError, last_applied_seq_of, status_code
from gradtape.v1 import tape_service_pb2 as pb
from gradtape.v1 import tape_service_pb2_grpc as pb_grpc

SESSION_ID_HEADER = "gradtape-session-id"
SESSION_TOKEN_HEADER = "gradtape-session-token"
_END = object()  # ends the request iterator


def _command_label(batch: Optional[pb.CommandBatch], seq: int) -> Optional[str]:
    """The op name (ExecuteOp) or command kind of command `seq` in `batch`."""
    if batch is None:
        return None
    for command in batch.commands:
        if command.seq == seq:
            kind = command.WhichOneof("kind")
            if kind == "execute":
                return command.execute.op
            # The command's message type: PutTensor, Gradient, Jacobian, ...
            return command.DESCRIPTOR.fields_by_name[kind].message_type.name
    return None


class StreamCore:
    """One session's connection: ids, buffer, stream, reader thread."""

    def __init__(
        self,
        address: str,
        *,
        session_id: Optional[str] = None,
        keep_alive_seconds: int = 0,
        batch_size: int = 512,
        max_batch_bytes: int = 16 << 20,
        chunk_bytes: int = 64 << 20,
        timeout: float = 10.0,
        credentials: Optional[grpc.ChannelCredentials] = None,
        channel_options: Sequence[Tuple[str, object]] = (),
        api_key: Optional[str] = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be at least 1, got {chunk_bytes}")
        self.chunk_bytes = chunk_bytes  # tensors larger move in chunks (_chunks.py)
        self.address = address
        self.batch_size = batch_size
        self.max_batch_bytes = max_batch_bytes
        self.timeout = timeout
        options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        options += list(channel_options)  # TLS name override, keepalive (_transport.py)
        if credentials is None:
            self.channel = grpc.insecure_channel(address, options=options)
        else:
            self.channel = grpc.secure_channel(address, credentials, options=options)
        self.stub = pb_grpc.TapeServiceStub(self.channel)

        proposed = session_id or secrets.token_hex(16)
        # API keys (--api_keys_file): `authorization: Bearer <key>` on every call.
        key_metadata = [("authorization", f"Bearer {api_key}")] if api_key else []
        try:
            response = self.stub.CreateSession(
                pb.CreateSessionRequest(session_id=proposed, keep_alive_seconds=keep_alive_seconds),
                metadata=[(SESSION_ID_HEADER, proposed)] + key_metadata,
                timeout=timeout,
                wait_for_ready=True,
            )
        except grpc.RpcError as e:
            self.channel.close()
            raise GradtapeError(e.code(), f"CreateSession at {address}: {e.details()}") from None
        self.session_id: str = response.session_id
        self.keep_alive_seconds: int = response.keep_alive_seconds
        self.metadata = [
            (SESSION_ID_HEADER, response.session_id),
            (SESSION_TOKEN_HEADER, response.token),
        ] + key_metadata

        self._ids = itertools.count(1)  # tensor ids; next() is atomic under the GIL
        self._tape_ids = itertools.count(1)
        self._releases: collections.deque = collections.deque()
        self._tape_deletes: collections.deque = collections.deque()

        self._lock = threading.Lock()  # buffer, seq, batch ids, results
        self._write_lock = threading.Lock()  # batches enter the stream in order
        self._cv = threading.Condition(self._lock)
        self._pending: List[pb.Command] = []
        self._pending_bytes = 0
        self._seq = 0
        self._last_batch_id = 0
        self._last_answered = 0
        self._errors: List[Tuple[int, GradtapeError]] = []
        self._results: Dict[int, pb.CommandResult] = {}
        self._inflight: Dict[int, pb.CommandBatch] = {}  # sent, not answered
        self._stream_done = False
        self._stream_error: Optional[GradtapeError] = None
        self.closed = False
        self.commands_sent = 0
        self.batches_sent = 0

        self._outbox: "queue.Queue[object]" = queue.Queue()
        self._responses = self.stub.Stream(self._requests(), metadata=self.metadata)
        self._reader = threading.Thread(
            target=self._read_loop, name=f"gradtape-{self.session_id[:8]}", daemon=True
        )
        self._reader.start()

    # -- ids ---------------------------------------------------------------

    def new_id(self) -> int:
        return next(self._ids)

    def new_tape_id(self) -> int:
        return next(self._tape_ids)

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
        session is closed) and sends the buffer when it is full."""
        with self._lock:
            if self.closed:
                return 0
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
        """Sends the buffered commands as one batch, without waiting."""
        with self._write_lock:
            with self._lock:
                if self.closed or self._stream_done:
                    self._pending.clear()
                    self._pending_bytes = 0
                    return
                self._drain_finalized_locked()
                if not self._pending:
                    return
                self._last_batch_id += 1
                batch = pb.CommandBatch(batch_id=self._last_batch_id, commands=self._pending)
                self.commands_sent += len(self._pending)
                self.batches_sent += 1
                self._pending = []
                self._pending_bytes = 0
                self._inflight[batch.batch_id] = batch
            self._outbox.put(batch)

    def last_seq(self) -> int:
        with self._lock:
            return self._seq

    # -- the stream --------------------------------------------------------

    def _requests(self):
        while True:
            item = self._outbox.get()
            if item is _END:
                return
            yield item

    def _read_loop(self) -> None:
        try:
            for reply in self._responses:
                with self._lock:
                    batch = self._inflight.pop(reply.batch_id, None)
                    for result in reply.results:
                        if result.WhichOneof("kind") == "error":
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
                        else:
                            self._results[result.seq] = result
                    self._last_answered = reply.batch_id
                    self._cv.notify_all()
            error = GradtapeError(grpc.StatusCode.UNAVAILABLE, "the server ended the command stream")
        except grpc.RpcError as e:
            error = GradtapeError(
                e.code(),
                f"gradtape command stream: {e.details()}",
                last_applied_seq=last_applied_seq_of(e),
            )
        with self._lock:
            self._stream_done = True
            self._stream_error = error
            self._cv.notify_all()

    # -- wait points -------------------------------------------------------

    def _flush_for_wait(self) -> int:
        self.flush()
        with self._lock:
            return self._last_batch_id

    def _wait(self, batch_id: int, timeout: Optional[float] = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            if self.closed:
                raise GradtapeError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"gradtape session {self.session_id} is closed",
                )
            while self._last_answered < batch_id and not self._stream_done:
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
            # A dead stream fails every wait point after its last reply (as
            # in the C++ client): commands buffered since were dropped, and
            # the stream's status (e.g. UNAVAILABLE "server draining;
            # reconnect ..." when the server drains) says why.
            if self._last_answered < batch_id or self._stream_done:
                raise self._stream_error

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
        seq = self.enqueue(command)
        if seq == 0:
            raise GradtapeError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"gradtape session {self.session_id} is closed",
            )
        try:
            self._wait(self._flush_for_wait())
        except GradtapeError:
            with self._lock:
                self._results.pop(seq, None)
            raise
        with self._lock:
            result = self._results.pop(seq, None)
        if result is None:
            raise GradtapeError(
                grpc.StatusCode.INTERNAL,
                f"the server sent no result for command {seq} of session {self.session_id}",
                seq=seq,
            )
        return result

    def keep_alive(self) -> None:
        try:
            self.stub.KeepAlive(pb.KeepAliveRequest(), metadata=self.metadata, timeout=self.timeout)
        except grpc.RpcError as e:
            raise GradtapeError(e.code(), f"KeepAlive: {e.details()}") from None

    def close(self) -> None:
        """Waits for everything sent (bounded), ends the stream, closes the
        session on the server. Raises the first unreported error, if any."""
        if self.closed:
            return
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
        self._reader.join(self.timeout)
        if self._reader.is_alive():
            self._responses.cancel()
            self._reader.join(self.timeout)
        try:
            self.stub.CloseSession(
                pb.CloseSessionRequest(), metadata=self.metadata, timeout=self.timeout
            )
        except grpc.RpcError as e:
            if first is None:
                first = GradtapeError(e.code(), f"CloseSession: {e.details()}")
        finally:
            self.channel.close()
        if first is not None:
            raise first

    # -- chunked transfer (_chunks.py) -------------------------------------

    def send_for_result(self, command: pb.Command) -> Tuple[int, int]:
        """The first half of call(): enqueues `command` and sends it (with
        what is buffered) as a batch; returns (seq, batch id) for
        await_result. Several may be in flight."""
        seq = self.enqueue(command)
        if seq == 0:
            raise GradtapeError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"gradtape session {self.session_id} is closed",
            )
        return seq, self._flush_for_wait()

    def await_result(self, seq: int, batch_id: int) -> pb.CommandResult:
        """The second half of call(): waits for batch `batch_id` and returns
        the result of command `seq` (or raises the first unreported error)."""
        try:
            self._wait(batch_id)
        except GradtapeError:
            with self._lock:
                self._results.pop(seq, None)
            raise
        with self._lock:
            result = self._results.pop(seq, None)
        if result is None:
            raise GradtapeError(
                grpc.StatusCode.INTERNAL,
                f"the server sent no result for command {seq} of session {self.session_id}",
                seq=seq,
            )
        return result
