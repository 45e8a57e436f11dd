"""tf.keras.optimizers over gradtape.optimizers (the update runs on the
server; None gradients are skipped, as Keras does): SGD, Adam, AdamW,
RMSprop, Adagrad with Keras 3's update rules and defaults. The learning
rate may be a number, a schedule (tf.keras.optimizers.schedules, called
with ``iterations`` before each update, as Keras) or any callable of no
arguments. Keras' clipnorm / clipvalue / global_clipnorm / use_ema are not
here (clip with tf.clip_by_global_norm before apply_gradients)."""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from gradtape import optimizers as _optimizers
from gradtape._tensor import Tensor
from gradtape.session import Session
from gradtape.tf._base import builtins_bool, cast, convert_to_tensor
from gradtape.tf.keras import schedules
from gradtape.tf.keras.schedules import LearningRateSchedule

__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "schedules", "LearningRateSchedule"]

_UNSUPPORTED = ("weight_decay", "clipnorm", "clipvalue", "global_clipnorm", "use_ema", "loss_scale_factor", "gradient_accumulation_steps")


def _check_kwargs(cls: str, kwargs: Dict[str, Any]) -> None:
    for key in _UNSUPPORTED:
        if kwargs.get(key) not in (None, False):
            raise NotImplementedError(f"tf.keras.optimizers.{cls}: {key} is not in gradtape.tf")


class _KerasLearningRate:
    """A schedule or callable learning rate, evaluated once per
    apply_gradients (Keras: ``learning_rate(iterations)``)."""

    _schedule: Any = None
    _current: Optional[Tensor] = None
    _per_dtype: Dict[str, Tensor]

    def _set_learning_rate(self, learning_rate: Any) -> float:
        self._per_dtype = {}
        if isinstance(learning_rate, LearningRateSchedule) or callable(learning_rate):
            self._schedule = learning_rate
            return 0.0
        if isinstance(learning_rate, Tensor):
            self._schedule = lambda: learning_rate
            return 0.0
        return float(learning_rate)

    def apply_gradients(self, grads_and_vars: Any) -> None:
        self._per_dtype = {}
        if self._schedule is not None:
            if isinstance(self._schedule, LearningRateSchedule):
                it = getattr(self, "_iterations", None)
                step = it.read_value() if it is not None else convert_to_tensor(np.int64(0))
                self._current = convert_to_tensor(self._schedule(step))
            else:
                self._current = convert_to_tensor(self._schedule())
        super().apply_gradients(grads_and_vars)  # type: ignore[misc]
        self._current = None

    def _lr(self, session: Session, dtype: np.dtype) -> Tensor:
        if self._current is None:
            return session.scalar(self.learning_rate, dtype)  # type: ignore[attr-defined]
        key = np.dtype(dtype).str
        if key not in self._per_dtype:
            self._per_dtype[key] = cast(self._current, dtype)
        return self._per_dtype[key]


class SGD(_KerasLearningRate, _optimizers.SGD):
    """tf.keras.optimizers.SGD. With momentum, Keras 3's form (the learning
    rate inside the velocity, which matters when it changes):
    ``m = momentum * m - lr * g``; ``var += m`` (Nesterov: ``var +=
    momentum * m - lr * g``)."""

    def __init__(self, learning_rate: Any = 0.01, momentum: float = 0.0, nesterov: Any = False, name: Optional[str] = None, **kwargs: Any) -> None:
        _check_kwargs("SGD", kwargs)
        super().__init__(learning_rate=self._set_learning_rate(learning_rate), momentum=momentum, nesterov=builtins_bool(nesterov))

    def _apply(self, session: Session, grad: Tensor, var: Any) -> None:
        if not self.momentum:
            super()._apply(session, grad, var)
            return
        d = var.dtype
        lr, mu = self._lr(session, d), session.scalar(self.momentum, d)
        m = self.slot(var, "momentum")
        m_new = m.read_value() * mu - grad * lr
        m.assign(m_new)
        var.assign_add(m_new * mu - grad * lr if self.nesterov else m_new)


class Adam(_KerasLearningRate, _optimizers.Adam):
    """tf.keras.optimizers.Adam."""

    def __init__(
        self,
        learning_rate: Any = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        amsgrad: Any = False,
        name: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        if amsgrad:
            raise NotImplementedError("tf.keras.optimizers.Adam(amsgrad=True) is not in gradtape.tf")
        _check_kwargs("Adam", kwargs)
        super().__init__(learning_rate=self._set_learning_rate(learning_rate), beta_1=beta_1, beta_2=beta_2, epsilon=epsilon)


class AdamW(_KerasLearningRate, _optimizers.AdamW):
    """tf.keras.optimizers.AdamW (Keras 3: var -= var * weight_decay * lr,
    then Adam; exclude_from_weight_decay as Keras)."""

    def __init__(
        self,
        learning_rate: Any = 0.001,
        weight_decay: float = 0.004,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        amsgrad: Any = False,
        name: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        if amsgrad:
            raise NotImplementedError("tf.keras.optimizers.AdamW(amsgrad=True) is not in gradtape.tf")
        _check_kwargs("AdamW", kwargs)
        lr = self._set_learning_rate(learning_rate)
        super().__init__(learning_rate=lr, weight_decay=weight_decay, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon)


class RMSprop(_KerasLearningRate, _optimizers.RMSprop):
    """tf.keras.optimizers.RMSprop (Keras 3's update and defaults)."""

    def __init__(
        self,
        learning_rate: Any = 0.001,
        rho: float = 0.9,
        momentum: float = 0.0,
        epsilon: float = 1e-7,
        centered: Any = False,
        name: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        _check_kwargs("RMSprop", kwargs)
        lr = self._set_learning_rate(learning_rate)
        super().__init__(learning_rate=lr, rho=rho, momentum=momentum, epsilon=epsilon, centered=builtins_bool(centered))


class Adagrad(_KerasLearningRate, _optimizers.Adagrad):
    """tf.keras.optimizers.Adagrad (Keras 3's update and defaults)."""

    def __init__(
        self,
        learning_rate: Any = 0.001,
        initial_accumulator_value: float = 0.1,
        epsilon: float = 1e-7,
        name: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        _check_kwargs("Adagrad", kwargs)
        lr = self._set_learning_rate(learning_rate)
        super().__init__(learning_rate=lr, initial_accumulator_value=initial_accumulator_value, epsilon=epsilon)
