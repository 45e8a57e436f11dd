"""`mypy --strict` on the client package (client/python/gradtape and its
setup.py), with the configuration in client/python/pyproject.toml and the
typed stubs of the generated modules that mypy-protobuf wrote at install
(setup.py).

One mypy run checks the package and a probe beside it whose errors must
show: an unannotated function (reported only under --strict, so the
configuration is in force) and a wrong field type in a generated message
(reported only with the .pyi stubs, so the messages are typed). The package
itself must have no error at all.
"""

import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from server_process import REPO_ROOT

pytestmark = pytest.mark.no_client  # a static check

PACKAGE_ROOT = REPO_ROOT / "client" / "python"
MYPY_TIMEOUT_S = 300
PROBE = textwrap.dedent(
    """
    from gradtape.v1 import tape_service_pb2 as pb


    def untyped(x):
        return x


    def wrong_field() -> pb.Command:
        return pb.Command(seq="not an int")
    """
)
ERROR = re.compile(r"^(?P<path>[^:\n]+):(?P<line>\d+): error: (?P<text>.*)$", re.M)


def test_mypy_strict_passes_on_the_package(tmp_path):
    stubs = PACKAGE_ROOT / "gradtape" / "v1"
    missing = [
        name
        for name in ("tape_service_pb2.pyi", "tape_service_pb2_grpc.pyi")
        if not (stubs / name).is_file()
    ]
    assert not missing, (
        f"{missing} not in {stubs}: reinstall the client with mypy-protobuf in the "
        "venv (pip install -r tests/python/requirements.txt, then "
        "pip install --no-build-isolation ./client/python)"
    )
    probe = tmp_path / "typing_probe.py"
    probe.write_text(PROBE)
    run = subprocess.run(
        [
            sys.executable, "-m", "mypy",
            "--cache-dir", str(tmp_path / "mypy-cache"),
            "--no-error-summary",
            "gradtape", "setup.py", str(probe),
        ],
        cwd=PACKAGE_ROOT,  # its pyproject.toml holds the configuration
        capture_output=True,
        text=True,
        timeout=MYPY_TIMEOUT_S,
    )
    assert run.returncode in (0, 1), f"mypy failed to run:\n{run.stdout}{run.stderr}"
    errors = [m.groupdict() for m in ERROR.finditer(run.stdout)]
    in_probe = [e["text"] for e in errors if pathlib.Path(e["path"]).name == probe.name]
    in_package = [
        f"{e['path']}:{e['line']}: {e['text']}"
        for e in errors
        if pathlib.Path(e["path"]).name != probe.name
    ]
    assert any("[no-untyped-def]" in t for t in in_probe), (
        f"mypy ran without --strict (client/python/pyproject.toml [tool.mypy]):\n{run.stdout}"
    )
    assert any('"seq"' in t and "[arg-type]" in t for t in in_probe), (
        f"the generated messages are untyped (no .pyi from mypy-protobuf):\n{run.stdout}"
    )
    assert not in_package, (
        f"mypy --strict: {len(in_package)} error(s) in client/python:\n" + "\n".join(in_package)
    )
