"""gradtape.connect over TLS and mTLS against the real gradtape-server, with
certificates made at test time (tests/make_test_certs.sh)."""

import grpc
import numpy as np
import pytest

import gradtape
from conftest import running_server
from tls_certs import Certs

CONNECT_TIMEOUT_S = 3
# A connect that cannot succeed waits for its whole timeout (CreateSession
# waits for the channel to be ready): short, it still fails for its reason.
FAILING_TIMEOUT_S = 1


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_address(certs):
    with running_server(*certs.tls_flags()) as address:
        yield address


@pytest.fixture(scope="module")
def mtls_address(certs):
    with running_server(*certs.tls_flags(client_ca=True)) as address:
        yield address


def add_over(address, timeout=CONNECT_TIMEOUT_S, **kwargs):
    with gradtape.connect(address, timeout=timeout, **kwargs) as session:
        total = session.constant(np.array([1.0, 2.0])) + session.constant(np.array([3.0, 4.0]))
        return total.numpy()


def test_tls_session_computes(certs, tls_address):
    out = add_over(tls_address, root_certificates=certs.read("ca.pem"), keepalive_time=30)
    np.testing.assert_array_equal(out, [4.0, 6.0])


@pytest.mark.pure_only(
    reason="a grpc.ChannelCredentials object: only grpcio takes one, so connect() is pure"
)
def test_tls_with_grpc_credentials_object(certs, tls_address):
    creds = grpc.ssl_channel_credentials(root_certificates=certs.read("ca.pem"))
    np.testing.assert_array_equal(add_over(tls_address, credentials=creds), [4.0, 6.0])


def test_plaintext_client_against_tls_port_fails(tls_address):
    with pytest.raises(gradtape.GradtapeError):
        add_over(tls_address, timeout=FAILING_TIMEOUT_S)


def test_client_trusting_another_ca_fails(certs, tls_address):
    with pytest.raises(gradtape.GradtapeError) as err:
        add_over(tls_address, FAILING_TIMEOUT_S, root_certificates=certs.read("ca2.pem"))
    assert "CreateSession" in str(err.value)


def test_mtls_with_the_right_client_certificate(certs, mtls_address):
    out = add_over(
        mtls_address,
        root_certificates=certs.read("ca.pem"),
        private_key=certs.read("client.key"),
        certificate_chain=certs.read("client.pem"),
    )
    np.testing.assert_array_equal(out, [4.0, 6.0])


@pytest.mark.parametrize("client", [None, "client2"])
def test_mtls_without_or_with_a_foreign_client_certificate_fails(certs, mtls_address, client):
    kwargs = {"root_certificates": certs.read("ca.pem")}
    if client is not None:
        kwargs.update(
            private_key=certs.read(client + ".key"),
            certificate_chain=certs.read(client + ".pem"),
        )
    with pytest.raises(gradtape.GradtapeError):
        add_over(mtls_address, FAILING_TIMEOUT_S, **kwargs)


def test_conflicting_arguments_are_refused(certs):
    ca = certs.read("ca.pem")
    creds = grpc.ssl_channel_credentials(root_certificates=ca)
    # Refused before any connection is tried: the address is never used.
    with pytest.raises(ValueError, match="exclusive"):
        gradtape.connect("127.0.0.1:1", credentials=creds, root_certificates=ca)
    with pytest.raises(ValueError, match="only private_key is set"):
        gradtape.connect("127.0.0.1:1", root_certificates=ca, private_key=certs.read("client.key"))
    with pytest.raises(TypeError, match="root_certificates must be PEM bytes"):
        gradtape.connect("127.0.0.1:1", root_certificates=123)
    with pytest.raises(TypeError, match="grpc.ChannelCredentials"):
        gradtape.connect("127.0.0.1:1", credentials="not credentials")
