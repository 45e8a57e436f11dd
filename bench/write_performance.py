"""Writes the results section of docs/PERFORMANCE.md from bench/run_all.sh's
outputs (one NAME.out and NAME.cmd per benchmark in the given folder).

The section sits between RESULTS_BEGIN and RESULTS_END; the rest of the file
(the hand-written profile notes) is kept.
"""
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys

RESULTS_BEGIN = "<!-- results:begin (written by bench/run_all.sh) -->"
RESULTS_END = "<!-- results:end -->"


def read(folder, name):
    path = os.path.join(folder, name + ".out")
    return open(path).read() if os.path.exists(path) else ""


def cmd(folder, name):
    path = os.path.join(folder, name + ".cmd")
    return open(path).read().strip() if os.path.exists(path) else "(not run)"


def verdict(ok):
    return "met" if ok else "**NOT met**"


def machine():
    cpu = "unknown"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kb = 0
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal"):
            mem_kb = int(line.split()[1])
    load = open("/proc/loadavg").read().split()[:3]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    return (f"- machine: {os.cpu_count()} CPUs (nproc), {cpu}, "
            f"{mem_kb / 1024 / 1024:.1f} GiB memory, {platform.system()} "
            f"{platform.release()}\n"
            f"- date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, "
            f"commit {commit} (plus uncommitted changes, if any), load average "
            f"at the end {' '.join(load)}\n"
            f"- client and server on the same machine, 127.0.0.1\n")


def recording(folder, out):
    text = read(folder, "recording")
    rows = re.findall(r"^(BM_\w+/(\d))_median\s+([\d.]+) ns.*?(\S+)\s*$",
                      text, re.M)
    out.append("### 1. Recording path in-process (Google Benchmark)\n")
    out.append(f"`{cmd(folder, 'recording')}`\n")
    out.append("| benchmark | label | median ns/op | target | |")
    out.append("|---|---|---|---|---|")
    targets = {"0": 20, "1": 60, "2": 400}
    for name, mode, ns, label in rows:
        target = targets[mode] if name.startswith("BM_RecordHook") else None
        t = f"<= {target}" if target else "-"
        v = verdict(float(ns) <= target) if target else ""
        out.append(f"| {name} | {label} | {float(ns):.1f} | {t} | {v} |")
    out.append("")


def stream(folder, out):
    def table(name):
        return [l.split() for l in read(folder, name).splitlines()
                if re.match(r"^\s*\d+\s+\d+\s+\d+\s+[\d.]+\s*$", l)]

    rows = table("stream")
    every = {r[0]: float(r[2]) for r in table("stream_every_reply")}
    out.append("### 2. Op stream throughput over `Stream`\n")
    out.append(f"`{cmd(folder, 'stream')}`\n")
    out.append("Chain of float32[4] AddV2/Mul on a watched tape; proto-level "
               "client (writer + reader thread), in-process server; median of "
               "3 runs per batch size. Every batch but the last goes out "
               "`reply_optional`, as the C++ client sends the batches it does "
               "not wait for; the last column is the same stream with every "
               "batch answered, in the same run (`"
               f"{cmd(folder, 'stream_every_reply')}`).\n")
    out.append("| ExecuteOps per batch | ops in chain | recorded ops/s | "
               "gradient of the chain, s per 1M ops | every batch answered: "
               "ops/s (ratio) |")
    out.append("|---|---|---|---|---|")
    for batch, ops, rate, grad in rows:
        base = every.get(batch)
        col = f"{base:,.0f} ({float(rate) / base:.2f}x)" if base else "-"
        out.append(f"| {batch} | {ops} | {float(rate):,.0f} | {grad} | {col} |")
    if rows:
        best = max(rows, key=lambda r: float(r[2]))
        grad = min(float(r[3]) for r in rows if int(r[0]) >= 64)
        out.append(
            f"\nTarget >= 1,000,000 recorded ops/s: best {float(best[2]):,.0f} "
            f"at batch {best[0]}: {verdict(float(best[2]) >= 1e6)}. Target "
            f"gradient < 1 s per 1M ops: {grad:.3f} s: {verdict(grad < 1)}.\n")
    base = table("stream_unwatched")
    rec = [r for r in rows if r[0] == "1024"]
    if base and rec:
        ratio = float(base[0][2]) / float(rec[0][2])
        # Per op: 1/recorded = 1/unrecorded + recording's share.
        share = 1 - 1 / ratio
        what = (f"recording is {share:.0%} of the per-op time"
                if share > 0 else "no recording cost visible above the noise")
        out.append(
            f"Baseline, the same stream with nothing recorded (tape pushed, x "
            f"unwatched; `{cmd(folder, 'stream_unwatched')}`): "
            f"{float(base[0][2]):,.0f} ops/s at batch 1024, {ratio:.2f}x the "
            f"recorded rate: {what}.\n")


def kernels(folder, out):
    def parse(name):
        """Medians over the rounds NAME.1, NAME.2, ... (or NAME alone)."""
        rounds = sorted(f[:-4] for f in os.listdir(folder)
                        if re.fullmatch(re.escape(name) + r"(\.\d+)?\.out", f))
        mm, ew, info = {}, {}, ""
        for r in rounds:
            text = read(folder, r)
            for n, v in re.findall(r"^matmul n=(\d+) ([\d.]+)", text, re.M):
                mm.setdefault(int(n), []).append(float(v))
            for op, v in re.findall(
                    r"^elementwise op=(\w+) elems=\d+ ([\d.]+)", text, re.M):
                ew.setdefault(op, []).append(float(v))
            m = re.search(r"^# (?:numpy|gradtape:) (.*)$", text, re.M)
            info = m.group(1) if m else info
        med = lambda d: {k: statistics.median(v) for k, v in d.items()}
        return med(mm), med(ew), info
    ours, ours_ew, info = parse("kernels")
    ours_u, ours_u_ew, info_u = parse("kernels_unset")
    npy, npy_ew, blas = parse("numpy")
    npu, npu_ew, blas_u = parse("numpy_unset")
    np1, np1_ew, blas_1 = parse("numpy_1thread")
    out.append("### 5. Kernels vs numpy (same run)\n")
    out.append("Two environments, each side by side with numpy in the same "
               "one: as the machine is set up (it exports OPENBLAS_CORETYPE="
               "Haswell and OPENBLAS_L2_SIZE, which both OpenBLAS builds "
               "obey), and with those two variables unset (OpenBLAS picks its "
               "AVX-512 kernels).\n")
    out.append(f"- gradtape: `{cmd(folder, 'kernels.1')}`; {info}")
    out.append(f"- numpy: `{cmd(folder, 'numpy.1')}`; {blas}")
    out.append(f"- gradtape, unset: `{cmd(folder, 'kernels_unset.1')}`; "
               f"{info_u}")
    out.append(f"- numpy, unset: `{cmd(folder, 'numpy_unset.1')}`; {blas_u}")
    out.append(f"- numpy on one thread (reference): "
               f"`{cmd(folder, 'numpy_1thread')}`; {blas_1}\n")
    head = ("| case | gradtape | numpy | ratio | gradtape (unset) | "
            "numpy (unset) | ratio (unset) | numpy 1 thread | target | |")
    out.append(head)
    out.append("|" + "---|" * (head.count("|") - 1))

    def row(label, a, b, a_u, b_u, one, target):
        r = a / max(b, 1e-9)
        r_u = a_u / max(b_u, 1e-9)
        ok = r >= target and (r_u >= target or not a_u)
        out.append(f"| {label} | {a:.1f} | {b:.1f} | {r:.2f} | {a_u:.1f} | "
                   f"{b_u:.1f} | {r_u:.2f} | {one:.1f} | >= {target} | "
                   f"{verdict(ok)} |")
    for n in sorted(ours):
        row(f"MatMul {n}x{n} f32, GFLOP/s", ours[n], npy.get(n, 0),
            ours_u.get(n, 0), npu.get(n, 0), np1.get(n, 0), 0.8)
    for op in ours_ew:
        row(f"{op} 16M f32, GB/s", ours_ew[op], npy_ew.get(op, 0),
            ours_u_ew.get(op, 0), npu_ew.get(op, 0), np1_ew.get(op, 0), 0.5)
    rounds = len([f for f in os.listdir(folder)
                  if re.fullmatch(r"kernels\.\d+\.out", f)])
    out.append(f"\nEach figure is the median of {rounds} alternating rounds (each "
               "round's figure is itself a median of its repetitions); a case "
               "is met when the ratio is at or above the target in both "
               "environments.\n")


def memory(folder, out):
    text = read(folder, "memory")
    out.append("### 6. Memory\n")
    out.append(f"`{cmd(folder, 'memory')}`\n")
    for line in text.splitlines():
        if line.startswith("tape ") or line.startswith("server rss"):
            out.append(f"- {line}")
    m = re.search(r"change ([+-][\d.]+)%", text)
    if m:
        out.append(f"\nTarget RSS within 10%: {m.group(1)}%: "
                   f"{verdict(abs(float(m.group(1))) <= 10)}.")
    out.append("")


def mlp(folder, out):
    out.append("### 4. Thin-client training step\n")
    out.append("Two session lengths: 300 steps, and 2000 steps (what "
               "`gradtape-mlp-demo` runs). A session pays fixed costs the "
               "in-process loop does not (the client fills its first batch "
               "before the server has work; the last loss and the logits are "
               "two round trips), so the ratio falls as sessions get longer.\n")
    for name in ("mlp", "mlp_long"):
        text = read(folder, name)
        m = re.search(r"^mlp step.*remote/in-process ([\d.]+)$", text, re.M)
        if m:
            out.append(f"- `{cmd(folder, name)}`: {m.group(0)}; target "
                       f"remote/in-process <= 1.3: "
                       f"{verdict(float(m.group(1)) <= 1.3)}")
    out.append("")


def ghz(folder, out):
    text = read(folder, "ghz")
    out.append("### 3. ghz load test\n")
    out.append(f"`{cmd(folder, 'ghz')}` (50 concurrent workers over 50 "
               "connections; keepalive and run_unary_fixed use one session "
               "and no template and run three times each, alternating; "
               "run_unary and stream use 10 sessions and templated ids; "
               "unary_load spreads its calls over 50 sessions; every load "
               "generator runs on the same 2 cores as the server)\n")
    for line in text.splitlines():
        if line.startswith(("ghz ", "unary_load ")) or \
                "ghz_sessions check" in line or "FAILED" in line:
            out.append(f"- {line}")

    def rates(pattern):
        return [(int(m.group(1)), float(m.group(2)), int(m.group(3)))
                for m in re.finditer(
                    pattern + r": .*?([\d]+) req/s, p50 [\d.]+ ms, "
                    r"p99 ([\d.]+) ms, errors (\d+)", text, re.M)]

    def median_run(runs):  # the run with the median rate, and all errors
        if not runs:
            return None
        runs = sorted(runs)
        rps, p99, _ = runs[len(runs) // 2]
        return rps, p99, sum(r[2] for r in runs), len(runs)

    fixed = median_run(rates(r"^ghz run_unary_fixed"))
    keepalive = median_run(rates(r"^ghz keepalive"))
    templated = median_run(rates(r"^ghz run_unary"))
    light = median_run(rates(r"^unary_load run"))
    light_keepalive = median_run(rates(r"^unary_load keepalive"))
    if fixed:
        rps, p99, errors, n = fixed
        out.append(f"\nTarget, with ghz as the load generator, unary Run with "
                   f"a small batch (run_unary_fixed, median of {n} runs): "
                   f">= 20,000 req/s: {rps:,}: {verdict(rps >= 20000)}. "
                   f"p99 <= 10 ms: {p99} ms: {verdict(p99 <= 10)}. Zero "
                   f"errors (all runs): {errors}: {verdict(errors == 0)}.")
    if fixed and keepalive:
        out.append(f"\nBaseline in the same run: ghz reaches {keepalive[0]:,} "
                   f"req/s (median of {keepalive[3]}) against KeepAlive, the "
                   f"cheapest authenticated call (no command, no tensor); Run "
                   f"reaches {fixed[0] / keepalive[0]:.2f}x of that. ghz's "
                   f"own CPU per call bounds both.")
    if templated and fixed:
        out.append(f"\nThe same batch with templated ids (run_unary, every "
                   f"call keeps its result): {templated[0]:,} req/s, p99 "
                   f"{templated[1]} ms, {templated[2]} errors, "
                   f"{templated[0] / fixed[0]:.2f}x of run_unary_fixed: ghz "
                   f"executes the data and metadata templates on every call.")
    if light:
        rps, p99, errors, _ = light
        line = (f"\nWith the compiled load generator (`unary_load`, same "
                f"batch as run_unary, 50 calls in flight over 50 "
                f"connections): {rps:,} req/s, p99 {p99} ms, {errors} "
                f"errors: the server side of the target is "
                f"{verdict(rps >= 20000 and p99 <= 10 and errors == 0)}")
        if light_keepalive:
            line += (f" (KeepAlive {light_keepalive[0]:,} req/s; Run is "
                     f"{rps / light_keepalive[0]:.2f}x of it)")
        out.append(line + ".")
    out.append("")


def python_client(folder, out):
    """bench/python_bench.py prints markdown tables and "target ..." lines:
    copied as they are, its section headings made sub-headings."""
    text = read(folder, "python")
    out.append("### 7. Python client vs local PyTorch and TF eager (same run)\n")
    out.append(f"`{cmd(folder, 'python')}`\n")
    if not text:
        out.append("(not run)\n")
        return
    kind = None  # the kind of the last line copied: blocks of different kinds get a blank line
    for line in text.splitlines():
        if line.startswith("### python_bench "):
            line, this = "**" + line[len("### python_bench "):] + "**", "heading"
        elif line.startswith("target "):
            line, this = line.replace("NOT met", "**NOT met**"), "target"
        elif line.startswith("|"):
            this = "table"
        elif line.startswith("- "):
            this = "list"
        elif line.startswith(("batch ", "python_bench:", "C++ floor", "(C++ floor", "Traceback",
                              "RuntimeError")):
            this = "text"
        else:
            continue
        if kind is not None and (this != kind or this in ("target", "text", "heading")):
            out.append("")
        out.append(line)
        kind = this
    out.append("")


def models(folder, out):
    """bench/transformer_bench.py and bench/cnn_bench.py print a heading, a
    markdown table and result lines: copied as they are."""
    out.append("### 8. Training real models vs local PyTorch (same run; issue 26)\n")
    for name in ("transformer", "cnn"):
        text = read(folder, name)
        out.append(f"`{cmd(folder, name)}`\n")
        if not text:
            out.append("(not run)\n")
            continue
        for line in text.splitlines():
            if line.startswith("### "):
                out.append("**" + line[4:] + "**\n")
            elif line.startswith("|"):
                out.append(line)
            elif line.startswith(("step time ", "gradtape commands per step", "load average")):
                out.append("\n" + line.replace("NOT met", "**NOT met**"))
        out.append("")


def main():
    folder, doc = sys.argv[1], sys.argv[2]
    out = [RESULTS_BEGIN, "## Results\n", machine()]
    recording(folder, out)
    stream(folder, out)
    ghz(folder, out)
    mlp(folder, out)
    kernels(folder, out)
    memory(folder, out)
    python_client(folder, out)
    models(folder, out)
    out.append(RESULTS_END)
    section = "\n".join(out)
    text = open(doc).read() if os.path.exists(doc) else \
        "# Performance\n\n" + RESULTS_BEGIN + "\n" + RESULTS_END + "\n"
    if RESULTS_BEGIN in text and RESULTS_END in text:
        head, rest = text.split(RESULTS_BEGIN, 1)
        tail = rest.split(RESULTS_END, 1)[1]
        text = head + section + tail
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    open(doc, "w").write(text)


if __name__ == "__main__":
    main()
