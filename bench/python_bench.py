"""The Python client beside local PyTorch and TensorFlow eager, in one run.

Three figures, each side by side in the same run (each implementation in a
worker process of its own, started by this script),
repetitions alternating between the implementations, medians printed with
their ratio to the baseline (issue 15's targets):

  1. per op: a chain of --ops float32[4] AddV2 (``a = a + b``), with no tape
     and recorded (the chain's first value watched on a GradientTape),
     waiting for the last value (``.numpy()``), in us per op;
     baseline local PyTorch (target: gradtape native <= PyTorch).
  2. digits MLP (64-128-128-10, ReLU, softmax cross-entropy, Adam lr 1e-3
     eps 1e-7), as client/python/examples/train_digits.py trains it: training
     steps/s at batch 64 and 32 and held-out accuracy; the same Glorot-uniform
     initial values (numpy, one seed), the same per-epoch batch order and the
     same number of steps for every implementation; the first epoch is
     warm-up and not timed. gradtape keeps the data, parameters and Adam's
     slots on the server (a step sends a batch of row indices); PyTorch and
     TF keep them in local tensors. Baseline local PyTorch (target: gradtape
     steps/s >= PyTorch's, accuracy >= 96%).
  3. large tensors: put (constant + sync) and fetch (numpy()) of 64 MiB
     float32 on each gradtape backend against a raw gRPC stub moving the
     same bytes in the same messages (bench/large_tensor_bench.py's raw side,
     served by ``large_tensor_bench --serve``); target time within 1.2x.

Implementations: gradtape native (``connect(native=True)``: the compiled
extension; "not built" when it is absent), gradtape native, captured (figure
2 only: the step a gradtape.function, one CallProgram per step once
recorded), gradtape pure
(``connect(native=False)``), PyTorch (CPU) on one intra-op thread (the
baseline) and on its default thread count, and TensorFlow eager
(``tf.raw_ops.AddV2``; Keras Adam; no tf.function). Each runs in a worker
process of its own (see "workers" below). An absent baseline prints "not
installed". The gradtape server is the Release ``gradtape-server`` on
127.0.0.1 (port 0), started and stopped here.

Under load from other processes, note that a gradtape op is served by two
processes (client and server, in parallel on two cores) and a PyTorch op by
one: a scheduler that shares the CPU per process gives the pipeline the
larger share. Compare figures from a quiet machine where it matters.

  python bench/python_bench.py [--server-bin build/server/gradtape-server]
      [--large-bin build/bench/large_tensor_bench] [--reps 5] [--ops 20000]
      [--mlp-reps 3] [--epochs 20] [--only per_op,mlp,large] [--quick]

Tables are printed as markdown (bench/write_performance.py copies them into
docs/PERFORMANCE.md), each target line as "target ...: met" or "NOT met".
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

import gradtape
from gradtape import optimizers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STARTUP_TIMEOUT_S = 30.0

GRADTAPE_IMPLS = (("gradtape native", True), ("gradtape pure", False))
CAPTURED = "gradtape native, captured"  # the MLP's step as a gradtape.function (figure 2 only)
TORCH, TORCH_DEFAULT, TF = "PyTorch (local, 1 thread)", "PyTorch (local, default threads)", "TF eager (local)"


# -- helpers --------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


@contextlib.contextmanager
def gradtape_server(binary: str, env: Optional[Dict[str, str]] = None,
                    flags: Sequence[str] = ()) -> Iterator[str]:
    """Starts gradtape-server on 127.0.0.1 (port 0), with `env` added to the
    environment and `flags` to its command line, yields its address and
    always stops it (SIGTERM, then SIGKILL after 30 s)."""
    proc = subprocess.Popen(
        [binary, "--address=127.0.0.1:0", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    lines: "queue.Queue[Optional[str]]" = queue.Queue()

    def pump() -> None:  # keeps the pipe drained
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        prefix = "gradtape-server listening on "
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if line is None:
                raise RuntimeError(f"{binary} exited early ({proc.wait()})")
            if line.startswith(prefix):
                yield line[len(prefix) :].strip()
                break
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def import_baseline(name: str) -> Tuple[Optional[Any], str]:
    """(module, version) or (None, "not installed"). "torch" runs on one
    intra-op thread, "torch_default" on torch's default count (one per core):
    on the shared 2-core machine the default spends most of a small MLP step
    waiting for its second thread (65-185 steps/s against 770-870 at batch 64
    in one loaded run), so the 1-thread one is the baseline."""
    try:
        if name in ("torch", "torch_default"):
            import torch

            if name == "torch":
                torch.set_num_threads(1)
            return torch, f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads"
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        return tf, f"tensorflow {tf.__version__}, default threads"
    except ImportError:
        return None, "not installed"


def open_gradtape(address: str, native: bool) -> Tuple[Optional[gradtape.Session], str]:
    """A session on `address` with the chosen backend, or (None, why not)."""
    try:
        return gradtape.connect(address, native=native, timeout=30), f"gradtape.connect(address, native={native})"
    except ImportError as e:
        return None, "not built" if native else f"unavailable ({e})"


class Table:
    """Rows of figures per implementation, printed as a markdown table with
    each column's ratio to the baseline row."""

    def __init__(self, columns: Sequence[str], unit: str, ratios: Optional[Sequence[bool]] = None) -> None:
        self.columns = list(columns)
        self.unit = unit
        self.ratios = list(ratios) if ratios is not None else [True] * len(self.columns)
        self.rows: Dict[str, List[float]] = {}
        self.notes: Dict[str, str] = {}

    def print(self, baseline: str) -> None:
        base = self.rows.get(baseline)
        head = ["implementation"]
        for c, r in zip(self.columns, self.ratios):
            head += [f"{c} ({self.unit})"] + ([f"{c}: ratio to {baseline}"] if r else [])
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for name in self.notes:
            cells = [name]
            values = self.rows.get(name)
            for i in range(len(self.columns)):
                if values is None:
                    cells += [self.notes[name]] + ([""] if self.ratios[i] else [])
                    continue
                ratio = "-"
                if base is not None and base[i] > 0:
                    ratio = f"{values[i] / base[i]:.2f}x"
                cells += [f"{values[i]:.3g}" if values[i] < 100 else f"{values[i]:.0f}"]
                cells += [ratio] if self.ratios[i] else []
            print("| " + " | ".join(cells) + " |")

    def ratio(self, name: str, baseline: str, column: int) -> Optional[float]:
        a, b = self.rows.get(name), self.rows.get(baseline)
        if a is None or b is None or b[column] <= 0:
            return None
        return a[column] / b[column]


# -- 1. per op --------------------------------------------------------------


def gradtape_chain(session: gradtape.Session) -> Callable[[bool, int], float]:
    def run(recorded: bool, n: int) -> float:
        a0 = session.constant(np.ones(4, np.float32))
        b = session.constant(np.ones(4, np.float32))
        session.sync()
        start = time.perf_counter()
        if recorded:
            with session.GradientTape() as tape:
                tape.watch(a0)
                a = a0
                for _ in range(n):
                    a = a + b
                value = a.numpy()
                elapsed = time.perf_counter() - start
        else:
            a = a0
            for _ in range(n):
                a = a + b
            value = a.numpy()
            elapsed = time.perf_counter() - start
        assert value.tolist() == [n + 1.0] * 4, value
        del a, a0, b
        session.sync()  # the tape's deletion and the releases, outside the timing
        return elapsed

    return run


def torch_chain(torch: Any) -> Callable[[bool, int], float]:
    def run(recorded: bool, n: int) -> float:
        a0 = torch.ones(4, dtype=torch.float32, requires_grad=recorded)
        b = torch.ones(4, dtype=torch.float32)
        start = time.perf_counter()
        a = a0
        for _ in range(n):
            a = a + b
        value = a.detach().numpy()
        elapsed = time.perf_counter() - start
        assert value.tolist() == [n + 1.0] * 4, value
        return elapsed

    return run


def tf_chain(tf: Any) -> Callable[[bool, int], float]:
    add = tf.raw_ops.AddV2

    def run(recorded: bool, n: int) -> float:
        a0 = tf.constant(np.ones(4, np.float32))
        b = tf.constant(np.ones(4, np.float32))
        start = time.perf_counter()
        if recorded:
            with tf.GradientTape() as tape:
                tape.watch(a0)
                a = a0
                for _ in range(n):
                    a = add(x=a, y=b)
                value = a.numpy()
                elapsed = time.perf_counter() - start
        else:
            a = a0
            for _ in range(n):
                a = add(x=a, y=b)
            value = a.numpy()
            elapsed = time.perf_counter() - start
        assert value.tolist() == [n + 1.0] * 4, value
        return elapsed

    return run


# -- 2. digits MLP ----------------------------------------------------------

Data = Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
SIZES = (64, 128, 128, 10)


def digits(seed: int) -> Data:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    return x_train, y_train, x_test, y_test


def initial_params(seed: int) -> List[np.ndarray]:
    """W1, b1, W2, b2, W3, b3: Glorot uniform weights, zero biases (as
    train_digits.py), the same arrays for every implementation."""
    rng = np.random.default_rng(seed)
    params: List[np.ndarray] = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        params.append(rng.uniform(-limit, limit, size=(fan_in, fan_out)).astype(np.float32))
        params.append(np.zeros(fan_out, dtype=np.float32))
    return params


def batch_orders(n_train: int, batch: int, epochs: int, seed: int) -> List[List[np.ndarray]]:
    """Per epoch, the row indices of each batch (int32)."""
    rng = np.random.default_rng(seed + 1)
    steps = -(-n_train // batch)
    out = []
    for _ in range(epochs):
        order = rng.permutation(n_train).astype(np.int32)
        out.append([order[i * batch : (i + 1) * batch] for i in range(steps)])
    return out


# A trainer: (data, initial params, batch orders) -> (timed steps/s, accuracy).
Trainer = Callable[[Data, List[np.ndarray], List[List[np.ndarray]]], Tuple[float, float]]


def gradtape_trainer(session: gradtape.Session, captured: bool = False) -> Trainer:
    def train(data: Data, init: List[np.ndarray], orders: List[List[np.ndarray]]) -> Tuple[float, float]:
        ops: Any = session.ops  # attributes from the server's registry
        x_train, y_train, x_test, y_test = data
        train_x, train_y, test_x = session.constant(x_train), session.constant(y_train), session.constant(x_test)
        params = [session.Variable(p) for p in init]
        opt = optimizers.Adam(learning_rate=1e-3, epsilon=1e-7)

        def model(x: gradtape.Tensor) -> gradtape.Tensor:
            h = x
            for i in range(3):
                h = ops.bias_add(h @ params[2 * i], params[2 * i + 1])
                if i < 2:
                    h = ops.relu(h)
            return h

        def train_step(idx: gradtape.Tensor) -> gradtape.Tensor:
            xb = ops.gather_v2(train_x, idx, axis=0)
            yb = ops.gather_v2(train_y, idx, axis=0)
            with session.GradientTape() as tape:
                logits = model(xb)
                loss = ops.mean(ops.sparse_softmax_cross_entropy_with_logits(logits, yb).loss, axis=[0])
            grads = tape.gradient(loss, params)
            opt.apply_gradients(zip(grads, params))
            return loss

        # Captured: the first steps (per batch shape) record it, then one CallProgram a step.
        step = gradtape.function(train_step, session=session) if captured else train_step
        steps, start = 0, 0.0
        for epoch, batches in enumerate(orders):
            if epoch == 1:
                session.sync()
                start = time.perf_counter()
            for rows in batches:
                step(session.constant(rows))
                steps += epoch > 0
        session.sync()
        elapsed = time.perf_counter() - start
        accuracy = float((model(test_x).numpy().argmax(axis=1) == y_test).mean())
        del params, train_x, train_y, test_x, opt, step
        session.sync()
        return steps / elapsed, accuracy

    return train


def torch_trainer(torch: Any) -> Trainer:
    F = torch.nn.functional

    def train(data: Data, init: List[np.ndarray], orders: List[List[np.ndarray]]) -> Tuple[float, float]:
        x_train, y_train, x_test, y_test = (torch.from_numpy(a) for a in data)
        params = [torch.tensor(p, requires_grad=True) for p in init]
        opt = torch.optim.Adam(params, lr=1e-3, eps=1e-7)

        def model(x: Any) -> Any:
            h = x
            for i in range(3):
                h = h @ params[2 * i] + params[2 * i + 1]
                if i < 2:
                    h = torch.relu(h)
            return h

        steps, start = 0, 0.0
        for epoch, batches in enumerate(orders):
            if epoch == 1:
                start = time.perf_counter()
            for rows in batches:
                idx = torch.from_numpy(rows).long()
                loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                steps += epoch > 0
        elapsed = time.perf_counter() - start
        with torch.no_grad():
            accuracy = float((model(x_test).argmax(dim=1) == y_test).float().mean())
        return steps / elapsed, accuracy

    return train


def tf_trainer(tf: Any) -> Trainer:
    import keras

    def train(data: Data, init: List[np.ndarray], orders: List[List[np.ndarray]]) -> Tuple[float, float]:
        x_train, y_train, x_test = (tf.constant(a) for a in data[:3])
        y_test = data[3]
        params = [tf.Variable(p) for p in init]
        opt = keras.optimizers.Adam(learning_rate=1e-3, epsilon=1e-7)

        def model(x: Any) -> Any:
            h = x
            for i in range(3):
                h = tf.nn.bias_add(h @ params[2 * i], params[2 * i + 1])
                if i < 2:
                    h = tf.nn.relu(h)
            return h

        steps, start = 0, 0.0
        for epoch, batches in enumerate(orders):
            if epoch == 1:
                start = time.perf_counter()
            for rows in batches:
                idx = tf.constant(rows)
                xb, yb = tf.gather(x_train, idx), tf.gather(y_train, idx)
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(yb, model(xb)))
                grads = tape.gradient(loss, params)
                opt.apply_gradients(zip(grads, params))
                steps += epoch > 0
        _ = params[0].numpy()  # wait for the last update
        elapsed = time.perf_counter() - start
        accuracy = float((model(x_test).numpy().argmax(axis=1) == y_test).mean())
        return steps / elapsed, accuracy

    return train


# -- workers: one process per implementation -------------------------------
#
# Each implementation runs in its own process (this script with --worker), so
# that the libraries do not share a process (torch and tensorflow each bring
# their own LLVM and thread pools; loading both aborts in Keras), and the
# parent alternates requests between them. A worker answers one line per
# request on stdout, prefixed with "@@" (anything else a library prints is
# ignored); its stderr goes to a file quoted when it fails.

WORKERS = (
    ("native", "gradtape native"),
    ("captured", CAPTURED),
    ("pure", "gradtape pure"),
    ("torch", TORCH),
    ("torch_default", TORCH_DEFAULT),
    ("tf", TF),
)
REQUEST_TIMEOUT_S = 900.0


def worker_main(kind: str, address: str) -> None:
    chain: Optional[Callable[[bool, int], float]] = None
    trainer: Optional[Trainer] = None
    session: Optional[gradtape.Session] = None
    if kind in ("native", "pure", "captured"):
        session, note = open_gradtape(address, kind != "pure")
        if session is not None:
            chain, trainer = gradtape_chain(session), gradtape_trainer(session, captured=kind == "captured")
    else:
        module, note = import_baseline(kind if kind != "tf" else "tensorflow")
        if module is not None:
            chain = tf_chain(module) if kind == "tf" else torch_chain(module)
            trainer = tf_trainer(module) if kind == "tf" else torch_trainer(module)
    print(f"@@{'ready' if chain else 'unavailable'} {note}", flush=True)
    if chain is None or trainer is None:
        return
    for line in sys.stdin:
        words = line.split()
        if words[0] == "chain":
            gc.collect()
            print(f"@@ok {chain(words[1] == '1', int(words[2]))!r}", flush=True)
        elif words[0] == "mlp":
            batch, epochs, seed = (int(w) for w in words[1:4])
            data = digits(seed)
            gc.collect()
            rate, accuracy = trainer(data, initial_params(seed), batch_orders(len(data[0]), batch, epochs, seed))
            print(f"@@ok {rate!r} {accuracy!r}", flush=True)
    if session is not None:
        session.close()


class Worker:
    """The parent's end of one worker process."""

    def __init__(self, kind: str, name: str, address: str, log_dir: str) -> None:
        self.name = name
        self.log = os.path.join(log_dir, f"{kind}.stderr")
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--worker", kind, "--address", address],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
            )
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        status, _, self.note = self._answer().partition(" ")
        self.ready = status == "ready"

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@@"):
                self.lines.put(line[2:].strip())
        self.lines.put(None)

    def _answer(self) -> str:
        try:
            line = self.lines.get(timeout=REQUEST_TIMEOUT_S)
        except queue.Empty:
            line = None
        if line is None:
            with open(self.log) as f:
                tail = f.read()[-2000:]
            raise RuntimeError(f"{self.name} worker ended or timed out; its stderr ends:\n{tail}")
        return line

    def request(self, line: str) -> List[float]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        status, _, rest = self._answer().partition(" ")
        if status != "ok":
            raise RuntimeError(f"{self.name}: {line}: {status} {rest}")
        return [float(w) for w in rest.split()]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def workers(address: str, log_dir: str) -> Iterator[List[Worker]]:
    started: List[Worker] = []
    try:
        for kind, name in WORKERS:
            started.append(Worker(kind, name, address, log_dir))
            print(f"- {name}: {started[-1].note}")
        yield started
    finally:
        for w in started:
            w.close()


# -- 1. and 2.: the figures ----------------------------------------------------


def per_op(pool: Sequence[Worker], reps: int, n: int) -> None:
    print(f"\n### python_bench per op: chain of {n} float32[4] AddV2 (a = a + b), "
          f"waiting for the last value; {reps} reps after one warm-up, alternating, medians\n")
    table = Table(["no tape", "recorded"], "us/op")
    times: Dict[Tuple[str, bool], List[float]] = {}
    pool = [w for w in pool if w.name != CAPTURED]  # a chain of single ops: nothing to capture
    for rep in range(reps + 1):
        for w in pool:
            for recorded in (False, True):
                if w.ready:
                    (t,) = w.request(f"chain {int(recorded)} {n}")
                    if rep > 0:  # rep 0 is warm-up
                        times.setdefault((w.name, recorded), []).append(t / n * 1e6)
    for w in pool:
        table.notes[w.name] = w.note
        if w.ready:
            table.rows[w.name] = [median(times[(w.name, False)]), median(times[(w.name, True)])]
    table.print(TORCH)
    for name, _ in GRADTAPE_IMPLS:
        no_tape, on_tape = table.ratio(name, TORCH, 0), table.ratio(name, TORCH, 1)
        if no_tape is None or on_tape is None:
            state = table.notes[name] if name not in table.rows else "no PyTorch baseline"
            print(f"\ntarget {name} per op <= PyTorch's: NOT met ({state})")
        else:
            print(f"\ntarget {name} per op <= PyTorch's: {verdict(no_tape <= 1 and on_tape <= 1)} "
                  f"(no tape {no_tape:.2f}x, recorded {on_tape:.2f}x)")


def mlp(pool: Sequence[Worker], reps: int, epochs: int, batches: Sequence[int], seed: int = 0) -> None:
    data = digits(seed)
    n_train = len(data[0])
    print(f"\n### python_bench digits MLP: 64-128-128-10, Adam (lr 1e-3, eps 1e-7), {epochs} epochs "
          f"of {n_train} training rows (the first is warm-up, not timed), {len(data[2])} held-out; "
          f"{reps} runs per implementation and batch size, alternating, medians")
    rates: Dict[Tuple[str, int], List[float]] = {}
    accuracies: Dict[Tuple[str, int], List[float]] = {}
    for _ in range(reps):
        for batch in batches:
            for w in pool:
                if w.ready:
                    rate, accuracy = w.request(f"mlp {batch} {epochs} {seed}")
                    rates.setdefault((w.name, batch), []).append(rate)
                    accuracies.setdefault((w.name, batch), []).append(accuracy)
    for batch in batches:
        steps = (epochs - 1) * -(-n_train // batch)
        print(f"\nbatch {batch}: {steps} timed steps per run\n")
        table = Table(["steps/s", "held-out accuracy"], "median", ratios=[True, False])
        for w in pool:
            table.notes[w.name] = w.note
            if w.ready:
                table.rows[w.name] = [median(rates[(w.name, batch)]), median(accuracies[(w.name, batch)])]
        table.print(TORCH)
        for name, _ in GRADTAPE_IMPLS:
            ratio = table.ratio(name, TORCH, 0)
            if ratio is None:
                state = table.notes[name] if name not in table.rows else "no PyTorch baseline"
                print(f"\ntarget {name} batch {batch} steps/s >= PyTorch's: NOT met ({state})")
                continue
            acc = min(accuracies[(name, batch)])
            print(f"\ntarget {name} batch {batch} steps/s >= PyTorch's: {verdict(ratio >= 1)} "
                  f"({ratio:.2f}x); accuracy >= 96% in every run: {verdict(acc >= 0.96)} "
                  f"(lowest {acc:.4f})")


# -- 3. large tensors ---------------------------------------------------------


@contextlib.contextmanager
def large_servers(binary: str) -> Iterator[Tuple[str, str]]:
    """`large_tensor_bench --serve`: (gradtape address, raw address); stops it
    by closing its stdin."""
    proc = subprocess.Popen([binary, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        words = proc.stdout.readline().split()  # gradtape ADDR raw ADDR
        if len(words) != 4:
            raise RuntimeError(f"{binary} --serve printed {words!r}")
        yield words[1], words[3]
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def large(binary: str, reps: int, mib: int) -> None:
    import grpc

    sys.path.insert(0, HERE)
    # The raw stub side (bench/large_tensor_bench.py, untyped) and the
    # generated stubs, as Any.
    raw: Any = importlib.import_module("large_tensor_bench")
    pb_grpc: Any = importlib.import_module("gradtape.v1.tape_service_pb2_grpc")

    print(f"\n### python_bench large tensors: {mib} MiB float32, put (constant + sync) and fetch "
          f"(numpy()), chunks of {raw.CHUNK >> 20} MiB; {reps} reps, alternating with the raw stub, "
          f"medians; ratio = gradtape time / raw time\n")
    x = (np.arange(mib << 18) % 1024).astype(np.float32)
    mb = x.nbytes / 1e6
    with large_servers(binary) as (address, raw_address):
        options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        channel = grpc.insecure_channel(raw_address, options=options)
        stub = pb_grpc.TapeServiceStub(channel)
        print("| backend | put MB/s | raw put MB/s | put ratio | fetch MB/s | raw fetch MB/s | fetch ratio |")
        print("|---|---|---|---|---|---|---|")
        verdicts = []
        native_rates: Dict[str, float] = {}
        for name, native in GRADTAPE_IMPLS:
            session, why = open_gradtape(address, native)
            if session is None:
                print(f"| {name} | {why} | | | | | |")
                verdicts.append(f"target {name} put and fetch within 1.2x of the raw stub: NOT met ({why})")
                continue
            with session:
                gput: List[float] = []
                rput: List[float] = []
                gfetch: List[float] = []
                rfetch: List[float] = []
                for _ in range(reps + 1):  # the first round is warm-up
                    holder: Dict[str, Any] = {}

                    def put() -> None:
                        holder["t"] = session.constant(x)
                        session.sync()

                    gput.append(raw.timed(put))
                    rput.append(raw.timed(lambda: raw.raw_put(stub, x)))
                    out: Dict[str, np.ndarray] = {}
                    gfetch.append(raw.timed(lambda: out.update(g=holder["t"].numpy())))
                    rfetch.append(raw.timed(lambda: out.update(r=raw.raw_fetch(stub, x.nbytes, np.float32, x.shape))))
                    assert np.array_equal(out["g"], x) and out["r"].nbytes == x.nbytes  # raw: its own bytes
                    del holder["t"], out
                    session.sync()
                gp, rp, gf, rf = (median(v[1:]) for v in (gput, rput, gfetch, rfetch))
                if native:
                    native_rates = {"put": mb / gp, "fetch": mb / gf}
                print(f"| {name} | {mb / gp:.0f} | {mb / rp:.0f} | {gp / rp:.2f} | {mb / gf:.0f} | "
                      f"{mb / rf:.0f} | {gf / rf:.2f} |")
                verdicts.append(f"target {name} put and fetch within 1.2x of the raw stub: "
                                f"{verdict(gp / rp <= 1.2 and gf / rf <= 1.2)} (put {gp / rp:.2f}x, "
                                f"fetch {gf / rf:.2f}x)")
        channel.close()
    for v in verdicts:
        print(f"\n{v}")
    cpp_floor(binary, reps, mib, native_rates)


def cpp_floor(binary: str, reps: int, mib: int, native: Dict[str, float]) -> None:
    """The raw stub above is Python grpcio; the native backend moves bytes
    through C++ gRPC, so its floor is the C++ raw stub: large_tensor_bench's
    own run (C++ client and C++ raw stub, alternating), after the rounds
    above, and the native backend's medians against that raw stub."""
    run = subprocess.run([binary, f"--sizes_mb={mib}", f"--reps={reps}", "--small_fetches=0"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    rows = {}
    for line in run.stdout.splitlines():
        words = line.split()
        if len(words) == 5 and words[0] == str(mib) and words[1] in ("put", "fetch"):
            rows[words[1]] = (float(words[2]), float(words[3]))  # C++ client MB/s, C++ raw MB/s
    if len(rows) != 2:
        print(f"\n(C++ floor: `{binary} --sizes_mb={mib}` printed no table: {run.stdout[-300:]!r})")
        return
    print(f"\nC++ floor, `large_tensor_bench --sizes_mb={mib} --reps={reps}` (C++ client vs C++ raw stub, "
          f"alternating, medians; run after the rounds above):\n")
    print("| op | C++ client MB/s | C++ raw stub MB/s | C++ client ratio | gradtape native MB/s | native ratio to the C++ raw stub |")
    print("|---|---|---|---|---|---|")
    for op in ("put", "fetch"):
        client, raw_cpp = rows[op]
        n = native.get(op)
        cells = f"{n:.0f} | {raw_cpp / n:.2f}" if n else "not built | "
        print(f"| {op} | {client:.0f} | {raw_cpp:.0f} | {raw_cpp / client:.2f} | {cells} |")
    if native:
        put, fetch = rows["put"][1] / native["put"], rows["fetch"][1] / native["fetch"]
        print(f"\ntarget gradtape native put and fetch within 1.2x of the C++ raw stub: "
              f"{verdict(put <= 1.2 and fetch <= 1.2)} (put {put:.2f}x, fetch {fetch:.2f}x; not alternated "
              f"with the native rounds)")


# -- main -------------------------------------------------------------------


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server-bin", default=os.path.join(ROOT, "build", "server", "gradtape-server"))
    parser.add_argument("--large-bin", default=os.path.join(ROOT, "build", "bench", "large_tensor_bench"))
    parser.add_argument("--reps", type=int, default=5, help="per-op and large-tensor repetitions")
    parser.add_argument("--ops", type=int, default=20000, help="ops in the per-op chain")
    parser.add_argument("--mlp-reps", type=int, default=3, help="training runs per implementation and batch")
    parser.add_argument("--epochs", type=int, default=20, help="epochs per training run (the first untimed)")
    parser.add_argument("--batches", default="64,32")
    parser.add_argument("--large-mib", type=int, default=64)
    parser.add_argument("--only", default="per_op,mlp,large")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: native|pure|torch|tf
    parser.add_argument("--address", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(args.worker, args.address)
        return
    if args.quick:
        args.reps, args.mlp_reps, args.epochs = 2, 1, 12
    only = set(args.only.split(","))
    print(f"python_bench: python {sys.version.split()[0]}, numpy {np.__version__}, gradtape "
          f"{gradtape.__version__}; load average at the start {load_average()} (2 cores shared: "
          f"client, server and the baselines run on the same machine)")
    if "per_op" in only or "mlp" in only:
        with gradtape_server(args.server_bin) as address, tempfile.TemporaryDirectory() as logs, \
                workers(address, logs) as pool:
            if "per_op" in only:
                per_op(pool, args.reps, args.ops)
            if "mlp" in only:
                mlp(pool, args.mlp_reps, args.epochs, [int(b) for b in args.batches.split(",")])
    if "large" in only:
        large(args.large_bin, args.reps, args.large_mib)
    print(f"\npython_bench: load average at the end {load_average()}")


if __name__ == "__main__":
    main()
