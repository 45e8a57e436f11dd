"""tf.linalg: matmul, einsum, cross, matvec, tensordot, matrix_transpose,
adjoint, trace, diag_part (MatMul / BatchMatMulV2, Einsum, Cross)."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from gradtape._tensor import Tensor
from gradtape.tf._base import TensorLike, _operands, _run, convert_to_tensor, reshape, transpose
from gradtape.tf import math as m
from gradtape.tf.math import matmul
from gradtape.tf._clip import global_norm as global_norm
from gradtape.tf.nn import l2_normalize as l2_normalize

__all__ = ["adjoint", "cross", "diag_part", "einsum", "matmul", "matrix_transpose", "matvec", "norm", "tensordot", "trace", "diag", "eye"]


def _explicit(equation: str) -> str:
    """`equation` with its output: numpy's implicit rule (the ellipsis, then
    the labels that occur once, in alphabetical order) when there is no
    '->'; refuses repeated output labels as TF does (ValueError)."""
    eq = equation.replace(" ", "")
    if "->" in eq:
        lhs, out = eq.split("->")
        labels = out.replace("...", "")
        for c in set(labels):
            if labels.count(c) > 1:
                raise ValueError(f"Output subscripts contain a label appearing more than once: {equation}")
        return eq
    letters = eq.replace("...", "").replace(",", "")
    once = sorted(c for c in set(letters) if letters.count(c) == 1)
    return eq + "->" + ("..." if "..." in eq else "") + "".join(once)


def einsum(equation: str, *inputs: TensorLike, **kwargs: Any) -> Tensor:
    """tf.einsum / tf.linalg.einsum: the server's Einsum (one or two
    operands). More operands are contracted pairwise left to right, each
    intermediate keeping the labels still needed (TF lets opt_einsum pick
    the order: the same values up to rounding)."""
    unknown = set(kwargs) - {"name", "optimize"}
    if unknown:
        raise TypeError(f"Invalid keyword arguments for this function: {', '.join(sorted(unknown))}. Expected: name, optimize")
    eq = _explicit(equation)
    if not inputs:
        raise ValueError("tf.einsum: at least one input is required")
    ts = [convert_to_tensor(t) for t in inputs] if len(inputs) == 1 else _operands(*inputs)
    if len(ts) <= 2:
        return ts[0].session.execute("Einsum", ts, {"equation": eq})[0]
    lhs, out = eq.split("->")
    terms = lhs.split(",")
    if len(terms) != len(ts):
        raise ValueError(f"tf.einsum: the equation has {len(terms)} inputs, {len(ts)} were given")
    cur_t, cur = ts[0], terms[0]
    for i in range(1, len(ts)):
        nxt = terms[i]
        if i == len(ts) - 1:
            sub = out
        else:
            later = "".join(terms[i + 1:]) + out
            keep = [c for c in dict.fromkeys((cur + nxt).replace(".", "")) if c in later]
            sub = ("..." if "..." in cur + nxt else "") + "".join(keep)
        cur_t = cur_t.session.execute("Einsum", [cur_t, ts[i]], {"equation": f"{cur},{nxt}->{sub}"})[0]
        cur = sub
    return cur_t


def cross(a: TensorLike, b: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.linalg.cross: Cross of 3-vectors in the last dim."""
    return _run("Cross", _operands(a, b))


def matrix_transpose(a: TensorLike, name: str = "matrix_transpose", conjugate: Any = False) -> Tensor:
    """tf.linalg.matrix_transpose: the last two dims swapped (conjugated
    with conjugate=True)."""
    t = convert_to_tensor(a)
    n = t.ndim
    if n < 2:
        raise ValueError(f"Argument `a` should be a (batch) matrix with rank >= 2.  Received `a` = {a} with shape: {t.shape}")
    return transpose(t, list(range(n - 2)) + [n - 1, n - 2], conjugate=conjugate)


def adjoint(matrix: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.linalg.adjoint: the conjugate transpose of the last two dims."""
    return matrix_transpose(matrix, conjugate=True)


def matvec(
    a: TensorLike,
    b: TensorLike,
    transpose_a: Any = False,
    adjoint_a: Any = False,
    a_is_sparse: Any = False,
    b_is_sparse: Any = False,
    name: Optional[str] = None,
) -> Tensor:
    """tf.linalg.matvec: matmul(a, b[..., None])[..., 0], as TF composes it."""
    x, y = _operands(a, b)
    col = _run("ExpandDims", [y, y.session.constant(np.asarray(-1, dtype=np.int32))])
    out = matmul(x, col, transpose_a=transpose_a, adjoint_a=adjoint_a)
    return _run("Squeeze", [out], {"squeeze_dims": [-1]})


def trace(x: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.linalg.trace: the sum of each matrix's diagonal (Einsum)."""
    return einsum("...ii->...", x)


def diag_part(input: TensorLike, name: str = "diag_part", k: int = 0, padding_value: Any = 0, align: str = "RIGHT_LEFT") -> Tensor:  # noqa: A002
    """tf.linalg.diag_part of the main diagonal (Einsum); other `k` are not
    here (NotImplementedError)."""
    if k != 0:
        raise NotImplementedError("tf.linalg.diag_part: only k=0 (the main diagonal) is in gradtape.tf")
    return einsum("...ii->...i", input)


def _tensordot_axes(a: Tensor, b: Tensor, axes: Any) -> Tuple[List[int], List[int]]:
    if isinstance(axes, (int, np.integer)) or (np.ndim(axes) == 0):
        n = int(np.asarray(axes))
        if n < 0 or n > a.ndim or n > b.ndim:
            raise ValueError(f"'axes' must be at most the rank of a and b, got {n}")
        return list(range(a.ndim - n, a.ndim)), list(range(n))
    pair = list(axes)
    if len(pair) != 2:
        raise ValueError(f"'axes' must be an integer or have length 2, got {axes!r}")
    xa, xb = (np.asarray(p).reshape(-1).tolist() for p in pair)
    if len(xa) != len(xb):
        raise ValueError(f"Different number of contraction axes 'a' and 'b', {len(xa)} != {len(xb)}.")
    return [int(v) % a.ndim for v in xa], [int(v) % b.ndim for v in xb]


def _flatten(t: Tensor, axes: Sequence[int], contract_first: bool) -> Tuple[Tensor, List[int]]:
    """TF's _tensordot_reshape: `t` transposed so the contracted `axes` are
    last (first with contract_first) and reshaped to a matrix; the free dims."""
    free = [i for i in range(t.ndim) if i not in axes]
    free_dims = [t.shape[i] for i in free]
    n_free = int(np.prod(free_dims)) if free_dims else 1
    n_axes = int(np.prod([t.shape[i] for i in axes])) if axes else 1
    perm = (list(axes) + free) if contract_first else (free + list(axes))
    moved = transpose(t, perm) if perm != list(range(t.ndim)) else t
    return reshape(moved, [n_axes, n_free] if contract_first else [n_free, n_axes]), free_dims


def tensordot(a: TensorLike, b: TensorLike, axes: Any, name: Optional[str] = None) -> Tensor:
    """tf.tensordot, composed as TF: transposes and reshapes to one MatMul."""
    x, y = _operands(a, b)
    ax, bx = _tensordot_axes(x, y, axes)
    ma, free_a = _flatten(x, ax, False)
    mb, free_b = _flatten(y, bx, True)
    return reshape(matmul(ma, mb), free_a + free_b)



def norm(tensor: TensorLike, ord: Any = "euclidean", axis: Any = None, keepdims: Any = None, name: Optional[str] = None) -> Tensor:  # noqa: A002
    """tf.norm / tf.linalg.norm, composed as TF composes it: vector norms
    ('euclidean', 1, 2, np.inf, any p > 0) and matrix norms over two axes
    ('euclidean', 'fro', 1, np.inf); the matrix 2-norm needs an SVD and is
    not here (NotImplementedError)."""
    t = convert_to_tensor(tensor)
    axes = None if axis is None else [int(a) for a in np.asarray(axis).reshape(-1)]
    matrix = axes is not None and len(axes) == 2
    if ord == "fro" and not matrix or ord == "nuc" or (matrix and ord not in ("euclidean", "fro", 1, np.inf)):
        if matrix and ord in (2, 2.0, "nuc"):
            raise NotImplementedError(f"tf.norm: the matrix norm ord={ord!r} needs an SVD (not in gradtape)")
        raise ValueError(f"'ord' must be a supported vector norm, got {ord!r}.")
    if ord in ("euclidean", "fro", 2, 2.0):
        out = m.sqrt(m.reduce_sum(m.multiply(t, m.conj(t)) if t.dtype.kind == "c" else m.multiply(t, t), axis=axes, keepdims=True))
    elif ord == 1:
        out = m.reduce_sum(m.abs(t), axis=None if axes is None else axes[0], keepdims=True)
        out = m.reduce_max(out, axis=axes[-1], keepdims=True) if matrix and axes is not None else out
    elif ord == np.inf:
        out = m.abs(t)
        out = m.reduce_sum(out, axis=axes[1], keepdims=True) if matrix and axes is not None else out
        out = m.reduce_max(out, axis=None if axes is None else axes[0], keepdims=True)
    elif isinstance(ord, (int, float)) and not isinstance(ord, bool) and ord > 0:
        out = m.pow(m.reduce_sum(m.pow(m.abs(t), float(ord)), axis=axes, keepdims=True), 1.0 / float(ord))
    else:
        raise ValueError(f"'ord' must be a supported vector norm, got {ord!r}.")
    if keepdims:
        return out
    return _run("Squeeze", [out], {"squeeze_dims": [] if axes is None else axes})


def eye(num_rows: Any, num_columns: Any = None, batch_shape: Any = None, dtype: Any = np.float32, name: Optional[str] = None) -> Tensor:
    """tf.linalg.eye (tf.eye)."""
    from gradtape.tf._array import eye as _eye

    return _eye(num_rows, num_columns, batch_shape, dtype)


def diag(
    diagonal: TensorLike,
    name: str = "diag",
    k: int = 0,
    num_rows: int = -1,
    num_cols: int = -1,
    padding_value: Any = 0,
    align: str = "RIGHT_LEFT",
) -> Tensor:
    """tf.linalg.diag of the main diagonal: diagonal[..., None] * eye (the
    same values and gradient as TF's MatrixDiagV3); other k, num_rows,
    num_cols or padding_value are not here (NotImplementedError)."""
    if k != 0 or num_rows != -1 or num_cols != -1 or padding_value != 0:
        raise NotImplementedError("tf.linalg.diag: only the main diagonal (k=0, default num_rows / num_cols / padding_value)")
    d = convert_to_tensor(diagonal)
    n = d.shape[-1]
    col = _run("ExpandDims", [d, d.session.constant(np.asarray(-1, dtype=np.int32))])
    return m.multiply(col, d.session.constant(np.eye(n, dtype=d.dtype)))
