"""tf.keras.layers for custom training loops: Layer, Dense, Embedding,
LayerNormalization, Dropout (``training=``), Conv2D, MaxPooling2D,
AveragePooling2D, Flatten, and Sequential (gradtape.tf.keras.Sequential).

A layer builds its weights at its first call, from Keras 3's default
initialisers (gradtape.tf.keras.initializers: the distributions and
shapes; a ``seed`` gives the same values every time, not Keras' own
values); ``get_weights`` / ``set_weights`` give and take numpy arrays, so
that a test can give two frameworks the same weights. The forward
computations are Keras 3's (TF backend), composed from server ops. Not
here: model.fit / compile / evaluate, tf.data, SavedModel, masking,
regularizers, constraints, mixed precision: write the training loop with
GradientTape and an optimizer."""

from __future__ import annotations

import inspect
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from gradtape import _dtypes
from gradtape._tensor import Tensor, Variable as _Variable
from gradtape.tf import nn as _nn
from gradtape.tf import random as _random
from gradtape.tf._base import Variable, _run, cast, convert_to_tensor, reshape
from gradtape.tf.keras import initializers
from gradtape.tf.math import add, matmul, multiply, negative, sigmoid, tanh

_NAME_COUNTS: Dict[str, int] = {}


def _unique_name(prefix: str) -> str:
    n = _NAME_COUNTS.get(prefix, 0)
    _NAME_COUNTS[prefix] = n + 1
    return prefix if n == 0 else f"{prefix}_{n}"


def _snake(name: str) -> str:
    s = re.sub(r"(.)([A-Z][a-z0-9]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", s).lower()


_ACTIVATIONS: Dict[str, Callable[[Tensor], Tensor]] = {
    "linear": lambda x: x,
    "relu": _nn.relu,
    "sigmoid": sigmoid,
    "tanh": tanh,
    "softmax": lambda x: _nn.softmax(x, axis=-1),
    "log_softmax": lambda x: _nn.log_softmax(x, axis=-1),
    "gelu": lambda x: _nn.gelu(x, approximate=False),
    "silu": _nn.silu,
    "swish": _nn.silu,
    "elu": _nn.elu,
    "selu": _nn.selu,
    "softplus": _nn.softplus,
    "softsign": _nn.softsign,
    "relu6": _nn.relu6,
    "leaky_relu": _nn.leaky_relu,
}


def _activation(identifier: Any) -> Callable[[Tensor], Tensor]:
    if identifier is None:
        return _ACTIVATIONS["linear"]
    if isinstance(identifier, str):
        if identifier not in _ACTIVATIONS:
            raise NotImplementedError(f"tf.keras activation {identifier!r} is not in gradtape.tf ({sorted(_ACTIVATIONS)})")
        return _ACTIVATIONS[identifier]
    if callable(identifier):
        return identifier  # type: ignore[no-any-return]
    raise ValueError(f"Could not interpret activation function identifier: {identifier}")


def _pair(value: Any, name: str) -> Tuple[int, int]:
    if isinstance(value, int):
        return value, value
    values = tuple(int(v) for v in value)
    if len(values) != 2:
        raise ValueError(f"The `{name}` argument must be a tuple of 2 integers. Received: {name}={value}")
    return values[0], values[1]


def _channels_last(data_format: Optional[str], layer: str) -> None:
    if data_format not in (None, "channels_last"):
        raise NotImplementedError(f"tf.keras.layers.{layer}: data_format={data_format!r} is not in gradtape.tf (channels_last only)")


class Layer:
    """The base layer: weights made by ``add_weight`` in ``build`` (called
    at the first call with the input's shape), sublayers found in the
    attributes (their weights follow the layer's own, as Keras orders them)."""

    _sublayers: List["Layer"]

    def __init__(self, trainable: bool = True, name: Optional[str] = None, dtype: Any = None, **kwargs: Any) -> None:
        object.__setattr__(self, "_sublayers", [])
        self._own_weights: List[_Variable] = []
        self.built = False
        self.trainable = trainable
        self.name = name or _unique_name(_snake(type(self).__name__))
        self.dtype = _dtypes.as_numpy_dtype(dtype or np.float32)

    def __setattr__(self, key: str, value: Any) -> None:
        found = [value] if isinstance(value, Layer) else [v for v in value if isinstance(v, Layer)] if isinstance(value, (list, tuple)) else []
        subs = self.__dict__.get("_sublayers")
        if subs is not None:
            subs.extend(v for v in found if all(v is not s for s in subs))
        object.__setattr__(self, key, value)

    def add_weight(
        self,
        shape: Sequence[int] = (),
        initializer: Any = "glorot_uniform",
        dtype: Any = None,
        trainable: bool = True,
        name: Optional[str] = None,
        **kwargs: Any,
    ) -> _Variable:
        value = initializers.get(initializer)(tuple(int(s) for s in shape), dtype=dtype or self.dtype)
        v = Variable(value, trainable=trainable and self.trainable)
        setattr(v, "_keras_trainable", trainable)  # the weight's own flag, kept when the layer is frozen
        v._name = f"{self.name}/{name or 'variable'}"  # Keras' path (not the server's shared name)
        self._own_weights.append(v)
        return v

    def build(self, input_shape: Any) -> None:
        self.built = True

    def call(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        return inputs

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.built:
            x = inputs if isinstance(inputs, (list, tuple)) else convert_to_tensor(inputs)
            shape = [tuple(convert_to_tensor(i).shape) for i in x] if isinstance(x, (list, tuple)) else tuple(x.shape)
            self.build(shape)
            self.built = True
        if "training" in kwargs and not _accepts(self.call, "training"):
            kwargs.pop("training")
        return self.call(inputs, *args, **kwargs)

    # -- weights (Keras 3's order: own trainable, own non-trainable, sublayers') --
    @property
    def trainable(self) -> bool:
        return bool(self.__dict__.get("_trainable", True))

    @trainable.setter
    def trainable(self, value: bool) -> None:
        """As Keras 3: also sets the layer's variables and sublayers."""
        object.__setattr__(self, "_trainable", bool(value))
        for w in self.__dict__.get("_own_weights", []):
            if getattr(w, "_keras_trainable", True):
                w.trainable = bool(value)
        for sub in self.__dict__.get("_sublayers", []):
            sub.trainable = value

    @property
    def weights(self) -> List[_Variable]:
        declared = [getattr(w, "_keras_trainable", True) for w in self._own_weights]
        own = [w for w, t in zip(self._own_weights, declared) if t] + [w for w, t in zip(self._own_weights, declared) if not t]
        out: List[_Variable] = []
        for w in own + [w for sub in self._sublayers for w in sub.weights]:
            if all(w is not o for o in out):
                out.append(w)
        return out

    variables = weights

    @property
    def trainable_weights(self) -> List[_Variable]:
        if not self.trainable:
            return []
        return [w for w in self.weights if w.trainable]

    trainable_variables = trainable_weights

    @property
    def non_trainable_weights(self) -> List[_Variable]:
        if not self.trainable:
            return self.weights
        return [w for w in self.weights if not w.trainable]

    non_trainable_variables = non_trainable_weights

    def get_weights(self) -> List[np.ndarray]:
        return [w.numpy() for w in self.weights]

    def set_weights(self, weights: Sequence[Any]) -> None:
        mine = self.weights
        if len(weights) != len(mine):
            raise ValueError(f"You called `set_weights(weights)` on layer '{self.name}' with a weight list of length {len(weights)}, but the layer was expecting {len(mine)} weights.")
        for w, value in zip(mine, weights):
            array = np.asarray(value)
            if tuple(array.shape) != tuple(w.shape):
                raise ValueError(f"Layer {self.name} weight shape {tuple(w.shape)} is not compatible with provided weight shape {array.shape}.")
            w.assign(array.astype(w.dtype))


def _accepts(fn: Callable[..., Any], arg: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True
    return arg in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


class Dense(Layer):
    """tf.keras.layers.Dense: activation(inputs @ kernel + bias), over the
    last axis of inputs of any rank."""

    def __init__(self, units: int, activation: Any = None, use_bias: bool = True, kernel_initializer: Any = "glorot_uniform",
                 bias_initializer: Any = "zeros", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.units, self.use_bias = int(units), use_bias
        self.activation = _activation(activation)
        self.kernel_initializer, self.bias_initializer = kernel_initializer, bias_initializer

    def build(self, input_shape: Any) -> None:
        self.kernel = self.add_weight((int(input_shape[-1]), self.units), self.kernel_initializer, name="kernel")
        self.bias = self.add_weight((self.units,), self.bias_initializer, name="bias") if self.use_bias else None
        self.built = True

    def call(self, inputs: Any) -> Tensor:
        x = convert_to_tensor(inputs)
        if x.ndim == 2:
            y = matmul(x, self.kernel)
        else:
            lead = list(x.shape[:-1])
            y = reshape(matmul(reshape(x, [-1, int(x.shape[-1])]), self.kernel), lead + [self.units])
        if self.bias is not None:
            y = add(y, self.bias)
        return self.activation(y)


class Embedding(Layer):
    """tf.keras.layers.Embedding: rows of ``embeddings`` (a gather of the
    variable; non-integer ids are cast to int32, as Keras)."""

    def __init__(self, input_dim: int, output_dim: int, embeddings_initializer: Any = "uniform", mask_zero: bool = False, **kwargs: Any) -> None:
        if mask_zero:
            raise NotImplementedError("tf.keras.layers.Embedding: mask_zero is not in gradtape.tf")
        kwargs.pop("input_length", None)
        super().__init__(**kwargs)
        self.input_dim, self.output_dim = int(input_dim), int(output_dim)
        self.embeddings_initializer = embeddings_initializer

    def build(self, input_shape: Any = None) -> None:
        self.embeddings = self.add_weight((self.input_dim, self.output_dim), self.embeddings_initializer, name="embeddings")
        self.built = True

    def call(self, inputs: Any) -> Tensor:
        ids = convert_to_tensor(inputs)
        if ids.dtype not in (np.int32, np.int64):
            ids = cast(ids, np.int32)
        return _nn.embedding_lookup(self.embeddings, ids)


class LayerNormalization(Layer):
    """tf.keras.layers.LayerNormalization, Keras 3's composition:
    mean, variance = tf.nn.moments(x, axis, keepdims=True);
    inv = rsqrt(variance + epsilon) * gamma; x * inv + (beta - mean * inv)."""

    def __init__(self, axis: Any = -1, epsilon: float = 1e-3, center: bool = True, scale: bool = True, rms_scaling: bool = False,
                 beta_initializer: Any = "zeros", gamma_initializer: Any = "ones", **kwargs: Any) -> None:
        if rms_scaling:
            raise NotImplementedError("tf.keras.layers.LayerNormalization: rms_scaling is not in gradtape.tf")
        super().__init__(**kwargs)
        self.axis = axis if isinstance(axis, int) else list(axis)
        self.epsilon, self.center, self.scale = float(epsilon), center, scale
        self.beta_initializer, self.gamma_initializer = beta_initializer, gamma_initializer

    def build(self, input_shape: Any) -> None:
        n = len(input_shape)
        axes = [self.axis] if isinstance(self.axis, int) else self.axis
        self._axes = sorted(a % n for a in axes)
        shape = tuple(int(input_shape[a]) for a in self._axes)
        self.gamma = self.add_weight(shape, self.gamma_initializer, name="gamma") if self.scale else None
        self.beta = self.add_weight(shape, self.beta_initializer, name="beta") if self.center else None
        self._broadcast = [int(input_shape[i]) if i in self._axes else 1 for i in range(n)]
        self.built = True

    def call(self, inputs: Any) -> Tensor:
        x = convert_to_tensor(inputs)
        n = x.ndim
        last = self._axes == [n - 1]

        def bc(v: Optional[_Variable]) -> Any:
            return v if v is None or last else reshape(v, self._broadcast)

        mean, variance = _nn.moments(x, self._axes, keepdims=True)
        inv = _run("Rsqrt", [add(variance, x.session.scalar(self.epsilon, x.dtype))])
        gamma, beta = bc(self.gamma), bc(self.beta)
        if gamma is not None:
            inv = multiply(inv, gamma)
        res = multiply(negative(mean), inv)
        if beta is not None:
            res = add(res, beta)
        return add(multiply(x, inv), res)


class Dropout(Layer):
    """tf.keras.layers.Dropout: the input at inference (``training`` None
    or False, as in a custom loop outside fit); with training=True, TF's
    stateless dropout with a fresh seed per call, drawn from ``seed`` (a
    seeded layer gives the same masks on every run; not Keras' masks)."""

    def __init__(self, rate: float, noise_shape: Any = None, seed: Optional[int] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not 0 <= rate <= 1:
            raise ValueError(f"Invalid value received for argument `rate`. Expected a float value between 0 and 1. Received: rate={rate}")
        self.rate, self.noise_shape, self.seed = float(rate), noise_shape, seed
        self._calls = 0
        self._base_seed = int(seed) if seed is not None else None

    def call(self, inputs: Any, training: Any = None) -> Tensor:
        x = convert_to_tensor(inputs)
        if not training or self.rate == 0:
            return x
        if self.rate == 1.0:
            return _run("ZerosLike", [x])
        if self._base_seed is None:
            self._base_seed = _random._get_seed(None)[1] & 0x7FFFFFFF
        seed = [self._base_seed, self._calls]
        self._calls += 1
        return _nn.stateless_dropout(x, self.rate, seed=seed, noise_shape=self.noise_shape)


class Conv2D(Layer):
    """tf.keras.layers.Conv2D (channels_last): tf.nn.convolution + bias."""

    def __init__(self, filters: int, kernel_size: Any, strides: Any = (1, 1), padding: str = "valid", data_format: Optional[str] = None,
                 dilation_rate: Any = (1, 1), groups: int = 1, activation: Any = None, use_bias: bool = True,
                 kernel_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros", **kwargs: Any) -> None:
        _channels_last(data_format, "Conv2D")
        if groups != 1:
            raise NotImplementedError("tf.keras.layers.Conv2D: groups != 1 is not in gradtape.tf")
        super().__init__(**kwargs)
        self.filters, self.kernel_size = int(filters), _pair(kernel_size, "kernel_size")
        self.strides, self.dilation_rate = _pair(strides, "strides"), _pair(dilation_rate, "dilation_rate")
        self.padding, self.use_bias = padding.lower(), use_bias
        self.activation = _activation(activation)
        self.kernel_initializer, self.bias_initializer = kernel_initializer, bias_initializer

    def build(self, input_shape: Any) -> None:
        shape = self.kernel_size + (int(input_shape[-1]), self.filters)
        self.kernel = self.add_weight(shape, self.kernel_initializer, name="kernel")
        self.bias = self.add_weight((self.filters,), self.bias_initializer, name="bias") if self.use_bias else None
        self.built = True

    def call(self, inputs: Any) -> Tensor:
        y = _nn.conv2d(inputs, self.kernel, list(self.strides), self.padding.upper(), dilations=list(self.dilation_rate))
        if self.bias is not None:
            y = add(y, reshape(self.bias, [1, 1, 1, self.filters]))
        return self.activation(y)


class _Pooling2D(Layer):
    _fn: Callable[..., Tensor]

    def __init__(self, pool_size: Any = (2, 2), strides: Any = None, padding: str = "valid", data_format: Optional[str] = None, **kwargs: Any) -> None:
        _channels_last(data_format, type(self).__name__)
        super().__init__(**kwargs)
        self.pool_size = _pair(pool_size, "pool_size")
        self.strides = self.pool_size if strides is None else _pair(strides, "strides")
        self.padding = padding.lower()

    def call(self, inputs: Any) -> Tensor:
        return type(self)._fn(inputs, list(self.pool_size), list(self.strides), self.padding.upper())


class MaxPooling2D(_Pooling2D):
    """tf.keras.layers.MaxPooling2D (channels_last)."""

    _fn = staticmethod(_nn.max_pool2d)


class AveragePooling2D(_Pooling2D):
    """tf.keras.layers.AveragePooling2D (channels_last; "same" averages the
    cells inside the input, as TF)."""

    _fn = staticmethod(_nn.avg_pool2d)

    def __init__(self, pool_size: Any, strides: Any = None, padding: str = "valid", data_format: Optional[str] = None, **kwargs: Any) -> None:
        # Keras 3: pool_size has no default here (MaxPooling2D's is (2, 2)).
        super().__init__(pool_size, strides, padding, data_format, **kwargs)


MaxPool2D, AvgPool2D = MaxPooling2D, AveragePooling2D


class Flatten(Layer):
    """tf.keras.layers.Flatten: (batch, everything else)."""

    def __init__(self, data_format: Optional[str] = None, **kwargs: Any) -> None:
        _channels_last(data_format, "Flatten")
        super().__init__(**kwargs)

    def call(self, inputs: Any) -> Tensor:
        x = convert_to_tensor(inputs)
        shape = tuple(x.shape)
        return reshape(x, [shape[0], int(np.prod(shape[1:]))] if x.ndim > 1 else [shape[0], 1])


class Activation(Layer):
    def __init__(self, activation: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.activation = _activation(activation)

    def call(self, inputs: Any) -> Tensor:
        return self.activation(convert_to_tensor(inputs))


class Sequential(Layer):
    """tf.keras.Sequential as a callable: the layers in order, each built at
    its first call; ``training`` goes to the layers that take it."""

    def __init__(self, layers: Optional[Sequence[Layer]] = None, trainable: bool = True, name: Optional[str] = None) -> None:
        super().__init__(trainable=trainable, name=name)
        self.layers: List[Layer] = []
        for layer in layers or []:
            self.add(layer)

    def add(self, layer: Layer) -> None:
        if not isinstance(layer, Layer):
            raise ValueError(f"Only instances of `keras.Layer` can be added to a Sequential model. Received: {layer}")
        self.layers.append(layer)
        self._sublayers.append(layer)

    def pop(self) -> Layer:
        layer = self.layers.pop()
        self._sublayers.remove(layer)
        return layer

    def __call__(self, inputs: Any, training: Any = None, **kwargs: Any) -> Any:
        self.built = True
        x = inputs
        for layer in self.layers:
            x = layer(x, training=training) if _accepts(layer.call, "training") else layer(x)
        return x

    def summary(self) -> None:
        for layer in self.layers:
            print(f"{layer.name} ({type(layer).__name__}): {sum(int(np.prod(w.shape)) for w in layer.weights)} params")


__all__ = [
    "Layer", "Dense", "Embedding", "LayerNormalization", "Dropout", "Conv2D", "MaxPooling2D", "AveragePooling2D",
    "MaxPool2D", "AvgPool2D", "Flatten", "Activation",
]
