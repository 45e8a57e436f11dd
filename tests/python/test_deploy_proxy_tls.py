"""deploy/k8s-tls (nginx terminating TLS, mTLS to the replicas) on loopback:
two gradtape-servers started with the overlay's TLS flags (--tls_cert_file,
--tls_key_file, --tls_client_ca_file) behind Debian's nginx running the
overlay's proxy.conf with the base nginx.conf and upstream.conf, only with
ports, certificate paths and the upstream name replaced for 127.0.0.1.
Certificates are made at test time (tests/make_test_certs.sh).

Checks that a TLS client works through the proxy (an op and a gradient on
sessions spread over both replicas), that a plaintext client cannot use the
proxy, and that a replica refuses a client without a certificate (only the
proxy, holding the client certificate, may open sessions there), and that
the proxy refuses a CreateSession without the routing header.
"""

import grpc
import numpy as np
import pytest

from conftest import REPO_ROOT, running_server
from test_deploy_proxy import free_port, render_nginx, running_nginx
from tls_certs import Certs

TLS_DIR = REPO_ROOT / "deploy" / "k8s-tls" / "nginx"


def _render(tmp, certs, backends, port):
    proxy = (TLS_DIR / "proxy.conf").read_text()
    replacements = {
        "listen 50051 ssl http2;": f"listen 127.0.0.1:{port} ssl http2;",
        "/etc/nginx/gradtape-tls/tls.crt": certs.path("server.pem"),
        "/etc/nginx/gradtape-tls/tls.key": certs.path("server.key"),
        "/etc/nginx/gradtape-upstream-tls/ca.crt": certs.path("ca.pem"),
        "/etc/nginx/gradtape-upstream-tls/tls.crt": certs.path("client.pem"),
        "/etc/nginx/gradtape-upstream-tls/tls.key": certs.path("client.key"),
        # The test replicas' certificate names localhost, not "gradtape".
        "grpc_ssl_name gradtape;": "grpc_ssl_name localhost;",
    }
    for old, new in replacements.items():
        assert old in proxy, old
        proxy = proxy.replace(old, new)
    return render_nginx(tmp, proxy, backends)


@pytest.fixture
def tls_proxy(tmp_path):
    """Two mTLS replicas and nginx in front; yields (certs, proxy address,
    replica addresses) and stops all three."""
    certs = Certs(tmp_path / "certs")
    flags = certs.tls_flags(client_ca=True)
    with running_server(*flags) as a, running_server(*flags) as b:
        port = free_port()
        with running_nginx(tmp_path, _render(tmp_path, certs, [a, b], port), port):
            yield certs, f"127.0.0.1:{port}", (a, b)


def test_tls_through_the_proxy_with_mtls_to_the_replicas(tls_proxy, pb):
    import gradtape

    certs, address, replicas = tls_proxy
    ca = certs.read("ca.pem")
    sessions = [gradtape.connect(address, timeout=10, root_certificates=ca) for _ in range(8)]
    try:
        for i, s in enumerate(sessions):
            x = s.constant(np.array([1.0, 2.0]) * (i + 1))
            with s.GradientTape() as tape:
                tape.watch(x)
                y = s.ops.sum(x * x, axis=[0])
            (dx,) = tape.gradient_values(y, [x])
            np.testing.assert_allclose(dx, 2 * np.array([1.0, 2.0]) * (i + 1))
    finally:
        for s in sessions:
            s.close()
    # The routing rules of ../nginx/proxy.conf hold here too: no
    # CreateSession without the routing header (docs/RELIABILITY.md "A replica lost
    # behind the proxy").
    tls = grpc.ssl_channel_credentials(root_certificates=ca)
    with grpc.secure_channel(address, tls) as channel:
        stub = pb.pb2_grpc.TapeServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.CreateSession(pb.pb2.CreateSessionRequest(), timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "gradtape-session-id" in caught.value.details()
    with pytest.raises(gradtape.GradtapeError):
        gradtape.connect(address, timeout=3)  # plaintext to the TLS proxy
    with pytest.raises(gradtape.GradtapeError):
        gradtape.connect(replicas[0], timeout=3, root_certificates=ca)  # no client cert
    with gradtape.connect(
        replicas[0],
        timeout=10,
        root_certificates=ca,
        private_key=certs.read("client.key"),
        certificate_chain=certs.read("client.pem"),
    ):
        pass
