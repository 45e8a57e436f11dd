#!/usr/bin/env python3
"""Samples a gradtape-server during tests/load/soak.sh and judges the run.

    soak_monitor.py sample --pid=P --metrics=HOST:PORT --csv=F --stop-file=S
    soak_monitor.py report --csv=F --load-start=T0 --load-end=T1 --png=P
                           [--max-drift=5] [--churned=N] [--trained=N]

sample: once a second (on a fixed schedule, not a sleep after each sample)
until the stop file exists, appends one CSV row: wall time, the server's
VmRSS (/proc/P/status) and, from its Prometheus endpoint, live tensor bytes,
tape-saved bytes, open sessions and the running totals of RPCs, commands,
sessions created and reaped, and duplicate commands. Exits 1 as soon as the server is gone or the
endpoint does not answer for 10 s in a row.

report: reads the CSV and the load's start and end (wall time), applies the
drift rule of soak.sh's header, prints one summary line ("soak: ...") and
writes a PNG of RSS, live bytes and request rate over time. Exits 1 if RSS
drifted more than --max-drift percent, if the server skipped any command as
a duplicate (exactly-once; nothing in the soak resends), if the live tensor
bytes did not come back to 0 after the load (every session of the soak is
then closed, reaped or empty), or if the samples do not cover the load.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
import urllib.request
from typing import Dict, List

FIELDS = ["time", "rss_bytes", "live_tensor_bytes", "tape_saved_bytes", "sessions_open",
          "rpcs_total", "commands_total", "sessions_created_total", "sessions_reaped_total",
          "duplicate_commands_total"]
# Prometheus sample name -> CSV column (summed over every label set).
METRICS = {
    "gradtape_live_tensor_bytes": "live_tensor_bytes",
    "gradtape_tape_saved_bytes": "tape_saved_bytes",
    "gradtape_sessions_open": "sessions_open",
    "gradtape_rpcs_total": "rpcs_total",
    "gradtape_commands_total": "commands_total",
    "gradtape_sessions_created_total": "sessions_created_total",
    "gradtape_sessions_reaped_total": "sessions_reaped_total",
    # Exactly-once: a command not applied because its seq was (no client of
    # the soak resends, and ghz's sessions are unsequenced: must stay 0).
    "gradtape_duplicate_commands_total": "duplicate_commands_total",
}
MIB = 1 << 20


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmRSS")


def scrape(address: str) -> Dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        text = response.read().decode()
    values = {column: 0.0 for column in METRICS.values()}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in METRICS:
                values[METRICS[sample.name]] += sample.value
    return values


def sample(args: argparse.Namespace) -> int:
    if not args.metrics.startswith("127.0.0.1:"):
        print(f"soak_monitor.py: not loopback: {args.metrics}", file=sys.stderr)
        return 2
    failures = 0
    next_tick = time.time()
    with open(args.csv, "w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=FIELDS)
        out.writeheader()
        while not os.path.exists(args.stop_file):
            try:
                row = {"time": f"{time.time():.3f}", "rss_bytes": rss_bytes(args.pid)}
            except (OSError, RuntimeError) as e:
                print(f"soak_monitor.py: FAILED: the server (pid {args.pid}) is gone: {e}",
                      file=sys.stderr)
                return 1
            try:
                row.update({k: int(v) for k, v in scrape(args.metrics).items()})
                failures = 0
                out.writerow(row)
                f.flush()
            except OSError as e:
                failures += 1
                if failures >= 10:
                    print(f"soak_monitor.py: FAILED: {args.metrics}/metrics did not answer "
                          f"10 times in a row: {e}", file=sys.stderr)
                    return 1
            next_tick = max(next_tick + args.interval, time.time())  # no catch-up burst
            time.sleep(max(0.0, next_tick - time.time()))
    return 0


def median_in(rows: List[Dict[str, float]], column: str, start: float, end: float) -> float:
    values = [r[column] for r in rows if start <= r["t"] < end]
    if not values:
        raise ValueError(f"no samples in [{start:.0f} s, {end:.0f} s)")
    return statistics.median(values)


def drift_windows(load_seconds: float) -> Dict[str, float]:
    """soak.sh's header: warm-up W = clamp(T/6, 15 s, 300 s); window
    L = min(60 s, (T - W)/3); baseline [W, W+L), end [T-L, T]."""
    warmup = min(300.0, max(15.0, load_seconds / 6))
    window = min(60.0, (load_seconds - warmup) / 3)
    return {"warmup": warmup, "window": window}


def report(args: argparse.Namespace) -> int:
    with open(args.csv) as f:
        raw = list(csv.DictReader(f))
    rows = [{k: float(v) for k, v in r.items()} for r in raw]
    if len(rows) < 3:
        print(f"soak: FAILED: only {len(rows)} samples in {args.csv}", file=sys.stderr)
        return 1
    t0, t1 = args.load_start, args.load_end
    for r in rows:
        r["t"] = r["time"] - t0
    for prev, r in zip(rows, rows[1:]):
        dt = max(r["time"] - prev["time"], 1e-6)
        r["rpc_rate"] = (r["rpcs_total"] - prev["rpcs_total"]) / dt
        r["command_rate"] = (r["commands_total"] - prev["commands_total"]) / dt
    rows[0]["rpc_rate"] = rows[0]["command_rate"] = 0.0
    load_seconds = t1 - t0
    w = drift_windows(load_seconds)
    failures: List[str] = []
    try:
        idle = [r for r in rows if r["t"] <= 0]  # the server before the load
        start_rss = (idle[-1] if idle else rows[0])["rss_bytes"]
        base = median_in(rows, "rss_bytes", w["warmup"], w["warmup"] + w["window"])
        end = median_in(rows, "rss_bytes", load_seconds - w["window"], load_seconds + 0.5)
    except ValueError as e:
        print(f"soak: FAILED: the samples do not cover the load: {e}", file=sys.stderr)
        return 1
    drift = 100.0 * (end - base) / base
    if drift > args.max_drift:
        failures.append(f"RSS drift {drift:+.1f}% > {args.max_drift:g}%")
    during = [r for r in rows if 0 <= r["t"] <= load_seconds]
    after = [r for r in rows if r["t"] > load_seconds]
    last_during = during[-1]
    requests = last_during["rpcs_total"] - during[0]["rpcs_total"]
    commands = last_during["commands_total"] - during[0]["commands_total"]
    reaped = last_during["sessions_reaped_total"] - during[0]["sessions_reaped_total"]
    created = last_during["sessions_created_total"] - during[0]["sessions_created_total"]
    duplicates = rows[-1].get("duplicate_commands_total", 0) - rows[0].get("duplicate_commands_total", 0)
    if duplicates:
        failures.append(f"{duplicates:.0f} duplicate commands (not applied: a client "
                        "resent, or a replaying load's session is not unsequenced)")
    live_max = max(r["live_tensor_bytes"] for r in during)
    zero = next((r for r in after if r["live_tensor_bytes"] == 0), None)
    if zero is None:
        drained = "not back to 0"
        if after:
            failures.append(f"live tensor bytes still {after[-1]['live_tensor_bytes']:.0f} "
                            "after the load")
        else:
            failures.append("no sample after the load")
    else:
        drained = (f"back to 0 {zero['t'] - load_seconds:.1f} s after the load "
                   f"(RSS then {zero['rss_bytes'] / MIB:.1f} MiB)")
    line = (
        f"soak: {load_seconds / 60:.1f} min, {requests:.0f} requests ({requests / load_seconds:.0f}/s), "
        f"{commands:.0f} commands ({duplicates:.0f} duplicates), {created:.0f} sessions ({args.churned} churned, {reaped:.0f} reaped; "
        f"{args.trained} trained), RSS start {start_rss / MIB:.1f} MiB, "
        f"after warm-up ({w['warmup']:.0f} s) {base / MIB:.1f} MiB, end {end / MIB:.1f} MiB, "
        f"drift {drift:+.2f}% (limit {args.max_drift:g}%; medians of {w['window']:.0f} s), "
        f"live bytes max {live_max / MIB:.2f} MiB, {drained}: "
        + ("OK" if not failures else "FAILED: " + "; ".join(failures))
    )
    print(line)
    if args.png:
        plot(rows, load_seconds, w, base, end, args.png)
        print(f"soak: wrote {args.png} and {args.csv}")
    return 1 if failures else 0


def plot(rows, load_seconds: float, w: Dict[str, float], base: float, end: float, png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [r["t"] / 60 for r in rows]
    fig, (ax_rss, ax_live, ax_rate) = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    ax_rss.plot(minutes, [r["rss_bytes"] / MIB for r in rows], lw=0.8, color="tab:blue")
    ax_rss.axvspan(0, w["warmup"] / 60, color="0.9", label="warm-up")
    for lo, level, name in ((w["warmup"], base, "baseline"), (load_seconds - w["window"], end, "end")):
        ax_rss.hlines(level / MIB, lo / 60, (lo + w["window"]) / 60, colors="tab:red", lw=2,
                      label=f"{name} median")
    ax_rss.set_ylabel("RSS (MiB)")
    ax_rss.legend(loc="lower right", fontsize=8)
    ax_live.plot(minutes, [r["live_tensor_bytes"] / MIB for r in rows], lw=0.8, color="tab:green")
    ax_live.set_ylabel("live tensor bytes (MiB)")
    ax_rate.plot(minutes, [r["rpc_rate"] for r in rows], lw=0.8, color="tab:orange", label="RPCs/s")
    ax_rate.plot(minutes, [r["command_rate"] for r in rows], lw=0.8, color="tab:purple",
                 label="commands/s")
    ax_rate.set_yscale("symlog", linthresh=10)
    ax_rate.set_ylabel("rate (1/s)")
    ax_rate.legend(loc="lower right", fontsize=8)
    ax_rate.set_xlabel("minutes since the load started")
    for ax in (ax_rss, ax_live, ax_rate):
        ax.axvline(load_seconds / 60, color="0.5", ls="--", lw=0.8)
        ax.grid(alpha=0.3)
    fig.suptitle("gradtape-server under tests/load/soak.sh", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--pid", type=int, required=True)
    s.add_argument("--metrics", required=True, help="127.0.0.1:PORT of /metrics")
    s.add_argument("--csv", required=True)
    s.add_argument("--stop-file", required=True)
    s.add_argument("--interval", type=float, default=1.0)
    r = sub.add_parser("report")
    r.add_argument("--csv", required=True)
    r.add_argument("--load-start", type=float, required=True, help="wall time (s)")
    r.add_argument("--load-end", type=float, required=True, help="wall time (s)")
    r.add_argument("--png", default="")
    r.add_argument("--max-drift", type=float, default=5.0, help="percent")
    r.add_argument("--churned", type=int, default=0)
    r.add_argument("--trained", type=int, default=0)
    args = parser.parse_args()
    return sample(args) if args.mode == "sample" else report(args)


if __name__ == "__main__":
    sys.exit(main())
