"""Throwaway TLS certificates for tests, made by tests/make_test_certs.sh (the
openssl CLI) at test time: CA 1 with a server certificate for
127.0.0.1/localhost and a client certificate, and an unrelated CA 2 with its
own client certificate."""

import pathlib
import subprocess

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "make_test_certs.sh"


class Certs:
    def __init__(self, directory: pathlib.Path):
        self.dir = pathlib.Path(directory)
        subprocess.run(["bash", str(SCRIPT), str(self.dir)], check=True, timeout=60)

    def path(self, name: str) -> str:
        return str(self.dir / name)

    def read(self, name: str) -> bytes:
        return (self.dir / name).read_bytes()

    def tls_flags(self, client_ca: bool = False):
        """gradtape-server flags serving server.{pem,key} (mTLS with CA 1
        when client_ca)."""
        flags = [
            f"--tls_cert_file={self.path('server.pem')}",
            f"--tls_key_file={self.path('server.key')}",
        ]
        if client_ca:
            flags.append(f"--tls_client_ca_file={self.path('ca.pem')}")
        return flags
