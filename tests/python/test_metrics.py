"""Prometheus metrics of the real gradtape-server binary, scraped with urllib
while the Python client trains a model, and the Grafana dashboard checked
against what the server exports (deploy/grafana/gradtape-dashboard.json)."""

import json
import re
import threading
import time
import urllib.request

import numpy as np
import pytest

import gradtape
from server_process import REPO_ROOT, ServerProcess

DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "gradtape-dashboard.json"
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
STEPS = 300  # training steps, one round trip each


@pytest.fixture
def metrics_server(tmp_path):
    """gradtape-server with metrics and an access log on free 127.0.0.1
    ports: yields (grpc address, metrics port, access log path); always
    stopped."""
    log = tmp_path / "access.log"
    with ServerProcess("--metrics_address=127.0.0.1:0", f"--access_log={log}") as server:
        assert server.metrics_port is not None, "no 'metrics on port' line before 'listening'"
        yield server.address, server.metrics_port, log


def scrape(port):
    """{(name, frozenset of label pairs): value} from GET /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        labels = frozenset(LABEL.findall(m.group(2) or ""))
        samples[(m.group(1), labels)] = float(m.group(3))
    return samples


def total(samples, name, **labels):
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def train(address, steps, done):
    """A linear model y = x w fitted with plain gradient steps."""
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((64, 8))
    y_np = x_np @ rng.standard_normal((8, 1))
    with gradtape.connect(address) as s:
        x, y = s.constant(x_np), s.constant(y_np)
        w = s.Variable(np.zeros((8, 1)))
        for _ in range(steps):
            with s.GradientTape() as tape:
                err = s.ops.mat_mul(x, w) - y
                loss = s.ops.mean(err * err, axis=[0, 1])
            (dw,) = tape.gradient(loss, [w])
            w.assign_sub(dw * 0.1)
            loss.numpy()  # one round trip per step
        done["loss"] = float(loss.numpy())


def test_counters_move_during_a_training_run(metrics_server):
    address, port, log = metrics_server
    before = scrape(port)
    assert total(before, "gradtape_sessions_created_total") == 0
    done = {}
    trainer = threading.Thread(target=train, args=(address, STEPS, done), daemon=True)
    trainer.start()
    during = []
    deadline = time.monotonic() + 60
    while trainer.is_alive() and time.monotonic() < deadline:
        during.append(scrape(port))
        time.sleep(0.02)
    trainer.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not trainer.is_alive(), "training did not finish within 60 s"
    assert done["loss"] < 0.01
    after = scrape(port)

    # Scraped while the session was open: it shows, with its memory.
    assert during, "training finished before the first scrape"
    assert max(total(s, "gradtape_sessions_open") for s in during) == 1
    assert max(total(s, "gradtape_live_tensor_bytes") for s in during) > 0
    # Counters only grow between scrapes.
    matmuls = [total(s, "gradtape_commands_total", op="MatMul") for s in during]
    assert matmuls == sorted(matmuls)

    assert total(after, "gradtape_sessions_created_total", tenant="") == 1
    assert total(after, "gradtape_sessions_closed_total") == 1
    assert total(after, "gradtape_sessions_open") == 0
    ok = dict(code="OK")
    assert total(after, "gradtape_commands_total", kind="execute", op="MatMul", **ok) == STEPS
    assert total(after, "gradtape_commands_total", kind="gradient", **ok) == STEPS
    assert total(after, "gradtape_commands_total") == total(after, "gradtape_commands_total", **ok)
    assert total(after, "gradtape_batch_duration_seconds_count", method="Stream") >= STEPS
    assert total(after, "gradtape_received_bytes_total", method="Stream") > 0
    assert total(after, "gradtape_sent_bytes_total", method="Stream") > 0
    assert total(after, "gradtape_rpcs_total", method="CreateSession", code="OK") == 1
    # MatMul keeps both inputs but not its output; Sub keeps nothing.
    assert total(after, "gradtape_elision_saved_bytes_total") > STEPS * 64 * 8
    # The access log has the session's calls; nothing that authenticates.
    # (The stream's line comes when the server ends it, after the client
    # closed it: wait for it, bounded.)
    for _ in range(100):
        entries = [json.loads(line) for line in log.read_text().splitlines()]
        if any(e["method"] == "Stream" for e in entries):
            break
        time.sleep(0.05)
    methods = [e["method"] for e in entries]
    assert methods.count("CreateSession") == 1 and methods.count("CloseSession") == 1
    streams = [e for e in entries if e["method"] == "Stream"]
    assert streams and sum(e["commands"] for e in streams) == total(
        after, "gradtape_commands_total"
    )
    text = log.read_text()
    assert "token" not in text
    assert not re.search(r"[0-9a-f]{64}", text), "a session token in the log"


def dashboard_metric_names():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(dashboard["panels"]) >= 5 and exprs
    names = set()
    for expr in exprs:
        names |= set(re.findall(r"\b(gradtape_[a-z_]+)\b", expr))
    for q in dashboard.get("templating", {}).get("list", []):
        names |= set(re.findall(r"\b(gradtape_[a-z_]+)\b", q.get("query", "")))
    return names


def test_dashboard_queries_only_exported_metrics(metrics_server):
    address, port, _ = metrics_server
    # One session, so the series labelled by tenant exist.
    with gradtape.connect(address) as s:
        s.constant(np.ones(3)).numpy()
    exported = {name for name, _ in scrape(port)}
    names = dashboard_metric_names()
    for panel in ("sessions", "commands", "batch_duration", "live_tensor", "elision", "memory_budget", "memory_in_use"):
        assert any(panel in n for n in names), panel
    missing = sorted(n for n in names if n not in exported)
    assert not missing, f"the dashboard queries metrics the server does not export: {missing}"
