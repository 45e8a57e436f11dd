"""tf.keras.optimizers over gradtape.optimizers (the update runs on the
server; None gradients are skipped, as Keras does)."""

from __future__ import annotations

from typing import Any, Optional

from gradtape import optimizers as _optimizers
from gradtape.tf._base import builtins_bool

class SGD(_optimizers.SGD):
    """tf.keras.optimizers.SGD (None gradients are skipped, as Keras does)."""

    def __init__(self, learning_rate: float = 0.01, momentum: float = 0.0, nesterov: Any = False, name: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, momentum=momentum, nesterov=builtins_bool(nesterov))


class Adam(_optimizers.Adam):
    """tf.keras.optimizers.Adam."""

    def __init__(
        self,
        learning_rate: float = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        amsgrad: Any = False,
        name: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        if amsgrad:
            raise NotImplementedError("tf.keras.optimizers.Adam(amsgrad=True) is not in gradtape.tf")
        super().__init__(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon)


