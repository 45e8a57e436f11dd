#!/usr/bin/env python3
"""Refits the float32 erf of core/ops/vector_math.cc: x P(x^2) / Q(x^2),
P of degree 6 and Q of degree 5 (Q(0) = 1), by iteratively reweighted
linear least squares (relative error) on 3000 Chebyshev points of [0, 4].
Prints the coefficients as float32 and the fit's relative error in exact
arithmetic. Needs numpy and mpmath (e.g. .venv-bench); not part of the
build."""
import mpmath as mp
import numpy as np

mp.mp.dps = 40
N, DP, DQ = 3000, 6, 5
k = np.arange(N)
x = np.sort(np.abs(2.0 + 2.0 * np.cos(np.pi * (k + 0.5) / N))) + 1e-6
y = np.array([float(mp.erf(mp.mpf(v))) for v in x])
t = x * x
q_at = np.ones_like(x)
for _ in range(30):
    # x P(t) - y (Q(t) - 1) = y, weighted by 1 / (y Q_previous(t)).
    a = np.hstack([x[:, None] * t[:, None] ** np.arange(DP + 1),
                   -y[:, None] * t[:, None] ** np.arange(1, DQ + 1)])
    w = 1.0 / (np.abs(y) * np.abs(q_at))
    sol, *_ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
    p, q = sol[:DP + 1], np.concatenate([[1.0], sol[DP + 1:]])
    q_at = np.polyval(q[::-1], t)
rel = np.max(np.abs(x * np.polyval(p[::-1], t) / q_at - y) / y)
print("P (t^0 first):", ", ".join("%.8ef" % np.float32(c) for c in p))
print("Q (t^0 first):", ", ".join("%.8ef" % np.float32(c) for c in q))
print("relative error in exact arithmetic: %.2e" % rel)
