"""A gradtape-server process for the tests: started on 127.0.0.1, its output
pumped into a list (so the pipe never fills), stopped on exit.

One class for every test that runs the real binary: conftest's
running_server and `servers` fixtures, and the tests that need the process
itself (signals, its output, its RSS, its metrics port).

GRADTAPE_SERVER_BIN names the binary (default: build/server/gradtape-server
under the repository root).
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import threading
import time
from typing import Dict, List, Optional

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 15
SHUTDOWN_TIMEOUT_S = 10
LISTENING = "gradtape-server listening on "
METRICS = "gradtape-server metrics on port "


def server_binary() -> pathlib.Path:
    default = REPO_ROOT / "build" / "server" / "gradtape-server"
    path = pathlib.Path(os.environ.get("GRADTAPE_SERVER_BIN", default))
    if not path.is_file():
        pytest.fail(
            f"gradtape-server not found at {path}: build it "
            "(cmake --build build) or set GRADTAPE_SERVER_BIN"
        )
    return path


class ServerProcess:
    """gradtape-server with `args` after --address=127.0.0.1:0 (a later
    --address wins: a fixed port). Waits for its "listening on" line (and
    takes the metrics port when it prints one); fails the test if the line
    does not come within `startup_timeout` s or the process exits first.

    Use as a context manager, or call stop() (SIGTERM, then SIGKILL after
    SHUTDOWN_TIMEOUT_S) or kill() (SIGKILL) yourself."""

    def __init__(
        self,
        *args: str,
        env: Optional[Dict[str, str]] = None,
        startup_timeout: float = STARTUP_TIMEOUT_S,
        wrapper: Optional[List[str]] = None,
    ) -> None:
        # `wrapper` runs before the binary and must exec it (its pid is the
        # server's): e.g. a shell that moves itself into a cgroup first.
        self.proc = subprocess.Popen(
            [*(wrapper or []), str(server_binary()), "--address=127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=None if env is None else {**os.environ, **env},
        )
        self.lines: List[str] = []  # every output line so far
        self._read = 0  # lines wait_for_line() has consumed
        self._ended = False  # the output ended (the process exited)
        self._cv = threading.Condition()
        self.address = ""
        self.metrics_port: Optional[int] = None
        threading.Thread(target=self._pump, daemon=True).start()
        try:
            line = self.wait_for_line(LISTENING, startup_timeout)
        except BaseException:
            self.kill()
            raise
        self.address = line[len(LISTENING):].strip()
        assert self.address.startswith("127.0.0.1:"), self.address
        for seen in self.lines:
            if seen.startswith(METRICS):
                self.metrics_port = int(seen.split()[-1])

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cv:
                self.lines.append(line)
                self._cv.notify_all()
        with self._cv:
            self._ended = True
            self._cv.notify_all()

    def wait_for_line(self, text: str, timeout: float) -> str:
        """The next output line (after those earlier calls returned)
        containing `text`; fails the test after `timeout` s or when the
        process exits first."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                while self._read < len(self.lines):
                    line = self.lines[self._read]
                    self._read += 1
                    if text in line:
                        return line
                if self._ended:
                    pytest.fail(
                        f"gradtape-server exited ({self.proc.wait()}) before printing "
                        f"{text!r}: {self.output()}"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    pytest.fail(f"gradtape-server printed no {text!r} within {timeout} s")
                self._cv.wait(remaining)

    def output(self) -> str:
        with self._cv:
            return "".join(self.lines)

    def stop(self) -> None:
        """SIGTERM (a drain), then SIGKILL if it has not exited in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=SHUTDOWN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc.wait()

    def kill(self) -> None:
        """SIGKILL: the process dies at once, its sessions with it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
