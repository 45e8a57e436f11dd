"""Fixtures for the protocol tests: Python stubs generated from proto/ at test
time, and a gradtape-server process on a free 127.0.0.1 port.

GRADTAPE_SERVER_BIN names the server binary (default:
build/server/gradtape-server under the repository root). Run:

  python3 -m venv .venv && .venv/bin/pip install -r tests/python/requirements.txt
  GRADTAPE_SERVER_BIN=build/server/gradtape-server .venv/bin/python -m pytest tests/python
"""

import contextlib
import importlib
import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading

import grpc
import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTO_ROOT = REPO_ROOT / "proto"
STARTUP_TIMEOUT_S = 15
SHUTDOWN_TIMEOUT_S = 10


@pytest.fixture(scope="session")
def pb(tmp_path_factory):
    """The generated modules, as a namespace with `pb2` and `pb2_grpc`."""
    from grpc_tools import protoc  # imported here: only needed to generate

    out = tmp_path_factory.mktemp("gen")
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        str(PROTO_ROOT / "gradtape" / "v1" / "tape_service.proto"),
    ]
    assert protoc.main(args) == 0, "protoc failed on tape_service.proto"
    sys.path.insert(0, str(out))
    try:
        pb2 = importlib.import_module("gradtape.v1.tape_service_pb2")
        pb2_grpc = importlib.import_module("gradtape.v1.tape_service_pb2_grpc")
    finally:
        sys.path.remove(str(out))

    class Generated:
        pass

    Generated.pb2 = pb2
    Generated.pb2_grpc = pb2_grpc
    return Generated


def _server_binary():
    default = REPO_ROOT / "build" / "server" / "gradtape-server"
    path = pathlib.Path(os.environ.get("GRADTAPE_SERVER_BIN", default))
    if not path.is_file():
        pytest.fail(
            f"gradtape-server not found at {path}: build it "
            "(cmake --build build) or set GRADTAPE_SERVER_BIN"
        )
    return path


@contextlib.contextmanager
def running_server(*extra_args):
    """Starts gradtape-server on 127.0.0.1 (port 0: the server picks a free
    one and prints it), yields its address and always stops it."""
    proc = subprocess.Popen(
        [str(_server_binary()), "--address=127.0.0.1:0", *extra_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = queue.Queue()

    def pump():  # also keeps the pipe drained while the tests run
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        address = None
        while address is None:
            try:
                line = lines.get(timeout=STARTUP_TIMEOUT_S)
            except queue.Empty:
                pytest.fail(f"no 'listening' line within {STARTUP_TIMEOUT_S} s")
            if line is None:
                pytest.fail(f"gradtape-server exited early ({proc.wait()})")
            prefix = "gradtape-server listening on "
            if line.startswith(prefix):
                address = line[len(prefix):].strip()
        assert address.startswith("127.0.0.1:")
        yield address
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=SHUTDOWN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="session")
def server_address():
    """One gradtape-server for the whole test session."""
    with running_server("--keep_alive_seconds=60") as address:
        yield address


@pytest.fixture
def channel(server_address):
    with grpc.insecure_channel(server_address) as ch:
        grpc.channel_ready_future(ch).result(timeout=10)
        yield ch


@pytest.fixture
def stub(pb, channel):
    return pb.pb2_grpc.TapeServiceStub(channel)


# -- the Python client package (client/python, installed into the venv) -----


@pytest.fixture
def gt(server_address):
    """A gradtape.Session on the test server, closed at the end."""
    import gradtape  # the client package: pip install ./client/python

    with gradtape.connect(server_address, timeout=10) as session:
        yield session
