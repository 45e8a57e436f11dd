"""Optimizers whose state lives on the server (TensorFlow semantics).

``apply_gradients(zip(grads, variables))`` buffers the update commands and
returns at once: slots (momentum, Adam's m and v) and Adam's beta powers are
server variables, created at the first update of each variable. The update
uses the server's fused optimizer op when it is registered
(ResourceApplyGradientDescent, ResourceApplyMomentum, ResourceApplyAdam,
TensorFlow's signatures) and otherwise the same formula in elementwise ops
plus AssignVariableOp, still entirely on the server. Updates run with
recording stopped, so an enclosing tape does not record them.
"""

from __future__ import annotations

import re
import warnings
from typing import Dict, Iterable, List, Optional, Set, Tuple, Union

import numpy as np

from gradtape.session import Session, Tensor, Variable

GradsAndVars = Iterable[Tuple[Optional[Tensor], Variable]]


def _variable_name(v: Variable) -> str:
    return v.name if v.name else f"Variable:{v.handle.id}"


class Optimizer:
    """Base class: per-variable slots and the apply loop."""

    #: the fused server op this optimizer uses when it is registered.
    server_op: str = ""

    def __init__(self, learning_rate: float, use_server_op: Optional[bool] = None) -> None:
        """
        Args:
          learning_rate: the step size.
          use_server_op: True: always use the fused server op (fails on the
            server if it is not registered); False: always the elementwise
            formula; None (default): the fused op when the server lists it.
        """
        self.learning_rate = float(learning_rate)
        self.use_server_op = use_server_op
        self._iterations: Optional[Variable] = None
        self._slots: Dict[Tuple[int, str], Variable] = {}

    @property
    def iterations(self) -> Union[Variable, int]:
        """The number of apply_gradients calls: an int64 server Variable
        (Keras' ``optimizer.iterations``), incremented on the server by each
        call (buffered); 0 before the first call, when the optimizer does
        not know its session yet."""
        return self._iterations if self._iterations is not None else 0

    def _lr(self, session: Session, dtype: np.dtype) -> Tensor:
        """The learning rate of this update as a scalar of `dtype` (a
        subclass may compute it from a schedule)."""
        return session.scalar(self.learning_rate, dtype)

    def _fused(self, session: Session) -> bool:
        if self.use_server_op is None:
            return session.has_op(self.server_op)
        return self.use_server_op

    def slot(self, var: Variable, name: str) -> Variable:
        """The slot variable `name` of `var` (zeros of its shape at first use)."""
        key = (var.handle.id, name)
        if key not in self._slots:
            self._slots[key] = var.session.Variable(np.zeros(var.shape, dtype=var.dtype), trainable=False)
        return self._slots[key]

    def apply_gradients(self, grads_and_vars: GradsAndVars) -> None:
        """Buffers one update of every variable whose gradient is not None,
        and of ``iterations``. As Keras: a None gradient is skipped with
        Keras' warning naming its variable; ValueError when no gradient is
        given at all."""
        pairs: List[Tuple[Tensor, Variable]] = []
        missing: List[str] = []
        for g, v in grads_and_vars:
            if g is None:
                missing.append(_variable_name(v))
            else:
                pairs.append((g, v))
        if not pairs:
            raise ValueError("No gradients provided for any variable.")
        if missing:
            warnings.warn(
                "Gradients do not exist for variables "
                f"{missing} when minimizing the loss."
                " If using `model.compile()`, did you forget to provide a "
                "`loss` argument?"
            )
        session = pairs[0][1].session
        with session.stop_recording():
            self._prepare(session, [v for _, v in pairs])
            for g, v in pairs:
                self._apply(session, g, v)
            self._finish(session, [v for _, v in pairs])
            if self._iterations is None:
                self._iterations = session.Variable(np.int64(0), name=None, trainable=False)
            self._iterations.assign_add(session.scalar(1, np.int64))

    def _prepare(self, session: Session, variables: List[Variable]) -> None:
        pass

    def _apply(self, session: Session, grad: Tensor, var: Variable) -> None:
        raise NotImplementedError

    def _finish(self, session: Session, variables: List[Variable]) -> None:
        pass


class SGD(Optimizer):
    """Gradient descent, optionally with (Nesterov) momentum:

    ``accum = momentum * accum + g``; ``var -= lr * accum`` (Nesterov:
    ``var -= lr * (g + momentum * accum)``); without momentum ``var -= lr * g``.
    """

    def __init__(
        self,
        learning_rate: float = 0.01,
        momentum: float = 0.0,
        nesterov: bool = False,
        use_server_op: Optional[bool] = None,
    ) -> None:
        super().__init__(learning_rate, use_server_op)
        self.momentum = float(momentum)
        self.nesterov = nesterov
        self.server_op = "ResourceApplyMomentum" if momentum else "ResourceApplyGradientDescent"

    def _apply(self, session: Session, grad: Tensor, var: Variable) -> None:
        lr = self._lr(session, var.dtype)
        fused = self._fused(session)
        if not self.momentum:
            if fused:
                session.execute("ResourceApplyGradientDescent", [var.handle, lr, grad])
            else:
                var.assign_sub(lr * grad)
            return
        accum = self.slot(var, "momentum")
        mu = session.scalar(self.momentum, var.dtype)
        if fused:
            session.execute(
                "ResourceApplyMomentum",
                [var.handle, accum.handle, lr, grad, mu],
                {"use_nesterov": self.nesterov},
            )
            return
        new_accum = accum.read_value() * mu + grad
        accum.assign(new_accum)
        step = grad + new_accum * mu if self.nesterov else new_accum
        var.assign_sub(lr * step)


class Adam(Optimizer):
    """Adam (Kingma & Ba), in the form of TensorFlow's ResourceApplyAdam:

    ``lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)``,
    ``m = m + (g - m) * (1 - beta1)``, ``v = v + (g^2 - v) * (1 - beta2)``,
    ``var -= lr_t * m / (sqrt(v) + epsilon)``.

    Slots ``m`` and ``v`` per variable and the powers ``beta1^t``,
    ``beta2^t`` (one pair per dtype) are server variables.
    """

    server_op = "ResourceApplyAdam"

    def __init__(
        self,
        learning_rate: float = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        use_server_op: Optional[bool] = None,
    ) -> None:
        super().__init__(learning_rate, use_server_op)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        self._powers: Dict[str, Tuple[Variable, Variable]] = {}
        self._power_values: Dict[str, Tuple[Tensor, Tensor]] = {}

    def _prepare(self, session: Session, variables: List[Variable]) -> None:
        self._power_values = {}
        for var in variables:
            key = var.dtype.str
            if key not in self._powers:
                self._powers[key] = (
                    session.Variable(np.asarray(self.beta_1, dtype=var.dtype), trainable=False),
                    session.Variable(np.asarray(self.beta_2, dtype=var.dtype), trainable=False),
                )
            if key not in self._power_values:
                b1p, b2p = self._powers[key]
                self._power_values[key] = (b1p.read_value(), b2p.read_value())

    def _apply(self, session: Session, grad: Tensor, var: Variable) -> None:
        d = var.dtype
        m, v = self.slot(var, "m"), self.slot(var, "v")
        b1p, b2p = self._power_values[d.str]
        lr = self._lr(session, d)
        b1 = session.scalar(self.beta_1, d)
        b2 = session.scalar(self.beta_2, d)
        eps = session.scalar(self.epsilon, d)
        if self._fused(session):
            session.execute(
                "ResourceApplyAdam", [var.handle, m.handle, v.handle, b1p, b2p, lr, b1, b2, eps, grad]
            )
            return
        ops = session.ops
        one = session.scalar(1.0, d)
        lr_t = lr * ops["Sqrt"](one - b2p) / (one - b1p)
        m_new = m.read_value()
        m_new = m_new + (grad - m_new) * session.scalar(1.0 - self.beta_1, d)
        v_new = v.read_value()
        v_new = v_new + (ops["Square"](grad) - v_new) * session.scalar(1.0 - self.beta_2, d)
        m.assign(m_new)
        v.assign(v_new)
        var.assign_sub(lr_t * m_new / (ops["Sqrt"](v_new) + eps))

    def _finish(self, session: Session, variables: List[Variable]) -> None:
        for key, (b1p_value, b2p_value) in self._power_values.items():
            b1p, b2p = self._powers[key]
            d = b1p.dtype
            b1p.assign(b1p_value * session.scalar(self.beta_1, d))
            b2p.assign(b2p_value * session.scalar(self.beta_2, d))
        self._power_values = {}


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter), with Keras'
    semantics (``keras.optimizers.AdamW``): before each Adam step,
    ``var -= var * weight_decay * lr`` (an AssignSubVariableOp on the
    server), for every variable not excluded with
    :meth:`exclude_from_weight_decay`.
    """

    def __init__(
        self,
        learning_rate: float = 0.001,
        weight_decay: float = 0.004,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        use_server_op: Optional[bool] = None,
    ) -> None:
        super().__init__(learning_rate, beta_1, beta_2, epsilon, use_server_op)
        if weight_decay is None:
            raise ValueError("Argument `weight_decay` must be a float. Received: weight_decay=None")
        self.weight_decay = float(weight_decay)
        self._exclude_ids: Set[int] = set()
        self._exclude_names: List[str] = []

    def exclude_from_weight_decay(
        self, var_list: Optional[Iterable[Variable]] = None, var_names: Optional[Iterable[str]] = None
    ) -> None:
        """As Keras: no weight decay for the variables in `var_list`, nor for
        those whose name contains a match of one of the regexes `var_names`."""
        self._exclude_ids.update(v.handle.id for v in (var_list or []))
        self._exclude_names.extend(var_names or [])

    def _decays(self, var: Variable) -> bool:
        if not self.weight_decay or var.handle.id in self._exclude_ids:
            return False
        name = var.name or ""
        return not any(re.search(pattern, name) for pattern in self._exclude_names)

    def _apply(self, session: Session, grad: Tensor, var: Variable) -> None:
        if self._decays(var):
            d = var.dtype
            wd = session.scalar(self.weight_decay, d)
            lr = self._lr(session, d)
            var.assign_sub(var.read_value() * wd * lr)
        super()._apply(session, grad, var)


class RMSprop(Optimizer):
    """RMSprop with Keras 3's update (``keras.optimizers.RMSprop``), in
    elementwise ops on the server (TF's ResourceApplyRMSProp rounds the
    moving average differently):

    ``ms = rho * ms + (1 - rho) * g^2``; centered: ``mg = rho * mg + (1 -
    rho) * g`` and ``denominator = ms - mg^2 + epsilon``, else ``ms +
    epsilon``; ``increment = lr * g / sqrt(denominator)``; with momentum
    ``mom = momentum * mom + increment``, ``var -= mom``, else ``var -=
    increment``.
    """

    def __init__(
        self,
        learning_rate: float = 0.001,
        rho: float = 0.9,
        momentum: float = 0.0,
        epsilon: float = 1e-7,
        centered: bool = False,
    ) -> None:
        super().__init__(learning_rate, use_server_op=False)
        self.rho = float(rho)
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.centered = bool(centered)

    def _apply(self, session: Session, grad: Tensor, var: Variable) -> None:
        d = var.dtype
        ops = session.ops
        rho, one_minus_rho = session.scalar(self.rho, d), session.scalar(1.0 - self.rho, d)
        eps = session.scalar(self.epsilon, d)
        ms = self.slot(var, "velocity")
        ms_new = ms.read_value() * rho + ops["Square"](grad) * one_minus_rho
        ms.assign(ms_new)
        if self.centered:
            mg = self.slot(var, "average_gradient")
            mg_new = mg.read_value() * rho + grad * one_minus_rho
            mg.assign(mg_new)
            denominator = ms_new - ops["Square"](mg_new) + eps
        else:
            denominator = ms_new + eps
        increment = self._lr(session, d) * grad / ops["Sqrt"](denominator)
        if self.momentum > 0:
            mom = self.slot(var, "momentum")
            mom_new = mom.read_value() * session.scalar(self.momentum, d) + increment
            mom.assign(mom_new)
            var.assign_sub(mom_new)
        else:
            var.assign_sub(increment)


class Adagrad(Optimizer):
    """Adagrad with Keras 3's update (``keras.optimizers.Adagrad``):
    ``accum += g^2``; ``var -= lr * g / sqrt(accum + epsilon)``, the
    accumulator starting at ``initial_accumulator_value`` (elementwise ops:
    TF's ResourceApplyAdagrad has no epsilon)."""

    def __init__(self, learning_rate: float = 0.001, initial_accumulator_value: float = 0.1, epsilon: float = 1e-7) -> None:
        super().__init__(learning_rate, use_server_op=False)
        self.initial_accumulator_value = float(initial_accumulator_value)
        self.epsilon = float(epsilon)

    def _apply(self, session: Session, grad: Tensor, var: Variable) -> None:
        d = var.dtype
        key = (var.handle.id, "accumulator")
        if key not in self._slots:
            start = np.full(var.shape, self.initial_accumulator_value, dtype=d)
            self._slots[key] = session.Variable(start, trainable=False)
        accum = self._slots[key]
        accum_new = accum.read_value() + session.ops["Square"](grad)
        accum.assign(accum_new)
        step = self._lr(session, d) * grad / session.ops["Sqrt"](accum_new + session.scalar(self.epsilon, d))
        var.assign_sub(step)
