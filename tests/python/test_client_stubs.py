"""The installed client's stubs are generated from proto/ (never committed)."""

import pathlib
import subprocess
import sys
from collections.abc import Sequence

import pytest
from google.protobuf import descriptor_pb2

from conftest import PROTO_ROOT, REPO_ROOT

import gradtape  # noqa: E402  (pip install ./client/python)
from gradtape.v1 import tape_service_pb2, tape_service_pb2_grpc  # noqa: E402

pytestmark = pytest.mark.no_client  # the installed stubs, no session


def _without_json_names(message):
    """json_name is filled in by protoc for plugins only; drop it everywhere."""
    if "json_name" in message.DESCRIPTOR.fields_by_name:
        message.ClearField("json_name")
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        for item in value if isinstance(value, Sequence) or hasattr(value, "add") else [value]:
            _without_json_names(item)
    return message


def _fresh_descriptor(tmp_path):
    """The proto compiled now by grpc_tools' protoc, in a child process:
    protoc crashes (SIGSEGV) inside a process that has loaded TensorFlow,
    which other tests of the same xdist worker may have done."""
    out = tmp_path / "set.pb"
    script = (
        "import pathlib, sys\n"
        "from grpc_tools import protoc\n"
        "include = pathlib.Path(protoc.__file__).parent / '_proto'\n"
        "sys.exit(protoc.main(['grpc_tools.protoc', f'-I{sys.argv[1]}', f'-I{include}',\n"
        "                      f'--descriptor_set_out={sys.argv[2]}', sys.argv[3]]))\n"
    )
    proto = PROTO_ROOT / "gradtape" / "v1" / "tape_service.proto"
    done = subprocess.run(
        [sys.executable, "-c", script, str(PROTO_ROOT), str(out), str(proto)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    (fresh,) = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    return fresh


def test_installed_stubs_match_the_proto(tmp_path):
    fresh = _without_json_names(_fresh_descriptor(tmp_path))
    installed = _without_json_names(
        descriptor_pb2.FileDescriptorProto.FromString(tape_service_pb2.DESCRIPTOR.serialized_pb)
    )
    assert installed.name == "gradtape/v1/tape_service.proto"
    assert installed == fresh, (
        "the installed gradtape stubs are stale: reinstall the client "
        "(pip install ./client/python)"
    )


def test_grpc_stub_has_every_rpc(tmp_path):
    fresh = _fresh_descriptor(tmp_path)
    (service,) = fresh.service
    methods = {m.name for m in service.method}
    assert methods >= {"CreateSession", "Stream", "Run", "ListOps"}
    servicer = tape_service_pb2_grpc.TapeServiceServicer
    assert methods == {name for name in dir(servicer) if not name.startswith("_")}


def test_generated_stubs_are_not_committed():
    tracked = subprocess.run(
        ["git", "ls-files", "client/python"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    generated = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi", "_pb2_grpc.pyi")
    assert not [p for p in tracked if p.endswith(generated)]
