"""docs/OPERATING.md ("Operating gradtape-server") documents every flag of the
server in a table row.

The flags are read from the binary itself (`--helpfull`, the section of
server/main.cc), so a new flag without a row in docs/OPERATING.md fails here.
"""

import re
import subprocess

import pytest

from server_process import REPO_ROOT, server_binary

pytestmark = pytest.mark.no_client  # the binary's --helpfull and docs/OPERATING.md


def _server_flags():
    out = subprocess.run(
        [str(server_binary()), "--helpfull"],
        capture_output=True, text=True, timeout=30, check=False,
    ).stdout
    flags, in_main = set(), False
    for line in out.splitlines():
        if line.startswith("  Flags from "):
            in_main = line.rstrip(":").endswith("server/main.cc")
            continue
        match = re.match(r"^    --([a-z0-9_]+) ", line)
        if in_main and match:
            flags.add(match.group(1))
    assert len(flags) >= 20, "too few server/main.cc flags in --helpfull:\n" + out[:2000]
    return flags


def _operating_section():
    """The whole of docs/OPERATING.md, the operators' manual."""
    text = (REPO_ROOT / "docs" / "OPERATING.md").read_text()
    assert text.startswith("# Operating gradtape-server\n"), text[:80]
    return text


def _missing(text, flags):
    """Flags without a table row (`| `--flag` | ...`) in `text`."""
    return sorted(f for f in flags if f"| `--{f}`" not in text)


def test_every_server_flag_has_a_row_in_the_operating_section():
    missing = _missing(_operating_section(), _server_flags())
    assert not missing, f"docs/OPERATING.md lacks flag rows for: {missing}"


def test_the_check_sees_a_missing_flag():
    text = _operating_section().replace("| `--worker_threads`", "| worker_threads")
    assert _missing(text, _server_flags()) == ["worker_threads"]
