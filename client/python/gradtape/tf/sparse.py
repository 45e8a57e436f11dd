"""tf.sparse: the segment reductions over rows picked by `indices`
(SparseSegmentSum / Mean / SqrtN, and their WithNumSegments forms).
SparseTensor is not in gradtape.tf."""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from gradtape._tensor import Tensor
from gradtape.tf._base import TensorLike, _run, convert_to_tensor

__all__ = ["segment_mean", "segment_sqrt_n", "segment_sum"]


def _sparse_segment(op: str) -> Callable[..., Tensor]:
    def fn(
        data: TensorLike,
        indices: TensorLike,
        segment_ids: TensorLike,
        num_segments: Any = None,
        name: Optional[str] = None,
        sparse_gradient: Any = False,
    ) -> Tensor:
        if sparse_gradient:
            raise NotImplementedError(f"tf.sparse.{fn.__name__}: sparse_gradient=True (gradtape's gradients are dense)")
        d, i, s = convert_to_tensor(data), convert_to_tensor(indices), convert_to_tensor(segment_ids)
        if num_segments is None:
            return _run(op, [d, i, s])
        n = s.session.constant(np.asarray(int(np.asarray(num_segments)), dtype=s.dtype))
        return _run(op + "WithNumSegments", [d, i, s, n])

    fn.__doc__ = f"tf.sparse.segment_*: the server's {op} (with num_segments: {op}WithNumSegments)."
    return fn


segment_sum = _sparse_segment("SparseSegmentSum")
segment_sum.__name__ = "segment_sum"
segment_mean = _sparse_segment("SparseSegmentMean")
segment_mean.__name__ = "segment_mean"
segment_sqrt_n = _sparse_segment("SparseSegmentSqrtN")
segment_sqrt_n.__name__ = "segment_sqrt_n"
