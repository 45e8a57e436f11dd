"""One definition per language of every name the clients and the server
share on the wire (metadata headers and trailers, the C++ client's status
payloads) and of the dtype table.

Each `"gradtape-..."` / `"authorization"` string literal in a language's
sources (comments and docstrings aside; tests aside: they check the wire)
appears once: Python in gradtape/_metadata.py, Go in metadata.go, C++ in
proto/gradtape/v1/metadata.h (the C++ client's own status payloads once
each in its headers). The dtype table is the proto's enum: Python maps it
in gradtape/_dtypes.py only; C++ holds its enums to it with static_asserts
(client/src/session.cc, server/convert.cc). Needs no server.
"""
import ast
import collections
import pathlib
import re
from typing import Dict, Iterable, List

import pytest

pytestmark = pytest.mark.no_client  # reads the sources

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAME = re.compile(r'^"(gradtape-[a-z-]+|authorization)"$')


def python_literals(path: pathlib.Path) -> List[str]:
    """The wire-name string constants of a Python file (docstrings, which
    are expression statements, and f-strings' text are not names)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and id(node) not in docstrings and NAME.match(f'"{node.value}"')
    ]


C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
C_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')


def c_like_literals(path: pathlib.Path) -> List[str]:
    """Wire-name string literals of a C++ or Go file, comments removed."""
    text = C_COMMENT.sub("", path.read_text())
    return [m.group(0)[1:-1] for m in C_STRING.finditer(text) if NAME.match(m.group(0))]


def duplicates(files: Iterable[pathlib.Path], read) -> Dict[str, List[str]]:
    where: Dict[str, List[str]] = collections.defaultdict(list)
    for path in files:
        for name in read(path):
            where[name].append(str(path.relative_to(ROOT)))
    return {name: places for name, places in where.items() if len(places) > 1}


def test_the_checks_find_a_second_definition(tmp_path: pathlib.Path) -> None:
    py = tmp_path / "a.py"
    py.write_text('"""gradtape-session-id in a docstring"""\nX = "gradtape-session-id"\nY = f"gradtape-{1}"\n')
    assert python_literals(py) == ["gradtape-session-id"]
    cc = tmp_path / "a.cc"
    cc.write_text('// "gradtape-session-id"\nconst char* a = "gradtape-session-id";\n'
                  '/* "authorization" */ const char* b = "authorization";\n')
    assert c_like_literals(cc) == ["gradtape-session-id", "authorization"]


def test_python_defines_each_wire_name_once() -> None:
    package = ROOT / "client" / "python" / "gradtape"
    files = [p for p in package.glob("*.py")]
    assert (package / "_metadata.py") in files
    assert not duplicates(files, python_literals)
    outside = {
        str(p.relative_to(ROOT)): python_literals(p) for p in files
        if p.name != "_metadata.py" and python_literals(p)
    }
    assert not outside, f"wire names outside gradtape/_metadata.py: {outside}"


def test_go_defines_each_wire_name_once() -> None:
    files = [p for p in (ROOT / "client" / "go" / "gradtape").glob("*.go") if not p.name.endswith("_test.go")]
    outside = {
        str(p.relative_to(ROOT)): c_like_literals(p) for p in files
        if p.name != "metadata.go" and c_like_literals(p)
    }
    assert not outside, f"wire names outside client/go/gradtape/metadata.go: {outside}"


# The C++ client's public header cannot include the proto target's headers:
# its payload name for the last applied seq repeats the trailer's, held
# equal by a static_assert in client/src/session_resume.cc.
CPP_EXEMPT = {("client/include/gradtape/client/session.h", "gradtape-last-applied-seq")}


def test_cpp_defines_each_wire_name_once() -> None:
    files = sorted(
        p for folder in ("server", "client/src", "client/include", "client/python/native", "proto")
        for p in (ROOT / folder).rglob("*") if p.suffix in (".cc", ".h")
    )
    assert ROOT / "proto/gradtape/v1/metadata.h" in files
    where: Dict[str, List[str]] = collections.defaultdict(list)
    for path in files:
        rel = str(path.relative_to(ROOT))
        for name in c_like_literals(path):
            if (rel, name) not in CPP_EXEMPT:
                where[name].append(rel)
    twice = {name: places for name, places in where.items() if len(places) > 1}
    assert not twice, f"wire names defined more than once in C++: {twice}"
    metadata = set(c_like_literals(ROOT / "proto/gradtape/v1/metadata.h"))
    assert {"gradtape-session-id", "gradtape-session-token", "authorization",
            "gradtape-last-applied-seq", "gradtape-server-status"} <= metadata


def test_python_has_one_dtype_table() -> None:
    package = ROOT / "client" / "python" / "gradtape"
    tables = [
        str(p.relative_to(ROOT)) for p in package.glob("*.py")
        if re.search(r"\bpb\.DTYPE_(FLOAT32|INT64|COMPLEX64)\b", p.read_text())
    ]
    assert tables == ["client/python/gradtape/_dtypes.py"], tables
