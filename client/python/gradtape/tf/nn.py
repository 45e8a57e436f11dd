"""tf.nn: activations, softmax and losses, convolutions, pooling,
normalization, embedding lookup and dropout, composed from the server's ops
as TensorFlow composes them in Python (gelu, moments, batch_normalization,
l2_normalize, conv1d over conv2d, dropout)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import grpc
import numpy as np

from gradtape import _dtypes, errors as _errors
from gradtape._tensor import Tensor, Variable as _Variable
from gradtape.tf._base import (
    TensorLike,
    _axes,
    _operands,
    _run,
    _session,
    _unary,
    cast,
    convert_to_tensor,
    stop_gradient,
    zeros_like,
)
from gradtape.tf.math import (
    add,
    divide,
    maximum,
    multiply,
    negative,
    reduce_mean,
    reduce_sum,
    sigmoid as sigmoid,
    softplus as softplus,
    square,
    squared_difference,
    subtract,
    tanh as tanh,
    top_k as top_k,
)

# -- activations ----------------------------------------------------------

relu = _unary("Relu")
relu6 = _unary("Relu6")
elu = _unary("Elu")
selu = _unary("Selu")
softsign = _unary("Softsign")


def leaky_relu(features: TensorLike, alpha: float = 0.2, name: Optional[str] = None) -> Tensor:
    """tf.nn.leaky_relu by the server's LeakyRelu (integer input is cast to
    float32 first, as TF does)."""
    t = convert_to_tensor(features)
    if t.dtype.kind in "iu":
        t = cast(t, np.float32)
    return _run("LeakyRelu", [t], {"alpha": float(alpha)})


def _scalar(value: float, like: Tensor) -> Tensor:
    return like.session.scalar(value, like.dtype)


def gelu(features: TensorLike, approximate: Any = False, name: Optional[str] = None) -> Tensor:
    """tf.nn.gelu, composed as TF composes it: 0.5 x (1 + erf(x / sqrt 2)),
    or with approximate=True 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    x = convert_to_tensor(features)
    half, one = _scalar(0.5, x), _scalar(1.0, x)
    if approximate:
        cube = _run("Pow", [x, _scalar(3.0, x)])
        inner = multiply(_scalar(0.7978845608028654, x), add(x, multiply(_scalar(0.044715, x), cube)))
        return multiply(multiply(half, x), add(one, tanh(inner)))
    erf = _run("Erf", [divide(x, _scalar(1.4142135623730951, x))])
    return multiply(multiply(half, x), add(one, erf))


def silu(features: TensorLike, beta: float = 1.0) -> Tensor:
    """tf.nn.silu / tf.nn.swish: features * sigmoid(beta * features) (TF's
    custom gradient is the same derivative, so it is left to the tape)."""
    x = convert_to_tensor(features)
    if beta == 1.0:
        return multiply(x, sigmoid(x))
    return multiply(x, sigmoid(multiply(_scalar(float(beta), x), x)))


swish = silu


def _swap_last(fn: Any, t: Tensor, axis: Optional[int]) -> Tensor:
    """Applies the last-axis op `fn` over `axis`, as TF does: the axis is
    swapped with the last one, and back."""
    n = t.ndim
    a = -1 if axis is None else int(axis)
    if a < -n or a >= max(n, 1):
        raise _errors.InvalidArgumentError(  # TF's kernel raises it
            grpc.StatusCode.INVALID_ARGUMENT, f"`dim` must be in the range [{-n}, {n}) where {n} is the number of dimensions in the input. Received: dim={a}"
        )
    a = a % n if n else 0
    if a == n - 1 or n == 0:
        out: Tensor = fn(t)
        return out
    perm = list(range(n))
    perm[a], perm[n - 1] = n - 1, a
    moved = _run("Transpose", [t], {"perm": perm})
    return _run("Transpose", [fn(moved)], {"perm": perm})


def softmax(logits: TensorLike, axis: Optional[int] = None, name: Optional[str] = None) -> Tensor:
    """tf.nn.softmax over any axis (moved last, as TF does)."""
    return _swap_last(lambda t: _run("Softmax", [t]), convert_to_tensor(logits), axis)


def log_softmax(logits: TensorLike, axis: Optional[int] = None, name: Optional[str] = None) -> Tensor:
    """tf.nn.log_softmax over any axis (moved last, as TF does)."""
    return _swap_last(lambda t: _run("LogSoftmax", [t]), convert_to_tensor(logits), axis)


# -- losses -----------------------------------------------------------------


def sparse_softmax_cross_entropy_with_logits(labels: TensorLike, logits: TensorLike, name: Optional[str] = None) -> Tensor:
    lg = convert_to_tensor(logits)
    lb = convert_to_tensor(labels)
    s = lg.session
    return s.execute("SparseSoftmaxCrossEntropyWithLogits", [lg, lb])[0]


def softmax_cross_entropy_with_logits(labels: TensorLike, logits: TensorLike, axis: int = -1, name: Optional[str] = None) -> Tensor:
    """-sum(labels * log_softmax(logits, axis), axis) (gradients to both, as TF)."""
    lg = convert_to_tensor(logits)
    lb = convert_to_tensor(labels, dtype_hint=lg.dtype)
    return negative(reduce_sum(multiply(lb, log_softmax(lg, axis=axis)), axis=axis))


def sigmoid_cross_entropy_with_logits(labels: TensorLike = None, logits: TensorLike = None, name: Optional[str] = None) -> Tensor:
    """tf.nn.sigmoid_cross_entropy_with_logits, TF's stable composition:
    max(x, 0) - x * z + log1p(exp(-|x|)) (by selects, as TF)."""
    if labels is None or logits is None:
        raise ValueError("Both labels and logits must be provided.")
    x = convert_to_tensor(logits)
    z = convert_to_tensor(labels, dtype_hint=x.dtype)
    if z.dtype != x.dtype:
        raise ValueError(f"logits and labels must have the same dtype, got {x.dtype.name} and {z.dtype.name}")
    zeros = zeros_like(x)
    cond = _run("GreaterEqual", [x, zeros])
    relu_logits = _run("SelectV2", [cond, x, zeros])
    neg_abs = _run("SelectV2", [cond, negative(x), x])
    return add(subtract(relu_logits, multiply(x, z)), _run("Log1p", [_run("Exp", [neg_abs])]))


def weighted_cross_entropy_with_logits(labels: TensorLike, logits: TensorLike, pos_weight: TensorLike, name: Optional[str] = None) -> Tensor:
    """tf.nn.weighted_cross_entropy_with_logits, TF's composition:
    (1 - z) x + (1 + (q - 1) z) (log1p(exp(-|x|)) + relu(-x))."""
    x = convert_to_tensor(logits)
    z = convert_to_tensor(labels, dtype_hint=x.dtype)
    q = convert_to_tensor(pos_weight, dtype_hint=x.dtype)
    one = _scalar(1.0, x)
    log_weight = add(one, multiply(subtract(q, one), z))
    softplus_neg = add(_run("Log1p", [_run("Exp", [negative(_run("Abs", [x]))])]), relu(negative(x)))
    return add(multiply(subtract(one, z), x), multiply(log_weight, softplus_neg))


def l2_loss(t: TensorLike, name: Optional[str] = None) -> Tensor:
    return _run("L2Loss", [convert_to_tensor(t)])


def l2_normalize(x: TensorLike, axis: Any = None, epsilon: float = 1e-12, name: Optional[str] = None, dim: Any = None) -> Tensor:
    """tf.math.l2_normalize: x * rsqrt(max(sum(x^2, axis), epsilon))."""
    t = convert_to_tensor(x)
    if t.dtype.kind == "c":
        raise NotImplementedError("tf.nn.l2_normalize: complex x is not in gradtape.tf")
    axis = dim if axis is None else axis
    square_sum = reduce_sum(square(t), axis=axis, keepdims=True)
    inv = _run("Rsqrt", [maximum(square_sum, _scalar(float(epsilon), t))])
    return multiply(t, inv)


def bias_add(value: TensorLike, bias: TensorLike, data_format: Optional[str] = None, name: Optional[str] = None) -> Tensor:
    v, b = _operands(value, bias)
    fmt = data_format or "NHWC"
    if fmt.startswith("NC"):
        fmt = "NCHW"
    elif fmt.startswith("N") and fmt.endswith("C"):
        fmt = "NHWC"
    return _run("BiasAdd", [v, b], {"data_format": fmt})


# -- convolution --------------------------------------------------------------


def _sequence(value: Any, n: int, channel_index: int, name: str) -> List[int]:
    """TF's _get_sequence: an int or a list of 1, n or n + 2 ints to the
    n + 2 entries of an op's strides / ksize / dilations."""
    if value is None:
        return [1] * (n + 2)
    if isinstance(value, (Tensor, _Variable)):
        value = np.asarray(value)
    values = [int(v) for v in np.asarray(value).reshape(-1)]
    if len(values) == n + 2:
        return values
    if len(values) == 1:
        values = values * n
    elif len(values) != n:
        raise ValueError(f"{name} should be of length 1, {n} or {n + 2}. Received: {name}={value} of length {len(values)}")
    return [1, 1] + values if channel_index == 1 else [1] + values + [1]


def _padding(padding: Any, fn: str, explicit_ok: bool = True) -> Tuple[str, List[int]]:
    """(padding, explicit_paddings) for an op: "SAME", "VALID", or TF's
    explicit list of [before, after] pairs, one per dim."""
    if isinstance(padding, str):
        p = padding.upper()
        if p not in ("SAME", "VALID"):
            raise ValueError(f"{fn}: padding must be 'SAME', 'VALID' or a list of pairs, got {padding!r}")
        return p, []
    if not explicit_ok:
        raise NotImplementedError(f"{fn}: explicit padding lists are not in gradtape.tf for this op (padding={padding!r})")
    flat = [int(v) for pair in padding for v in pair]
    return "EXPLICIT", flat


def _channel_index(data_format: Optional[str], rank: int) -> int:
    return 1 if data_format is not None and data_format.startswith("NC") else rank - 1


def _conv2d_attrs(strides: Any, padding: Any, dilations: Any, data_format: str, fn: str) -> Dict[str, Any]:
    """The attrs of the server's 2-D convolutions (Conv2D,
    DepthwiseConv2dNative, Conv2DBackpropInput) from TF's arguments."""
    ci = _channel_index(data_format, 4)
    p, explicit = _padding(padding, fn)
    return {
        "strides": _sequence(strides, 2, ci, "strides"),
        "padding": p,
        "dilations": _sequence(dilations, 2, ci, "dilations"),
        "data_format": data_format,
        "explicit_paddings": explicit,
    }


def conv2d(
    input: TensorLike,  # noqa: A002
    filters: TensorLike,
    strides: Any,
    padding: Any,
    data_format: str = "NHWC",
    dilations: Any = None,
    name: Optional[str] = None,
) -> Tensor:
    """tf.nn.conv2d by the server's Conv2D (NHWC or NCHW; strides and
    dilations an int or 1, 2 or 4 ints; padding SAME, VALID or explicit)."""
    x, f = _operands(input, filters)
    return _run("Conv2D", [x, f], _conv2d_attrs(strides, padding, dilations, data_format, "tf.nn.conv2d"))


def conv1d(
    input: TensorLike,  # noqa: A002
    filters: TensorLike,
    stride: Any,
    padding: Any,
    data_format: str = "NWC",
    dilations: Any = None,
    name: Optional[str] = None,
) -> Tensor:
    """tf.nn.conv1d as TF builds it: a conv2d over inputs with a height of
    1 (ExpandDims, Conv2D, Squeeze)."""
    x, f = _operands(input, filters)
    if data_format in (None, "NHWC", "NWC"):
        axis, fmt, ci = -3, "NHWC", 2
    elif data_format in ("NCHW", "NCW"):
        axis, fmt, ci = -2, "NCHW", 1
    else:
        raise ValueError(f"`data_format` must be 'NWC' or 'NCW'. Received: data_format={data_format}")
    stride_l = [1] + _sequence(stride, 1, ci, "stride")
    dil_l = [1] + _sequence(dilations, 1, ci, "dilations")
    p, explicit = _padding(padding, "tf.nn.conv1d", explicit_ok=False)
    i32 = np.int32
    x4 = _run("ExpandDims", [x, _session().constant(np.asarray(axis, i32))])
    f4 = _run("ExpandDims", [f, _session().constant(np.asarray(0, i32))])
    attrs = {"strides": stride_l, "padding": p, "dilations": dil_l, "data_format": fmt, "explicit_paddings": explicit}
    y = _run("Conv2D", [x4, f4], attrs)
    return _run("Squeeze", [y], {"squeeze_dims": [axis]})


def conv3d(
    input: TensorLike,  # noqa: A002
    filters: TensorLike,
    strides: Any,
    padding: Any,
    data_format: str = "NDHWC",
    dilations: Any = None,
    name: Optional[str] = None,
) -> Tensor:
    """tf.nn.conv3d by the server's Conv3D (NDHWC or NCDHW; SAME or VALID)."""
    x, f = _operands(input, filters)
    ci = _channel_index(data_format, 5)
    p, _ = _padding(padding, "tf.nn.conv3d", explicit_ok=False)
    attrs = {
        "strides": _sequence(strides, 3, ci, "strides"),
        "padding": p,
        "dilations": _sequence(dilations, 3, ci, "dilations"),
        "data_format": data_format,
    }
    return _run("Conv3D", [x, f], attrs)


def depthwise_conv2d(
    input: TensorLike,  # noqa: A002
    filter: TensorLike,  # noqa: A002
    strides: Any,
    padding: Any,
    data_format: Optional[str] = None,
    dilations: Any = None,
    name: Optional[str] = None,
) -> Tensor:
    """tf.nn.depthwise_conv2d by the server's DepthwiseConv2dNative, whose
    dilations give TF's values (TF goes through space_to_batch)."""
    x, f = _operands(input, filter)
    attrs = _conv2d_attrs(strides, padding, dilations, data_format or "NHWC", "tf.nn.depthwise_conv2d")
    return _run("DepthwiseConv2dNative", [x, f], attrs)


def conv2d_transpose(
    input: TensorLike,  # noqa: A002
    filters: TensorLike,
    output_shape: Any,
    strides: Any,
    padding: Any = "SAME",
    data_format: str = "NHWC",
    dilations: Any = None,
    name: Optional[str] = None,
) -> Tensor:
    """tf.nn.conv2d_transpose: Conv2DBackpropInput (input_sizes =
    output_shape)."""
    x, f = _operands(input, filters)
    attrs = _conv2d_attrs(strides, padding, dilations, data_format, "tf.nn.conv2d_transpose")
    attrs["input_sizes"] = [int(v) for v in np.asarray(output_shape).reshape(-1)]
    return _run("Conv2DBackpropInput", [f, x], attrs)


def dilation2d(
    input: TensorLike,  # noqa: A002
    filters: TensorLike,
    strides: Any,
    padding: str,
    data_format: str,
    dilations: Any,
    name: Optional[str] = None,
) -> Tensor:
    """tf.nn.dilation2d (NHWC only, as TF)."""
    if data_format != "NHWC":
        raise ValueError("`data_format` should be NHWC. Received: data_format=" + str(data_format))
    x, f = _operands(input, filters)
    p, _ = _padding(padding, "tf.nn.dilation2d", explicit_ok=False)
    return _run("Dilation2D", [x, f], {"strides": [int(s) for s in strides], "padding": p, "rates": [int(d) for d in dilations]})


def convolution(
    input: TensorLike,  # noqa: A002
    filters: TensorLike,
    strides: Any = None,
    padding: Any = "VALID",
    data_format: Optional[str] = None,
    dilations: Any = None,
    name: Optional[str] = None,
) -> Tensor:
    """tf.nn.convolution: conv1d, conv2d or conv3d by the input's rank."""
    x = convert_to_tensor(input)
    n = x.ndim - 2
    channels_first = data_format is not None and data_format.startswith("NC")
    if n == 1:
        return conv1d(x, filters, 1 if strides is None else strides, padding, "NCW" if channels_first else "NWC", dilations)
    if n == 2:
        return conv2d(x, filters, 1 if strides is None else strides, padding, "NCHW" if channels_first else "NHWC", dilations)
    if n == 3:
        fmt = "NCDHW" if channels_first else "NDHWC"
        return conv3d(x, filters, _sequence(strides, 3, 1 if channels_first else 4, "strides"), padding, fmt, _sequence(dilations, 3, 1 if channels_first else 4, "dilations"))
    raise ValueError(f"`input.shape.rank` must be 3, 4 or 5. Received: input.shape={tuple(x.shape)} of rank {x.ndim}")


def separable_conv2d(
    input: TensorLike,  # noqa: A002
    depthwise_filter: TensorLike,
    pointwise_filter: TensorLike,
    strides: Any,
    padding: Any,
    data_format: Optional[str] = None,
    dilations: Any = None,
    name: Optional[str] = None,
) -> Tensor:
    """tf.nn.separable_conv2d as TF composes it: depthwise_conv2d, then a
    1x1 conv2d (stride 1, VALID)."""
    depthwise = depthwise_conv2d(input, depthwise_filter, strides, padding, data_format, dilations)
    return conv2d(depthwise, pointwise_filter, [1, 1, 1, 1], "VALID", data_format or "NHWC")


# -- pooling ----------------------------------------------------------------


def _pool(op: str, fn: str, input: TensorLike, ksize: Any, strides: Any, padding: Any, data_format: Optional[str], n: int) -> Tensor:  # noqa: A002
    x = convert_to_tensor(input)
    fmt = data_format or ("NHWC" if n == 2 else "NDHWC")
    ci = _channel_index(fmt, n + 2)
    p, explicit = _padding(padding, fn, explicit_ok=op == "MaxPool")
    attrs: Dict[str, Any] = {
        "ksize": _sequence(ksize, n, ci, "ksize"),
        "strides": _sequence(strides, n, ci, "strides"),
        "padding": p,
        "data_format": fmt,
    }
    if explicit:
        attrs["explicit_paddings"] = explicit
    return _run(op, [x], attrs)


def max_pool2d(input: TensorLike, ksize: Any, strides: Any, padding: Any, data_format: str = "NHWC", name: Optional[str] = None) -> Tensor:  # noqa: A002
    """tf.nn.max_pool2d by the server's MaxPool (SAME, VALID or explicit)."""
    return _pool("MaxPool", "tf.nn.max_pool2d", input, ksize, strides, padding, data_format, 2)


def avg_pool2d(input: TensorLike, ksize: Any, strides: Any, padding: Any, data_format: str = "NHWC", name: Optional[str] = None) -> Tensor:  # noqa: A002
    """tf.nn.avg_pool2d by the server's AvgPool (SAME averages valid cells)."""
    return _pool("AvgPool", "tf.nn.avg_pool2d", input, ksize, strides, padding, data_format, 2)


def max_pool3d(input: TensorLike, ksize: Any, strides: Any, padding: Any, data_format: str = "NDHWC", name: Optional[str] = None) -> Tensor:  # noqa: A002
    return _pool("MaxPool3D", "tf.nn.max_pool3d", input, ksize, strides, padding, data_format, 3)


def avg_pool3d(input: TensorLike, ksize: Any, strides: Any, padding: Any, data_format: str = "NDHWC", name: Optional[str] = None) -> Tensor:  # noqa: A002
    return _pool("AvgPool3D", "tf.nn.avg_pool3d", input, ksize, strides, padding, data_format, 3)


def _pool1d(op: str, fn: str, input: TensorLike, ksize: Any, strides: Any, padding: Any, data_format: str) -> Tensor:  # noqa: A002
    """TF's 1-D pooling: ExpandDims to a height of 1, 2-D pooling, Squeeze."""
    x = convert_to_tensor(input)
    if data_format in ("NWC", "NHWC", None):
        axis, fmt, ci = 1, "NHWC", 2
    elif data_format in ("NCW", "NCHW"):
        axis, fmt, ci = 2, "NCHW", 1
    else:
        raise ValueError(f"`data_format` must be 'NWC' or 'NCW'. Received: data_format={data_format}")
    k = [1] + _sequence(ksize, 1, ci, "ksize")
    s = [1] + _sequence(strides, 1, ci, "strides")
    x4 = _run("ExpandDims", [x, _session().constant(np.asarray(axis, np.int32))])
    y = _pool(op, fn, x4, k, s, padding, fmt, 2)
    return _run("Squeeze", [y], {"squeeze_dims": [axis]})


def max_pool1d(input: TensorLike, ksize: Any, strides: Any, padding: Any, data_format: str = "NWC", name: Optional[str] = None) -> Tensor:  # noqa: A002
    return _pool1d("MaxPool", "tf.nn.max_pool1d", input, ksize, strides, padding, data_format)


def avg_pool1d(input: TensorLike, ksize: Any, strides: Any, padding: Any, data_format: str = "NWC", name: Optional[str] = None) -> Tensor:  # noqa: A002
    return _pool1d("AvgPool", "tf.nn.avg_pool1d", input, ksize, strides, padding, data_format)


def _pool_nd(kind: str, input: TensorLike, ksize: Any, strides: Any, padding: Any, data_format: Optional[str]) -> Tensor:  # noqa: A002
    x = convert_to_tensor(input)
    n = x.ndim - 2
    fns = {1: (max_pool1d, avg_pool1d), 2: (max_pool2d, avg_pool2d), 3: (max_pool3d, avg_pool3d)}
    if n not in fns:
        raise ValueError(f"`input.shape.rank` must be 3, 4 or 5. Received: input.shape={tuple(x.shape)} of rank {x.ndim}")
    fn = fns[n][0 if kind == "max" else 1]
    fmt = data_format or {1: "NWC", 2: "NHWC", 3: "NDHWC"}[n]
    out: Tensor = fn(x, ksize, strides, padding, fmt)
    return out


def max_pool(input: TensorLike, ksize: Any, strides: Any, padding: Any, data_format: Optional[str] = None, name: Optional[str] = None) -> Tensor:  # noqa: A002
    """tf.nn.max_pool: 1-, 2- or 3-D by the input's rank."""
    return _pool_nd("max", input, ksize, strides, padding, data_format)


def avg_pool(input: TensorLike, ksize: Any, strides: Any, padding: Any, data_format: Optional[str] = None, name: Optional[str] = None) -> Tensor:  # noqa: A002
    """tf.nn.avg_pool: 1-, 2- or 3-D by the input's rank."""
    return _pool_nd("avg", input, ksize, strides, padding, data_format)


def max_pool_with_argmax(
    input: TensorLike,  # noqa: A002
    ksize: Any,
    strides: Any,
    padding: str,
    data_format: str = "NHWC",
    output_dtype: Any = np.int64,
    include_batch_in_index: Any = False,
    name: Optional[str] = None,
) -> Tuple[Tensor, Tensor]:
    """tf.nn.max_pool_with_argmax: (output, argmax) (NHWC only, as TF)."""
    if data_format != "NHWC":
        raise ValueError("`data_format` values other  than 'NHWC' are not supported. Received: data_format=" + str(data_format))
    x = convert_to_tensor(input)
    p, _ = _padding(padding, "tf.nn.max_pool_with_argmax", explicit_ok=False)
    attrs = {
        "ksize": _sequence(ksize, 2, 3, "ksize"),
        "strides": _sequence(strides, 2, 3, "strides"),
        "padding": p,
        "Targmax": _dtypes.as_numpy_dtype(output_dtype),
        "include_batch_in_index": bool(include_batch_in_index),
    }
    out, argmax = x.session.execute("MaxPoolWithArgmax", [x], attrs)
    return out, argmax


# -- normalization ----------------------------------------------------------


def moments(x: TensorLike, axes: Any, shift: Any = None, keepdims: Any = False, name: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    """tf.nn.moments as TF composes it: mean = reduce_mean(x, axes);
    variance = reduce_mean(squared_difference(x, stop_gradient(mean)))."""
    y = convert_to_tensor(x)
    mean = reduce_mean(y, axis=axes, keepdims=True)
    variance = reduce_mean(squared_difference(y, stop_gradient(mean)), axis=axes, keepdims=True)
    if not keepdims:
        dims = _axes(y, axes)
        mean = _run("Squeeze", [mean], {"squeeze_dims": dims})
        variance = _run("Squeeze", [variance], {"squeeze_dims": dims})
    return mean, variance


def batch_normalization(
    x: TensorLike,
    mean: TensorLike,
    variance: TensorLike,
    offset: Optional[TensorLike],
    scale: Optional[TensorLike],
    variance_epsilon: float,
    name: Optional[str] = None,
) -> Tensor:
    """tf.nn.batch_normalization as TF composes it:
    inv = rsqrt(variance + eps) * scale; x * inv + (offset - mean * inv)."""
    t = convert_to_tensor(x)
    m, v = convert_to_tensor(mean, dtype_hint=t.dtype), convert_to_tensor(variance, dtype_hint=t.dtype)
    inv = _run("Rsqrt", [add(v, _scalar(float(variance_epsilon), v))])
    if scale is not None:
        inv = multiply(inv, convert_to_tensor(scale, dtype_hint=t.dtype))
    if offset is not None:
        shift = subtract(convert_to_tensor(offset, dtype_hint=t.dtype), multiply(m, inv))
    else:
        shift = multiply(negative(m), inv)
    return add(multiply(t, cast(inv, t.dtype)), cast(shift, t.dtype))


def fused_batch_norm(
    x: TensorLike,
    scale: TensorLike,
    offset: TensorLike,
    mean: Optional[TensorLike] = None,
    variance: Optional[TensorLike] = None,
    epsilon: float = 0.001,
    data_format: str = "NHWC",
    is_training: Any = True,
    name: Optional[str] = None,
    exponential_avg_factor: float = 1.0,
) -> Tuple[Tensor, Tensor, Tensor]:
    """tf.nn.fused_batch_norm by the server's FusedBatchNormV3: (y,
    running_mean, running_var); epsilon at least 1.001e-5, as TF."""
    if (not is_training or exponential_avg_factor != 1.0) and (mean is None or variance is None):
        raise ValueError(
            "Both `mean` and `variance` must be a 1D tensor when is_training is False or exponential_avg_factor != 1.0. "
            f"Received: mean {mean!r} and variance {variance!r}"
        )
    t = convert_to_tensor(x)
    sc, off = convert_to_tensor(scale), convert_to_tensor(offset)
    empty = t.session.constant(np.zeros([0], dtype=sc.dtype))
    m = empty if mean is None else convert_to_tensor(mean)
    v = empty if variance is None else convert_to_tensor(variance)
    eps = float(epsilon) if float(epsilon) > 1.001e-5 else 1.001e-5
    attrs = {
        "epsilon": eps,
        "exponential_avg_factor": float(exponential_avg_factor),
        "data_format": data_format,
        "is_training": bool(is_training),
    }
    outs = t.session.execute("FusedBatchNormV3", [t, sc, off, m, v], attrs)
    return outs[0], outs[1], outs[2]


def local_response_normalization(
    input: TensorLike,  # noqa: A002
    depth_radius: int = 5,
    bias: float = 1.0,
    alpha: float = 1.0,
    beta: float = 0.5,
    name: Optional[str] = None,
) -> Tensor:
    """tf.nn.local_response_normalization (tf.nn.lrn) by the server's LRN."""
    attrs = {"depth_radius": int(depth_radius), "bias": float(bias), "alpha": float(alpha), "beta": float(beta)}
    return _run("LRN", [convert_to_tensor(input)], attrs)


lrn = local_response_normalization


# -- embedding, dropout -------------------------------------------------------


def embedding_lookup(params: Any, ids: TensorLike, max_norm: Any = None, name: Optional[str] = None) -> Tensor:
    """tf.nn.embedding_lookup: a Variable through ResourceGather (its
    gradient is dense here; TF gives IndexedSlices, whose dense value is
    the same), a tensor through GatherV2. One shard only."""
    if isinstance(params, (list, tuple)):
        if len(params) != 1:
            raise NotImplementedError("tf.nn.embedding_lookup: sharded params (a list of several) are not in gradtape.tf")
        params = params[0]
    if max_norm is not None:
        raise NotImplementedError("tf.nn.embedding_lookup: max_norm is not in gradtape.tf")
    idx = convert_to_tensor(ids)
    if isinstance(params, _Variable):
        tapes = params.session._tapes
        if tapes.active:
            tapes.on_read_variable(params)  # watched as a read is (TF does the same)
        out = params.session.execute("ResourceGather", [params.handle, idx], {"dtype": params.dtype})[0]
        if idx._shape is not None:  # known without a round trip: ids' shape + the rows'
            out._shape = tuple(idx._shape) + tuple(params.shape[1:])
        return out
    return _run("GatherV2", [convert_to_tensor(params), idx], {"axis": 0})


def _dropout(
    x: TensorLike, rate: Any, noise_shape: Any, sampler: Any, fn: str
) -> Tensor:
    """TF's _dropout: x * (1 / (1 - rate)) where uniform >= rate, else 0."""
    if isinstance(rate, (int, float)) and not isinstance(rate, bool) and (rate < 0 or rate >= 1):
        raise ValueError(f"`rate` must be a scalar tensor or a float in the range [0, 1). Received: rate={rate}")
    t = convert_to_tensor(x)
    if t.dtype.kind != "f":
        raise ValueError(f"`x.dtype` must be a floating point tensor as `x` will be scaled. Received: x_dtype={t.dtype.name}")
    if isinstance(rate, (int, float)) and rate == 0:
        return t
    if isinstance(rate, (Tensor, _Variable)):
        r = cast(convert_to_tensor(rate), t.dtype)
        ret = _run("RealDiv", [t, subtract(_scalar(1.0, t), r)])
    else:
        r = t.session.constant(np.asarray(rate, dtype=t.dtype))
        ret = multiply(t, t.session.constant(np.asarray(1 / (1 - float(rate)), dtype=t.dtype)))
    shape = list(t.shape) if noise_shape is None else [
        int(t.shape[i]) if d is None else int(d) for i, d in enumerate(np.asarray(noise_shape, dtype=object).reshape(-1))
    ]
    keep = _run("GreaterEqual", [sampler(shape, t.dtype), r])
    return _run("SelectV2", [keep, ret, _scalar(0.0, t)])


def dropout(x: TensorLike, rate: Any, noise_shape: Any = None, seed: Optional[int] = None, name: Optional[str] = None) -> Tensor:
    """tf.nn.dropout, TF's composition over gradtape.tf.random.uniform
    (seeded as TF: tf.random.set_seed + seed give the same mask on every
    run of the program; the mask's values are not TF's)."""
    from gradtape.tf import random as _random

    return _dropout(x, rate, noise_shape, lambda shape, dtype: _random.uniform(shape, dtype=dtype, seed=seed), "dropout")


def stateless_dropout(x: TensorLike, rate: Any, seed: Any, rng_alg: Any = None, noise_shape: Any = None, name: Optional[str] = None) -> Tensor:
    """tf.nn.experimental.stateless_dropout: TF's values bit for bit (its
    mask is stateless_random_uniform, which the server matches)."""
    from gradtape.tf import random as _random

    return _dropout(
        x, rate, noise_shape, lambda shape, dtype: _random.stateless_uniform(shape, seed, dtype=dtype, alg=rng_alg or "auto_select"), "stateless_dropout"
    )


class _Experimental:
    stateless_dropout = staticmethod(stateless_dropout)


experimental = _Experimental()
