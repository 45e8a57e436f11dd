"""deploy/k8s/nginx (the proxy in front of the replicas) on loopback: two
gradtape-servers behind Debian's nginx running the same nginx.conf,
upstream.conf and proxy.conf, only with the replicas' names and the listen
port replaced by 127.0.0.1 ports.

Checks that sessions created through the proxy work (ops, tapes, gradients,
a Stream of many batches, a tensor larger than nginx's default 1 MB body
limit), that each session lives on exactly one replica and that both
replicas get sessions.
"""

import contextlib
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import time

import grpc
import numpy as np
import pytest

from conftest import REPO_ROOT, running_server

NGINX_DIR = REPO_ROOT / "deploy" / "k8s" / "nginx"
START_TIMEOUT_S = 10


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render_nginx(tmp: pathlib.Path, proxy: str, backends):
    """Writes deploy/k8s/nginx's nginx.conf and upstream.conf (the replicas
    replaced by `backends`) and `proxy` (a proxy.conf already pointed at
    loopback) into tmp; returns the nginx.conf path."""
    upstream = (NGINX_DIR / "upstream.conf").read_text()
    server_lines = re.findall(r"^\s*server gradtape-\d+:50051;\s*$", upstream, re.M)
    assert len(server_lines) == 2, "upstream.conf should list gradtape-0 and gradtape-1"
    for line, backend in zip(server_lines, backends):
        upstream = upstream.replace(line, f"  server {backend};")
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
    """True if `replica` holds the session (a Stats command succeeds), False
    if it answers NOT_FOUND."""
    with grpc.insecure_channel(replica) as channel:
        stub = pb.pb2_grpc.TapeServiceStub(channel)
        batch = pb.pb2.CommandBatch(commands=[pb.pb2.Command(seq=1 << 30, stats=pb.pb2.Stats())])
        try:
            stub.Run(batch, metadata=session._core.metadata, timeout=10)
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
