"""Training steps/s of a small residual CNN through gradtape beside the same
model in local PyTorch, in one run (issue 26, target 3; reported, never a CI
gate).

The model: 32x32x3 images, conv 3x3 (3 -> C) + batch norm (training mode:
the batch's statistics) + ReLU, two residual blocks (conv 3x3, batch norm,
ReLU, conv 3x3, batch norm, plus the block's input, ReLU), max pool 2x2,
global average pool, dense to 10 classes, softmax cross entropy, Adam (lr
1e-3). The gradtape side is written with the Python client's raw ops
(Conv2D, FusedBatchNormV3, Relu, MaxPool, Mean, MatMul,
SparseSoftmaxCrossEntropyWithLogits; NHWC, filters HWIO); PyTorch runs it
NCHW, as its users do. Both start from the same weights (drawn with numpy
from a seed, transposed for PyTorch's layout) and train on the same fixed
random images and labels (numpy, seeded: a random template per class plus
noise; nothing is downloaded), --batches batches of --batch images in turn.

Implementations: gradtape native (``connect(native=True)``), gradtape pure
(``connect(native=False)``, with --pure), PyTorch CPU on one intra-op thread
and on its default thread count (the issue's target is at least the
latter). Every repetition runs each implementation in a fresh worker
process, in turn (alternating), for --warmup untimed steps and then --steps
timed ones. Medians are printed with their ratios to both PyTorch runs, and
the loss of the last step in each implementation (same weights, same
batches: they must agree). --check runs gradtape native and PyTorch for
--check-steps steps and fails unless the losses agree within 1e-2
(relative). The server is the Release gradtape-server on 127.0.0.1 (port
0), started and stopped here.

Workers run on this interpreter (as in bench/transformer_bench.py: one
environment with the client and torch, .venv-bench in bench/run_all.sh);
--gradtape-python / --torch-python run them on others.

  python bench/cnn_bench.py [--server-bin build/server/gradtape-server]
      [--reps 3] [--steps 30] [--warmup 5] [--batch 32] [--channels 32] [--pure]
  python bench/cnn_bench.py --check [--check-steps 35]
"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
IMPLS = (("native", "gradtape native"), ("pure", "gradtape pure"),
         ("torch", "PyTorch, 1 thread"), ("torch_default", "PyTorch, default threads"))
BASELINE_1 = "PyTorch, 1 thread"
BASELINE = "PyTorch, default threads"  # the target
CLASSES = 10
IMAGE = 32
BN_EPSILON = 1e-5
LEARNING_RATE = 1e-3
ADAM_EPSILON = 1e-7  # the client's Adam (TensorFlow's); PyTorch gets the same
CHECK_RTOL = 1e-2


# -- model and data (numpy: the same for every implementation) -----------------


def parameter_shapes(channels: int) -> Dict[str, Tuple[int, ...]]:
    """Every parameter, in a fixed order; conv filters HWIO (gradtape's layout)."""
    c = channels
    shapes: Dict[str, Tuple[int, ...]] = {"stem.conv": (3, 3, 3, c), "stem.bn.g": (c,), "stem.bn.b": (c,)}
    for i in range(2):
        p = f"block{i}."
        shapes.update({p + "conv1": (3, 3, c, c), p + "bn1.g": (c,), p + "bn1.b": (c,),
                       p + "conv2": (3, 3, c, c), p + "bn2.g": (c,), p + "bn2.b": (c,)})
    shapes.update({"fc.w": (c, CLASSES), "fc.b": (CLASSES,)})
    return shapes


def initial_weights(channels: int, seed: int = 0) -> Dict[str, np.ndarray]:
    """He-normal filters, 1/sqrt(fan_in) dense weights, batch-norm gains 1,
    shifts and biases 0 (float32)."""
    rng = np.random.default_rng(seed)
    weights: Dict[str, np.ndarray] = {}
    for name, shape in parameter_shapes(channels).items():
        if len(shape) == 4:
            value = rng.normal(0.0, np.sqrt(2.0 / (shape[0] * shape[1] * shape[2])), shape)
        elif len(shape) == 2:
            value = rng.normal(0.0, np.sqrt(1.0 / shape[0]), shape)
        else:
            value = np.ones(shape) if name.endswith(".g") else np.zeros(shape)
        weights[name] = value.astype(np.float32)
    return weights


def dataset(batches: int, batch: int, seed: int = 1) -> List[Tuple[np.ndarray, np.ndarray]]:
    """`batches` fixed (images NHWC float32, labels int32) batches: each
    image is its class's random template plus as much noise (learnable, so
    the loss falls)."""
    rng = np.random.default_rng(seed)
    templates = rng.standard_normal((CLASSES, IMAGE, IMAGE, 3))
    labels = rng.integers(0, CLASSES, size=(batches, batch)).astype(np.int32)
    images = (templates[labels] + rng.standard_normal((batches, batch, IMAGE, IMAGE, 3))).astype(np.float32)
    return [(images[i], labels[i]) for i in range(batches)]


# -- gradtape -------------------------------------------------------------------


def gradtape_trainer(session: Any, weights: Dict[str, np.ndarray],
                     data: List[Tuple[np.ndarray, np.ndarray]]) -> Callable[[int], Any]:
    """step(i) -> the loss of a training step on batch i % len(data) (not waited for)."""
    from gradtape import optimizers

    ops = session.ops
    params = {name: session.Variable(session.constant(value), name=name) for name, value in weights.items()}
    batches = [(session.constant(x), session.constant(y)) for x, y in data]
    empty = session.constant(np.zeros(0, dtype=np.float32))  # training: no running statistics
    opt = optimizers.Adam(learning_rate=LEARNING_RATE, epsilon=ADAM_EPSILON)

    def conv_bn(x: Any, conv: str, bn: str) -> Any:
        y = ops.conv2d(x, params[conv], strides=[1, 1, 1, 1], padding="SAME")
        return ops.fused_batch_norm_v3(y, params[bn + ".g"], params[bn + ".b"], empty, empty,
                                       epsilon=BN_EPSILON, is_training=True).y

    def loss_of(x: Any, labels: Any) -> Any:
        h = ops.relu(conv_bn(x, "stem.conv", "stem.bn"))
        for i in range(2):
            p = f"block{i}."
            r = ops.relu(conv_bn(h, p + "conv1", p + "bn1"))
            h = ops.relu(h + conv_bn(r, p + "conv2", p + "bn2"))
        h = ops.max_pool(h, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID")
        logits = ops.mean(h, axis=[1, 2]) @ params["fc.w"] + params["fc.b"]
        return ops.mean(ops.sparse_softmax_cross_entropy_with_logits(logits, labels).loss, axis=[0])

    variables = list(params.values())

    def step(i: int) -> Any:
        x, labels = batches[i % len(batches)]
        with session.GradientTape() as tape:
            loss = loss_of(x, labels)
        opt.apply_gradients(list(zip(tape.gradient(loss, variables), variables)))
        return loss

    return step


def gradtape_run(address: str, native: bool, steps: int, warmup: int, args: argparse.Namespace) -> Tuple[float, float]:
    import gradtape

    with gradtape.connect(address, native=native) as session:
        step = gradtape_trainer(session, initial_weights(args.channels), dataset(args.batches, args.batch))
        loss: Any = None
        start = time.perf_counter()
        for i in range(warmup + steps):
            if i == warmup and loss is not None:
                float(loss)  # everything before is done
                start = time.perf_counter()
            loss = step(i)
        last = float(loss)
        return steps / (time.perf_counter() - start), last


def gradtape_op_counts(address: str, args: argparse.Namespace) -> None:
    """Prints the ExecuteOp commands one step sends, by op (pure client: its
    Python core is the one whose execute can be counted), after two steps
    (which create Adam's slots), and the step's tape entries."""
    import gradtape

    counts: "collections.Counter[str]" = collections.Counter()
    with gradtape.connect(address, native=False) as session:
        step = gradtape_trainer(session, initial_weights(args.channels), dataset(args.batches, args.batch))
        for i in range(2):
            step(i)
        session.sync()
        core = session._core
        execute = core.execute

        def counting(op: str, *rest: Any, **kw: Any) -> Any:
            counts[op] += 1
            return execute(op, *rest, **kw)

        core.execute = counting  # type: ignore[method-assign]
        sent = core.commands_sent
        float(step(2))
        total = core.commands_sent - sent
    print(f"@@ops {sum(counts.values())} {total} " + " ".join(f"{op}={n}" for op, n in counts.most_common()),
          flush=True)


# -- PyTorch --------------------------------------------------------------------


def torch_run(threads: Optional[int], steps: int, warmup: int, args: argparse.Namespace) -> Tuple[float, float]:
    import torch
    import torch.nn.functional as F

    if threads is not None:
        torch.set_num_threads(threads)
    params: Dict[str, torch.Tensor] = {}
    for name, value in initial_weights(args.channels).items():
        if value.ndim == 4:
            value = value.transpose(3, 2, 0, 1)  # HWIO -> OIHW
        params[name] = torch.tensor(np.ascontiguousarray(value), requires_grad=True)
    batches = [(torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))),  # NHWC -> NCHW
                torch.from_numpy(y.astype(np.int64))) for x, y in dataset(args.batches, args.batch)]
    opt = torch.optim.Adam(list(params.values()), lr=LEARNING_RATE, eps=ADAM_EPSILON)

    def conv_bn(x: torch.Tensor, conv: str, bn: str) -> torch.Tensor:
        y = F.conv2d(x, params[conv], padding=1)
        return F.batch_norm(y, None, None, params[bn + ".g"], params[bn + ".b"], training=True, eps=BN_EPSILON)

    def loss_of(x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        h = F.relu(conv_bn(x, "stem.conv", "stem.bn"))
        for i in range(2):
            p = f"block{i}."
            r = F.relu(conv_bn(h, p + "conv1", p + "bn1"))
            h = F.relu(h + conv_bn(r, p + "conv2", p + "bn2"))
        h = F.max_pool2d(h, 2)
        logits = h.mean((2, 3)) @ params["fc.w"] + params["fc.b"]
        return F.cross_entropy(logits, labels)

    start = time.perf_counter()
    for i in range(warmup + steps):
        if i == warmup:
            start = time.perf_counter()
        x, labels = batches[i % len(batches)]
        loss = loss_of(x, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return steps / (time.perf_counter() - start), loss.item()


# -- driver ---------------------------------------------------------------------


def worker(kind: str, address: str, args: argparse.Namespace) -> None:
    try:
        if kind == "ops":
            gradtape_op_counts(address, args)
            return
        if kind in ("native", "pure"):
            rate, loss = gradtape_run(address, kind == "native", args.steps, args.warmup, args)
        else:
            rate, loss = torch_run(1 if kind == "torch" else None, args.steps, args.warmup, args)
    except ImportError as e:
        print(f"@@unavailable {e}", flush=True)
        return
    print(f"@@rate {rate!r} {loss!r}", flush=True)


def run_worker(kind: str, address: str, args: argparse.Namespace, steps: int, warmup: int) -> Optional[List[str]]:
    """The worker's @@ line's fields, or None when its imports are missing."""
    python = args.torch_python if kind.startswith("torch") else args.gradtape_python
    out = subprocess.run(
        [python, os.path.abspath(__file__), "--worker", kind, "--address", address,
         "--steps", str(steps), "--warmup", str(warmup), "--batch", str(args.batch),
         "--batches", str(args.batches), "--channels", str(args.channels)],
        capture_output=True, text=True, timeout=1800)
    for line in out.stdout.splitlines():
        if line.startswith(("@@rate ", "@@ops ")):
            return line.split()[1:]
        if line.startswith("@@unavailable"):
            return None
    raise RuntimeError(f"{kind} worker failed (exit {out.returncode}):\n{out.stderr[-3000:]}")


def model_line(args: argparse.Namespace) -> str:
    return (f"residual CNN (32x32x3, conv3x3-BN-ReLU, 2 residual blocks, max pool, global average pool, "
            f"dense 10; {args.channels} channels, Adam lr {LEARNING_RATE:g}), batch {args.batch}, "
            f"{args.batches} fixed random batches")


def check(address: str, args: argparse.Namespace) -> None:
    losses = {}
    for kind, name in (("native", "gradtape native"), ("torch_default", BASELINE)):
        fields = run_worker(kind, address, args, args.check_steps, 0)
        if fields is None:
            sys.exit(f"--check: {name} is not installed")
        losses[name] = float(fields[1])
        print(f"{name}: loss of step {args.check_steps} = {losses[name]:.4f}")
    a, b = losses["gradtape native"], losses[BASELINE]
    rel = abs(a - b) / abs(b)
    print(f"relative difference {rel:.2e} (tolerance {CHECK_RTOL:g})")
    assert rel <= CHECK_RTOL, f"losses disagree: gradtape {a} vs PyTorch {b}"
    print("check passed")


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server-bin", default=str(HERE.parent / "build" / "server" / "gradtape-server"))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batches", type=int, default=4, help="fixed random batches, used in turn")
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--pure", action="store_true", help="also time the pure client")
    parser.add_argument("--check", action="store_true", help="only the loss agreement check")
    parser.add_argument("--check-steps", type=int, default=35)
    parser.add_argument("--gradtape-python", default=sys.executable, help="interpreter of the gradtape workers")
    parser.add_argument("--torch-python", default=sys.executable, help="interpreter of the PyTorch workers")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.address, args)
        return
    sys.path.insert(0, str(HERE))
    from python_bench import gradtape_server, load_average

    impls = [(kind, name) for kind, name in IMPLS if args.pure or kind != "pure"]
    rates: Dict[str, List[float]] = {}
    losses: Dict[str, List[float]] = {}
    missing: Dict[str, str] = {}
    print(f"load average at the start: {load_average()}")
    with gradtape_server(args.server_bin) as address:
        if args.check:
            check(address, args)
            return
        op_counts = run_worker("ops", address, args, 0, 0)
        for _ in range(args.reps):
            for kind, name in impls:
                if name in missing:
                    continue
                fields = run_worker(kind, address, args, args.steps, args.warmup)
                if fields is None:
                    missing[name] = "not installed"
                else:
                    rates.setdefault(name, []).append(float(fields[0]))
                    losses.setdefault(name, []).append(float(fields[1]))
    print(f"load average at the end: {load_average()}")
    print(f"\n### cnn_bench: {model_line(args)}, {args.steps} timed steps after {args.warmup} warm-up, "
          f"{args.reps} runs per implementation, alternating, medians\n")
    base = statistics.median(rates[BASELINE]) if BASELINE in rates else None
    base_1 = statistics.median(rates[BASELINE_1]) if BASELINE_1 in rates else None
    print("| implementation | steps/s | ratio to PyTorch default threads | ratio to PyTorch 1 thread "
          f"| loss of step {args.warmup + args.steps} | runs |")
    print("|---|---|---|---|---|---|")
    for _, name in impls:
        if name in missing:
            print(f"| {name} | {missing[name]} | | | | |")
            continue
        med = statistics.median(rates[name])
        ratio = f"{med / base:.2f}x" if base else "-"
        ratio_1 = f"{med / base_1:.2f}x" if base_1 else "-"
        runs = ", ".join(f"{r:.2f}" for r in rates[name])
        loss = ", ".join(sorted({f"{l:.4f}" for l in losses[name]}))
        print(f"| {name} | {med:.2f} | {ratio} | {ratio_1} | {loss} | {runs} |")
    if op_counts is not None:
        executes, commands, *per_op = op_counts
        print(f"\ngradtape commands per step: {commands} ({executes} ExecuteOp; the backward runs on the "
              f"server inside the Gradient command): {', '.join(per_op)}")


if __name__ == "__main__":
    main()
