"""Build hook: compiles the wire contract into the package.

`pip install ./client/python` runs `build_py`, which calls grpcio-tools'
protoc on proto/gradtape/v1/tape_service.proto (found at ../../proto, or at
$GRADTAPE_PROTO_DIR) and writes gradtape/v1/tape_service_pb2{,_grpc}.py into
the package. The generated files are never committed (.gitignore), so the
installed stubs always come from the proto of the checkout being installed;
tests/python/test_client_stubs.py checks that they match it.

When mypy-protobuf is installed in the build environment (it is in
tests/python/requirements.txt), its protoc plugins also write typed stubs,
gradtape/v1/tape_service_pb2{,_grpc}.pyi, so `mypy --strict` sees the
messages' fields and the service's methods (tests/python/test_typing.py).
Without it the package builds the same, untyped, with a warning.

`build_ext` builds the compiled extension gradtape._native
(client/python/native, nanobind over the C++ client library) with CMake over
the checkout: in $GRADTAPE_CMAKE_BUILD_DIR when set (an existing build of the
repo, e.g. scripts/test.sh's build/, so the client is not compiled twice),
else in build-python/ at the repo's root. When it cannot be built (no
compiler, CMake, gRPC C++, Python headers or nanobind), the install still
succeeds without it and gradtape/_native_build.txt says why (the package
warns once on import and works in pure Python). GRADTAPE_BUILD_NATIVE=0
skips it.

The protobuf runtime must be at least the version of the protoc that
generated the stubs, so the install requirement is derived from the build
environment's protobuf.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import warnings
from typing import List, Optional

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
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


def mypy_plugin(name: str) -> Optional[str]:
    """The path of mypy-protobuf's protoc plugin `name` (protoc-gen-mypy,
    protoc-gen-mypy_grpc): beside this Python (a venv's bin/), else on PATH;
    None when mypy-protobuf is not installed."""
    if importlib.util.find_spec("mypy_protobuf") is None:
        return None
    here = os.path.dirname(sys.executable)
    return shutil.which(name, path=here) or shutil.which(name)


def generate_stubs(out_dir: pathlib.Path) -> None:
    from grpc_tools import protoc  # a build requirement (pyproject.toml)

    root = proto_root()
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    args: List[str] = [
        "grpc_tools.protoc",
        f"-I{root}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
    ]
    mypy, mypy_grpc = mypy_plugin("protoc-gen-mypy"), mypy_plugin("protoc-gen-mypy_grpc")
    if mypy and mypy_grpc:
        args += [
            f"--plugin=protoc-gen-mypy={mypy}",
            f"--plugin=protoc-gen-mypy_grpc={mypy_grpc}",
            f"--mypy_out={out_dir}",
            f"--mypy_grpc_out={out_dir}",
        ]
    else:
        warnings.warn(
            "mypy-protobuf is not installed: gradtape/v1 gets no typed stubs (.pyi); "
            "pip install mypy-protobuf for them",
            stacklevel=1,
        )
    if protoc.main(args + [str(root / PROTO_FILE)]) != 0:
        raise RuntimeError(f"protoc failed on {root / PROTO_FILE}")


class BuildPyWithStubs(build_py):
    """build_py that first generates the stubs into the source package."""

    def run(self) -> None:
        generate_stubs(HERE)
        super().run()


REPO = HERE.parent.parent
REASON_FILE = pathlib.Path("gradtape") / "_native_build.txt"


def build_native() -> pathlib.Path:
    """Builds the CMake target gradtape_native; returns the module's path.
    Raises RuntimeError with the reason when it cannot."""
    if not (REPO / "client" / "python" / "native" / "CMakeLists.txt").is_file():
        raise RuntimeError(f"no gradtape checkout at {REPO} (client/python/native)")
    if shutil.which("cmake") is None:
        raise RuntimeError("cmake is not installed")
    given = os.environ.get("GRADTAPE_CMAKE_BUILD_DIR")
    build_dir = pathlib.Path(given).resolve() if given else REPO / "build-python"
    args = [
        "cmake", "-S", str(REPO), "-B", str(build_dir),
        "-DGRADTAPE_PYTHON_NATIVE=ON", f"-DPython_EXECUTABLE={sys.executable}",
    ]
    if not (build_dir / "CMakeCache.txt").is_file():
        # A build of its own: only what the extension needs.
        args += ["-DCMAKE_BUILD_TYPE=Release", "-DGRADTAPE_BUILD_TESTS=OFF",
                 "-DGRADTAPE_BUILD_BENCH=OFF"]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        if shutil.which("ccache"):
            args += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    for step in (args, ["cmake", "--build", str(build_dir), "--target", "gradtape_native"]):
        run = subprocess.run(step, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # The CMake warning that says why the target was skipped.
        skipped = [line.strip() for line in run.stdout.splitlines() if "gradtape_native skipped" in line]
        if skipped:
            raise RuntimeError(skipped[0])
        if run.returncode != 0:
            tail = "\n".join(run.stdout.strip().splitlines()[-15:])
            raise RuntimeError(f"`{' '.join(step[:3])} ...` failed:\n{tail}")
    found = glob.glob(str(build_dir / "client" / "python" / "native" / "_native*.so"))
    if not found:
        raise RuntimeError(f"the build in {build_dir} made no _native*.so")
    return pathlib.Path(found[0])


class BuildNative(build_ext):
    """Builds gradtape._native with CMake, or records why it could not."""

    def build_extension(self, ext: Extension) -> None:
        dest = pathlib.Path(self.get_ext_fullpath(ext.name))
        reason_file = dest.parent / REASON_FILE.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            if os.environ.get("GRADTAPE_BUILD_NATIVE", "1") == "0":
                raise RuntimeError("not built: GRADTAPE_BUILD_NATIVE=0 at install")
            built = build_native()
        except (RuntimeError, OSError) as e:
            print(f"gradtape: the native extension was not built: {e}", file=sys.stderr)
            reason_file.write_text(str(e).splitlines()[0] + "\n")
            if dest.exists():
                dest.unlink()  # from an earlier build in the same tree
            return
        shutil.copyfile(built, dest)
        if reason_file.exists():
            reason_file.unlink()


def install_requires() -> List[str]:
    requires = ["grpcio>=1.51", "numpy>=1.21"]
    try:
        import google.protobuf

        requires.append(f"protobuf>={google.protobuf.__version__}")
    except ImportError:
        requires.append("protobuf>=4.21")
    return requires


setup(
    cmdclass={"build_py": BuildPyWithStubs, "build_ext": BuildNative},
    ext_modules=[Extension("gradtape._native", sources=[])],
    install_requires=install_requires(),
)
