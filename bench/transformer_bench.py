"""Training steps/s of the character transformer of
client/python/examples/train_transformer.py through gradtape beside the same
model in local PyTorch, in one run (issue 16; reported, never a CI gate).

Implementations: gradtape native (``connect(native=True)``), gradtape
native, captured (the same with the step a gradtape.function: one
CallProgram per step after the warmup's first steps, which record it),
gradtape pure (``connect(native=False)``), PyTorch CPU on one intra-op thread (the
baseline, as in bench/python_bench.py) and on its default thread count,
PyTorch with the loss under torch.compile, and JAX with the whole step
(loss, gradient, optax AdamW) under jax.jit (jax[cpu] and optax from PyPI;
an implementation whose package is missing is reported as such).
--impls picks some (kinds: native captured pure torch torch_default
torch_compile jax).
Every repetition runs each implementation in a fresh worker process, in
turn (alternating), for --warmup untimed steps and then --steps timed ones,
same config (2 layers, d_model 64, 4 heads, context 64, dropout 0.1, AdamW
lr 3e-3 wd 0.01), same batch size and batch order. Medians are printed with
their ratio to PyTorch 1 thread. The server is the Release gradtape-server
on 127.0.0.1 (port 0), started and stopped here.

With --plans, two more servers run the captured step: one with
--plan_programs=false (every call runs the program's tape steps) and one
with --fuse_programs=false (planned, no fused loops); the table's last lines
are the default server's captured rate over theirs (docs/CAPTURE.md).

With --scaling, a second server runs with GRADTAPE_INTRA_OP_THREADS=1 and
"gradtape native, server on 1 thread" joins the rotation; the table's last
line is the step time with the default thread count over the time with one
(issue 26's target: at most 0.75x on 2 cores).

  python bench/transformer_bench.py [--server-bin build/server/gradtape-server]
      [--reps 3] [--steps 100] [--warmup 10] [--batch 32] [--scaling] [--plans]
      [--impls native,captured,torch_default,torch_compile,jax]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import math
import os
import pathlib
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "client" / "python" / "examples" / "train_transformer.py"
IMPLS = (("native", "gradtape native"), ("captured", "gradtape native, captured"), ("pure", "gradtape pure"),
         ("torch", "PyTorch, 1 thread"), ("torch_default", "PyTorch, default threads"),
         ("torch_compile", "PyTorch torch.compile, default threads"), ("jax", "JAX jit, default threads"))
# Issue 29's comparison: the captured step against the eager one and the
# best of these.
RIVALS = ("PyTorch, default threads", "PyTorch torch.compile, default threads", "JAX jit, default threads")
BASELINE = "PyTorch, 1 thread"
ONE_THREAD = "gradtape native, server on 1 thread"
# --plans: the captured step on servers with plans off, and unfused.
PLANS_OFF = "gradtape native, captured, plans off"
UNFUSED = "gradtape native, captured, plans not fused"
PLAN_FLAGS = {PLANS_OFF: ["--plan_programs=false"], UNFUSED: ["--fuse_programs=false"]}


def example() -> Any:
    spec = importlib.util.spec_from_file_location("train_transformer", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def gradtape_rate(tt: Any, address: str, native: bool, steps: int, warmup: int, batch: int,
                  captured: bool = False) -> float:
    import gradtape

    cfg = tt.Config()
    text = tt.load_text()
    vocab = tt.Vocab(text)
    tokens = vocab.encode(text)
    rng = np.random.default_rng(0)
    with gradtape.connect(address, native=native) as session:
        data = session.constant(tokens)
        model = tt.Transformer(session, cfg, len(vocab), seed=0)
        opts = tt.make_optimizers(model, 3e-3, 0.01)
        dropout = tt.DropoutStream(1)
        step = tt.make_step(model, data, opts, dropout.key, captured)
        loss = None
        for i in range(warmup + steps):
            if i == warmup:
                float(loss)  # everything before is done
                start = time.perf_counter()
            loss = tt.train_step(model, data, tt.batch_starts(rng, len(tokens), batch, cfg.context), opts, dropout,
                                 step)
        float(loss)
        return steps / (time.perf_counter() - start)


def torch_rate(tt: Any, threads: Optional[int], steps: int, warmup: int, batch: int,
               compiled: bool = False) -> float:
    """PyTorch eager (or with `compiled`, the loss's forward and backward
    through torch.compile's default mode; AdamW's step stays eager, as
    torch.compile's tutorial trains)."""
    import torch
    import torch.nn.functional as F

    if threads is not None:
        torch.set_num_threads(threads)
    cfg = tt.Config()
    text = tt.load_text()
    vocab = tt.Vocab(text)
    tokens = torch.from_numpy(vocab.encode(text).astype(np.int64))
    rng = np.random.default_rng(0)
    params = {name: torch.tensor(value, requires_grad=True) for name, value in initial_params(tt, cfg, len(vocab)).items()}
    decayed = [p for n, p in params.items() if tt.decays(n)]
    rest = [p for n, p in params.items() if not tt.decays(n)]
    opt = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                            lr=3e-3, eps=1e-7)
    t, d, h = cfg.context, cfg.d_model, cfg.n_head
    hd = d // h
    mask = torch.triu(torch.full((t, t), -1e9), diagonal=1)
    p_drop = cfg.dropout

    def ln(x: torch.Tensor, p: str) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        c = x - mean
        return c * torch.rsqrt((c * c).mean(-1, keepdim=True) + cfg.layer_norm_epsilon) * params[p + ".g"] + params[p + ".b"]

    def loss_of(windows: torch.Tensor) -> torch.Tensor:
        b = windows.shape[0]
        x = F.dropout(params["wte"][windows[:, :t]] + params["wpe"], p_drop)
        for i in range(cfg.n_layer):
            p = f"h{i}."
            a = ln(x, p + "ln1").reshape(b * t, d) @ params[p + "attn.w_qkv"] + params[p + "attn.b_qkv"]
            q, k, v = a.reshape(b, t, 3, h, hd).permute(2, 0, 3, 1, 4)
            probs = F.dropout(torch.softmax(q @ k.transpose(-1, -2) * (1.0 / math.sqrt(hd)) + mask, -1), p_drop)
            out = (probs @ v).permute(0, 2, 1, 3).reshape(b * t, d) @ params[p + "attn.w_o"] + params[p + "attn.b_o"]
            x = x + F.dropout(out.reshape(b, t, d), p_drop)
            m = ln(x, p + "ln2").reshape(b * t, d) @ params[p + "mlp.w_in"] + params[p + "mlp.b_in"]
            m = F.gelu(m) @ params[p + "mlp.w_out"] + params[p + "mlp.b_out"]
            x = x + F.dropout(m.reshape(b, t, d), p_drop)
        logits = ln(x, "ln_f").reshape(b * t, d) @ params["head.w"]
        return F.cross_entropy(logits, windows[:, 1:].reshape(b * t))

    loss_fn = torch.compile(loss_of) if compiled else loss_of
    for i in range(warmup + steps):
        if i == warmup:
            start = time.perf_counter()
        idx = torch.from_numpy(tt.window_indices(tt.batch_starts(rng, len(tokens), batch, t), t).astype(np.int64))
        loss = loss_fn(tokens[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    float(loss)
    return steps / (time.perf_counter() - start)


def initial_params(tt: Any, cfg: Any, vocab_size: int) -> Dict[str, np.ndarray]:
    """The PyTorch and JAX models' starting weights (truncated normals,
    ones, zeros: the example's distributions, numpy's draws)."""
    gen = np.random.default_rng(1)
    out: Dict[str, np.ndarray] = {}
    for name, shape in tt.parameter_shapes(cfg, vocab_size).items():
        if len(shape) == 2:
            value = np.clip(gen.normal(0.0, cfg.init_std, shape), -2 * cfg.init_std, 2 * cfg.init_std)
        else:
            value = np.ones(shape) if name.endswith(".g") else np.zeros(shape)
        out[name] = value.astype(np.float32)
    return out


def jax_rate(tt: Any, steps: int, warmup: int, batch: int) -> float:
    """The same model and step in JAX: loss, gradient and optax's AdamW in
    one jax.jit function (donated parameters and optimizer state), dropout
    from jax.random with a key split per step; JAX's default CPU threads."""
    import jax
    import jax.numpy as jnp
    import optax

    cfg = tt.Config()
    text = tt.load_text()
    vocab = tt.Vocab(text)
    tokens = jnp.asarray(vocab.encode(text).astype(np.int32))
    rng = np.random.default_rng(0)
    params = {n: jnp.asarray(v) for n, v in initial_params(tt, cfg, len(vocab)).items()}
    opt = optax.adamw(3e-3, eps=1e-7, weight_decay=0.01, mask={n: tt.decays(n) for n in params})
    opt_state = opt.init(params)
    t, d, h = cfg.context, cfg.d_model, cfg.n_head
    hd = d // h
    mask = jnp.triu(jnp.full((t, t), -1e9, dtype=jnp.float32), k=1)
    p_drop = cfg.dropout

    def dropout(x: Any, key: Any) -> Any:
        keep = jax.random.bernoulli(key, 1.0 - p_drop, x.shape)
        return jnp.where(keep, x / (1.0 - p_drop), 0.0)

    def ln(params: Any, x: Any, p: str) -> Any:
        mean = x.mean(-1, keepdims=True)
        c = x - mean
        return c * jax.lax.rsqrt((c * c).mean(-1, keepdims=True) + cfg.layer_norm_epsilon) * params[p + ".g"] + params[p + ".b"]

    def loss_of(params: Any, windows: Any, key: Any) -> Any:
        b = windows.shape[0]
        keys = jax.random.split(key, 1 + 3 * cfg.n_layer)
        x = dropout(params["wte"][windows[:, :t]] + params["wpe"], keys[0])
        for i in range(cfg.n_layer):
            p = f"h{i}."
            a = ln(params, x, p + "ln1").reshape(b * t, d) @ params[p + "attn.w_qkv"] + params[p + "attn.b_qkv"]
            q, k, v = a.reshape(b, t, 3, h, hd).transpose(2, 0, 3, 1, 4)
            probs = dropout(jax.nn.softmax(q @ k.swapaxes(-1, -2) * (1.0 / math.sqrt(hd)) + mask, -1), keys[1 + 3 * i])
            out = (probs @ v).transpose(0, 2, 1, 3).reshape(b * t, d) @ params[p + "attn.w_o"] + params[p + "attn.b_o"]
            x = x + dropout(out.reshape(b, t, d), keys[2 + 3 * i])
            m = ln(params, x, p + "ln2").reshape(b * t, d) @ params[p + "mlp.w_in"] + params[p + "mlp.b_in"]
            m = jax.nn.gelu(m, approximate=False) @ params[p + "mlp.w_out"] + params[p + "mlp.b_out"]
            x = x + dropout(m.reshape(b, t, d), keys[3 + 3 * i])
        logits = ln(params, x, "ln_f").reshape(b * t, d) @ params["head.w"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, windows[:, 1:].reshape(b * t)).mean()

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def step(params: Any, opt_state: Any, windows: Any, key: Any) -> Any:
        loss, grads = jax.value_and_grad(loss_of)(params, windows, key)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    key = jax.random.PRNGKey(1)
    loss = None
    for i in range(warmup + steps):
        if i == warmup:
            jax.block_until_ready(loss)
            start = time.perf_counter()
        idx = tt.window_indices(tt.batch_starts(rng, int(tokens.shape[0]), batch, t), t)
        key, sub = jax.random.split(key)
        params, opt_state, loss = step(params, opt_state, tokens[jnp.asarray(idx)], sub)
    float(loss)
    return steps / (time.perf_counter() - start)


def worker(kind: str, address: str, steps: int, warmup: int, batch: int) -> None:
    tt = example()
    try:
        if kind in ("native", "pure", "captured"):
            rate = gradtape_rate(tt, address, kind != "pure", steps, warmup, batch, captured=kind == "captured")
        elif kind == "jax":
            rate = jax_rate(tt, steps, warmup, batch)
        else:
            rate = torch_rate(tt, 1 if kind == "torch" else None, steps, warmup, batch,
                              compiled=kind == "torch_compile")
    except ImportError as e:
        print(f"@@unavailable {e}", flush=True)
        return
    print(f"@@rate {rate!r}", flush=True)


def run_worker(kind: str, address: str, args: argparse.Namespace) -> Optional[float]:
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", kind, "--address", address,
         "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch)],
        capture_output=True, text=True, timeout=1800)
    for line in out.stdout.splitlines():
        if line.startswith("@@rate "):
            return float(line.split()[1])
        if line.startswith("@@unavailable"):
            return None
    raise RuntimeError(f"{kind} worker failed (exit {out.returncode}):\n{out.stderr[-3000:]}")


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server-bin", default=str(HERE.parent / "build" / "server" / "gradtape-server"))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--scaling", action="store_true", help="also the server on one intra-op thread")
    parser.add_argument("--plans", action="store_true", help="also captured with plans off, and unfused")
    parser.add_argument("--impls", help="comma-separated kinds (default: all)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.address, args.steps, args.warmup, args.batch)
        return
    sys.path.insert(0, str(HERE))
    from python_bench import gradtape_server, load_average

    rates: Dict[str, List[float]] = {}
    missing: Dict[str, str] = {}
    print(f"load average at the start: {load_average()}")
    chosen = set(args.impls.split(",")) if args.impls else {kind for kind, _ in IMPLS}
    impls = [(k, n) for k, n in IMPLS if k in chosen] + ([("native", ONE_THREAD)] if args.scaling else [])
    impls += [("captured", name) for name in PLAN_FLAGS] if args.plans else []
    with contextlib.ExitStack() as stack:
        address = stack.enter_context(gradtape_server(args.server_bin))
        servers = {name: address for _, name in impls}
        if args.scaling:
            servers[ONE_THREAD] = stack.enter_context(
                gradtape_server(args.server_bin, {"GRADTAPE_INTRA_OP_THREADS": "1"}))
        for name, flags in PLAN_FLAGS.items() if args.plans else ():
            servers[name] = stack.enter_context(gradtape_server(args.server_bin, flags=flags))
        for _ in range(args.reps):
            for kind, name in impls:
                if name in missing:
                    continue
                rate = run_worker(kind, servers[name], args)
                if rate is None:
                    missing[name] = "not installed"
                else:
                    rates.setdefault(name, []).append(rate)
    print(f"load average at the end: {load_average()}")
    print(f"\n### transformer_bench: char transformer (2 layers, d_model 64, 4 heads, context 64, "
          f"dropout 0.1, AdamW), batch {args.batch}, {args.steps} timed steps after {args.warmup} warm-up, "
          f"{args.reps} runs per implementation, alternating, medians\n")
    base = statistics.median(rates[BASELINE]) if BASELINE in rates else None
    print("| implementation | steps/s | ratio to PyTorch 1 thread | runs |")
    print("|---|---|---|---|")
    for _, name in impls:
        if name in missing:
            print(f"| {name} | {missing[name]} | | |")
            continue
        med = statistics.median(rates[name])
        ratio = f"{med / base:.2f}x" if base else "-"
        runs = ", ".join(f"{r:.1f}" for r in rates[name])
        print(f"| {name} | {med:.1f} | {ratio} | {runs} |")
    captured, eager = "gradtape native, captured", "gradtape native"
    if captured in rates and eager in rates:
        ratio = statistics.median(rates[captured]) / statistics.median(rates[eager])
        print(f"\ncaptured over eager: {ratio:.2f}x (issue 29 target >= 1.5x: {'met' if ratio >= 1.5 else 'NOT met'})")
        rivals = {n: statistics.median(rates[n]) for n in RIVALS if n in rates}
        if rivals:
            best = max(rivals, key=lambda n: rivals[n])
            ratio = statistics.median(rates[captured]) / rivals[best]
            print(f"captured over the best rival ({best}, {rivals[best]:.1f} steps/s): {ratio:.2f}x "
                  f"(issue 29 target > 1x: {'met' if ratio > 1 else 'NOT met'}; rivals run: {', '.join(rivals)})")
    for name in PLAN_FLAGS if args.plans else ():
        if captured in rates and name in rates:
            ratio = statistics.median(rates[captured]) / statistics.median(rates[name])
            print(f"captured (planned, fused) over {name}: {ratio:.2f}x")
    if args.scaling and ONE_THREAD in rates and "gradtape native" in rates:
        ratio = statistics.median(rates[ONE_THREAD]) / statistics.median(rates["gradtape native"])
        print(f"\nstep time with the server's default intra-op threads over one thread: {ratio:.2f}x "
              f"(issue 26 target <= 0.75x: {'met' if ratio <= 0.75 else 'NOT met'})")


if __name__ == "__main__":
    main()
