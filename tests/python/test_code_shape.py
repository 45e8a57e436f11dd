"""The shape of the code: no function over ~80 lines but registration lists.

Issue 12's rule, checked with lizard (a C/C++ function-length analyser from
PyPI, tests/python/requirements.txt): every function in core/, server/ and
the C++ client (client/src, client/include, client/python/native) is at
most MAX_LINES lines long, except the `Register...` functions that list
registrations (in core/, one builder expression per op, see
core/registry/op_registry.h). The Python client (client/python/gradtape,
generated stubs aside) follows the same rule, measured with `ast`, its
docstrings not counted. Needs no server.
"""
import ast
import pathlib

import lizard
import pytest

pytestmark = pytest.mark.no_client  # reads the C++ sources

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_LINES = 80

# Each tree, and the fewest C++ sources it must hold (a moved tree must not
# pass by holding nothing).
TREES = {
    "core": ["core"],
    "server": ["server"],
    "client": ["client/src", "client/include", "client/python/native"],
}
MIN_SOURCES = {"core": 40, "server": 20, "client": 10}


def long_functions(paths):
    found = []
    for path in paths:
        info = lizard.analyze_file(str(path))
        for fn in info.function_list:
            name = fn.name.split("::")[-1]
            if fn.length > MAX_LINES and not name.startswith("Register"):
                rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                found.append(f"{rel}:{fn.start_line} {fn.name}: {fn.length} lines")
    return found


def sources(tree):
    return sorted(p for folder in TREES[tree]
                  for p in (ROOT / folder).rglob("*")
                  if p.suffix in (".cc", ".h"))


def test_the_check_finds_a_long_function(tmp_path):
    body = "\n".join(f"  x += {i};" for i in range(MAX_LINES + 5))
    src = tmp_path / "long.cc"
    src.write_text(f"int Long(int x) {{\n{body}\n  return x;\n}}\n"
                   f"void RegisterLongOps(int x) {{\n{body}\n}}\n")
    found = long_functions([src])
    assert len(found) == 1 and "Long" in found[0], found


def python_long_functions(paths):
    """Python functions over MAX_LINES lines, their docstrings not counted
    (connect()'s is its reference documentation)."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            length = node.end_lineno - node.lineno + 1
            doc = node.body[0] if node.body else None
            if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) \
                    and isinstance(doc.value.value, str):
                length -= doc.end_lineno - doc.lineno + 1
            if length > MAX_LINES:
                rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                found.append(f"{rel}:{node.lineno} {node.name}: {length} lines")
    return found


def test_the_python_check_finds_a_long_function(tmp_path):
    body = "\n".join(f"    x += {i}" for i in range(MAX_LINES + 5))
    doc = "\n".join("    line" for _ in range(MAX_LINES))
    src = tmp_path / "long.py"
    src.write_text(f"def long(x):\n{body}\n    return x\n\n\n"
                   f'def documented(x):\n    """Doc.\n{doc}\n    """\n    return x\n')
    found = python_long_functions([src])
    assert len(found) == 1 and "long" in found[0], found


def test_no_python_client_function_is_over_80_lines():
    paths = sorted((ROOT / "client" / "python" / "gradtape").rglob("*.py"))
    paths = [p for p in paths if "v1" not in p.relative_to(ROOT).parts]  # generated
    assert len(paths) >= 20, paths
    found = python_long_functions(paths)
    assert not found, "functions over %d lines in the Python client (split " \
        "them into named steps):\n%s" % (MAX_LINES, "\n".join(found))


@pytest.mark.parametrize("tree", sorted(TREES))
def test_no_function_is_over_80_lines(tree):
    paths = sources(tree)
    assert len(paths) >= MIN_SOURCES[tree], paths
    found = long_functions(paths)
    assert not found, "functions over %d lines in %s (split them into " \
        "named steps):\n%s" % (MAX_LINES, ", ".join(TREES[tree]),
                               "\n".join(found))
