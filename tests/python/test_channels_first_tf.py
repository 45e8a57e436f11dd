"""data_format NCHW / NCDHW for the convolution and pooling ops through the
server against TensorFlow (tensorflow-cpu from PyPI, imported lazily by the
`tf` fixture), in float32: TF 2.21's CPU kernels take these layouts only in
float32 (with oneDNN), and refuse float64; gradtape takes both (the float64
full-Jacobian checks of every channels-first sample are in the C++ suite).

Forward values and the gradients wrt every input are compared with TF's
raw op in the same layout. Where TF's CPU cannot run or differentiate the
op channels-first (max pooling: MaxPoolGrad / MaxPool3DGrad refuse NCHW;
EXPLICIT padding: Conv2DBackpropInput refuses NCHW) the reference is TF's
channels-last op on the transposed tensors (the case says which)."""

from typing import Any, Dict, List, Tuple

import grpc
import numpy as np
import pytest

import gradtape

RTOL, ATOL = 2e-5, 2e-5


@pytest.fixture(scope="module")
def tf() -> Any:
    import tensorflow  # heavy: imported only when these tests run

    return tensorflow


def _to_last(rank: int) -> List[int]:
    return [0] + list(range(2, rank)) + [1]


def _to_first(rank: int) -> List[int]:
    return [0, rank - 1] + list(range(1, rank - 1))


# (case id, TF raw op, gradtape op, {input name: shape}, attrs). Shapes are
# NCHW / NCDHW, filters [k..., C, O] (as in TF, in either layout).
CASES: List[Tuple[str, str, str, Dict[str, Tuple[int, ...]], Dict[str, Any]]] = [
    ("Conv2D SAME stride (2,1)", "Conv2D", "conv2d",
     {"input": (2, 3, 5, 6), "filter": (3, 3, 3, 4)},
     {"strides": [1, 1, 2, 1], "padding": "SAME"}),
    ("Conv2D VALID dilation 2", "Conv2D", "conv2d",
     {"input": (1, 2, 6, 5), "filter": (2, 2, 2, 3)},
     {"strides": [1, 1, 1, 1], "padding": "VALID", "dilations": [1, 1, 2, 2]}),
    ("Conv2D EXPLICIT", "Conv2D", "conv2d",
     {"input": (2, 3, 5, 6), "filter": (3, 2, 3, 2)},
     {"strides": [1, 1, 1, 2], "padding": "EXPLICIT", "explicit_paddings": [0, 0, 0, 0, 1, 2, 0, 1]}),
    ("DepthwiseConv2dNative SAME multiplier 2", "DepthwiseConv2dNative", "depthwise_conv2d_native",
     {"input": (2, 3, 5, 6), "filter": (3, 3, 3, 2)},
     {"strides": [1, 1, 1, 1], "padding": "SAME"}),
    ("DepthwiseConv2dNative EXPLICIT stride 2", "DepthwiseConv2dNative", "depthwise_conv2d_native",
     {"input": (1, 2, 6, 6), "filter": (2, 2, 2, 1)},
     {"strides": [1, 1, 2, 2], "padding": "EXPLICIT", "explicit_paddings": [0, 0, 0, 0, 2, 0, 1, 1]}),
    ("Conv3D SAME", "Conv3D", "conv3d",
     {"input": (2, 3, 4, 5, 4), "filter": (2, 2, 2, 3, 4)},
     {"strides": [1, 1, 1, 1, 1], "padding": "SAME"}),
    ("Conv3D VALID strides (2,1,2)", "Conv3D", "conv3d",
     {"input": (1, 2, 5, 4, 5), "filter": (2, 2, 2, 2, 3)},
     {"strides": [1, 1, 2, 1, 2], "padding": "VALID"}),
    ("AvgPool SAME 3x3 stride 2", "AvgPool", "avg_pool",
     {"value": (2, 3, 5, 6)},
     {"ksize": [1, 1, 3, 3], "strides": [1, 1, 2, 2], "padding": "SAME"}),
    ("AvgPool3D VALID", "AvgPool3D", "avg_pool3d",
     {"input": (1, 2, 4, 5, 4)},
     {"ksize": [1, 1, 2, 2, 2], "strides": [1, 1, 2, 1, 2], "padding": "VALID"}),
    ("MaxPool SAME 2x2 stride 2", "MaxPool", "max_pool",
     {"input": (2, 3, 5, 6)},
     {"ksize": [1, 1, 2, 2], "strides": [1, 1, 2, 2], "padding": "SAME"}),
    ("MaxPool EXPLICIT", "MaxPool", "max_pool",
     {"input": (1, 2, 5, 6)},
     {"ksize": [1, 1, 2, 3], "strides": [1, 1, 2, 2], "padding": "EXPLICIT",
      "explicit_paddings": [0, 0, 0, 0, 1, 0, 0, 2]}),
    ("MaxPool3D VALID", "MaxPool3D", "max_pool3d",
     {"input": (1, 2, 4, 5, 4)},
     {"ksize": [1, 1, 2, 2, 2], "strides": [1, 1, 2, 2, 1], "padding": "VALID"}),
]


# TF's CPU cannot differentiate these channels-first (nor, with
# explicit_paddings, any op here): the reference is the channels-last op.
CHANNELS_LAST_REFERENCE = {"MaxPool", "MaxPool3D"}


def _channels_last_attrs(attrs: Dict[str, Any], rank: int) -> Dict[str, Any]:
    perm = _to_last(rank)
    out = dict(attrs)
    for name in ("strides", "ksize", "dilations"):
        if name in out:
            out[name] = [attrs[name][p] for p in perm]
    if "explicit_paddings" in out:
        pairs = attrs["explicit_paddings"]
        out["explicit_paddings"] = [pairs[2 * p + j] for p in perm for j in (0, 1)]
    return out


def _tf_forward_and_grads(tf: Any, op: str, values: Dict[str, np.ndarray], attrs: Dict[str, Any], rank: int,
                          dy_seed: int) -> Tuple[np.ndarray, np.ndarray, List[np.ndarray]]:
    """TF's output, the output gradient used and the input gradients: TF's
    channels-first kernel, or for the ops of CHANNELS_LAST_REFERENCE its
    channels-last one on the transposed input (see the docstring)."""
    last = op in CHANNELS_LAST_REFERENCE or "explicit_paddings" in attrs
    tensors = {k: tf.constant(v) for k, v in values.items()}
    with tf.GradientTape() as tape:
        for t in tensors.values():
            tape.watch(t)
        if last:
            # The activation (the first input) transposed; a filter as it is.
            args = dict(tensors)
            name = next(iter(args))
            args[name] = tf.transpose(args[name], _to_last(rank))
            y = getattr(tf.raw_ops, op)(**args, **_channels_last_attrs(attrs, rank),
                                        data_format="NHWC" if rank == 4 else "NDHWC")
            y = tf.transpose(y, _to_first(rank))
        else:
            y = getattr(tf.raw_ops, op)(**tensors, **attrs, data_format="NCHW" if rank == 4 else "NCDHW")
        dy = np.random.default_rng(dy_seed).normal(size=y.shape).astype(np.float32)
        loss = tf.reduce_sum(y * dy)
    grads = tape.gradient(loss, list(tensors.values()))
    return y.numpy(), dy, [g.numpy() for g in grads]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_channels_first_matches_tensorflow(gt: Any, tf: Any, case: Any) -> None:
    _, tf_op, gt_op, shapes, attrs = case
    rank = len(next(iter(shapes.values())))
    rng = np.random.default_rng(7)
    values = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    want, dy, want_grads = _tf_forward_and_grads(tf, tf_op, values, attrs, rank, 8)

    inputs = [gt.constant(v) for v in values.values()]
    with gt.GradientTape() as tape:
        for t in inputs:
            tape.watch(t)
        y = getattr(gt.ops, gt_op)(*inputs, **attrs, data_format="NCHW" if rank == 4 else "NCDHW")
    grads = tape.gradient_values(y, inputs, output_gradients=[gt.constant(dy)])
    got = y.numpy()
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


# The backprop ops called directly, against TF's raw op in NCHW / NCDHW
# (TF's input_sizes / filter_sizes tensor is an attr here).
BACKPROPS: List[Tuple[str, str, Dict[str, Tuple[int, ...]], Dict[str, Any], Tuple[str, List[int]]]] = [
    ("Conv2DBackpropInput", "conv2d_backprop_input",
     {"filter": (3, 3, 3, 4), "out_backprop": (2, 4, 3, 6)},
     {"strides": [1, 1, 2, 1], "padding": "SAME"}, ("input_sizes", [2, 3, 5, 6])),
    ("Conv2DBackpropFilter", "conv2d_backprop_filter",
     {"input": (2, 3, 5, 6), "out_backprop": (2, 2, 3, 3)},
     {"strides": [1, 1, 1, 2], "padding": "VALID"},
     ("filter_sizes", [3, 2, 3, 2])),
    ("DepthwiseConv2dNativeBackpropInput", "depthwise_conv2d_native_backprop_input",
     {"filter": (3, 3, 3, 2), "out_backprop": (2, 6, 5, 6)},
     {"strides": [1, 1, 1, 1], "padding": "SAME"}, ("input_sizes", [2, 3, 5, 6])),
    ("DepthwiseConv2dNativeBackpropFilter", "depthwise_conv2d_native_backprop_filter",
     {"input": (2, 3, 5, 6), "out_backprop": (2, 6, 5, 6)},
     {"strides": [1, 1, 1, 1], "padding": "SAME"}, ("filter_sizes", [3, 3, 3, 2])),
    ("Conv3DBackpropInputV2", "conv3d_backprop_input_v2",
     {"filter": (2, 2, 2, 3, 4), "out_backprop": (2, 4, 4, 5, 4)},
     {"strides": [1, 1, 1, 1, 1], "padding": "SAME"}, ("input_sizes", [2, 3, 4, 5, 4])),
    ("Conv3DBackpropFilterV2", "conv3d_backprop_filter_v2",
     {"input": (1, 2, 5, 4, 5), "out_backprop": (1, 3, 2, 3, 2)},
     {"strides": [1, 1, 2, 1, 2], "padding": "VALID"}, ("filter_sizes", [2, 2, 2, 2, 3])),
    ("AvgPoolGrad", "avg_pool_grad",
     {"grad": (2, 3, 3, 3)},
     {"ksize": [1, 1, 3, 3], "strides": [1, 1, 2, 2], "padding": "SAME"}, ("orig_input_shape", [2, 3, 5, 6])),
    ("AvgPool3DGrad", "avg_pool3d_grad",
     {"grad": (1, 2, 2, 4, 2)},
     {"ksize": [1, 1, 2, 2, 2], "strides": [1, 1, 2, 1, 2], "padding": "VALID"},
     ("orig_input_shape", [1, 2, 4, 5, 4])),
]


@pytest.mark.parametrize("case", BACKPROPS, ids=[c[0] for c in BACKPROPS])
def test_channels_first_backprops_match_tensorflow(gt: Any, tf: Any, case: Any) -> None:
    tf_op, gt_op, shapes, attrs, (size_name, sizes) = case
    rank = len(next(iter(shapes.values())))
    fmt = "NCHW" if rank == 4 else "NCDHW"
    rng = np.random.default_rng(9)
    values = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    want = getattr(tf.raw_ops, tf_op)(
        **{k: tf.constant(v) for k, v in values.items()},
        **{size_name: tf.constant(sizes, tf.int32)}, **attrs, data_format=fmt,
    ).numpy()
    got = getattr(gt.ops, gt_op)(*[gt.constant(v) for v in values.values()],
                                 **{size_name: sizes}, **attrs, data_format=fmt).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_max_pool_grads_in_nchw_are_the_transposed_nhwc_ones(gt: Any) -> None:
    """MaxPoolGrad and MaxPoolGradGrad in NCHW (which TF's CPU refuses) equal
    the NHWC ops on the transposed tensors, here through the server."""
    rng = np.random.default_rng(10)
    x = rng.permutation(2 * 3 * 5 * 6).reshape(2, 3, 5, 6).astype(np.float32) / 10
    kw = {"ksize": [1, 1, 2, 2], "strides": [1, 1, 2, 2], "padding": "SAME"}
    last = {"ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "SAME"}
    t = lambda a, perm: np.ascontiguousarray(a.transpose(perm))  # noqa: E731
    y = gt.ops.max_pool(gt.constant(x), **kw, data_format="NCHW").numpy()
    dy = rng.normal(size=y.shape).astype(np.float32)
    dx = rng.normal(size=x.shape).astype(np.float32)
    first = [gt.ops.max_pool_grad(gt.constant(x), gt.constant(y), gt.constant(dy), **kw, data_format="NCHW"),
             gt.ops.max_pool_grad_grad(gt.constant(x), gt.constant(y), gt.constant(dx), **kw, data_format="NCHW")]
    xl, yl = gt.constant(t(x, [0, 2, 3, 1])), gt.constant(t(y, [0, 2, 3, 1]))
    channels_last = [gt.ops.max_pool_grad(xl, yl, gt.constant(t(dy, [0, 2, 3, 1])), **last),
                     gt.ops.max_pool_grad_grad(xl, yl, gt.constant(t(dx, [0, 2, 3, 1])), **last)]
    for f, l in zip(first, channels_last):
        np.testing.assert_array_equal(f.numpy(), l.numpy().transpose(0, 3, 1, 2))


@pytest.mark.parametrize("op, fmt", [("conv2d", "NCDHW"), ("conv3d", "NCHW"), ("max_pool", "NHCW")])
def test_an_unknown_data_format_is_refused(gt: Any, op: str, fmt: str) -> None:
    rank = 5 if op == "conv3d" else 4
    x = gt.constant(np.zeros((1,) * rank, np.float32))
    if op == "max_pool":
        y = gt.ops.max_pool(x, ksize=[1] * 4, strides=[1] * 4, padding="VALID", data_format=fmt)
    else:
        f = gt.constant(np.zeros((1,) * rank, np.float32))
        y = getattr(gt.ops, op)(x, f, strides=[1] * rank, padding="VALID", data_format=fmt)
    with pytest.raises(gradtape.GradtapeError) as err:
        y.numpy()
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"data_format '{fmt}' must be" in err.value.message
    assert f"command {err.value.seq}" in err.value.message
    gt.sync()  # the session runs on
    np.testing.assert_array_equal(gt.constant(np.ones(2)).numpy(), np.ones(2))
