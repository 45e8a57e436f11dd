"""tf.nn: activations, softmax and losses."""

from __future__ import annotations

from typing import Optional

from gradtape.tf._base import TensorLike, _operands, _run, _unary, convert_to_tensor
from gradtape.tf.math import multiply, negative, reduce_sum, sigmoid, softplus, tanh
from gradtape._tensor import Tensor

# -- nn ----------------------------------------------------------------------


def _last_axis(fn_name: str, t: Tensor, axis: int) -> None:
    if axis not in (-1, t.ndim - 1):
        raise NotImplementedError(f"tf.nn.{fn_name}: gradtape supports the last axis only, got axis={axis}")


def softmax(logits: TensorLike, axis: Optional[int] = None, name: Optional[str] = None) -> Tensor:
    t = convert_to_tensor(logits)
    _last_axis("softmax", t, -1 if axis is None else axis)
    return _run("Softmax", [t])


def log_softmax(logits: TensorLike, axis: Optional[int] = None, name: Optional[str] = None) -> Tensor:
    t = convert_to_tensor(logits)
    _last_axis("log_softmax", t, -1 if axis is None else axis)
    return _run("LogSoftmax", [t])


def sparse_softmax_cross_entropy_with_logits(labels: TensorLike, logits: TensorLike, name: Optional[str] = None) -> Tensor:
    lg = convert_to_tensor(logits)
    lb = convert_to_tensor(labels)
    s = lg.session
    return s.execute("SparseSoftmaxCrossEntropyWithLogits", [lg, lb])[0]


def softmax_cross_entropy_with_logits(labels: TensorLike, logits: TensorLike, axis: int = -1, name: Optional[str] = None) -> Tensor:
    """-sum(labels * log_softmax(logits), axis) (gradients to both, as TF)."""
    lg = convert_to_tensor(logits)
    _last_axis("softmax_cross_entropy_with_logits", lg, axis)
    lb = convert_to_tensor(labels, dtype_hint=lg.dtype)
    return negative(reduce_sum(multiply(lb, log_softmax(lg)), axis=-1))


def l2_loss(t: TensorLike, name: Optional[str] = None) -> Tensor:
    return _run("L2Loss", [convert_to_tensor(t)])


def bias_add(value: TensorLike, bias: TensorLike, data_format: Optional[str] = None, name: Optional[str] = None) -> Tensor:
    v, b = _operands(value, bias)
    return _run("BiasAdd", [v, b], {"data_format": data_format or "NHWC"})


relu = _unary("Relu")
relu6 = _unary("Relu6")
elu = _unary("Elu")
selu = _unary("Selu")
softsign = _unary("Softsign")
