"""tf.keras.optimizers.schedules: learning-rate schedules as callables of
the step (a Python number, a Tensor or the optimizer's int64 iterations
Variable), composed from server ops as Keras 3 composes them."""

from __future__ import annotations

import math as _pymath
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from gradtape._tensor import Tensor
from gradtape.tf._base import _run, cast, convert_to_tensor
from gradtape.tf.math import add, cos, divide, maximum, minimum, multiply, subtract, where


def _f(value: Any, dtype: Any = np.float32) -> Tensor:
    return cast(convert_to_tensor(value), dtype)


class LearningRateSchedule:
    """The base class: ``schedule(step)`` gives the learning rate."""

    def __call__(self, step: Any) -> Tensor:
        raise NotImplementedError(f"Learning rate schedule '{type(self).__name__}' must override `__call__(self, step)`.")

    def get_config(self) -> Dict[str, Any]:
        raise NotImplementedError(f"Learning rate schedule '{type(self).__name__}' must override `get_config()`.")

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "LearningRateSchedule":
        return cls(**config)


class ExponentialDecay(LearningRateSchedule):
    """initial_learning_rate * decay_rate ^ (step / decay_steps) (floor of
    the exponent with staircase)."""

    def __init__(self, initial_learning_rate: Any, decay_steps: Any, decay_rate: Any, staircase: bool = False, name: str = "ExponentialDecay") -> None:
        if decay_steps <= 0:
            raise ValueError(f"Argument `decay_steps` must be > 0. Received: decay_steps={decay_steps}")
        self.initial_learning_rate, self.decay_steps, self.decay_rate = initial_learning_rate, decay_steps, decay_rate
        self.staircase, self.name = staircase, name

    def __call__(self, step: Any) -> Tensor:
        lr = convert_to_tensor(self.initial_learning_rate)
        d = lr.dtype
        p = divide(_f(step, d), _f(self.decay_steps, d))
        if self.staircase:
            p = _run("Floor", [p])
        return multiply(lr, _run("Pow", [_f(self.decay_rate, d), p]))

    def get_config(self) -> Dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "decay_rate": self.decay_rate, "staircase": self.staircase, "name": self.name}


class InverseTimeDecay(LearningRateSchedule):
    """initial_learning_rate / (1 + decay_rate * step / decay_steps)."""

    def __init__(self, initial_learning_rate: Any, decay_steps: Any, decay_rate: Any, staircase: bool = False, name: str = "InverseTimeDecay") -> None:
        self.initial_learning_rate, self.decay_steps, self.decay_rate = initial_learning_rate, decay_steps, decay_rate
        self.staircase, self.name = staircase, name

    def __call__(self, step: Any) -> Tensor:
        lr = convert_to_tensor(self.initial_learning_rate)
        d = lr.dtype
        p = divide(_f(step, d), _f(self.decay_steps, d))
        if self.staircase:
            p = _run("Floor", [p])
        return divide(lr, add(_f(1, d), multiply(_f(self.decay_rate, d), p)))

    def get_config(self) -> Dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "decay_rate": self.decay_rate, "staircase": self.staircase, "name": self.name}


class PiecewiseConstantDecay(LearningRateSchedule):
    """values[i] for boundaries[i-1] < step <= boundaries[i]."""

    def __init__(self, boundaries: Sequence[Any], values: Sequence[Any], name: str = "PiecewiseConstant") -> None:
        if len(boundaries) != len(values) - 1:
            raise ValueError(
                "The length of boundaries should be 1 less than the length of values. "
                f"Received: boundaries={boundaries} of length {len(boundaries)}, and values={values} of length {len(values)}."
            )
        self.boundaries, self.values, self.name = list(boundaries), list(values), name

    def __call__(self, step: Any) -> Tensor:
        x = convert_to_tensor(step)
        values = [convert_to_tensor(v) for v in self.values]
        result = values[-1]
        for b, v in zip(reversed(self.boundaries), reversed(values[:-1])):
            result = where(_run("LessEqual", [x, cast(convert_to_tensor(b), x.dtype)]), v, result)
        return result

    def get_config(self) -> Dict[str, Any]:
        return {"boundaries": self.boundaries, "values": self.values, "name": self.name}


class PolynomialDecay(LearningRateSchedule):
    """(initial - end) * (1 - step / decay_steps) ^ power + end (step capped
    at decay_steps; with cycle, decay_steps grows to the next multiple)."""

    def __init__(self, initial_learning_rate: Any, decay_steps: Any, end_learning_rate: Any = 0.0001, power: Any = 1.0, cycle: bool = False, name: str = "PolynomialDecay") -> None:
        self.initial_learning_rate, self.decay_steps = initial_learning_rate, decay_steps
        self.end_learning_rate, self.power, self.cycle, self.name = end_learning_rate, power, cycle, name

    def __call__(self, step: Any) -> Tensor:
        lr = convert_to_tensor(self.initial_learning_rate)
        d = lr.dtype
        end, power = _f(self.end_learning_rate, d), _f(self.power, d)
        s, steps = _f(step, d), _f(self.decay_steps, d)
        if self.cycle:
            ratio = _run("Ceil", [divide(s, steps)])
            ratio = where(_run("Equal", [s, _f(0, d)]), _f(1, d), ratio)
            steps = multiply(steps, ratio)
        else:
            s = minimum(s, steps)
        frac = divide(s, steps)
        return add(multiply(subtract(lr, end), _run("Pow", [subtract(_f(1, d), frac), power])), end)

    def get_config(self) -> Dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "end_learning_rate": self.end_learning_rate, "power": self.power, "cycle": self.cycle, "name": self.name}


class CosineDecay(LearningRateSchedule):
    """Cosine decay from initial_learning_rate (or, after a linear warmup
    of warmup_steps, from warmup_target) to alpha times it over decay_steps."""

    def __init__(self, initial_learning_rate: Any, decay_steps: Any, alpha: Any = 0.0, name: str = "CosineDecay",
                 warmup_target: Optional[Any] = None, warmup_steps: Any = 0) -> None:
        self.initial_learning_rate, self.decay_steps, self.alpha = initial_learning_rate, decay_steps, alpha
        self.name, self.warmup_target, self.warmup_steps = name, warmup_target, warmup_steps

    def _decay(self, step: Tensor, steps: Tensor, lr: Tensor) -> Tensor:
        d = lr.dtype
        fraction = divide(step, steps)
        cosine = multiply(_f(0.5, d), add(_f(1.0, d), cos(multiply(_f(_pymath.pi, d), fraction))))
        decayed = add(multiply(_f(1 - self.alpha, d), cosine), _f(self.alpha, d))
        return multiply(lr, decayed)

    def __call__(self, step: Any) -> Tensor:
        lr = convert_to_tensor(self.initial_learning_rate)
        d = lr.dtype
        steps = _f(self.decay_steps, d)
        s = _f(step, d)
        if self.warmup_target is None:
            return self._decay(minimum(s, steps), steps, lr)
        target = _f(self.warmup_target, d)
        warm = _f(self.warmup_steps, d)
        s = minimum(s, add(steps, warm))
        warmup = add(multiply(subtract(target, lr), divide(s, warm)), lr)
        after = self._decay(minimum(subtract(s, warm), steps), steps, target)
        return where(_run("Less", [s, warm]), warmup, after)

    def get_config(self) -> Dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps, "alpha": self.alpha,
                "name": self.name, "warmup_target": self.warmup_target, "warmup_steps": self.warmup_steps}


__all__: List[str] = [
    "LearningRateSchedule", "ExponentialDecay", "InverseTimeDecay", "PiecewiseConstantDecay", "PolynomialDecay", "CosineDecay",
]
