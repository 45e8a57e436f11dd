"""TensorFlow's eager API over gradtape: ``import gradtape.tf as tf``.

A TF2 eager training script ports by changing its import::

    import gradtape.tf as tf               # was: import tensorflow as tf
    tf.connect("127.0.0.1:50051")          # or GRADTAPE_ADDRESS=host:port

    x, y = tf.constant([[2.0, 3.0], [1.0, 4.0]]), tf.constant([[1.0], [-1.0]])
    w = tf.Variable([[0.5], [-0.25]], name="w")
    opt = tf.keras.optimizers.SGD(learning_rate=0.01)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    grads = tape.gradient(loss, [w])
    opt.apply_gradients(zip(grads, [w]))

Everything runs on the server of the *default session*: the one given to
``tf.connect(address, **connect_kwargs)`` or ``gradtape.set_default_session``,
else one connected on first use from the environment variable
``GRADTAPE_ADDRESS``.

What is here, with TensorFlow's semantics (names, arguments, dtype
inference of Python values: floats float32, ints int32):
  constant, Variable, Tensor, GradientTape, convert_to_tensor, identity,
  zeros, ones, zeros_like, ones_like, fill, reduce_sum, reduce_mean,
  reduce_max, reduce_min, reduce_prod, reduce_logsumexp, matmul, add, subtract, multiply,
  divide, negative, square, sqrt, exp, log, sin, cos, tan, tanh, sigmoid,
  abs, maximum, minimum, pow (needs the server's Pow), where, cast,
  reshape, transpose, shape, stop_gradient, add_n, custom_gradient,
  math.* (the above plus log1p, expm1, reciprocal, softplus, sign,
  squared_difference, log_sigmoid), nn.* (relu, relu6, elu, selu,
  softplus, softsign, sigmoid, tanh, leaky_relu, gelu (exact and
  approximate, composed as TF), silu / swish, softmax and log_softmax over
  any axis, sparse_softmax_cross_entropy_with_logits,
  softmax_cross_entropy_with_logits, sigmoid_cross_entropy_with_logits,
  weighted_cross_entropy_with_logits, l2_loss, l2_normalize, bias_add,
  convolution, conv1d (over conv2d, as TF), conv2d, conv3d,
  depthwise_conv2d, separable_conv2d, conv2d_transpose, dilation2d, max_pool /
  avg_pool (1-, 2-, 3-D), max_pool1d/2d/3d, avg_pool1d/2d/3d,
  max_pool_with_argmax, moments, batch_normalization, fused_batch_norm
  (TF 2 has it as tf.compat.v1.nn.fused_batch_norm), lrn /
  local_response_normalization, embedding_lookup (a Variable through
  ResourceGather), dropout, experimental.stateless_dropout),
  random.* (stateless_uniform / normal / truncated_normal: TF's bits;
  uniform / normal / truncated_normal and set_seed: TF's shapes, dtypes and
  seeding rules, not its values: see gradtape.tf.random), clip_by_value,
  clip_by_norm, clip_by_global_norm, Module and name_scope (gradtape.tf.module),
  errors.* (TF's exception classes: a server error is raised as the one for
  its status code; a disabled or undefined gradient is also a LookupError),
  keras.layers (Dense, Embedding, LayerNormalization, Dropout, Conv2D,
  MaxPooling2D, AveragePooling2D, Flatten) and keras.Sequential for custom
  training loops (gradtape.tf.keras.layers), keras.initializers,
  keras.optimizers SGD / Adam / AdamW / RMSprop / Adagrad (Keras 3's rules)
  with learning-rate schedules (keras.optimizers.schedules) or callables,
  autodiff.ForwardAccumulator, train.Checkpoint (named variables),
  UnconnectedGradients, the dtypes
  float32, float64, int32, int64, bool, complex64, complex128 (numpy
  dtypes: ``x.dtype == tf.float32`` works).

Array, math and linalg functions (TF's names, arguments, defaults, dtype
inference and broadcasting; each runs the server op TF's function runs,
or is composed from server ops as TF composes it):
  concat, stack, unstack, split (a number or sizes with one -1),
  expand_dims, squeeze, tile, fill, range (TF's dtype inference), reverse,
  pad (CONSTANT with constant_values, REFLECT, SYMMETRIC), broadcast_to,
  one_hot, gather (axis, batch_dims), gather_nd (batch_dims), scatter_nd,
  slice, strided_slice (all five masks), newaxis, repeat, roll, meshgrid,
  sequence_mask, eye, tensor_scatter_nd_add / sub, where (SelectV2 broadcasting), argmax, argmin, sort,
  argsort (from top_k, as TF), equal, not_equal, greater, greater_equal,
  less, less_equal, logical_and / or / not, reduce_all, reduce_any, floor,
  round (half to even), atan, atan2, scalar_mul, complex, einsum,
  tensordot, norm;
  math.* also erf, erfc, ceil, rsqrt, reduce_variance, reduce_std, cumsum,
  cumprod (exclusive, reverse), top_k, segment_sum / mean / min / max /
  prod, unsorted_segment_sum / max / min / prod / mean / sqrt_n, angle,
  is_nan, is_inf, is_finite, logical_xor, count_nonzero,
  reduce_euclidean_norm, polyval; abs of complex
  (TF's ComplexAbs, composed), real / imag / conj of real tensors (TF's
  rules: the input, zeros, the input);
  linalg.* matmul (also a_is_sparse: SparseMatMul), einsum, cross, matvec,
  tensordot, matrix_transpose, adjoint, trace, diag_part, diag (k=0),
  eye, norm;
  sparse.segment_sum / segment_mean / segment_sqrt_n (with and without
  num_segments); raw_ops.<Op>(**kwargs) for every server op (TF's keyword
  arguments; a host tensor TF takes where gradtape has an attr is read).
  Their differences from TF: one_hot's on_value / off_value get no
  gradient (attrs here), and an int one_hot is made as float64 and cast;
  top_k(sorted=False) returns the values sorted (an order TF allows);
  repeat's repeats are read as Python ints; einsum contracts more than two
  operands pairwise left to right (TF: opt_einsum's order); norm has no matrix 2-norm or
  nuclear norm (no SVD); matmul's output_type must be the inputs' dtype;
  sparse.segment_*(sparse_gradient=True) is refused (gradients are
  dense); gather_nd's bad_indices_policy other than the default is
  refused. tests/python/test_tf_api.py compares each with TF;
  tests/python/test_tf_coverage.py maps every server op to a TF name.
  Not here (no server op to run them on): boolean_mask, where with one
  argument, unique, bincount, floordiv / floormod, multiply_no_nan,
  hyperbolic and inverse trigonometric functions but atan; ListOps says
  which ops a server has.

Not here: float16 and bfloat16 (gradtape has no such dtype),
Keras' model.fit / compile / evaluate, tf.data
and SavedModel (write the training loop with GradientTape and an
optimizer), string ops, slicing and ``**`` beyond 2 and 0.5 (the Tensor
protocol, gradtape.Tensor), ``where`` with one argument,
``Adam(amsgrad=True)``, Keras optimizers' clipnorm / clipvalue /
global_clipnorm / use_ema, integer stateless_uniform and alg="threefry"
(the server has Philox only), embedding_lookup over sharded params or
with max_norm, conv3d and pooling with explicit padding lists (the
server's Conv3D / AvgPool have none), Keras layers with channels_first,
masking, regularizers or constraints (each raises NotImplementedError).
Tensor indexing is TF's (``x[::-1]``, ``x[..., tf.newaxis]``, negative
strides, scalar int Tensors as indices; no boolean masks).

Differences that remain, and why: an op the server refuses for a reason
the client cannot see (an index out of range, an unknown shape) raises its
tf.errors class at the next wait point (``.numpy()``, a fetched gradient,
``sync()``), not at the call, because commands are sent in batches without
waiting; what the client sees from known shapes (shapes that do not
broadcast, matmul dimensions, a reshape to another size) and attr types,
input counts and Python values' dtypes raise at the call, as in TF;
``custom_gradient``'s ``grad`` is traced
once into a server program (gradtape._custom: ops only, no ``.numpy()``);
a ForwardAccumulator keeps the handles of the ops run inside its block
alive until it exits (gradtape._forward); embedding_lookup's gradient is
a dense tensor where TF gives IndexedSlices (the same values, so Keras'
row-by-row sparse optimizer updates differ for repeated ids); seeded
stateful random ops and Keras initializers / Dropout masks draw different
numbers from TF's (same distributions, shapes, dtypes, determinism); a
Variable's name is not prefixed by name scopes (Keras layers name theirs
"layer/weight"). tests/python/test_tf_reference.py
runs each case with TensorFlow and with this module.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Optional

from gradtape import _custom, _default, _function
from gradtape._function import TensorSpec
from gradtape._default import get_default_session, set_default_session
from gradtape._tensor import Tensor
from gradtape.session import Session
from gradtape.tf import autodiff, errors, keras, linalg, math, nn, raw_ops, sparse, train
from gradtape.tf import random  # noqa: A004 (TensorFlow's name)
from gradtape.tf._base import (
    DType,
    GradientTape,
    TensorLike,
    UnconnectedGradients,
    Variable,
    _session,
    bool,
    cast,
    complex64,
    complex128,
    connect,
    constant,
    convert_to_tensor,
    double,
    float32,
    float64,
    identity,
    int32,
    int64,
    ones,
    ones_like,
    rank,
    reshape,
    shape,
    size,
    stop_gradient,
    transpose,
    zeros,
    zeros_like,
)
from gradtape.tf.module import Module, name_scope
from gradtape.tf._clip import clip_by_global_norm, clip_by_norm, clip_by_value
from gradtape.tf._array import (
    broadcast_to,
    concat,
    expand_dims,
    eye,
    fill,
    gather,
    gather_nd,
    meshgrid,
    newaxis,
    one_hot,
    pad,
    range,
    repeat,
    reverse,
    roll,
    scatter_nd,
    sequence_mask,
    slice,
    split,
    squeeze,
    stack,
    strided_slice,
    tensor_scatter_nd_add,
    tensor_scatter_nd_sub,
    tile,
    unstack,
)
from gradtape.tf.linalg import einsum, norm, tensordot
from gradtape.tf.math import (
    argmax,
    argmin,
    argsort,
    atan,
    atan2,
    complex,
    cumsum,
    equal,
    floor,
    greater,
    greater_equal,
    less,
    less_equal,
    logical_and,
    logical_not,
    logical_or,
    not_equal,
    reduce_all,
    reduce_any,
    round,
    scalar_mul,
    sort,
)
from gradtape.tf.math import (
    abs,
    add,
    add_n,
    conj,
    cos,
    divide,
    exp,
    imag,
    log,
    matmul,
    maximum,
    minimum,
    multiply,
    negative,
    pow,
    real,
    reduce_logsumexp,
    reduce_max,
    reduce_mean,
    reduce_min,
    reduce_prod,
    reduce_sum,
    sigmoid,
    sign,
    sin,
    sqrt,
    square,
    subtract,
    tan,
    tanh,
    truediv,
    where,
)

__all__ = [
    "GradientTape",
    "Tensor",
    "UnconnectedGradients",
    "Variable",
    "connect",
    "get_default_session",
    "set_default_session",
]


def custom_gradient(f: Optional[Callable[..., Any]] = None) -> Any:
    """tf.custom_gradient (see gradtape._custom for how grad is traced)."""
    if f is None:
        return custom_gradient

    @functools.wraps(f)
    def decorated(*args: Any, **kwargs: Any) -> Any:
        return _custom.call_with_custom_gradient(f, args, kwargs, _session(), convert_to_tensor)

    return decorated


def function(
    func: Optional[Callable[..., Any]] = None,
    input_signature: Optional[Any] = None,
    autograph: Any = True,
    jit_compile: Any = None,
    reduce_retracing: Any = False,
    experimental_implements: Optional[str] = None,
    experimental_autograph_options: Any = None,
    experimental_attributes: Optional[Dict[str, Any]] = None,
    experimental_relax_shapes: Any = None,
    experimental_compile: Any = None,
    experimental_follow_type_hints: Any = None,
    name: Optional[str] = None,
) -> Any:
    """tf.function: captured steps (gradtape.function, on the default
    session unless a Tensor or Variable argument names another). The first
    call per input signature runs eagerly and is recorded as a server
    program; later calls are one CallProgram each. See gradtape._function
    for what is captured (constants by value, Python side effects only at
    tracing) and what falls back to eager.

    input_signature: TensorSpecs the arguments must match (TypeError as TF);
    None dimensions trace once per concrete shape (a program has fixed
    shapes), so reduce_retracing / experimental_relax_shapes change
    nothing. autograph: there is no graph, so Python control flow runs as
    Python at tracing (a branch on a tensor value reads it: that trace
    falls back to eager). jit_compile / experimental_compile,
    experimental_implements, experimental_autograph_options,
    experimental_attributes, experimental_follow_type_hints: accepted and
    ignored."""
    def wrap(f: Callable[..., Any]) -> Any:
        relax = reduce_retracing is True or experimental_relax_shapes is True
        return _function.Function(f, input_signature, relax, name)

    return wrap if func is None else wrap(func)


def _get_default() -> Optional[Session]:
    return _default._default
