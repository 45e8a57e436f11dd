"""tf.keras.initializers: Keras 3's default initialisers with its
distributions and shapes. A seeded initializer gives the same values on
every call (as Keras 3), from tf.random.stateless_* with seed [seed, 0];
the values are not Keras' own (its SeedGenerator draws differently), only
the distribution. Unseeded ones use tf.random's stateful ops."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

import numpy as np

from gradtape import _dtypes
from gradtape._tensor import Tensor
from gradtape.tf import random as _random
from gradtape.tf._base import ones as _ones, zeros as _zeros


def compute_fans(shape: Tuple[int, ...]) -> Tuple[int, int]:
    """Keras' (fan_in, fan_out): a kernel's receptive field times its
    input / output depth."""
    if len(shape) < 1:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = int(np.prod(shape[:-2]))
    return shape[-2] * receptive, shape[-1] * receptive


class Initializer:
    def __call__(self, shape: Any, dtype: Any = None) -> Tensor:
        raise NotImplementedError

    def get_config(self) -> Dict[str, Any]:
        return {}


class Zeros(Initializer):
    def __call__(self, shape: Any, dtype: Any = None) -> Tensor:
        return _zeros(shape, dtype=dtype or np.float32)


class Ones(Initializer):
    def __call__(self, shape: Any, dtype: Any = None) -> Tensor:
        return _ones(shape, dtype=dtype or np.float32)


class RandomUniform(Initializer):
    """Uniform in [minval, maxval) (Keras: -0.05, 0.05)."""

    def __init__(self, minval: float = -0.05, maxval: float = 0.05, seed: Optional[int] = None) -> None:
        self.minval, self.maxval, self.seed = minval, maxval, seed

    def __call__(self, shape: Any, dtype: Any = None) -> Tensor:
        d = _dtypes.as_numpy_dtype(dtype or np.float32)
        if self.seed is not None:
            return _random.stateless_uniform(shape, [int(self.seed), 0], minval=self.minval, maxval=self.maxval, dtype=d)
        return _random.uniform(shape, minval=self.minval, maxval=self.maxval, dtype=d)


class RandomNormal(Initializer):
    def __init__(self, mean: float = 0.0, stddev: float = 0.05, seed: Optional[int] = None) -> None:
        self.mean, self.stddev, self.seed = mean, stddev, seed

    def __call__(self, shape: Any, dtype: Any = None) -> Tensor:
        d = _dtypes.as_numpy_dtype(dtype or np.float32)
        if self.seed is not None:
            return _random.stateless_normal(shape, [int(self.seed), 0], mean=self.mean, stddev=self.stddev, dtype=d)
        return _random.normal(shape, mean=self.mean, stddev=self.stddev, dtype=d)


class GlorotUniform(Initializer):
    """Uniform in [-limit, limit], limit = sqrt(6 / (fan_in + fan_out))."""

    def __init__(self, seed: Optional[int] = None) -> None:
        self.seed = seed

    def __call__(self, shape: Any, dtype: Any = None) -> Tensor:
        fan_in, fan_out = compute_fans(tuple(int(s) for s in shape))
        limit = math.sqrt(3.0 / max(1.0, (fan_in + fan_out) / 2.0))
        return RandomUniform(-limit, limit, self.seed)(shape, dtype)


_BY_NAME = {
    "zeros": Zeros,
    "ones": Ones,
    "uniform": RandomUniform,
    "random_uniform": RandomUniform,
    "normal": RandomNormal,
    "random_normal": RandomNormal,
    "glorot_uniform": GlorotUniform,
}


def get(identifier: Any) -> Initializer:
    """An initializer from its Keras name, an Initializer, or a callable."""
    if isinstance(identifier, Initializer):
        return identifier
    if isinstance(identifier, str):
        cls = _BY_NAME.get(identifier.lower())
        if cls is None:
            raise NotImplementedError(f"tf.keras.initializers: {identifier!r} is not in gradtape.tf ({sorted(_BY_NAME)})")
        return cls()
    if callable(identifier):
        return identifier  # type: ignore[no-any-return]
    raise ValueError(f"Could not interpret initializer identifier: {identifier}")


zeros, ones, glorot_uniform = Zeros, Ones, GlorotUniform
