"""Gradients through the server equal a reference autodiff library (autograd,
from PyPI) on random chains of elementwise, matmul and reduction ops, in
float64."""

import numpy as np
import pytest

import autograd as ag  # noqa: E402
import autograd.numpy as anp  # noqa: E402

NUM_CHAINS = 24
RTOL, ATOL = 1e-9, 1e-11

# (name, gradtape builder, autograd builder); all are smooth on the reals
# (inputs of log/sqrt/reciprocal are kept away from their poles).
UNARY = [
    ("tanh", lambda o, h: o.tanh(h), lambda h: anp.tanh(h)),
    ("sigmoid", lambda o, h: o.sigmoid(h), lambda h: 1 / (1 + anp.exp(-h))),
    ("sin", lambda o, h: o.sin(h), anp.sin),
    ("cos", lambda o, h: o.cos(h), anp.cos),
    ("neg", lambda o, h: -h, lambda h: -h),
    ("square", lambda o, h: o.square(h) * 0.5, lambda h: h * h * 0.5),
    ("exp", lambda o, h: o.exp(o.tanh(h)), lambda h: anp.exp(anp.tanh(h))),
    ("log1p_sq", lambda o, h: o.log1p(o.square(h)), lambda h: anp.log1p(h * h)),
    ("log", lambda o, h: o.log(o.square(h) + 1.0), lambda h: anp.log(h * h + 1.0)),
    ("sqrt", lambda o, h: o.sqrt(o.square(h) + 1.0), lambda h: anp.sqrt(h * h + 1.0)),
    ("softplus", lambda o, h: o.softplus(h), lambda h: anp.logaddexp(0.0, h)),
    ("reciprocal", lambda o, h: o.reciprocal(o.sin(h) + 2.0), lambda h: 1.0 / (anp.sin(h) + 2.0)),
    ("expm1", lambda o, h: o.expm1(o.tanh(h)), lambda h: anp.expm1(anp.tanh(h))),
]

BINARY = [  # with a constant c (same shape or a broadcast row)
    ("add", lambda o, h, c: h + c, lambda h, c: h + c),
    ("sub", lambda o, h, c: c - h, lambda h, c: c - h),
    ("mul", lambda o, h, c: h * c, lambda h, c: h * c),
    ("div", lambda o, h, c: h / (o.square(c) + 1.5), lambda h, c: h / (c * c + 1.5)),
    ("sqdiff", lambda o, h, c: o.squared_difference(h, c) * 0.25, lambda h, c: (h - c) ** 2 * 0.25),
]


def build_chain(rng, n, m):
    """A random program: a list of steps, plus the parameters it uses."""
    steps, params = [], []
    width = m
    for _ in range(rng.integers(5, 11)):
        kind = rng.choice(["unary", "binary", "param", "matmul", "reduce"], p=[0.35, 0.2, 0.15, 0.15, 0.15])
        if kind == "unary":
            steps.append(("unary", int(rng.integers(len(UNARY)))))
        elif kind == "binary":
            shape = (n, width) if rng.random() < 0.5 else (1, width)
            steps.append(("binary", int(rng.integers(len(BINARY))), rng.normal(size=shape)))
        elif kind == "param":  # elementwise with a differentiated parameter
            params.append(rng.normal(size=(n, width)))
            steps.append(("param", len(params) - 1))
        elif kind == "matmul":
            k = int(rng.integers(2, 6))
            transpose_b = bool(rng.random() < 0.5)
            w = rng.normal(size=(k, width) if transpose_b else (width, k)) / np.sqrt(width)
            params.append(w)
            steps.append(("matmul", len(params) - 1, transpose_b))
            width = k
        else:
            op = str(rng.choice(["sum", "mean"]))
            steps.append(("reduce", op, rng.normal(size=(1, width))))
    final = str(rng.choice(["sum", "mean"]))
    return steps, params, final


def run_reference(steps, final, x, params):
    h = x
    for step in steps:
        if step[0] == "unary":
            h = UNARY[step[1]][2](h)
        elif step[0] == "binary":
            h = BINARY[step[1]][2](h, step[2])
        elif step[0] == "param":
            h = h * params[step[1]]
        elif step[0] == "matmul":
            w = params[step[1]]
            h = anp.dot(h, w.T if step[2] else w)
        else:
            r = anp.sum(h, axis=1, keepdims=True) if step[1] == "sum" else anp.mean(h, axis=1, keepdims=True)
            h = r * step[2]  # broadcast back to (n, width)
    return anp.sum(h) if final == "sum" else anp.mean(h)


def run_gradtape(session, steps, final, x, params):
    o = session.ops
    h = x
    for step in steps:
        if step[0] == "unary":
            h = UNARY[step[1]][1](o, h)
        elif step[0] == "binary":
            h = BINARY[step[1]][1](o, h, session.constant(step[2]))
        elif step[0] == "param":
            h = h * params[step[1]]
        elif step[0] == "matmul":
            h = o.mat_mul(h, params[step[1]], transpose_b=step[2])
        else:
            reduce = o.sum if step[1] == "sum" else o.mean
            h = reduce(h, axis=[1], keep_dims=True) * session.constant(step[2])
    reduce = o.sum if final == "sum" else o.mean
    return reduce(h, axis=[0, 1])


@pytest.mark.parametrize("seed", range(NUM_CHAINS))
def test_random_chain_matches_autograd(gt, seed):
    rng = np.random.default_rng(1000 + seed)
    n, m = int(rng.integers(1, 5)), int(rng.integers(1, 6))
    steps, params, final = build_chain(rng, n, m)
    x = rng.normal(size=(n, m))

    def f(args):
        return run_reference(steps, final, args[0], args[1:])

    expected_loss = f([x] + params)
    expected = ag.grad(f)([x] + params)

    xs = gt.constant(x)
    ps = [gt.constant(p) for p in params]
    with gt.GradientTape() as tape:
        tape.watch([xs] + ps)
        loss = run_gradtape(gt, steps, final, xs, ps)
    got = tape.gradient_values(loss, [xs] + ps, unconnected_gradients="zero")
    np.testing.assert_allclose(loss.numpy(), expected_loss, rtol=RTOL, atol=ATOL)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape, (i, steps)
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL, err_msg=f"source {i}, chain {steps}")


def test_jacobian_matches_autograd(gt):
    rng = np.random.default_rng(7)
    x, w = rng.normal(size=(3,)), rng.normal(size=(3, 2))

    def f(x):
        return anp.tanh(anp.dot(x[None, :], w))[0] * anp.sin(x[:2])

    xs, ws = gt.constant(x), gt.constant(w)
    with gt.GradientTape(persistent=True) as tape:
        tape.watch(xs)
        xr = gt.ops.reshape(xs, shape=[1, 3])
        y = gt.ops.reshape(gt.ops.tanh(xr @ ws), shape=[2]) * gt.ops.sin(
            gt.ops.reshape(gt.ops.mat_mul(xr, gt.constant(np.eye(3)[:, :2])), shape=[2])
        )
    jac = tape.jacobian(y, xs)
    np.testing.assert_allclose(jac, ag.jacobian(f)(x), rtol=RTOL, atol=ATOL)
