"""The Python client resumes after transport failures and never reports a
false OK (docs/RELIABILITY.md "Resuming clients").

The fault test trains a small MLP with Adam through FaultProxy
(fault_proxy.py), which cuts the connection at seeded byte offsets in both
directions, and compares every fetched loss and the final variables bit for
bit with a fault-free run of the same seed; the server's SessionStats show
that no command was applied twice. The other tests: a killed server gives a
bounded-time UNAVAILABLE SessionLostError, a restarted one NOT_FOUND, a
drain a final error at once, and a status that is not a transport failure is
never retried.
"""

from __future__ import annotations

import contextlib
import gc
import signal
import socket
import threading
import time
from concurrent import futures

import grpc
import numpy as np
import pytest

import gradtape
from gradtape import optimizers
from gradtape.v1 import tape_service_pb2 as pb
from gradtape.v1 import tape_service_pb2_grpc as pb_grpc
from fault_proxy import FaultProxy

TRAIN_TIMEOUT_S = 120  # a bound, far above the ~20 s the fault test takes
STEPS = 3000
SEED = 20261201
# Cuts per direction and the bytes between cuts (c2s: ~1.3 KB a step, s2c:
# ~80 B a step; the ranges leave a margin so every planned cut happens).
CUTS = {"c2s": 14, "s2c": 14}
GAPS = {"c2s": (40_000, 240_000), "s2c": (2_000, 14_000)}


@pytest.fixture
def proxy():
    p = None

    def make(upstream: str, seed: int = SEED) -> FaultProxy:
        nonlocal p
        p = FaultProxy(upstream, seed=seed)
        return p

    yield make
    if p is not None:
        p.close()


def bounded(fn, timeout: float = TRAIN_TIMEOUT_S):
    """Runs fn() in a thread; fails the test if it takes over `timeout`."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # re-raised in the test's thread
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        pytest.fail(f"did not finish within {timeout} s (a hang)")
    if "error" in out:
        raise out["error"]
    return out["value"]


# -- the training run ---------------------------------------------------------


def glorot(rng: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=(fan_in, fan_out)).astype(np.float32)


def train(address: str, steps: int, seed: int, on_start=lambda: None, captured: bool = False, **connect_args) -> dict:
    """Adam on a 16-32-4 MLP over a seeded synthetic set, the loss fetched
    every step; on_start() runs before the first step. With `captured` the
    step is a gradtape.function (one CallProgram a step once recorded).
    Returns the losses, final variables and counters."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(256, 16)).astype(np.float32)
    y = np.argmax(x @ rng.normal(size=(16, 4)), axis=1).astype(np.int64)
    losses = []
    with gradtape.connect(address, **connect_args) as s:
        ops = s.ops
        train_x, train_y = s.constant(x), s.constant(y)
        params = [
            s.Variable(glorot(rng, 16, 32)),
            s.Variable(np.zeros(32, np.float32)),
            s.Variable(glorot(rng, 32, 4)),
            s.Variable(np.zeros(4, np.float32)),
        ]
        opt = optimizers.Adam(learning_rate=1e-2)
        s.sync()
        on_start()

        def step(idx: gradtape.Tensor) -> gradtape.Tensor:
            xb = ops.gather_v2(train_x, idx, axis=0)
            yb = ops.gather_v2(train_y, idx, axis=0)
            with s.GradientTape() as tape:
                h = ops.relu(ops.bias_add(xb @ params[0], params[1]))
                logits = ops.bias_add(h @ params[2], params[3])
                loss = ops.mean(
                    ops.sparse_softmax_cross_entropy_with_logits(logits, yb).loss, axis=[0]
                )
            opt.apply_gradients(zip(tape.gradient(loss, params), params))
            return loss

        if captured:
            step = gradtape.function(step, session=s)
        for _ in range(steps):
            loss = step(s.constant(rng.integers(0, len(x), size=32).astype(np.int32)))
            losses.append(loss.numpy())
        final = [p.numpy() for p in params]
        gc.collect()  # releases of handles in reference cycles: now, in both runs
        s.sync()
        stats = s.stats()
        return {
            "losses": losses,
            "final": final,
            "stats": stats,
            "transport": s.transport_stats(),
            # Includes the stats command. (Not comparable across runs: how
            # many ReleaseTensors commands carry the finalizers' releases
            # depends on when cyclic garbage is collected.)
            "commands_sent": s.counters["commands_sent"],
        }


def train_with_and_without_cuts(servers, proxy, steps, cuts, gaps, *server_args, captured=False):
    """The fault-free run, then the run with cuts, through one FaultProxy to
    one server. Returns (proxy, reference, faulted); prints the figures."""
    server = servers(*server_args)
    cutter = proxy(server.address)
    start = time.monotonic()
    reference = bounded(lambda: train(cutter.address, steps, SEED, captured=captured))
    reference_s = time.monotonic() - start
    assert sum(cutter.cuts.values()) == 0 and cutter.connections == 1

    start = time.monotonic()
    cut = lambda: cutter.start_cutting(gaps, cuts)  # noqa: E731
    faulted = bounded(lambda: train(cutter.address, steps, SEED, cut, captured=captured, reconnect_timeout=20))
    faulted_s = time.monotonic() - start
    cutter.stop_cutting()

    t, ref_stats, stats = faulted["transport"], reference["stats"], faulted["stats"]
    print(
        f"\nfault test{' ' + ' '.join(server_args) if server_args else ''}: {steps} "
        f"{'captured ' if captured else ''}Adam "
        f"steps, seed {SEED}: cuts c2s {cutter.cuts['c2s']} "
        f"(mid-message {cutter.mid_message_cuts['c2s']}), s2c {cutter.cuts['s2c']} "
        f"(mid-message {cutter.mid_message_cuts['s2c']}); {cutter.connections - 1} reconnections; "
        f"client: {t['transport_failures']} transport failures, {t['reconnects']} resumes, "
        f"{t['reconnect_attempts']} reconnect attempts, {t['commands_resent']} commands resent "
        f"in {t['batches_resent']} batches ({t['resent_already_applied']} of them already "
        f"applied), {t['duplicate_results']} duplicate results, {t['refetches']} re-fetches; "
        f"server: {stats.duplicate_commands} duplicates skipped, {stats.commands_applied} "
        f"commands applied of {faulted['commands_sent']} sent (fault-free: "
        f"{ref_stats.commands_applied} of {reference['commands_sent']}); "
        f"{reference_s:.1f} s fault-free, {faulted_s:.1f} s with cuts"
    )
    assert cutter.cuts == cuts, "fewer cuts than planned: narrow the gaps' ranges"
    return cutter, reference, faulted


def assert_same_as_fault_free(steps: int, reference: dict, faulted: dict, commands_per_step: int = 40) -> None:
    """Bit for bit, and every command applied exactly once."""
    assert len(faulted["losses"]) == len(reference["losses"]) == steps
    differing = [
        i for i, (a, b) in enumerate(zip(reference["losses"], faulted["losses"]))
        if a.tobytes() != b.tobytes()
    ]
    assert not differing, f"{len(differing)} losses differ, the first at step {differing[0]}"
    for i, (a, b) in enumerate(zip(reference["final"], faulted["final"])):
        assert a.tobytes() == b.tobytes(), f"variable {i} differs from the fault-free run"
    # Exactly once: the server applied each command the client sent once
    # (as in the fault-free run, where the stats command sees the same
    # offset between the two; re-fetches are new commands, sent and
    # applied), and skipped what was sent again.
    t, ref_stats, stats = faulted["transport"], reference["stats"], faulted["stats"]
    ref_offset = ref_stats.commands_applied - reference["commands_sent"]
    assert ref_stats.commands_applied > steps * commands_per_step
    assert stats.commands_applied - faulted["commands_sent"] == ref_offset
    # Every duplicate the server skipped was a resent command the client
    # knew applied (its probe's last_applied_seq). Not always equal: a cut
    # that lands during a resend, before the server read those commands,
    # makes the client count them again at the next resume.
    assert 0 < stats.duplicate_commands <= t["resent_already_applied"]
    assert ref_stats.duplicate_commands == 0
    assert stats.live_tensors == ref_stats.live_tensors  # releases neither lost nor doubled


def test_training_through_random_cuts_matches_the_fault_free_run(servers, proxy):
    cutter, reference, faulted = train_with_and_without_cuts(servers, proxy, STEPS, CUTS, GAPS)
    assert sum(cutter.mid_message_cuts.values()) > 0
    assert faulted["transport"]["reconnects"] >= sum(CUTS.values()) // 2
    assert_same_as_fault_free(STEPS, reference, faulted)


# The captured loop sends far fewer bytes a step (c2s: a put of the indices,
# one CallProgram, a fetch and releases, ~0.3 KB; s2c as before).
CAPTURED_STEPS = 2000
CAPTURED_GAPS = {"c2s": (6_000, 24_000), "s2c": (2_000, 9_000)}


def test_captured_training_through_random_cuts_matches_the_fault_free_run(servers, proxy):
    """A CallProgram is one command: resent after a cut, the server applies
    it once (the losses and variables equal the uncut run's bit for bit)."""
    cutter, reference, faulted = train_with_and_without_cuts(
        servers, proxy, CAPTURED_STEPS, CUTS, CAPTURED_GAPS, captured=True)
    assert faulted["transport"]["reconnects"] >= sum(CUTS.values()) // 2
    assert_same_as_fault_free(CAPTURED_STEPS, reference, faulted, commands_per_step=2)


def test_fetches_are_sent_again_when_the_server_kept_no_result(servers, proxy):
    """--result_cache_mb=0: a resent fetch whose reply was cut gets ABORTED
    "no longer kept"; the client fetches again, with a new seq."""
    cuts, gaps = {"c2s": 0, "s2c": 6}, {"c2s": (1, 1), "s2c": (1_000, 4_000)}
    _, reference, faulted = train_with_and_without_cuts(
        servers, proxy, 500, cuts, gaps, "--result_cache_mb=0"
    )
    assert faulted["transport"]["refetches"] >= 1
    assert_same_as_fault_free(500, reference, faulted)


# -- a server that is gone ----------------------------------------------------


def test_a_killed_server_is_one_clear_unavailable_error_in_bounded_time(servers):
    """The false OK of issue 14: a session idle when its server died. sync()
    with commands buffered raises (never OK), naming the session and the
    server, within reconnect_timeout; later calls raise it at once."""
    server = servers()
    s = gradtape.connect(server.address, reconnect_timeout=2.0)
    try:
        x = s.constant(np.ones(3))
        np.testing.assert_array_equal((x + 1.0).numpy(), [2.0, 2.0, 2.0])
        server.kill()  # SIGKILL while the session is idle
        y = x * 2.0  # buffered
        start = time.monotonic()
        with pytest.raises(gradtape.GradtapeError) as info:
            bounded(s.sync, 20)
        elapsed = time.monotonic() - start
        e = info.value
        assert e.code == grpc.StatusCode.UNAVAILABLE
        assert f"session {s.id}: server {server.address} unreachable for" in e.message
        assert "reconnect attempts)" in e.message
        assert isinstance(e, gradtape.SessionLostError) and e.reason == "unreachable"
        assert e.attempts >= 2
        assert 1.5 <= elapsed < 8, elapsed
        # Every later call raises the same error at once.
        for later in (y.numpy, s.sync, lambda: s.constant(1.0), s.keep_alive):
            start = time.monotonic()
            with pytest.raises(gradtape.SessionLostError) as again:
                later()
            assert time.monotonic() - start < 0.5
            assert again.value.message == e.message
    finally:
        s.close()  # the loss was reported: close neither raises nor hangs


def test_close_during_an_outage_ends_in_bounded_time(servers, implementation):
    """close() while the reader is reconnecting: it waits at most `timeout`
    for the unacknowledged batch, stops the reconnecting and raises."""
    server = servers()
    s = gradtape.connect(server.address, timeout=2, reconnect_timeout=60)
    s.constant(np.ones(1)).numpy()
    server.kill()
    s.constant(np.ones(1))
    s.flush()  # unacknowledged now
    start = time.monotonic()
    with pytest.raises(gradtape.GradtapeError) as info:
        bounded(s.close, 20)
    assert time.monotonic() - start < 8
    assert info.value.code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE)
    assert s.closed
    with pytest.raises(gradtape.GradtapeError) as closed:
        s.sync(timeout=1)  # at once: nothing waits on the outage any more
    assert "is closed" in closed.value.message
    if implementation == "pure":  # StreamCore's reader thread stopped reconnecting
        assert not s._core._reader.is_alive()


def test_reconnect_timeout_0_loses_the_session_at_the_first_failure(servers):
    server = servers()
    s = gradtape.connect(server.address, reconnect_timeout=0)
    try:
        s.constant(np.ones(1)).numpy()
        server.kill()
        start = time.monotonic()
        with pytest.raises(gradtape.SessionLostError) as info:
            bounded(lambda: s.constant(np.ones(1)).numpy(), 20)
        assert time.monotonic() - start < 2
        assert info.value.code == grpc.StatusCode.UNAVAILABLE
        assert "(0 reconnect attempts)" in info.value.message
    finally:
        s.close()


def test_a_restarted_server_is_not_found_naming_the_session(servers, proxy):
    first = servers()
    relay = proxy(first.address)
    s = gradtape.connect(relay.address, reconnect_timeout=20)
    try:
        np.testing.assert_array_equal(s.constant(np.arange(3.0)).numpy(), [0.0, 1.0, 2.0])
        first.kill()
        relay.cut_all()
        relay.set_upstream(servers().address)  # a new process: no sessions
        with pytest.raises(gradtape.SessionLostError) as info:
            bounded(lambda: s.constant(np.ones(1)).numpy(), 30)
        e = info.value
        assert e.code == grpc.StatusCode.NOT_FOUND and e.reason == "not_found"
        assert f"session {s.id}: the server no longer has this session" in e.message
        assert s.transport_stats()["reconnects"] == 0
    finally:
        s.close()


def test_a_server_that_never_answers_is_unreachable_in_bounded_time(servers, proxy):
    """Reconnect probes that time out (a host that accepts connections and
    says nothing) count as unreachable, not as a final status."""
    server = servers()
    relay = proxy(server.address)
    silent = socket.create_server(("127.0.0.1", 0))  # never accepts: no HTTP/2
    try:
        s = gradtape.connect(relay.address, timeout=0.5, reconnect_timeout=3)
        try:
            s.constant(np.ones(1)).numpy()
            relay.set_upstream(f"127.0.0.1:{silent.getsockname()[1]}")
            relay.cut_all()
            start = time.monotonic()
            with pytest.raises(gradtape.SessionLostError) as info:
                bounded(lambda: s.constant(np.ones(1)).numpy(), 20)
            assert time.monotonic() - start < 10
            assert info.value.reason == "unreachable", info.value
            assert "DEADLINE_EXCEEDED" in info.value.message and info.value.attempts >= 2
        finally:
            s.close()
    finally:
        silent.close()


def test_a_drain_is_final_at_once(servers):
    server = servers("--shutdown_grace_seconds=10")
    s = gradtape.connect(server.address, reconnect_timeout=30)
    try:
        s.constant(np.ones(2)).numpy()
        start = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        server.wait_for_line("draining", 10)

        def until_lost() -> None:
            # The server prints "draining" just before the drain begins: a
            # batch may still be answered then. Once it has begun, the error
            # must be final at once.
            while True:
                s.constant(np.ones(2)).numpy()

        with pytest.raises(gradtape.SessionLostError) as info:
            bounded(until_lost, 20)
        e = info.value
        assert e.code == grpc.StatusCode.UNAVAILABLE and e.reason == "draining", e
        assert "restore the drain checkpoint" in e.message and "server draining" in e.message
        assert s.transport_stats()["reconnect_attempts"] == 0
        assert time.monotonic() - start < 10  # not the 30 s of reconnect_timeout
    finally:
        s.close()


def test_a_server_status_is_never_retried(servers):
    """The session closed behind the client's back: the stream's next batch
    gets the server's NOT_FOUND, final at once (no reconnect attempt); a
    failed command fails alone and is not sent again."""
    server = servers()
    s = gradtape.connect(server.address, reconnect_timeout=30)
    try:
        a = s.constant(np.ones((2, 3)))
        with pytest.raises(gradtape.GradtapeError) as bad:
            s.ops.mat_mul(a, a).numpy()
        assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert not isinstance(bad.value, gradtape.SessionLostError)
        s.sync()
        with grpc.insecure_channel(server.address) as channel:  # behind the client's back
            pb_grpc.TapeServiceStub(channel).CloseSession(
                pb.CloseSessionRequest(), metadata=s._core.metadata, timeout=10
            )
        start = time.monotonic()
        with pytest.raises(gradtape.SessionLostError) as info:
            bounded(lambda: s.constant(np.ones(1)).numpy(), 20)
        assert info.value.code == grpc.StatusCode.NOT_FOUND
        assert time.monotonic() - start < 5
        stats = s.transport_stats()
        assert stats["reconnect_attempts"] == 0 and stats["commands_resent"] == 0
    finally:
        s.close()


@pytest.mark.pure_only(
    reason="StreamCore's max_unacked_bytes and _unacked: connect() has no such argument"
)
def test_unacknowledged_batches_are_bounded(servers):
    """What a resume may have to resend is bounded: past max_unacked_bytes
    a flush waits for replies (here: one batch in flight at a time)."""
    server = servers()
    with gradtape.connect(server.address, batch_size=1) as s:
        s._core.max_unacked_bytes = 1
        x = s.constant(np.zeros(4))
        most = 0
        for _ in range(200):
            x = x + 1.0
            most = max(most, len(s._core._unacked))
        np.testing.assert_array_equal(x.numpy(), np.full(4, 200.0))
        assert most == 1


class _FakeCall(grpc.RpcError):
    def __init__(self, code, trailers=()):
        self._code, self._trailers = code, trailers

    def code(self):
        return self._code

    def trailing_metadata(self):
        return self._trailers


@pytest.mark.no_client  # errors.py and _resume.py on stand-in calls
def test_the_proxy_verdict_is_final_only_when_consecutive_for_the_grace():
    from gradtape._resume import REPLICA_UNREACHABLE_GRACE_S as grace
    from gradtape._resume import ReplicaVerdicts
    from gradtape.errors import is_replica_unreachable, is_transport_failure

    verdict = (("gradtape-proxy-verdict", "replica-unreachable"),)
    assert is_replica_unreachable(_FakeCall(grpc.StatusCode.UNAVAILABLE, verdict))
    assert is_transport_failure(_FakeCall(grpc.StatusCode.UNAVAILABLE, verdict))
    other = (("gradtape-proxy-verdict", "other"),)
    assert not is_replica_unreachable(_FakeCall(grpc.StatusCode.UNAVAILABLE, other))
    assert not is_replica_unreachable(_FakeCall(grpc.StatusCode.UNAVAILABLE))

    v = ReplicaVerdicts()
    assert v.cap(60.0, now=0.0) == 60.0  # no verdict yet: the backoff's delay
    assert not v.record(True, now=100.0)
    assert v.cap(60.0, now=100.5) == pytest.approx(grace - 0.5)
    assert not v.record(True, now=100.0 + grace - 0.001)
    assert not v.record(False, now=103.0)  # no verdict: counting starts again
    assert v.cap(60.0, now=103.0) == 60.0
    assert not v.record(True, now=104.0)
    assert not v.record(True, now=105.0)
    assert v.record(True, now=104.0 + grace)
    assert not ReplicaVerdicts().record(True, now=1e6)  # one verdict alone


@pytest.mark.no_client  # errors.py on stand-in calls
def test_only_statuses_the_server_did_not_send_are_transport_failures():
    from gradtape.errors import is_transport_failure

    mine = (("gradtape-server-status", "1"),)
    for code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
        assert is_transport_failure(_FakeCall(code))
        assert not is_transport_failure(_FakeCall(code, mine))
    for code in (
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    ):
        assert not is_transport_failure(_FakeCall(code))


# -- against a scripted stand-in server ----------------------------------------


class ScriptedTape(pb_grpc.TapeServiceServicer):
    """Answers like a gradtape server (puts and fetches only) and does on
    request what the real one does rarely: CreateSession failing in
    transport (a proxy that cannot reach the replica the id hashes to),
    Streams ending with a given status after their first batch, fetches
    answered "already applied; its result is no longer kept", and
    duplicate marks (seq and `duplicate`, no kind: "applied before, its
    result delivered or not kept") for puts and fetches."""

    def __init__(
        self,
        create_failures=(),
        stream_failures=(),
        forget_fetches=0,
        keep_alive_failure=None,
        mark_fetches=0,
        mark_puts=False,
    ):
        self.create_failures = create_failures  # [(code, trailers)]*n, in order
        self.stream_failures = list(stream_failures)
        self.keep_alive_failure = keep_alive_failure  # (code, trailers) for every KeepAlive
        self.probes = 0
        self.forget_fetches = forget_fetches
        self.mark_fetches = mark_fetches
        self.mark_puts = mark_puts
        self.proposed = []  # CreateSession's session ids
        self.fetch_seqs = []
        self.streams = 0
        self.tensors = {}

    def CreateSession(self, request, context):  # noqa: N802 (gRPC's names)
        self.proposed.append(request.session_id)
        if len(self.proposed) <= len(self.create_failures):
            code, trailers = self.create_failures[len(self.proposed) - 1]
            context.set_trailing_metadata(trailers)
            context.abort(code, "no healthy upstream")
        return pb.CreateSessionResponse(
            session_id=request.session_id, token="t", keep_alive_seconds=60
        )

    def ListOps(self, request, context):  # noqa: N802
        return pb.ListOpsResponse()

    def KeepAlive(self, request, context):  # noqa: N802
        self.probes += 1
        if self.keep_alive_failure is not None:
            context.set_trailing_metadata(self.keep_alive_failure[1])
            context.abort(
                self.keep_alive_failure[0],
                "gradtape-proxy: the replica of session s is unreachable; create new "
                "sessions under a new id",
            )
        return pb.KeepAliveResponse()

    def CloseSession(self, request, context):  # noqa: N802
        return pb.CloseSessionResponse()

    def Stream(self, requests, context):  # noqa: N802
        self.streams += 1
        failure = self.stream_failures.pop(0) if self.stream_failures else None
        for batch in requests:
            if failure is not None:  # the batch is lost with the stream
                context.set_trailing_metadata(failure[1])
                context.abort(failure[0], "upstream reset the stream")
            yield self._apply(batch)

    def _apply(self, batch):
        reply = pb.BatchReply(batch_id=batch.batch_id)
        for c in batch.commands:
            if c.WhichOneof("kind") == "put":
                self.tensors[c.put.id] = c.put.value
                if self.mark_puts:
                    reply.results.add(seq=c.seq, duplicate=True)
            elif c.WhichOneof("kind") == "fetch":
                self.fetch_seqs.append(c.seq)
                if self.mark_fetches > 0:
                    self.mark_fetches -= 1
                    reply.results.add(seq=c.seq, duplicate=True)
                elif self.forget_fetches > 0:
                    self.forget_fetches -= 1
                    message = (
                        f"FetchTensor (command {c.seq}): already applied; its result is no "
                        "longer kept: fetch again"
                    )
                    error = pb.Error(code=grpc.StatusCode.ABORTED.value[0], message=message)
                    reply.results.add(seq=c.seq, duplicate=True, error=error)
                else:
                    reply.results.add(seq=c.seq, tensor=self.tensors[c.fetch.id])
            reply.last_seq = c.seq
        return reply


@pytest.fixture
def scripted():
    started = []

    def start(servicer: ScriptedTape) -> str:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_TapeServiceServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        started.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for server in started:
        server.stop(grace=None)


MINE = (("gradtape-server-status", "1"),)
PROXY_502 = (grpc.StatusCode.UNAVAILABLE, ())


def test_create_session_failing_in_transport_is_retried_with_a_new_id(scripted):
    tape = ScriptedTape(create_failures=[PROXY_502, PROXY_502])
    with gradtape.connect(scripted(tape), reconnect_timeout=10) as s:
        assert len(tape.proposed) == 3 and len(set(tape.proposed)) == 3
        assert s.id == tape.proposed[-1]
        np.testing.assert_array_equal(s.constant(np.arange(2.0)).numpy(), [0.0, 1.0])


@pytest.mark.parametrize(
    "failure, connect_args",
    [
        ((grpc.StatusCode.UNAVAILABLE, MINE), {}),  # the server's own: draining
        (PROXY_502, {"session_id": "ab" * 16}),  # the caller's id: tried once
        (PROXY_502, {"reconnect_timeout": 0}),
    ],
)
def test_create_session_is_not_retried(scripted, failure, connect_args):
    tape = ScriptedTape(create_failures=[failure])
    with pytest.raises(gradtape.GradtapeError) as info:
        gradtape.connect(scripted(tape), **connect_args)
    assert info.value.code == grpc.StatusCode.UNAVAILABLE
    assert "CreateSession at 127.0.0.1:" in info.value.message
    assert len(tape.proposed) == 1


def test_a_reset_stream_is_resumed_and_its_batch_resent(scripted):
    """INTERNAL (a proxy's RST_STREAM) and UNKNOWN without the server's
    trailer are transport failures: resumed, the lost batch sent again."""
    failures = [(grpc.StatusCode.INTERNAL, ()), (grpc.StatusCode.UNKNOWN, ())]
    tape = ScriptedTape(stream_failures=failures)
    with gradtape.connect(scripted(tape), reconnect_timeout=10) as s:
        np.testing.assert_array_equal(s.constant(np.arange(3.0)).numpy(), [0.0, 1.0, 2.0])
        stats = s.transport_stats()
    assert tape.streams == 3
    assert stats["transport_failures"] == 2 and stats["reconnects"] == 2
    assert stats["batches_resent"] == 2


def test_a_server_sent_unavailable_is_final(scripted):
    tape = ScriptedTape(stream_failures=[(grpc.StatusCode.UNAVAILABLE, MINE)])
    s = gradtape.connect(scripted(tape), reconnect_timeout=10)
    try:
        with pytest.raises(gradtape.SessionLostError) as info:
            bounded(lambda: s.constant(np.ones(1)).numpy(), 20)
        assert info.value.reason == "draining"
        assert "restore the drain checkpoint" in info.value.message
        assert tape.streams == 1 and s.transport_stats()["reconnect_attempts"] == 0
    finally:
        s.close()


def test_a_fetch_whose_result_is_no_longer_kept_is_fetched_again(scripted):
    tape = ScriptedTape(forget_fetches=1)
    with gradtape.connect(scripted(tape)) as s:
        x = s.constant(np.array([4.0, 5.0]))
        np.testing.assert_array_equal(x.numpy(), [4.0, 5.0])
        assert s.transport_stats()["refetches"] == 1
        first, again = tape.fetch_seqs
        assert again > first  # a new seq: the server applies it
        np.testing.assert_array_equal(x.numpy(), [4.0, 5.0])


def test_duplicate_marks_are_accepted_and_a_marked_fetch_is_read_again(scripted):
    """Issue 25: a duplicate without a result is answered with a mark (seq
    and `duplicate`, no kind). The client counts it, stores nothing for a
    put, and reads a fetch answered by one again with a new seq."""
    tape = ScriptedTape(mark_fetches=1, mark_puts=True)
    with gradtape.connect(scripted(tape)) as s:
        x = s.constant(np.array([4.0, 5.0]))
        y = s.constant(np.array([6.0]))
        np.testing.assert_array_equal(x.numpy(), [4.0, 5.0])
        np.testing.assert_array_equal(y.numpy(), [6.0])
        stats = s.transport_stats()
        assert stats["refetches"] == 1
        assert stats["duplicate_results"] == 3  # two puts, one fetch
        first, again, _ = tape.fetch_seqs
        assert again > first


VERDICT = (("gradtape-proxy-verdict", "replica-unreachable"),)


@pytest.mark.parametrize(
    "trailers, budget, lost_after",
    [
        (VERDICT, 60, (2.0, 4.0)),  # the proxy's verdict: final after the 2 s grace
        ((), 4, (3.9, 7.0)),  # no verdict (maybe a blip): the whole budget
    ],
)
def test_the_proxy_verdict_ends_a_session_within_seconds(scripted, trailers, budget, lost_after):
    """A stream reset as its replica died, then every probe answered by the
    proxy (deploy/k8s/nginx/proxy.conf)."""
    tape = ScriptedTape(
        stream_failures=[(grpc.StatusCode.INTERNAL, ())],
        keep_alive_failure=(grpc.StatusCode.UNAVAILABLE, trailers),
    )
    s = gradtape.connect(scripted(tape), reconnect_timeout=budget)
    try:
        started = time.monotonic()
        with pytest.raises(gradtape.SessionLostError) as info:
            bounded(lambda: s.constant(np.ones(1)).numpy(), 20)
        waited = time.monotonic() - started
        assert (info.value.code, info.value.reason) == (grpc.StatusCode.UNAVAILABLE, "unreachable")
        assert "gradtape-proxy: the replica of session" in info.value.message
        assert lost_after[0] <= waited < lost_after[1], waited
        assert tape.probes >= 2
    finally:
        with contextlib.suppress(gradtape.GradtapeError):
            s.close()
