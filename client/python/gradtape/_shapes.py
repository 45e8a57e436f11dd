"""Output shapes the client knows without asking the server (internal).

Each rule maps the input shapes (None where unknown) and the op's attrs to
the output shapes, or None where it cannot tell (an unknown input shape, an
attr it does not understand: the server then reports any error, and
``Tensor.shape`` fetches). Where known shapes alone prove that the server
will refuse the inputs (shapes that do not broadcast, matmul dimensions
that do not match, a reshape to another number of elements), the rule
raises ``Refusal``: the session raises InvalidArgumentError at the call,
as TensorFlow eager does, and sends nothing. A rule raises nothing else.
Rules are looked up once per op (``rule_for``), when the session builds its
op table from ListOps.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

Shape = Tuple[int, ...]
MaybeShape = Optional[Shape]
ShapeRule = Callable[[Sequence[MaybeShape], Mapping[str, Any]], Optional[List[MaybeShape]]]


class Refusal(Exception):
    """Inputs the server is certain to refuse, seen from their known shapes
    (the message says why)."""


def broadcast(a: MaybeShape, b: MaybeShape) -> MaybeShape:
    """numpy / TensorFlow broadcasting of two shapes; None if unknown or
    incompatible."""
    if a is None or b is None:
        return None
    if a == b:
        return a
    n = max(len(a), len(b))
    pa = (1,) * (n - len(a)) + a
    pb = (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(out)


def broadcast_or_refuse(a: MaybeShape, b: MaybeShape) -> MaybeShape:
    """broadcast(a, b); Refusal if both are known and do not broadcast."""
    out = broadcast(a, b)
    if out is None and a is not None and b is not None:
        raise Refusal(f"shapes {list(a)} and {list(b)} do not broadcast")
    return out


def _same0(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    return [shapes[0]] if shapes else None


def _elementwise(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    if not shapes:
        return None
    out = shapes[0]
    for s in shapes[1:]:
        out = broadcast_or_refuse(out, s) if out is not None else None
    return [out]


def _select(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    return [broadcast(shapes[1], shapes[2])] if len(shapes) == 3 else None


def _matmul(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    a, b = shapes[0], shapes[1]
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return None
    ka = a[0] if attrs.get("transpose_a") else a[1]
    kb = b[1] if attrs.get("transpose_b") else b[0]
    if ka != kb:
        raise Refusal(f"matrices {list(a)} and {list(b)} (transpose_a={bool(attrs.get('transpose_a'))}, transpose_b={bool(attrs.get('transpose_b'))}): inner dimensions {ka} and {kb} differ")
    m = a[1] if attrs.get("transpose_a") else a[0]
    n = b[0] if attrs.get("transpose_b") else b[1]
    return [(m, n)]


def _batch_matmul(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    a, b = shapes[0], shapes[1]
    if a is None or b is None or len(a) < 2 or len(b) < 2:
        return None
    batch = broadcast(a[:-2], b[:-2])
    if batch is None:
        return None
    m = a[-1] if attrs.get("adj_x") else a[-2]
    n = b[-2] if attrs.get("adj_y") else b[-1]
    return [batch + (m, n)]


def _reduce(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    s = shapes[0]
    if s is None:
        return None
    axis = attrs.get("axis") or []
    keep = bool(attrs.get("keep_dims", False))
    rank = len(s)
    try:
        axes = {int(a) + rank if int(a) < 0 else int(a) for a in axis} if axis else set(range(rank))
    except (TypeError, ValueError):
        return None
    if any(a < 0 or a >= rank for a in axes):
        return None
    if keep:
        return [tuple(1 if i in axes else d for i, d in enumerate(s))]
    return [tuple(d for i, d in enumerate(s) if i not in axes)]


def _scalar(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    return [()]


def _reshape(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    try:
        target = [int(d) for d in attrs["shape"]]
    except (KeyError, TypeError, ValueError):
        return None
    unknown = [i for i, d in enumerate(target) if d == -1]
    if len(unknown) > 1 or any(d < -1 for d in target):
        return None
    s = shapes[0]
    if s is None:
        return None if unknown else [tuple(target)]
    size = 1
    for d in s:
        size *= d
    rest = 1
    for d in target:
        if d != -1:
            rest *= d
    if unknown:
        if rest == 0:
            return None  # the server decides (TensorFlow: only a 0-element input may)
        if size % rest:
            raise Refusal(f"cannot reshape {list(s)} ({size} elements) to {target}")
        target[unknown[0]] = size // rest
    elif size != rest:
        raise Refusal(f"cannot reshape {list(s)} ({size} elements) to {target} ({rest} elements)")
    return [tuple(target)]


def _broadcast_to(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    try:
        return [tuple(int(d) for d in attrs["shape"])]
    except (KeyError, TypeError, ValueError):
        return None


def _transpose(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    s = shapes[0]
    if s is None:
        return None
    perm = attrs.get("perm")
    try:
        p = [int(i) for i in perm] if perm else list(range(len(s)))[::-1]
        if sorted(p) != list(range(len(s))):
            return None
        return [tuple(s[i] for i in p)]
    except (TypeError, ValueError):
        return None


def _shape(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    s = shapes[0]
    return [None if s is None else (len(s),)]


def _gather(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    p, i = shapes[0], shapes[1]
    if p is None or i is None or attrs.get("batch_dims", 0):
        return None
    axis = int(attrs.get("axis", 0))
    if axis < 0:
        axis += len(p)
    if not 0 <= axis < len(p):
        return None
    return [p[:axis] + i + p[axis + 1:]]


def _pack(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    if not shapes or any(x is None or x != shapes[0] for x in shapes):
        return None
    s = shapes[0]
    assert s is not None
    axis = int(attrs.get("axis", 0))
    if axis < 0:
        axis += len(s) + 1
    if not 0 <= axis <= len(s):
        return None
    return [s[:axis] + (len(shapes),) + s[axis:]]


def _one_hot(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    s = shapes[0]
    if s is None or "depth" not in attrs or attrs.get("axis", -1) != -1:
        return None
    return [s + (int(attrs["depth"]),)]


def _sparse_xent(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    s = shapes[0]
    if s is None or len(s) != 2:
        return None
    return [(s[0],), s]


def _bias_add_grad(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    s = shapes[0]
    if s is None or not s:
        return None
    fmt = attrs.get("data_format", "NHWC")
    if fmt not in ("NHWC", "NCHW", b"NHWC", b"NCHW"):
        return None
    return [(s[1],) if fmt in ("NCHW", b"NCHW") and len(s) > 2 else (s[-1],)]


def _spatial(data_format: str, rank: int) -> Optional[List[int]]:
    """The spatial axes of a conv / pool input in `data_format` (channels
    last or, with a "C" second, first)."""
    if len(data_format) != rank or data_format[0] != "N":
        return None
    return list(range(1, rank - 1)) if data_format[-1] == "C" else list(range(2, rank))


def _window_out(size: int, k: int, stride: int, dilation: int, padding: str, lo: int = 0, hi: int = 0) -> Optional[int]:
    """One spatial output size of a window op (TensorFlow's rule); None for
    what the server refuses or what this does not know."""
    span = (k - 1) * dilation + 1
    if stride < 1 or k < 1 or dilation < 1:
        return None
    if padding == "SAME":
        return -(-size // stride)
    if padding == "EXPLICIT":
        size += lo + hi
    elif padding != "VALID":
        return None
    return (size - span) // stride + 1 if size >= span else None


def _window_shape(x: Shape, window: Sequence[int], channels: Optional[int], attrs: Mapping[str, Any], default_format: str) -> Optional[List[MaybeShape]]:
    """Output shape of a conv / pool over input `x`: `window` is the kernel's
    spatial sizes, `channels` the output channels (None: the input's)."""
    data_format = str(attrs.get("data_format") or default_format)
    axes = _spatial(data_format, len(x))
    strides = [int(v) for v in attrs["strides"]]
    dilations = [int(v) for v in attrs.get("dilations") or [1] * len(x)]
    padding = str(attrs["padding"])
    pads = [int(v) for v in attrs.get("explicit_paddings") or []]
    if axes is None or len(strides) != len(x) or len(dilations) != len(x) or len(window) != len(axes):
        return None
    if padding == "EXPLICIT" and len(pads) != 2 * len(x):
        return None
    out = list(x)
    for k, axis in zip(window, axes):
        lo, hi = (pads[2 * axis], pads[2 * axis + 1]) if padding == "EXPLICIT" else (0, 0)
        size = _window_out(x[axis], int(k), strides[axis], dilations[axis], padding, lo, hi)
        if size is None:
            return None
        out[axis] = size
    if channels is not None:
        out[axes[0] - 1 if axes[0] == 2 else len(x) - 1] = channels
    return [tuple(out)]


def _conv(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    x, f = shapes[0], shapes[1]
    if x is None or f is None or len(f) != len(x):
        return None
    default = "NHWC" if len(x) == 4 else "NDHWC"
    return _window_shape(x, f[:-2], f[-1], attrs, default)


def _depthwise(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    x, f = shapes[0], shapes[1]
    if x is None or f is None or len(x) != 4 or len(f) != 4:
        return None
    return _window_shape(x, f[:2], f[2] * f[3], attrs, "NHWC")


def _pool(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    x = shapes[0]
    if x is None:
        return None
    default = "NHWC" if len(x) == 4 else "NDHWC"
    axes = _spatial(str(attrs.get("data_format") or default), len(x))
    ksize = [int(v) for v in attrs["ksize"]]
    if axes is None or len(ksize) != len(x) or any(ksize[i] != 1 for i in range(len(x)) if i not in axes):
        return None
    return _window_shape(x, [ksize[a] for a in axes], None, {**attrs, "dilations": None}, default)


def _squeeze(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    x = shapes[0]
    if x is None:
        return None
    dims = [int(d) for d in attrs.get("squeeze_dims") or []]
    if not dims:
        return [tuple(d for d in x if d != 1)]
    drop = {d + len(x) if d < 0 else d for d in dims}
    if any(not 0 <= d < len(x) or x[d] != 1 for d in drop):
        return None  # the server reports it
    return [tuple(d for i, d in enumerate(x) if i not in drop)]


def _einsum(shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    equation = str(attrs["equation"]).replace(" ", "")
    if "->" not in equation or "." in equation or any(s is None for s in shapes):
        return None
    lhs, out = equation.split("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        return None
    sizes: Dict[str, int] = {}
    for term, shape in zip(terms, shapes):
        if shape is None or len(term) != len(shape):
            return None
        for label, d in zip(term, shape):
            if sizes.setdefault(label, d) != d:
                return None  # the server reports it
    if any(label not in sizes for label in out):
        return None
    return [tuple(sizes[label] for label in out)]


_UNARY = (
    "Neg Square Sqrt Exp Log Tanh Sigmoid Abs Sign Expm1 Log1p Sin Cos Tan Reciprocal Inv "
    "Identity Cast StopGradient PreventGradient ZerosLike OnesLike Cumsum Cumprod "
    "Relu Relu6 Elu Selu Softplus Softsign Softmax LogSoftmax Conj Real Imag Angle "
    "Rsqrt Floor Ceil Round Erf Erfc LeakyRelu BiasAdd BiasAddV1"
).split()
_BINARY = (
    "AddV2 Add Sub Mul RealDiv Div Maximum Minimum SquaredDifference Pow Complex "
    "Equal NotEqual Greater GreaterEqual Less LessEqual Atan2"
).split()
# Gradient helpers whose output has their first input's shape.
_SAME0 = (
    "SqrtGrad TanhGrad SigmoidGrad ReciprocalGrad RsqrtGrad ReluGrad Relu6Grad EluGrad SeluGrad "
    "SoftplusGrad SoftsignGrad LeakyReluGrad"
).split()

_RULES: Dict[str, ShapeRule] = {}
for _name in _UNARY + _SAME0:
    _RULES[_name] = _same0
for _name in _BINARY:
    _RULES[_name] = _elementwise
_RULES.update(
    {
        "Select": _select,
        "SelectV2": lambda s, a: [broadcast(broadcast(s[0], s[1]), s[2])] if len(s) == 3 else None,
        "MatMul": _matmul,
        "BatchMatMul": _batch_matmul,
        "BatchMatMulV2": _batch_matmul,
        "Sum": _reduce,
        "Mean": _reduce,
        "Prod": _reduce,
        "L2Loss": _scalar,
        "VarHandleOp": _scalar,
        "Reshape": _reshape,
        "BroadcastTo": _broadcast_to,
        "Transpose": _transpose,
        "Shape": _shape,
        "GatherV2": _gather,
        "Pack": _pack,
        "OneHot": _one_hot,
        "SparseSoftmaxCrossEntropyWithLogits": _sparse_xent,
        "BiasAddGrad": _bias_add_grad,
        "Conv2D": _conv,
        "Conv3D": _conv,
        "DepthwiseConv2dNative": _depthwise,
        "MaxPool": _pool,
        "AvgPool": _pool,
        "MaxPool3D": _pool,
        "AvgPool3D": _pool,
        "Squeeze": _squeeze,
        "Einsum": _einsum,
    }
)


def rule_for(op: str) -> Optional[ShapeRule]:
    """The shape rule of `op`, None if the client has none."""
    return _RULES.get(op)


def output_shapes(rule: Optional[ShapeRule], shapes: Sequence[MaybeShape], attrs: Mapping[str, Any]) -> Optional[List[MaybeShape]]:
    """`rule` applied (None: not known); raises only Refusal."""
    if rule is None:
        return None
    try:
        return rule(shapes, attrs)
    except Refusal:
        raise
    except Exception:  # a rule must not turn a server-side error into a client crash
        return None
