"""Clipping: tf.clip_by_value, tf.clip_by_norm, tf.clip_by_global_norm and
tf.linalg.global_norm, composed as TensorFlow composes them."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from gradtape._tensor import Tensor, Variable as _Variable
from gradtape.tf._base import TensorLike, _operands, _run, cast, convert_to_tensor, ones_like, zeros_like
from gradtape.tf.math import add, divide, maximum, minimum, multiply, reduce_sum, sqrt, subtract, where


def clip_by_value(t: TensorLike, clip_value_min: TensorLike, clip_value_max: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.clip_by_value = minimum(maximum(t, min), max)."""
    x, lo, hi = _operands(t, clip_value_min, clip_value_max)
    return _run("Minimum", [_run("Maximum", [x, lo]), hi])


def clip_by_norm(t: TensorLike, clip_norm: TensorLike, axes: Any = None, name: Optional[str] = None) -> Tensor:
    """tf.clip_by_norm, TF's composition: t * clip_norm / max(l2norm(t),
    clip_norm), the norm by a two-select `where` so that its gradient at 0
    is finite; a negative clip_norm counts as 0 (a Python number is
    clamped, a tensor goes through maximum(clip_norm, 0) and is cast to
    t's dtype)."""
    values = convert_to_tensor(t)
    if isinstance(clip_norm, (Tensor, _Variable)) or np.ndim(clip_norm) != 0:
        c_t = convert_to_tensor(clip_norm, dtype_hint=values.dtype)
        c = cast(maximum(c_t, zeros_like(c_t)), values.dtype)
    else:
        c = values.session.constant(np.asarray(max(clip_norm, 0), dtype=values.dtype))
    l2sum = reduce_sum(multiply(values, values), axis=axes, keepdims=True)
    positive = _run("Greater", [l2sum, zeros_like(l2sum)])
    safe = where(positive, l2sum, ones_like(l2sum))
    l2norm = where(positive, sqrt(safe), l2sum)
    intermediate = multiply(values, c)
    if tuple(intermediate.shape) != tuple(values.shape):
        raise ValueError(f"Shapes {tuple(values.shape)} and {tuple(intermediate.shape)} are incompatible")
    return divide(intermediate, maximum(l2norm, c))


def global_norm(t_list: Sequence[Optional[TensorLike]], name: Optional[str] = None) -> Tensor:
    """tf.linalg.global_norm: sqrt(2 * sum(l2_loss(t))) over the non-None
    entries, as TF composes it (L2Loss per tensor, Pack, Sum)."""
    if not isinstance(t_list, (list, tuple)):
        raise TypeError(f"`t_list` should be a sequence of tensors. Received {type(t_list)}.")
    values = [convert_to_tensor(v) for v in t_list if v is not None]
    halves = [_run("L2Loss", [v]) for v in values]
    half = reduce_sum(_run("Pack", halves, {"axis": 0}))
    return sqrt(multiply(half, half.session.scalar(2.0, half.dtype)))


def clip_by_global_norm(
    t_list: Sequence[Optional[TensorLike]], clip_norm: TensorLike, use_norm: Optional[TensorLike] = None, name: Optional[str] = None
) -> Tuple[List[Optional[Tensor]], Tensor]:
    """tf.clip_by_global_norm: (the tensors scaled by clip_norm /
    max(global_norm, clip_norm), None entries kept, and the global norm),
    TF's composition (a non-finite norm makes every entry NaN)."""
    if not isinstance(t_list, (list, tuple)):
        raise TypeError(f"`t_list` should be a sequence of tensors. Received {type(t_list)}.")
    norm = global_norm(t_list) if use_norm is None else convert_to_tensor(use_norm)
    c = convert_to_tensor(clip_norm, dtype_hint=norm.dtype)
    one = norm.session.scalar(1.0, norm.dtype)
    scale_for_finite = multiply(c, minimum(divide(one, norm), divide(one, c)))
    scale = add(scale_for_finite, subtract(norm, norm))
    clipped: List[Optional[Tensor]] = []
    for v in t_list:
        if v is None:
            clipped.append(None)
        else:
            t = convert_to_tensor(v)
            clipped.append(multiply(t, cast(scale, t.dtype)))
    return clipped, norm
