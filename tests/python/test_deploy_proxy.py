"""deploy/k8s/nginx (the proxy in front of the replicas) on loopback: two
(or three) gradtape-servers behind Debian's nginx running the same nginx.conf,
upstream.conf and proxy.conf, only with the replicas' names and the listen
port replaced by 127.0.0.1 ports.

Checks that sessions created through the proxy work (ops, tapes, gradients,
a Stream of many batches, a tensor larger than nginx's default 1 MB body
limit), that each session lives on exactly one replica and that both
replicas get sessions; that a CreateSession without the routing header is
refused; and, with three replicas, what a replica lost mid-training
(killed and restarted, or drained) does to the sessions on it and on the
others (docs/RELIABILITY.md "A replica lost behind the proxy").
"""

import contextlib
import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time

import grpc
import numpy as np
import pytest

from conftest import REPO_ROOT, running_server
from server_process import ServerProcess

NGINX_DIR = REPO_ROOT / "deploy" / "k8s" / "nginx"
START_TIMEOUT_S = 10


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render_nginx(tmp: pathlib.Path, proxy: str, backends):
    """Writes deploy/k8s/nginx's nginx.conf and upstream.conf (its replicas
    replaced by one line per address in `backends`, with the same server
    parameters) and `proxy` (a proxy.conf already pointed at loopback) into
    tmp; returns the nginx.conf path."""
    upstream = (NGINX_DIR / "upstream.conf").read_text()
    server_lines = re.findall(r"^\s*server gradtape-\d+:50051( [^;]*)?;\n", upstream, re.M)
    assert len(server_lines) == 2, "upstream.conf should list gradtape-0 and gradtape-1"
    assert len(set(server_lines)) == 1, "every replica should have the same parameters"
    block = re.search(r"(^\s*server gradtape-\d+:50051[^;]*;\n)+", upstream, re.M)
    servers = "".join(f"  server {b}{server_lines[0]};\n" for b in backends)
    upstream = upstream[: block.start()] + servers + upstream[block.end() :]
    main = (NGINX_DIR / "nginx.conf").read_text().replace("/etc/nginx/gradtape/", f"{tmp}/")
    # Writable temp paths, so the test does not depend on /var/lib/nginx.
    temp = "".join(
        f"  {d}_temp_path {tmp}/{d};\n"
        for d in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    main = main.replace("http {\n", "http {\n" + temp, 1)
    (tmp / "upstream.conf").write_text(upstream)
    (tmp / "proxy.conf").write_text(proxy)
    (tmp / "nginx.conf").write_text(main)
    return tmp / "nginx.conf"


def _render(tmp: pathlib.Path, backends, port):
    """The deploy configs in tmp, pointed at loopback."""
    proxy = (NGINX_DIR / "proxy.conf").read_text()
    assert "listen 50051 http2;" in proxy
    proxy = proxy.replace("listen 50051 http2;", f"listen 127.0.0.1:{port} http2;")
    return render_nginx(tmp, proxy, backends)


@contextlib.contextmanager
def running_nginx(tmp: pathlib.Path, conf: pathlib.Path, port: int):
    """Checks `conf` (nginx -t), runs nginx with it until it accepts on
    127.0.0.1:`port`, and stops it (gracefully: open streams finish) on exit."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(nginx):
        pytest.fail("nginx not found: scripts/setup.sh installs nginx-light")
    globals_ = f"daemon off; pid {tmp}/nginx.pid; error_log {tmp}/error.log;"
    check = subprocess.run(
        [nginx, "-t", "-c", str(conf), "-g", globals_],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert check.returncode == 0, check.stderr
    proc = subprocess.Popen(
        [nginx, "-c", str(conf), "-g", globals_],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"nginx did not start: {proc.stderr.read()!r}")
                time.sleep(0.05)
        yield
    finally:
        proc.send_signal(signal.SIGQUIT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def proxy(tmp_path):
    """Two replicas and nginx in front; yields (proxy address, replica
    addresses) and stops all three."""
    with running_server("--keep_alive_seconds=60") as a, running_server(
        "--keep_alive_seconds=60"
    ) as b:
        port = free_port()
        with running_nginx(tmp_path, _render(tmp_path, [a, b], port), port):
            yield f"127.0.0.1:{port}", (a, b)


def _holds(pb, replica, session):
    """True if `replica` holds the session (KeepAlive succeeds), False if it
    answers NOT_FOUND. KeepAlive applies no command: a probe that sent one
    would be a second writer on the session, and its seq would put the
    client's own later commands out of order."""
    with grpc.insecure_channel(replica) as channel:
        stub = pb.pb2_grpc.TapeServiceStub(channel)
        try:
            stub.KeepAlive(pb.pb2.KeepAliveRequest(), metadata=session._core.metadata, timeout=10)
            return True
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND, e.details()
            return False


def test_sessions_through_the_proxy_stay_on_one_replica(proxy, pb):
    import gradtape

    address, replicas = proxy
    sessions = [gradtape.connect(address, timeout=10) for _ in range(16)]
    try:
        for i, s in enumerate(sessions):
            x = s.constant(np.array([1.0, 2.0, 3.0]) * (i + 1))
            with s.GradientTape() as tape:
                tape.watch(x)
                y = s.ops.sum(x * x, axis=[0])
            (dx,) = tape.gradient_values(y, [x])
            np.testing.assert_allclose(dx, 2 * np.array([1.0, 2.0, 3.0]) * (i + 1))
        where = [[_holds(pb, r, s) for r in replicas] for s in sessions]
        assert all(sum(w) == 1 for w in where), where
        per_replica = [sum(w[k] for w in where) for k in range(2)]
        assert min(per_replica) >= 1, f"sessions per replica: {per_replica}"
    finally:
        for s in sessions:
            s.close()


def test_long_stream_and_large_tensor_through_the_proxy(proxy):
    import gradtape

    address, _ = proxy
    with gradtape.connect(address, timeout=10, batch_size=64) as s:
        # ~3,000 commands in ~50 batches on one Stream, then a 4 MB tensor
        # each way (nginx's default client_max_body_size would cut the
        # stream after 1 MB).
        x = s.constant(np.ones(4))
        for _ in range(3000):
            x = x * 1.0001
        np.testing.assert_allclose(x.numpy(), np.full(4, 1.0001**3000), rtol=1e-9)
        big = np.arange(1 << 19, dtype=np.float64)
        np.testing.assert_array_equal((s.constant(big) + 1.0).numpy(), big + 1.0)
        assert s.counters["batches_sent"] >= 40


# -- three replicas, one lost: docs/RELIABILITY.md "A replica lost behind the proxy" ------
#
# Training sessions spread over three replicas behind the same nginx config;
# one replica is killed (SIGKILL) mid-training and later restarted on its
# port, or drained (SIGTERM, --checkpoint_on_drain into a checkpoint dir the
# three share). Every wait is bounded: a worker that does not finish within
# WORKER_TIMEOUT_S is a hang and fails the test.

REPLICAS = 3
PER_REPLICA = 2  # training sessions on each replica
STEPS = 60
FAULT_AT = 20  # the fault comes once every session has done this many steps
PAUSE_AT = 40  # a session that reaches this step before the fault waits for it
WORKER_TIMEOUT_S = 60
# The clients' reconnect budget (connect(reconnect_timeout=...)) where no
# replica is killed.
RECONNECT_S = 1.5
# ... and where one is: the clients' default, far longer than the proxy's
# verdict takes to end a lost session.
RECONNECT_LONG_S = 30
# Each lost session's error arrives within this long of the kill: the
# proxy's replica-unreachable verdict, repeated for the clients' grace
# (REPLICA_UNREACHABLE_GRACE_S, the same in all three clients), is final.
LOST_WITHIN_S = 5
LOG_TIMEOUT_S = 10


def _access_log_sessions(paths):
    """{session id: set of methods} of the access-log lines in `paths` that
    a replica answered for a session, failed CreateSessions left out (a
    client retrying under a new id, or a draining replica refusing one)."""
    seen = {}
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if not entry["session"]:
                continue
            if entry["method"] == "CreateSession" and entry["code"] != "OK":
                continue
            seen.setdefault(entry["session"], set()).add(entry["method"])
    return seen


class Replica:
    """A gradtape-server on 127.0.0.1 that keeps its port across restarts;
    each start writes its own access log."""

    def __init__(self, tmp: pathlib.Path, name: str, *args):
        self.tmp, self.name, self.args = tmp, name, args
        self.logs = []
        self.server = None
        self.port = 0
        self.start()

    def start(self):
        log = self.tmp / f"{self.name}-{len(self.logs)}.jsonl"
        self.logs.append(log)
        self.server = ServerProcess(
            f"--address=127.0.0.1:{self.port}", f"--access_log={log}", *self.args
        )
        self.address = self.server.address
        self.port = int(self.address.rsplit(":", 1)[1])

    def kill(self):
        self.server.kill()

    def drain(self):
        self.server.proc.send_signal(signal.SIGTERM)
        assert self.server.proc.wait(timeout=30) == 0, self.server.output()

    def stop(self):
        self.server.stop()

    def sessions(self):
        return _access_log_sessions(self.logs)


@contextlib.contextmanager
def cluster(tmp: pathlib.Path, *args):
    """REPLICAS Replicas (extra `args` for each) and nginx in front; yields
    (proxy address, replicas) and stops them all."""
    replicas = []
    try:
        for k in range(REPLICAS):
            replicas.append(Replica(tmp, f"replica{k}", "--keep_alive_seconds=60", *args))
        port = free_port()
        conf = _render(tmp, [r.address for r in replicas], port)
        with running_nginx(tmp, conf, port):
            yield f"127.0.0.1:{port}", replicas
    finally:
        for r in replicas:
            r.stop()


def _holder(replicas, session_id):
    """The index of the replica whose access log shows `session_id`'s
    CreateSession (waits for the line: it is written as the status is sent)."""
    deadline = time.monotonic() + LOG_TIMEOUT_S
    while True:
        found = [k for k, r in enumerate(replicas) if session_id in r.sessions()]
        if found or time.monotonic() > deadline:
            assert len(found) == 1, f"session {session_id} on replicas {found}"
            return found[0]
        time.sleep(0.02)


def _data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(16, 4))
    y = x @ rng.normal(size=(4, 1)) + 0.1 * rng.normal(size=(16, 1))
    return x, y


class Trainer:
    """Linear regression by gradient descent on one session, step by step:
    w, b and the step count are named variables, so a drain checkpoint holds
    everything needed to continue. losses[k] is the loss before step k's
    update (fetched at the end of the step: one batch per step)."""

    def __init__(self, session, seed, restore=None):
        self.seed, self.session, self.losses = seed, session, {}
        x, y = _data(seed)
        self.w = session.Variable(np.zeros((4, 1)), name="w")
        self.b = session.Variable(np.zeros(()), name="b")
        self.step = session.Variable(np.zeros(()), name="step")
        if restore is not None:
            # The Python client has no checkpoint API yet: the raw command.
            from gradtape.v1 import tape_service_pb2 as pb

            command = pb.Command(restore_checkpoint=pb.RestoreCheckpoint(name=restore))
            session._core.call(command)
        self.x, self.y = session.constant(x), session.constant(y)
        self.done = int(self.step.numpy())

    def run(self, until, pause=None):
        """Steps until `until`; at step PAUSE_AT waits for `pause` (an Event)."""
        s = self.session
        for k in range(self.done, until):
            if pause is not None and k == PAUSE_AT:
                assert pause.wait(WORKER_TIMEOUT_S), "the fault never came"
            with s.GradientTape() as tape:
                r = s.ops.mat_mul(self.x, self.w) + self.b - self.y
                loss = s.ops.sum(r * r, axis=[0, 1])
            gw, gb = tape.gradient(loss, [self.w, self.b])
            self.w.assign_sub(gw * 0.01)
            self.b.assign_sub(gb * 0.01)
            self.step.assign_add(np.array(1.0))
            self.losses[k] = loss.numpy().tobytes()
            self.done = k + 1

    def final(self):
        return self.w.numpy().tobytes() + self.b.numpy().tobytes()


def _reference(address, seeds):
    """Fault-free runs: {seed: (losses, final variables)}."""
    import gradtape

    out = {}
    for seed in seeds:
        with gradtape.connect(address, timeout=10, reconnect_timeout=RECONNECT_S) as s:
            t = Trainer(s, seed)
            t.run(STEPS)
            out[seed] = (t.losses, t.final())
    return out


def _connect_routed(address, replicas, live, want=None, reconnect=RECONNECT_S, attempts=200):
    """A session created through the proxy on a replica in `live` (and on
    replica `want` if given), under ids chosen here: the client tries a
    caller's id once, so a CreateSession whose id hashes to a dead replica
    fails fast with the proxy's UNAVAILABLE, and is retried here under a
    new id. Returns (session, holder, seconds each failure took)."""
    import gradtape

    failures = []
    for _ in range(attempts):
        started = time.monotonic()
        try:
            s = gradtape.connect(
                address, session_id=secrets.token_hex(16), timeout=10, reconnect_timeout=reconnect
            )
        except gradtape.GradtapeError as e:
            failures.append(time.monotonic() - started)
            assert e.code == grpc.StatusCode.UNAVAILABLE, e
            assert "is unreachable" in e.message, e.message
            continue
        k = _holder(replicas, s.id)
        assert k in live, f"session {s.id} created on dead replica {k}"
        if want is None or k == want:
            return s, k, failures
        s.close()
    pytest.fail(f"no session on replica {want} in {attempts} attempts")


def _train_all(trainers, pause):
    """Runs every trainer in its own thread up to STEPS; returns the threads
    and {seed: None (finished) or (the exception raised, when)}."""
    outcome = {}

    def work(t):
        try:
            t.run(STEPS, pause)
            outcome[t.seed] = None
        except Exception as e:  # noqa: BLE001 (recorded, asserted by the test)
            outcome[t.seed] = (e, time.monotonic())

    threads = [threading.Thread(target=work, args=(t,), daemon=True) for t in trainers]
    for th in threads:
        th.start()
    return threads, outcome


def _join(threads, timeout):
    """Fails on a worker that neither finished nor raised in time: a hang."""
    deadline = time.monotonic() + timeout
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))
    hung = [th for th in threads if th.is_alive()]
    assert not hung, f"{len(hung)} training worker(s) hang"


def _wait_all_reached(trainers, step):
    deadline = time.monotonic() + WORKER_TIMEOUT_S
    while not all(t.done >= step for t in trainers):
        assert time.monotonic() < deadline, [t.done for t in trainers]
        time.sleep(0.01)


def _spread(address, replicas, reconnect=lambda k, i: RECONNECT_S):
    """PER_REPLICA sessions on each replica: [(session, holder)], seeds are
    the list indices; the i-th session on replica k gets a reconnect
    budget of reconnect(k, i) seconds."""
    placed = []
    for k in range(REPLICAS):
        for i in range(PER_REPLICA):
            s, holder, _ = _connect_routed(
                address, replicas, range(REPLICAS), want=k, reconnect=reconnect(k, i)
            )
            placed.append((s, holder))
    return placed


def _close_quietly(session):
    import gradtape

    try:
        session.close()
    except gradtape.GradtapeError:
        pass  # its replica is gone


def _assert_each_session_on_one_replica(replicas, ids):
    logs = [r.sessions() for r in replicas]
    for session_id in ids:
        where = [k for k, seen in enumerate(logs) if session_id in seen]
        assert len(where) == 1, f"session {session_id} answered by replicas {where}"


def _raw_keep_alive(pb, address, session):
    """KeepAlive of `session` straight through the proxy (no client logic):
    the RpcError, and the seconds it took."""
    with grpc.insecure_channel(address) as channel:
        stub = pb.pb2_grpc.TapeServiceStub(channel)
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as caught:
            stub.KeepAlive(pb.pb2.KeepAliveRequest(), metadata=session._core.metadata, timeout=10)
        return caught.value, time.monotonic() - started


def _assert_lost(error, code, reason, words, session):
    import gradtape

    assert isinstance(error, gradtape.SessionLostError), repr(error)
    assert (error.code, error.reason) == (code, reason), error
    assert words in error.message and session.id in error.message, error.message


def test_a_killed_replica_loses_only_its_sessions_and_routing_stays_sticky(tmp_path, pb):
    import gradtape
    from gradtape._resume import REPLICA_UNREACHABLE_GRACE_S

    victim = 1
    with cluster(tmp_path) as (address, replicas):
        # Every client has a 30 s budget: the proxy's verdict, not the
        # budget, ends the lost ones.
        placed = _spread(address, replicas, lambda k, i: RECONNECT_LONG_S)
        seeds = range(len(placed))
        reference = _reference(address, seeds)
        trainers = [Trainer(s, seed) for seed, (s, _) in enumerate(placed)]
        kept = [t for t, (_, k) in zip(trainers, placed) if k != victim]
        gone = [t for t, (_, k) in zip(trainers, placed) if k == victim]
        fault = threading.Event()
        threads, outcome = _train_all(trainers, fault)
        _wait_all_reached(trainers, FAULT_AT)
        killed = time.monotonic()
        replicas[victim].kill()
        fault.set()
        _join(threads, WORKER_TIMEOUT_S)

        # Survivors: untouched, bit for bit.
        for t in kept:
            assert outcome[t.seed] is None, outcome[t.seed]
            assert t.losses == reference[t.seed][0], f"seed {t.seed}: losses differ"
            assert t.final() == reference[t.seed][1], f"seed {t.seed}: variables differ"
        # The lost replica's clients: one clear error each, within seconds
        # of the kill (the proxy's verdict held for the grace), quoting the
        # proxy, although their budget had 25 s more.
        to_unreachable = []
        for t in gone:
            error, when = outcome[t.seed]
            _assert_lost(error, grpc.StatusCode.UNAVAILABLE, "unreachable", "unreachable", t.session)
            assert "gradtape-proxy: the replica of session" in error.message, error.message
            assert FAULT_AT <= t.done < STEPS
            to_unreachable.append(when - killed)
            with pytest.raises(gradtape.SessionLostError):
                t.session.keep_alive()  # every later call: the same error
        assert all(
            REPLICA_UNREACHABLE_GRACE_S <= d < LOST_WITHIN_S for d in to_unreachable
        ), to_unreachable

        # While it is down: its sessions' calls fail fast at the proxy, with
        # UNAVAILABLE naming the session and the verdict trailer (no retry
        # on another replica) ...
        raw, down_call = _raw_keep_alive(pb, address, gone[0].session)
        assert raw.code() == grpc.StatusCode.UNAVAILABLE, raw
        assert "is unreachable" in raw.details() and gone[0].session.id in raw.details()
        verdict = ("gradtape-proxy-verdict", "replica-unreachable")
        assert verdict in tuple(raw.trailing_metadata() or ()), raw.trailing_metadata()
        # ... new sessions land on the live replicas: CreateSessions of ids
        # that hash to it fail fast, and the client retries under a new id.
        live = [k for k in range(REPLICAS) if k != victim]
        fresh, create_failures = [], []
        while len(fresh) < 4 or not create_failures:
            assert len(fresh) < 40, "no CreateSession hashed to the dead replica"
            s, _, failed = _connect_routed(address, replicas, live)
            create_failures += failed
            fresh.append(Trainer(s, len(fresh) % len(seeds)))
        for _ in range(3):
            s = gradtape.connect(address, timeout=10, reconnect_timeout=RECONNECT_S)
            assert _holder(replicas, s.id) in live
            fresh.append(Trainer(s, len(fresh) % len(seeds)))
        for t in fresh:
            t.run(FAULT_AT)

        replicas[victim].start()  # same port, empty
        # Its old sessions' calls reach it again, which no longer has them
        # (waiting for it could not have saved them).
        raw, _ = _raw_keep_alive(pb, address, gone[0].session)
        assert raw.code() == grpc.StatusCode.NOT_FOUND, raw
        # The sessions created meanwhile stay where they are (no split brain).
        for t in fresh:
            t.session.keep_alive()
            t.run(STEPS)
            assert t.losses == reference[t.seed][0] and t.final() == reference[t.seed][1]
            t.session.close()
        # The restarted replica takes its share of new sessions at once (no
        # fail_timeout to wait out).
        back, _, failed = _connect_routed(address, replicas, range(REPLICAS), want=victim)
        assert not failed
        Trainer(back, 0).run(FAULT_AT)
        back.close()
        for t in kept:
            t.session.close()
        for t in gone:
            _close_quietly(t.session)

        ids = [t.session.id for t in trainers + fresh] + [back.id]
        _assert_each_session_on_one_replica(replicas, ids)
        assert not set(t.session.id for t in fresh) & set(replicas[victim].sessions())
        print(
            f"\nreplica lost: {len(kept)} sessions on survivors bit-identical; "
            f"lost clients UNAVAILABLE unreachable "
            f"{', '.join(f'{d:.2f}' for d in to_unreachable)} s after the kill (budget "
            f"{RECONNECT_LONG_S} s, the proxy's verdict final after "
            f"{REPLICA_UNREACHABLE_GRACE_S} s); a call while down {down_call * 1000:.1f} ms "
            f"at the proxy; {len(create_failures)} CreateSession(s) hashed to it failed in "
            f"{max(create_failures) * 1000:.1f} ms (max); {len(fresh)} new sessions on live "
            f"replicas, bit-identical after the restart"
        )


def test_a_drained_replica_lets_its_clients_restore_and_continue(tmp_path):
    import gradtape

    shared = tmp_path / "checkpoints"
    shared.mkdir()
    drain_flags = (
        f"--checkpoint_dir={shared}",
        "--checkpoint_on_drain",
        "--shutdown_grace_seconds=10",
    )
    with cluster(tmp_path, *drain_flags) as (address, replicas):
        placed = _spread(address, replicas)
        seeds = range(len(placed))
        reference = _reference(address, seeds)
        victim = 2
        trainers = [Trainer(s, seed) for seed, (s, _) in enumerate(placed)]
        drained = [t for t, (_, k) in zip(trainers, placed) if k == victim]
        kept = [t for t, (_, k) in zip(trainers, placed) if k != victim]
        fault = threading.Event()
        threads, outcome = _train_all(trainers, fault)
        _wait_all_reached(trainers, FAULT_AT)
        drained_at = time.monotonic()
        replicas[victim].drain()
        fault.set()
        _join(threads, WORKER_TIMEOUT_S)

        for t in kept:
            assert outcome[t.seed] is None, outcome[t.seed]
            assert t.losses == reference[t.seed][0] and t.final() == reference[t.seed][1]
            t.session.close()
        live = [k for k in range(REPLICAS) if k != victim]
        to_draining = []
        for t in drained:
            error, when = outcome[t.seed]
            # The server's own UNAVAILABLE (its status trailer tells it from
            # the proxy's): final, never retried.
            _assert_lost(error, grpc.StatusCode.UNAVAILABLE, "draining", "draining", t.session)
            to_draining.append(when - drained_at)
            assert (shared / f"drain-{t.session.id}").exists()
            _close_quietly(t.session)

        def resume(t, session):
            again = Trainer(session, t.seed, restore=f"drain-{t.session.id}")
            # The checkpoint holds every step the client saw finish, and
            # perhaps the next: a step whose batch the drain applied but
            # whose wait saw the stream end (the step variable tells).
            assert again.done in (t.done, t.done + 1), (again.done, t.done)
            restored.append(again.done)
            again.run(STEPS)
            losses = {**t.losses, **again.losses}
            assert len(losses) >= STEPS - 1
            assert all(loss == reference[t.seed][0][k] for k, loss in losses.items())
            assert again.final() == reference[t.seed][1]
            session.close()
            return again

        # One client resumes at once on another replica, under a new id
        # (the checkpoint dir is shared) ...
        restored = []
        s, _, _ = _connect_routed(address, replicas, live)
        resumed = [resume(drained[0], s)]
        # ... the other once its replica is back, under its old id: that
        # routes to the same replica, whose own disk holds the checkpoint
        # (deploy/k8s: one volume per replica).
        replicas[victim].start()
        old_id = drained[1].session.id
        s = gradtape.connect(address, session_id=old_id, timeout=10, reconnect_timeout=RECONNECT_S)
        deadline = time.monotonic() + LOG_TIMEOUT_S
        while old_id not in _access_log_sessions(replicas[victim].logs[-1:]):
            assert time.monotonic() < deadline, f"{old_id} not created on replica {victim}"
            time.sleep(0.02)
        resumed.append(resume(drained[1], s))

        _assert_each_session_on_one_replica(
            replicas, [t.session.id for t in trainers + resumed]
        )
        print(
            f"\nreplica drained: {len(kept)} sessions on survivors bit-identical, "
            f"drained clients UNAVAILABLE draining {max(to_draining):.2f} s (max) after "
            f"the SIGTERM, "
            f"{len(drained)} restored from drain-<id> (one at once on another replica, "
            f"one under its old id on the restarted replica) and finished "
            f"bit-identical (resumed at steps {restored}; the clients "
            f"had seen {[t.done for t in drained]})"
        )


@pytest.mark.no_client  # raw stubs through the proxy
def test_create_session_without_the_routing_header_is_refused(proxy, pb):
    """Without gradtape-session-id nginx would pick a replica round-robin
    and the session's later calls would hash elsewhere."""
    address, replicas = proxy
    with grpc.insecure_channel(address) as channel:
        stub = pb.pb2_grpc.TapeServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.CreateSession(pb.pb2.CreateSessionRequest(), timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "gradtape-session-id" in caught.value.details()
        # ListOps needs no session: still served.
        assert stub.ListOps(pb.pb2.ListOpsRequest(), timeout=10).ops
