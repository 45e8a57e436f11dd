"""Every op the server registers (ListOps) is reached by a named function
of gradtape.tf, or is listed here with the reason it is not.

PUBLIC maps an op to the TensorFlow name that runs it and a call of that
name; the test runs the call on gradtape.tf with the session's backend
spied on and checks that the op was executed (so a function that stops
using its op, or a table entry that is wrong, fails). Ops TensorFlow itself
only exposes as raw ops (``tf.raw_ops.Add``; ``tf.compat.v1`` aside) are
reached through ``tf.raw_ops``. GRADIENT lists the ops only a backward
runs. A server op in neither fails the test.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import pytest


def _f(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).uniform(0.5, 2.0, size=shape).astype(np.float32)


def _c(tf: Any) -> Any:
    return tf.complex(tf.constant([1.0, -2.0]), tf.constant([0.5, 3.0]))


def _m(tf: Any) -> Any:
    return tf.constant(_f(3, 3))


def _b(tf: Any) -> Any:
    return tf.constant(_f(2, 3, 3))


def _ids(tf: Any) -> Any:
    return tf.constant([0, 0, 2])


def _img(tf: Any) -> Any:
    return tf.constant(_f(1, 4, 4, 2))


def _filt(tf: Any) -> Any:
    return tf.constant(_f(2, 2, 2, 3))


def _vol(tf: Any) -> Any:
    return tf.constant(_f(1, 3, 3, 3, 2))


def _filt3(tf: Any) -> Any:
    return tf.constant(_f(2, 2, 2, 2, 3))


def _step(tf: Any, opt: Any) -> Any:
    v = tf.Variable(_f(3))
    return opt.apply_gradients([(tf.constant(_f(3)), v)])


# op -> (the TensorFlow name that runs it, a call of that name)
PUBLIC: Dict[str, Tuple[str, Callable[[Any], Any]]] = {
    # unary
    "Erf": ("tf.math.erf", lambda tf: tf.math.erf(_m(tf))),
    "Erfc": ("tf.math.erfc", lambda tf: tf.math.erfc(_m(tf))),
    "Floor": ("tf.math.floor", lambda tf: tf.floor(_m(tf))),
    "Ceil": ("tf.math.ceil", lambda tf: tf.math.ceil(_m(tf))),
    "Round": ("tf.math.round", lambda tf: tf.round(_m(tf))),
    "Neg": ("tf.math.negative", lambda tf: tf.negative(_m(tf))),
    "Square": ("tf.math.square", lambda tf: tf.square(_m(tf))),
    "Sqrt": ("tf.math.sqrt", lambda tf: tf.sqrt(_m(tf))),
    "Rsqrt": ("tf.math.rsqrt", lambda tf: tf.math.rsqrt(_m(tf))),
    "Exp": ("tf.math.exp", lambda tf: tf.exp(_m(tf))),
    "Log": ("tf.math.log", lambda tf: tf.math.log(_m(tf))),
    "Tanh": ("tf.math.tanh", lambda tf: tf.tanh(_m(tf))),
    "Sigmoid": ("tf.math.sigmoid", lambda tf: tf.sigmoid(_m(tf))),
    "Abs": ("tf.math.abs", lambda tf: tf.abs(_m(tf))),
    "Sign": ("tf.math.sign", lambda tf: tf.sign(_m(tf))),
    "Expm1": ("tf.math.expm1", lambda tf: tf.math.expm1(_m(tf))),
    "Log1p": ("tf.math.log1p", lambda tf: tf.math.log1p(_m(tf))),
    "Sin": ("tf.math.sin", lambda tf: tf.sin(_m(tf))),
    "Cos": ("tf.math.cos", lambda tf: tf.cos(_m(tf))),
    "Tan": ("tf.math.tan", lambda tf: tf.tan(_m(tf))),
    "Reciprocal": ("tf.math.reciprocal", lambda tf: tf.math.reciprocal(_m(tf))),
    "Inv": ("tf.raw_ops.Inv", lambda tf: tf.raw_ops.Inv(x=_m(tf))),
    # binary
    "AddV2": ("tf.math.add", lambda tf: tf.add(_m(tf), 1.0)),
    "Add": ("tf.raw_ops.Add", lambda tf: tf.raw_ops.Add(x=_m(tf), y=_m(tf))),
    "Sub": ("tf.math.subtract", lambda tf: tf.subtract(_m(tf), 1.0)),
    "Mul": ("tf.math.multiply", lambda tf: tf.multiply(_m(tf), 2.0)),
    "RealDiv": ("tf.math.divide", lambda tf: tf.divide(_m(tf), 2.0)),
    "Div": ("tf.raw_ops.Div", lambda tf: tf.raw_ops.Div(x=_m(tf), y=_m(tf))),
    "Maximum": ("tf.math.maximum", lambda tf: tf.maximum(_m(tf), 1.0)),
    "Minimum": ("tf.math.minimum", lambda tf: tf.minimum(_m(tf), 1.0)),
    "SquaredDifference": ("tf.math.squared_difference", lambda tf: tf.math.squared_difference(_m(tf), 1.0)),
    "Pow": ("tf.math.pow", lambda tf: tf.pow(_m(tf), 3.0)),
    "Atan2": ("tf.math.atan2", lambda tf: tf.math.atan2(_m(tf), 1.0)),
    # comparison
    "Equal": ("tf.math.equal", lambda tf: tf.equal(_m(tf), 1.0)),
    "NotEqual": ("tf.math.not_equal", lambda tf: tf.not_equal(_m(tf), 1.0)),
    "Greater": ("tf.math.greater", lambda tf: tf.greater(_m(tf), 1.0)),
    "GreaterEqual": ("tf.math.greater_equal", lambda tf: tf.greater_equal(_m(tf), 1.0)),
    "Less": ("tf.math.less", lambda tf: tf.less(_m(tf), 1.0)),
    "LessEqual": ("tf.math.less_equal", lambda tf: tf.less_equal(_m(tf), 1.0)),
    "Select": ("tf.raw_ops.Select", lambda tf: tf.raw_ops.Select(condition=tf.constant([True, False]), t=[1.0, 2.0], e=[3.0, 4.0])),
    "SelectV2": ("tf.where", lambda tf: tf.where(_m(tf) > 1.0, _m(tf), 0.0)),
    # reduction, scan
    "Max": ("tf.math.reduce_max", lambda tf: tf.reduce_max(_m(tf), axis=1)),
    "Min": ("tf.math.reduce_min", lambda tf: tf.reduce_min(_m(tf))),
    "ArgMax": ("tf.math.argmax", lambda tf: tf.argmax(_m(tf))),
    "ArgMin": ("tf.math.argmin", lambda tf: tf.argmin(_m(tf), axis=1)),
    "Sum": ("tf.math.reduce_sum", lambda tf: tf.reduce_sum(_m(tf))),
    "Mean": ("tf.math.reduce_mean", lambda tf: tf.reduce_mean(_m(tf))),
    "Prod": ("tf.math.reduce_prod", lambda tf: tf.reduce_prod(_m(tf))),
    "L2Loss": ("tf.nn.l2_loss", lambda tf: tf.nn.l2_loss(_m(tf))),
    "Cumsum": ("tf.math.cumsum", lambda tf: tf.cumsum(_m(tf))),
    "Cumprod": ("tf.math.cumprod", lambda tf: tf.math.cumprod(_m(tf))),
    # array
    "Identity": ("tf.identity", lambda tf: tf.identity(_m(tf))),
    "Reshape": ("tf.reshape", lambda tf: tf.reshape(_m(tf), [9])),
    "Transpose": ("tf.transpose", lambda tf: tf.transpose(_m(tf))),
    "Cast": ("tf.cast", lambda tf: tf.cast(_m(tf), tf.int32)),
    "BroadcastTo": ("tf.broadcast_to", lambda tf: tf.broadcast_to(_m(tf), [2, 3, 3])),
    "StopGradient": ("tf.stop_gradient", lambda tf: tf.stop_gradient(_m(tf))),
    "PreventGradient": ("tf.raw_ops.PreventGradient", lambda tf: tf.raw_ops.PreventGradient(input=_m(tf), message="no")),
    "ZerosLike": ("tf.zeros_like", lambda tf: tf.zeros_like(_m(tf))),
    "OnesLike": ("tf.ones_like", lambda tf: tf.ones_like(_m(tf))),
    "Shape": ("tf.shape", lambda tf: tf.shape(_m(tf))),
    "GatherV2": ("tf.gather", lambda tf: tf.gather(_m(tf), [2, 0], axis=1)),
    # slice
    "StridedSlice": ("tf.strided_slice, Tensor.__getitem__", lambda tf: _m(tf)[::-1, tf.newaxis]),
    "Slice": ("tf.slice", lambda tf: tf.slice(_m(tf), [1, 0], [-1, 2])),
    # layout
    "ExpandDims": ("tf.expand_dims", lambda tf: tf.expand_dims(_m(tf), 0)),
    "Squeeze": ("tf.squeeze", lambda tf: tf.squeeze(tf.ones([1, 2]))),
    "Tile": ("tf.tile", lambda tf: tf.tile(_m(tf), [1, 2])),
    "Fill": ("tf.fill", lambda tf: tf.fill([2, 2], 3.0)),
    "Range": ("tf.range", lambda tf: tf.range(5)),
    "Reverse": ("tf.raw_ops.Reverse", lambda tf: tf.raw_ops.Reverse(tensor=_m(tf), dims=tf.constant([True, False]))),
    "ReverseV2": ("tf.reverse", lambda tf: tf.reverse(_m(tf), [1])),
    "Pad": ("tf.pad", lambda tf: tf.pad(_m(tf), [[1, 0], [0, 1]])),
    "PadV2": ("tf.pad (constant_values)", lambda tf: tf.pad(_m(tf), [[1, 0], [0, 1]], constant_values=1.0)),
    "MirrorPad": ("tf.pad (REFLECT, SYMMETRIC)", lambda tf: tf.pad(_m(tf), [[1, 0], [0, 1]], "REFLECT")),
    # nn-family ops of this half
    "TopKV2": ("tf.math.top_k", lambda tf: tf.math.top_k(_m(tf), 2)),
    "OneHot": ("tf.one_hot", lambda tf: tf.one_hot([0, 2], 3)),
    # linalg, einsum
    "MatMul": ("tf.linalg.matmul", lambda tf: tf.matmul(_m(tf), _m(tf))),
    "BatchMatMul": ("tf.raw_ops.BatchMatMul", lambda tf: tf.raw_ops.BatchMatMul(x=_b(tf), y=_b(tf))),
    "BatchMatMulV2": ("tf.linalg.matmul (batches)", lambda tf: tf.matmul(_b(tf), _m(tf))),
    "BatchMatMulV3": ("tf.raw_ops.BatchMatMulV3", lambda tf: tf.raw_ops.BatchMatMulV3(x=_b(tf), y=_b(tf), Tout=tf.float32)),
    "SparseMatMul": ("tf.linalg.matmul (a_is_sparse)", lambda tf: tf.matmul(_m(tf), _m(tf), a_is_sparse=True)),
    "Cross": ("tf.linalg.cross", lambda tf: tf.linalg.cross(_m(tf), _m(tf))),
    "Einsum": ("tf.einsum", lambda tf: tf.einsum("ij,jk->ik", _m(tf), _m(tf))),
    # segment
    "SegmentSum": ("tf.math.segment_sum", lambda tf: tf.math.segment_sum(_m(tf), _ids(tf))),
    "SegmentMean": ("tf.math.segment_mean", lambda tf: tf.math.segment_mean(_m(tf), _ids(tf))),
    "SegmentMin": ("tf.math.segment_min", lambda tf: tf.math.segment_min(_m(tf), _ids(tf))),
    "SegmentMax": ("tf.math.segment_max", lambda tf: tf.math.segment_max(_m(tf), _ids(tf))),
    "SegmentProd": ("tf.math.segment_prod", lambda tf: tf.math.segment_prod(_m(tf), _ids(tf))),
    "UnsortedSegmentSum": ("tf.math.unsorted_segment_sum", lambda tf: tf.math.unsorted_segment_sum(_m(tf), _ids(tf), 3)),
    "UnsortedSegmentMax": ("tf.math.unsorted_segment_max", lambda tf: tf.math.unsorted_segment_max(_m(tf), _ids(tf), 3)),
    "UnsortedSegmentMin": ("tf.math.unsorted_segment_min", lambda tf: tf.math.unsorted_segment_min(_m(tf), _ids(tf), 3)),
    "UnsortedSegmentProd": ("tf.math.unsorted_segment_prod", lambda tf: tf.math.unsorted_segment_prod(_m(tf), _ids(tf), 3)),
    "SparseSegmentSum": ("tf.sparse.segment_sum", lambda tf: tf.sparse.segment_sum(_m(tf), [0, 1], [0, 1])),
    "SparseSegmentMean": ("tf.sparse.segment_mean", lambda tf: tf.sparse.segment_mean(_m(tf), [0, 1], [0, 1])),
    "SparseSegmentSqrtN": ("tf.sparse.segment_sqrt_n", lambda tf: tf.sparse.segment_sqrt_n(_m(tf), [0, 1], [0, 1])),
    "SparseSegmentSumWithNumSegments": (
        "tf.sparse.segment_sum (num_segments)",
        lambda tf: tf.sparse.segment_sum(_m(tf), [0, 1], [0, 1], num_segments=3),
    ),
    "SparseSegmentMeanWithNumSegments": (
        "tf.sparse.segment_mean (num_segments)",
        lambda tf: tf.sparse.segment_mean(_m(tf), [0, 1], [0, 1], num_segments=3),
    ),
    "SparseSegmentSqrtNWithNumSegments": (
        "tf.sparse.segment_sqrt_n (num_segments)",
        lambda tf: tf.sparse.segment_sqrt_n(_m(tf), [0, 1], [0, 1], num_segments=3),
    ),
    # complex
    "Complex": ("tf.complex", lambda tf: _c(tf)),
    "Real": ("tf.math.real", lambda tf: tf.math.real(_c(tf))),
    "Imag": ("tf.math.imag", lambda tf: tf.math.imag(_c(tf))),
    "Angle": ("tf.math.angle", lambda tf: tf.math.angle(_c(tf))),
    "Conj": ("tf.math.conj", lambda tf: tf.math.conj(_c(tf))),
    # gather, concat
    "GatherNd": ("tf.gather_nd", lambda tf: tf.gather_nd(_m(tf), [[0, 1], [2, 2]])),
    "ScatterNd": ("tf.scatter_nd", lambda tf: tf.scatter_nd([[0], [2]], [1.0, 2.0], [4])),
    "ConcatV2": ("tf.concat", lambda tf: tf.concat([_m(tf), _m(tf)], 0)),
    "Pack": ("tf.stack", lambda tf: tf.stack([_m(tf), _m(tf)])),
    "Unpack": ("tf.unstack", lambda tf: tf.unstack(_m(tf))),
    "Split": ("tf.split", lambda tf: tf.split(_m(tf), 3)),
    "SplitV": ("tf.split (sizes)", lambda tf: tf.split(_m(tf), [1, -1], axis=1)),
    # nn, conv, pool, norm
    "ClipByValue": ("tf.raw_ops.ClipByValue", lambda tf: tf.raw_ops.ClipByValue(t=_m(tf), clip_value_min=0.7, clip_value_max=1.5)),
    "Relu": ("tf.nn.relu", lambda tf: tf.nn.relu(_m(tf))),
    "Relu6": ("tf.nn.relu6", lambda tf: tf.nn.relu6(_m(tf))),
    "LeakyRelu": ("tf.nn.leaky_relu", lambda tf: tf.nn.leaky_relu(_m(tf))),
    "Elu": ("tf.nn.elu", lambda tf: tf.nn.elu(_m(tf))),
    "Selu": ("tf.nn.selu", lambda tf: tf.nn.selu(_m(tf))),
    "Softplus": ("tf.nn.softplus", lambda tf: tf.nn.softplus(_m(tf))),
    "Softsign": ("tf.nn.softsign", lambda tf: tf.nn.softsign(_m(tf))),
    "Softmax": ("tf.nn.softmax", lambda tf: tf.nn.softmax(_m(tf))),
    "LogSoftmax": ("tf.nn.log_softmax", lambda tf: tf.nn.log_softmax(_m(tf))),
    "SoftmaxCrossEntropyWithLogits": (
        "tf.raw_ops.SoftmaxCrossEntropyWithLogits",
        lambda tf: tf.raw_ops.SoftmaxCrossEntropyWithLogits(features=_m(tf), labels=tf.nn.softmax(_m(tf))),
    ),
    "SparseSoftmaxCrossEntropyWithLogits": (
        "tf.nn.sparse_softmax_cross_entropy_with_logits",
        lambda tf: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=[0, 2, 1], logits=_m(tf)),
    ),
    "LRN": ("tf.nn.local_response_normalization", lambda tf: tf.nn.local_response_normalization(_img(tf), 1)),
    "BiasAdd": ("tf.nn.bias_add", lambda tf: tf.nn.bias_add(_m(tf), [1.0, 2.0, 3.0])),
    "BiasAddV1": ("tf.raw_ops.BiasAddV1", lambda tf: tf.raw_ops.BiasAddV1(value=_m(tf), bias=[1.0, 2.0, 3.0])),
    "Conv2D": ("tf.nn.conv2d", lambda tf: tf.nn.conv2d(_img(tf), _filt(tf), 1, "SAME")),
    "Conv2DBackpropInput": (
        "tf.nn.conv2d_transpose",
        lambda tf: tf.nn.conv2d_transpose(tf.constant(_f(1, 4, 4, 3)), _filt(tf), [1, 4, 4, 2], 1),
    ),
    "Conv2DBackpropFilter": (
        "tf.raw_ops.Conv2DBackpropFilter",
        lambda tf: tf.raw_ops.Conv2DBackpropFilter(
            input=_img(tf), filter_sizes=[2, 2, 2, 3], out_backprop=tf.constant(_f(1, 4, 4, 3)), strides=[1, 1, 1, 1], padding="SAME"
        ),
    ),
    "DepthwiseConv2dNative": (
        "tf.nn.depthwise_conv2d",
        lambda tf: tf.nn.depthwise_conv2d(_img(tf), tf.constant(_f(2, 2, 2, 1)), [1, 1, 1, 1], "SAME"),
    ),
    "DepthwiseConv2dNativeBackpropInput": (
        "tf.raw_ops.DepthwiseConv2dNativeBackpropInput",
        lambda tf: tf.raw_ops.DepthwiseConv2dNativeBackpropInput(
            input_sizes=[1, 4, 4, 2], filter=tf.constant(_f(2, 2, 2, 1)), out_backprop=_img(tf), strides=[1, 1, 1, 1], padding="SAME"
        ),
    ),
    "DepthwiseConv2dNativeBackpropFilter": (
        "tf.raw_ops.DepthwiseConv2dNativeBackpropFilter",
        lambda tf: tf.raw_ops.DepthwiseConv2dNativeBackpropFilter(
            input=_img(tf), filter_sizes=[2, 2, 2, 1], out_backprop=_img(tf), strides=[1, 1, 1, 1], padding="SAME"
        ),
    ),
    "Conv3D": ("tf.nn.conv3d", lambda tf: tf.nn.conv3d(_vol(tf), _filt3(tf), [1, 1, 1, 1, 1], "SAME")),
    "Conv3DBackpropInputV2": (
        "tf.raw_ops.Conv3DBackpropInputV2",
        lambda tf: tf.raw_ops.Conv3DBackpropInputV2(
            input_sizes=[1, 3, 3, 3, 2], filter=_filt3(tf), out_backprop=tf.constant(_f(1, 3, 3, 3, 3)),
            strides=[1, 1, 1, 1, 1], padding="SAME",
        ),
    ),
    "Conv3DBackpropFilterV2": (
        "tf.raw_ops.Conv3DBackpropFilterV2",
        lambda tf: tf.raw_ops.Conv3DBackpropFilterV2(
            input=_vol(tf), filter_sizes=[2, 2, 2, 2, 3], out_backprop=tf.constant(_f(1, 3, 3, 3, 3)),
            strides=[1, 1, 1, 1, 1], padding="SAME",
        ),
    ),
    "Dilation2D": (
        "tf.nn.dilation2d",
        lambda tf: tf.nn.dilation2d(_img(tf), tf.constant(_f(2, 2, 2)), [1, 1, 1, 1], "SAME", "NHWC", [1, 1, 1, 1]),
    ),
    "Dilation2DBackpropInput": (
        "tf.raw_ops.Dilation2DBackpropInput",
        lambda tf: tf.raw_ops.Dilation2DBackpropInput(
            input=_img(tf), filter=tf.constant(_f(2, 2, 2)), out_backprop=_img(tf), strides=[1, 1, 1, 1], rates=[1, 1, 1, 1], padding="SAME"
        ),
    ),
    "Dilation2DBackpropFilter": (
        "tf.raw_ops.Dilation2DBackpropFilter",
        lambda tf: tf.raw_ops.Dilation2DBackpropFilter(
            input=_img(tf), filter=tf.constant(_f(2, 2, 2)), out_backprop=_img(tf), strides=[1, 1, 1, 1], rates=[1, 1, 1, 1], padding="SAME"
        ),
    ),
    "AvgPool": ("tf.nn.avg_pool2d", lambda tf: tf.nn.avg_pool2d(_img(tf), 2, 2, "VALID")),
    "MaxPool": ("tf.nn.max_pool2d", lambda tf: tf.nn.max_pool2d(_img(tf), 2, 2, "VALID")),
    "AvgPool3D": ("tf.nn.avg_pool3d", lambda tf: tf.nn.avg_pool3d(_vol(tf), 2, 1, "VALID")),
    "MaxPool3D": ("tf.nn.max_pool3d", lambda tf: tf.nn.max_pool3d(_vol(tf), 2, 1, "VALID")),
    "MaxPoolWithArgmax": ("tf.nn.max_pool_with_argmax", lambda tf: tf.nn.max_pool_with_argmax(_img(tf), 2, 2, "VALID")),
    "BatchNormWithGlobalNormalization": (
        "tf.raw_ops.BatchNormWithGlobalNormalization",
        lambda tf: tf.raw_ops.BatchNormWithGlobalNormalization(
            t=_img(tf), m=[0.1, 0.2], v=[1.0, 2.0], beta=[0.0, 1.0], gamma=[1.0, 0.5],
            variance_epsilon=1e-3, scale_after_normalization=True,
        ),
    ),
    "FusedBatchNormV3": (
        "tf.nn.fused_batch_norm",
        lambda tf: tf.nn.fused_batch_norm(_img(tf), tf.constant([1.0, 0.5]), tf.constant([0.0, 1.0])),
    ),
    # variables, optimizers
    "VarHandleOp": ("tf.Variable", lambda tf: tf.Variable(_f(3))),
    "AssignVariableOp": ("tf.Variable.assign", lambda tf: tf.Variable(_f(3)).assign(_f(3))),
    "ReadVariableOp": ("tf.Variable.read_value", lambda tf: tf.Variable(_f(3)).read_value()),
    "AssignAddVariableOp": ("tf.Variable.assign_add", lambda tf: tf.Variable(_f(3)).assign_add(_f(3))),
    "AssignSubVariableOp": ("tf.Variable.assign_sub", lambda tf: tf.Variable(_f(3)).assign_sub(_f(3))),
    "ResourceGather": ("tf.nn.embedding_lookup (a Variable)", lambda tf: tf.nn.embedding_lookup(tf.Variable(_f(3, 2)), [2, 0])),
    "ResourceApplyGradientDescent": ("tf.keras.optimizers.SGD", lambda tf: _step(tf, tf.keras.optimizers.SGD())),
    "ResourceApplyMomentum": (
        "tf.raw_ops.ResourceApplyMomentum",
        lambda tf: tf.raw_ops.ResourceApplyMomentum(
            var=tf.Variable(_f(3)).handle, accum=tf.Variable(_f(3)).handle, lr=0.1, grad=_f(3), momentum=0.9
        ),
    ),
    "ResourceApplyAdam": ("tf.keras.optimizers.Adam", lambda tf: _step(tf, tf.keras.optimizers.Adam())),
    "ResourceApplyAdagrad": (
        "tf.raw_ops.ResourceApplyAdagrad",
        lambda tf: tf.raw_ops.ResourceApplyAdagrad(var=tf.Variable(_f(3)).handle, accum=tf.Variable(_f(3)).handle, lr=0.1, grad=_f(3)),
    ),
    "ResourceApplyRMSProp": (
        "tf.raw_ops.ResourceApplyRMSProp",
        lambda tf: tf.raw_ops.ResourceApplyRMSProp(
            var=tf.Variable(_f(3)).handle, ms=tf.Variable(_f(3)).handle, mom=tf.Variable(_f(3)).handle,
            lr=0.1, rho=0.9, momentum=0.0, epsilon=1e-7, grad=_f(3),
        ),
    ),
    # random
    "StatelessRandomUniform": ("tf.random.stateless_uniform", lambda tf: tf.random.stateless_uniform([3], seed=[1, 2])),
    "StatelessRandomNormal": ("tf.random.stateless_normal", lambda tf: tf.random.stateless_normal([3], seed=[1, 2])),
    "StatelessTruncatedNormal": (
        "tf.random.stateless_truncated_normal",
        lambda tf: tf.random.stateless_truncated_normal([3], seed=[1, 2]),
    ),
    "StatelessRandomUniformV2": (
        "tf.raw_ops.StatelessRandomUniformV2",
        lambda tf: tf.raw_ops.StatelessRandomUniformV2(shape=[3], key=tf.constant([7], tf.int64), counter=tf.constant([0, 0], tf.int64), alg=1),
    ),
    "StatelessRandomNormalV2": (
        "tf.raw_ops.StatelessRandomNormalV2",
        lambda tf: tf.raw_ops.StatelessRandomNormalV2(shape=[3], key=tf.constant([7], tf.int64), counter=tf.constant([0, 0], tf.int64), alg=1),
    ),
    "StatelessTruncatedNormalV2": (
        "tf.raw_ops.StatelessTruncatedNormalV2",
        lambda tf: tf.raw_ops.StatelessTruncatedNormalV2(
            shape=[3], key=tf.constant([7], tf.int64), counter=tf.constant([0, 0], tf.int64), alg=1
        ),
    ),

}

# Gradient ops: run by the server when a tape computes a gradient (TF names
# them only as raw ops, for its own gradient functions).
GRADIENT = {
    "SqrtGrad", "RsqrtGrad", "TanhGrad", "SigmoidGrad", "ReciprocalGrad", "StridedSliceGrad", "MirrorPadGrad",
    "ReluGrad", "Relu6Grad", "LeakyReluGrad", "EluGrad", "SeluGrad", "SoftplusGrad", "SoftsignGrad", "LRNGrad",
    "BiasAddGrad", "AvgPoolGrad", "MaxPoolGrad", "MaxPoolGradGrad", "AvgPool3DGrad", "MaxPool3DGrad",
    "MaxPool3DGradGrad", "MaxPoolGradWithArgmax", "MaxPoolGradGradWithArgmax", "BatchNormWithGlobalNormalizationGrad",
    "FusedBatchNormGradV3", "Dilation2DBackpropInputGrad", "Dilation2DBackpropFilterGrad",
}



class _Spy:
    """The session's backend, recording the op of every execute."""

    def __init__(self, core: Any) -> None:
        self._spied = core
        self.ops: List[str] = []

    def execute(self, op: str, *args: Any, **kwargs: Any) -> Any:
        self.ops.append(op)
        return self._spied.execute(op, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spied, name)


@pytest.fixture
def spied(server_address: str) -> Any:
    import gradtape
    import gradtape.tf as gtf

    session = gradtape.connect(server_address, timeout=10)
    spy = _Spy(session._core)
    session._core = spy
    gradtape.set_default_session(session)
    try:
        yield gtf, session, spy
    finally:
        gradtape.set_default_session(None)
        session._core = spy._spied
        session.close()


def test_every_server_op_is_mapped_or_listed(spied: Any) -> None:
    _, session, _ = spied
    server = {op.name for op in session.list_ops()}
    listed = [set(PUBLIC), GRADIENT]
    for i, a in enumerate(listed):
        for b in listed[i + 1:]:
            assert not a & b, f"listed twice: {sorted(a & b)}"
    everything = set().union(*listed)
    assert not server - everything, f"server ops nobody maps (add a TF name to PUBLIC, or a reason): {sorted(server - everything)}"
    assert not everything - server, f"listed but not on the server: {sorted(everything - server)}"


@pytest.mark.parametrize("op", sorted(PUBLIC))
def test_public_name_runs_its_op(op: str, spied: Any) -> None:
    gtf, session, spy = spied
    name, call = PUBLIC[op]
    spy.ops.clear()
    result = call(gtf)
    session.sync()
    assert op in spy.ops, f"{name} ran {spy.ops}, not {op}"
    # The training ops have no outputs: TF's raw op and apply_gradients return None.
    assert (result is None) == op.startswith("ResourceApply"), (op, result)


@pytest.fixture(scope="module")
def tensorflow() -> Any:
    try:
        import gradtape._native_core  # noqa: F401 (before TensorFlow's libraries)
    except ImportError:
        pass
    import tensorflow as tensorflow_module

    return tensorflow_module


# Server ops TF does not have (gradtape-only gradient ops).
NOT_IN_TF = {"Dilation2DBackpropInputGrad", "Dilation2DBackpropFilterGrad"}


def test_raw_ops_take_tensorflows_arguments(spied: Any, tensorflow: Any) -> None:
    """Every server op is a tf.raw_ops name here taking each argument
    TensorFlow's raw op takes (by TF's Python names), and no input TF's
    does not have."""
    import inspect

    from gradtape.tf import raw_ops

    _, session, _ = spied
    problems = []
    for info in session.list_ops():
        op = info.name
        assert callable(getattr(raw_ops, op))
        tf_fn = getattr(tensorflow.raw_ops, op, None)
        if tf_fn is None:
            assert op in NOT_IN_TF, f"{op} is not a TF raw op: list it in NOT_IN_TF"
            continue
        tf_args = set(inspect.signature(tf_fn).parameters)
        ours = raw_ops.arguments(op)
        missing = tf_args - set(ours)
        inputs = set(ours[: len(info.input_names)])
        extra_inputs = inputs - tf_args
        if missing or extra_inputs:
            problems.append(f"{op}: TF's {sorted(missing)} not taken; inputs {sorted(extra_inputs)} not TF's")
    assert not problems, "\n".join(problems)
