"""Build hook: compiles the wire contract into the package.

`pip install ./client/python` runs `build_py`, which calls grpcio-tools'
protoc on proto/gradtape/v1/tape_service.proto (found at ../../proto, or at
$GRADTAPE_PROTO_DIR) and writes gradtape/v1/tape_service_pb2{,_grpc}.py into
the package. The generated files are never committed (.gitignore), so the
installed stubs always come from the proto of the checkout being installed;
tests/python/test_client_stubs.py checks that they match it.

The protobuf runtime must be at least the version of the protoc that
generated the stubs, so the install requirement is derived from the build
environment's protobuf.
"""

import os
import pathlib

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
PROTO_FILE = pathlib.Path("gradtape") / "v1" / "tape_service.proto"


def proto_root() -> pathlib.Path:
    root = pathlib.Path(os.environ.get("GRADTAPE_PROTO_DIR", HERE.parent.parent / "proto"))
    if not (root / PROTO_FILE).is_file():
        raise RuntimeError(
            f"{PROTO_FILE} not found under {root}: build from a gradtape checkout "
            "(pip install ./client/python) or set GRADTAPE_PROTO_DIR"
        )
    return root


def generate_stubs(out_dir: pathlib.Path) -> None:
    from grpc_tools import protoc  # a build requirement (pyproject.toml)

    root = proto_root()
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{root}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(root / PROTO_FILE),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {root / PROTO_FILE}")


class BuildPyWithStubs(build_py):
    """build_py that first generates the stubs into the source package."""

    def run(self) -> None:
        generate_stubs(HERE)
        super().run()


def install_requires() -> list:
    requires = ["grpcio>=1.51", "numpy>=1.21"]
    try:
        import google.protobuf

        requires.append(f"protobuf>={google.protobuf.__version__}")
    except ImportError:
        requires.append("protobuf>=4.21")
    return requires


setup(cmdclass={"build_py": BuildPyWithStubs}, install_requires=install_requires())
