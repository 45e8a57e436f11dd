"""numpy's side of bench/kernel_bench.cc: the same cases, the same output
lines (median of --reps runs), plus which BLAS numpy uses.

Run: .venv/bin/python bench/numpy_bench.py [--reps 5]
"""
import argparse
import time

import numpy as np


def median_seconds(reps, fn, warmup_s):
    """Median of `reps` timed calls, after calling fn for at least warmup_s
    (as kernel_bench's --warmup_s)."""
    warm_until = time.perf_counter() + warmup_s
    fn()
    while time.perf_counter() < warm_until:
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def blas_info():
    try:
        from threadpoolctl import threadpool_info  # optional
        for pool in threadpool_info():
            if pool.get("user_api") == "blas":
                return (f"{pool.get('internal_api')} {pool.get('version')}, "
                        f"kernel {pool.get('architecture')}, "
                        f"{pool.get('num_threads')} threads")
    except ImportError:
        pass
    try:
        config = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]
        return f"{blas.get('name')} {blas.get('version')}"
    except Exception:  # older numpy
        return "unknown"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--elems", type=int, default=1 << 24)
    parser.add_argument("--warmup-s", type=float, default=0.2,
                        help="seconds each case runs before it is timed")
    args = parser.parse_args()
    print(f"# numpy {np.__version__}, BLAS: {blas_info()}")
    for n in (256, 512, 1024):
        a = np.full((n, n), 0.5, dtype=np.float32)
        b = np.full((n, n), 0.25, dtype=np.float32)
        reps = args.reps * 4 if n <= 256 else args.reps
        s = median_seconds(reps, lambda: np.matmul(a, b), args.warmup_s)
        print(f"matmul n={n} {2.0 * n ** 3 / s / 1e9:.2f} GFLOP/s")
    x = np.full(args.elems, 0.5, dtype=np.float32)
    y = np.full(args.elems, 0.25, dtype=np.float32)
    cases = [("AddV2", 2, lambda: np.add(x, y)),
             ("Mul", 2, lambda: np.multiply(x, y)),
             ("Exp", 1, lambda: np.exp(x)),
             ("Log", 1, lambda: np.log(x)),
             # numpy has no sigmoid: its usual spelling, three passes.
             ("Sigmoid", 1, lambda: 1 / (1 + np.exp(-x))),
             ("Relu", 1, lambda: np.maximum(x, 0))]
    for op, arity, fn in cases:
        s = median_seconds(args.reps, fn, args.warmup_s)
        gbs = 4.0 * args.elems * (arity + 1) / s / 1e9
        print(f"elementwise op={op} elems={args.elems} {gbs:.2f} GB/s")


if __name__ == "__main__":
    main()
