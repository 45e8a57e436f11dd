"""Clipping: tf.clip_by_value, tf.clip_by_norm (tf.clip_by_global_norm
belongs here too)."""

from __future__ import annotations

from typing import Any, Optional

from gradtape._tensor import Tensor
from gradtape.tf._base import TensorLike, _operands, _run, ones_like, zeros_like
from gradtape.tf.math import divide, maximum, multiply, reduce_sum, sqrt, where


def clip_by_value(t: TensorLike, clip_value_min: TensorLike, clip_value_max: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.clip_by_value = minimum(maximum(t, min), max)."""
    x, lo, hi = _operands(t, clip_value_min, clip_value_max)
    return _run("Minimum", [_run("Maximum", [x, lo]), hi])


def clip_by_norm(t: TensorLike, clip_norm: TensorLike, axes: Any = None, name: Optional[str] = None) -> Tensor:
    """tf.clip_by_norm: t * clip_norm / max(l2norm(t), clip_norm) (TF's
    formula, with a zero norm kept safe)."""
    x, c = _operands(t, clip_norm)
    l2sum = reduce_sum(multiply(x, x), axis=axes, keepdims=True)
    positive = _run("Greater", [l2sum, zeros_like(l2sum)])
    safe = where(positive, l2sum, ones_like(l2sum))
    l2norm = where(positive, sqrt(safe), l2sum)
    return divide(multiply(x, c), maximum(l2norm, c))
