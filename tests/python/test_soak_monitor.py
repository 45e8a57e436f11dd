"""The soak's verdict (tests/load/soak_monitor.py report) on made-up samples:
a flat line passes, RSS growth past the limit fails, live bytes that stay
after the load fail, and the windows are the ones soak.sh's header states.
No server: the sampler's input is a CSV."""

import csv
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MONITOR = ROOT / "tests" / "load" / "soak_monitor.py"
sys.path.insert(0, str(MONITOR.parent))
import soak_monitor  # noqa: E402

pytestmark = pytest.mark.no_client  # the soak's sampler, on recorded samples

MIB = 1 << 20
T0 = 1_000_000.0


def write_samples(path, load_seconds, rss, live_after=0, after_seconds=5, duplicates=0):
    """One row a second from 3 s before the load until after_seconds after
    it; rss(t) gives the RSS at load time t."""
    with open(path, "w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=soak_monitor.FIELDS)
        out.writeheader()
        for t in range(-3, int(load_seconds) + after_seconds + 1):
            during = 0 <= t <= load_seconds
            out.writerow({
                "time": T0 + t, "rss_bytes": int(rss(t)),
                "live_tensor_bytes": 2 * MIB if during else (0 if t < 0 else live_after),
                "tape_saved_bytes": 0, "sessions_open": 3,
                "rpcs_total": 100 * max(0, t), "commands_total": 1000 * max(0, t),
                "sessions_created_total": 4 * max(0, t), "sessions_reaped_total": 4 * max(0, t - 3),
                "duplicate_commands_total": duplicates if t > 30 else 0,
            })


def report(csv_path, load_seconds, png=""):
    return subprocess.run(
        [sys.executable, str(MONITOR), "report", f"--csv={csv_path}", f"--load-start={T0}",
         f"--load-end={T0 + load_seconds}", f"--png={png}", "--max-drift=5", "--churned=7"],
        capture_output=True, text=True, timeout=120)


def test_windows_follow_the_header():
    assert soak_monitor.drift_windows(60) == {"warmup": 15.0, "window": 15.0}
    assert soak_monitor.drift_windows(1800) == {"warmup": 300.0, "window": 60.0}
    assert soak_monitor.drift_windows(7200) == {"warmup": 300.0, "window": 60.0}


def test_flat_line_passes_and_plots(tmp_path):
    # Warm-up growth (20 -> 30 MiB in the first 10 s) is not drift.
    write_samples(tmp_path / "s.csv", 60, lambda t: 20 * MIB + min(max(t, 0), 10) * MIB)
    result = report(tmp_path / "s.csv", 60, png=tmp_path / "s.png")
    assert result.returncode == 0, result.stdout + result.stderr
    line = result.stdout.splitlines()[0]
    assert line.startswith("soak: 1.0 min, 6000 requests (100/s), 60000 commands"), line
    assert "RSS start 20.0 MiB, after warm-up (15 s) 30.0 MiB, end 30.0 MiB, drift +0.00%" in line
    assert "back to 0 1.0 s after the load" in line and line.endswith(": OK"), line
    assert (tmp_path / "s.png").stat().st_size > 10_000


def test_growth_past_the_limit_fails(tmp_path):
    # 30 MiB after warm-up, then +0.1 MiB a second: +12% at the end.
    write_samples(tmp_path / "s.csv", 60, lambda t: 30 * MIB + max(0, t - 15) * MIB // 10)
    result = report(tmp_path / "s.csv", 60)
    assert result.returncode == 1
    assert "FAILED: RSS drift +" in result.stdout and "> 5%" in result.stdout, result.stdout


@pytest.mark.parametrize("after_seconds,message", [
    (5, "FAILED: live tensor bytes still 4096 after the load"),
    (0, "FAILED: no sample after the load"),  # 0 during the load is not enough
])
def test_live_bytes_left_after_the_load_fail(tmp_path, after_seconds, message):
    write_samples(tmp_path / "s.csv", 60, lambda t: 30 * MIB, live_after=4096,
                  after_seconds=after_seconds)
    result = report(tmp_path / "s.csv", 60)
    assert result.returncode == 1
    assert message in result.stdout, result.stdout


def test_samples_that_stop_early_fail(tmp_path):
    write_samples(tmp_path / "s.csv", 20, lambda t: 30 * MIB)  # the sampler died at 25 s
    result = report(tmp_path / "s.csv", 60)
    assert result.returncode == 1
    assert "the samples do not cover the load" in result.stderr, result.stderr


def test_duplicate_commands_fail(tmp_path):
    # Exactly-once skipped commands: a load replaying seqs on a sequenced
    # session (its calls would do nothing and still be OK).
    write_samples(tmp_path / "s.csv", 60, lambda t: 30 * MIB, duplicates=990)
    result = report(tmp_path / "s.csv", 60)
    assert result.returncode == 1
    assert "(990 duplicates)" in result.stdout
    assert "FAILED: 990 duplicate commands (not applied" in result.stdout, result.stdout
