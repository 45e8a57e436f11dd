"""Fixtures of the Python tests: Python stubs generated from proto/ at test
time, gradtape-server processes on free 127.0.0.1 ports (server_process.py),
and every test that uses the client run once per implementation.

GRADTAPE_SERVER_BIN names the server binary (default:
build/server/gradtape-server under the repository root). Run:

  python3 -m venv .venv && .venv/bin/pip install -r tests/python/requirements.txt
  .venv/bin/pip install --no-build-isolation ./client/python
  GRADTAPE_SERVER_BIN=build/server/gradtape-server .venv/bin/python -m pytest tests/python

## Both implementations (client/python/gradtape/_backend.py)

Every test runs twice, as `test_x[native]` (GRADTAPE_NATIVE=1: the compiled
extension) and `test_x[pure]` (GRADTAPE_NATIVE=0: StreamCore), so the two
cannot drift; `-k pure` or `-k native` picks one. The variable is set for
the test only (monkeypatch), and subprocesses inherit it. Markers (listed
by `pytest --markers`):

* `no_client`: the test never connects a gradtape client (raw stubs, the
  server binary, files, pure functions): it runs once, without an id.
* `pure_only(reason=...)`: the test is about the pure implementation's own
  machinery (StreamCore's attributes): it runs only as `[pure]`.
* `picks_implementation`: the test chooses the implementation of each
  session itself (connect(native=True/False), GRADTAPE_NATIVE in a
  subprocess's env): it runs once.

They are checked, so the classification cannot rot: a doubled test that
passes without calling gradtape.connect() fails ("mark it no_client"), a
`[native]` run in which every connect() took the pure implementation fails
("mark it pure_only"), a `[pure]` run in which a connect() took the native
one fails ("mark it picks_implementation"), and a no_client test that
connects fails at once.

When the extension is not built, the `[native]` variants skip with the
reason (ImportError from `gradtape._native_core`); under CI (CI=true, as
scripts/test.sh sets) they fail with it instead.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pathlib
import subprocess
import sys
from typing import Any, Callable, Iterator, List, Optional

# The client package first, when it is installed: importing it loads the
# native extension (Debian's gRPC C++ behind RTLD_DEEPBIND), which aborted
# the process at random (glibc's mutex assertions in tpp.c and
# pthread_mutex_lock.c) when grpc_tools' compiler extension was loaded
# before it, as the `pb` fixture does for a worker whose first tests are
# protocol-only (grpcio 1.85).
try:
    import gradtape  # noqa: F401
except ImportError:
    pass

import grpc
import pytest

from server_process import REPO_ROOT, ServerProcess

PROTO_ROOT = REPO_ROOT / "proto"
IMPLEMENTATIONS = ("native", "pure")


# -- one run per implementation ------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "no_client: never connects a gradtape client: runs once, not per implementation",
    )
    config.addinivalue_line(
        "markers",
        "pure_only(reason): about the pure implementation's own machinery: runs only as [pure]",
    )
    config.addinivalue_line(
        "markers",
        "picks_implementation: chooses each session's implementation itself: runs once",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for once in ("no_client", "picks_implementation"):
        if metafunc.definition.get_closest_marker(once) is not None:
            return
    pure_only = metafunc.definition.get_closest_marker("pure_only")
    if pure_only is not None and not pure_only.kwargs.get("reason"):
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: pure_only needs a reason=")
    names = ["pure"] if pure_only is not None else list(IMPLEMENTATIONS)
    metafunc.parametrize("implementation", names, indirect=True)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.stash[_PASSED] = report.passed


_PASSED = pytest.StashKey[bool]()


@pytest.fixture(autouse=True)
def implementation(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Optional[str]]:
    """"native", "pure" (the implementation connect() takes in this test),
    or None for a no_client test."""
    name: Optional[str] = getattr(request, "param", None)
    try:
        from gradtape import _backend
    except ImportError:  # the client is not installed: only no_client tests can run
        if name is not None:
            pytest.fail("the gradtape client is not installed: pip install ./client/python")
        yield None
        return
    real = _backend.use_native
    if name is None and request.node.get_closest_marker("picks_implementation") is not None:
        yield None
        return
    if name is None:
        refused: List[bool] = []

        def refuse(native: Optional[bool], has_grpc_credentials: bool) -> bool:
            refused.append(True)  # also when a thread of the test swallows the failure
            pytest.fail("this test is marked no_client but calls gradtape.connect()")

        monkeypatch.setattr(_backend, "use_native", refuse)
        yield None
        if refused:
            pytest.fail("this test is marked no_client but calls gradtape.connect()")
        return

    monkeypatch.setenv("GRADTAPE_NATIVE", "1" if name == "native" else "0")
    if name == "native":
        why = _backend.native_unavailable()
        if why is not None:
            message = f"the native extension is not built ({why})"
            if _in_ci():
                pytest.fail(f"{message}; CI runs every test on both implementations")
            pytest.skip(message)
    chosen: List[bool] = []  # what each connect() of this test took (True: native)

    def recording(native: Optional[bool], has_grpc_credentials: bool) -> bool:
        used = real(native, has_grpc_credentials)
        chosen.append(used)
        return used

    monkeypatch.setattr(_backend, "use_native", recording)
    yield name
    if not request.node.stash.get(_PASSED, False):
        return  # its own failure says more
    if not chosen:
        pytest.fail(
            "this test never called gradtape.connect(), so running it per implementation "
            "checks nothing twice: mark it no_client"
        )
    if name == "native" and not any(chosen):
        pytest.fail(
            "every gradtape.connect() of this [native] run took the pure implementation: "
            "mark the test pure_only(reason=...) (or picks_implementation if it chooses)"
        )
    if name == "pure" and any(chosen):
        pytest.fail(
            "a gradtape.connect() of this [pure] run took the native implementation: the "
            "test chooses itself: mark it picks_implementation"
        )


# -- generated stubs and servers -------------------------------------------------


@pytest.fixture(scope="session")
def pb(tmp_path_factory):
    """The generated modules, as a namespace with `pb2` and `pb2_grpc`."""
    from grpc_tools import protoc  # imported here: only needed to generate

    out = tmp_path_factory.mktemp("gen")
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    args = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        str(PROTO_ROOT / "gradtape" / "v1" / "tape_service.proto"),
    ]
    # In a subprocess: protoc in this process crashed (SIGSEGV) once a test
    # had imported TensorFlow, whose wheels carry their own protobuf.
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"protoc failed on tape_service.proto: {done.stderr}"
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


@contextlib.contextmanager
def running_server(*extra_args: str) -> Iterator[str]:
    """Starts gradtape-server on 127.0.0.1 (port 0: the server picks a free
    one and prints it), yields its address and always stops it."""
    with ServerProcess(*extra_args) as server:
        yield server.address


@pytest.fixture
def servers() -> Iterator[Callable[..., ServerProcess]]:
    """A factory: servers(*args) starts a ServerProcess; every one started
    is stopped at the end of the test."""
    started: List[ServerProcess] = []

    def start(*args: str) -> ServerProcess:
        started.append(ServerProcess(*args))
        return started[-1]

    yield start
    for server in started:
        server.stop()


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


@pytest.fixture(scope="module")
def tf():
    """TensorFlow, the reference of the test_tf_* files (imported only when
    they run). The native extension is loaded first: the other order crashes
    the native client's connect in this process."""
    try:
        import gradtape._native_core  # noqa: F401
    except ImportError:
        pass
    import tensorflow

    return tensorflow


@pytest.fixture
def gtf(server_address):
    """gradtape.tf on a fresh default session of the test server."""
    import gradtape
    import gradtape.tf as gtf_module

    session = gradtape.connect(server_address, timeout=10)
    gradtape.set_default_session(session)
    try:
        yield gtf_module
    finally:
        gradtape.set_default_session(None)
        try:
            session.close()
        except gradtape.GradtapeError:
            pass
