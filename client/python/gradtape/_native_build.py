"""Whether the compiled extension was built, and the one warning when it
was not (internal).

``pip install ./client/python`` tries to build gradtape._native (setup.py:
CMake over the gradtape checkout, nanobind, gRPC C++ from Debian). When it
cannot, the install still succeeds, the package works in pure Python, and
setup.py records why in ``_native_build.txt`` beside this file; importing
gradtape then warns once with that reason (or the extension's ImportError)
and how to build it.
"""

from __future__ import annotations

import os
import pathlib
import warnings

from gradtape import _backend

HOW_TO_BUILD = (
    "build it with `bash scripts/setup.sh` (the C++ toolchain, gRPC C++, python3-dev) "
    "and `pip install nanobind`, then `pip install --no-build-isolation ./client/python`"
)
_REASON_FILE = pathlib.Path(__file__).with_name("_native_build.txt")


def build_failure() -> str:
    """Why setup.py did not build the extension ("" when it did, or when the
    package was not installed by setup.py)."""
    try:
        return _REASON_FILE.read_text().strip()
    except OSError:
        return ""


def warn_if_unavailable() -> None:
    """One RuntimeWarning when the extension does not import (not when
    GRADTAPE_NATIVE=0 asks for the pure client)."""
    if os.environ.get("GRADTAPE_NATIVE", "") == "0":
        return
    why = _backend.native_unavailable()
    if why is None:
        return
    built = build_failure()
    reason = f"{built} ({why})" if built else why
    warnings.warn(
        f"gradtape: the compiled extension gradtape._native is not available, using the "
        f"pure-Python client (same behaviour, slower per op): {reason}. To use it, {HOW_TO_BUILD}.",
        RuntimeWarning,
        stacklevel=3,
    )
