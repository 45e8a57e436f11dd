"""tf.autodiff: ForwardAccumulator (forward mode, gradtape._forward)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gradtape import _forward, _tape
from gradtape._tensor import Tensor
from gradtape.tf._base import _session

class ForwardAccumulator(_forward.ForwardAccumulator):
    """tf.autodiff.ForwardAccumulator; Python tangents take the primal's dtype."""

    def __init__(self, primals: Any, tangents: Any) -> None:
        flat_p, flat_t = _tape._flatten(primals), _tape._flatten(tangents)
        if len(flat_p) == len(flat_t):
            converted = [
                t if isinstance(t, Tensor) or not isinstance(p, Tensor)
                else _session().constant(np.asarray(t, dtype=p.dtype))
                for p, t in zip(flat_p, flat_t)
            ]
            tangents = _tape._pack_like(tangents, converted) if isinstance(tangents, (list, tuple, dict)) else converted[0]
        super().__init__(primals, tangents)

