"""numpy dtypes <-> gradtape.v1.DType, TensorValue encoding (internal)."""

from __future__ import annotations

import warnings
from typing import Any, Dict, Union, cast

import numpy as np

from gradtape.v1 import tape_service_pb2 as pb

RESOURCE = np.dtype([("resource", "<i8")])  # marks a variable handle

_TO_PB: Dict[np.dtype, int] = {
    np.dtype(np.float32): pb.DTYPE_FLOAT32,
    np.dtype(np.float64): pb.DTYPE_FLOAT64,
    np.dtype(np.int32): pb.DTYPE_INT32,
    np.dtype(np.int64): pb.DTYPE_INT64,
    np.dtype(np.bool_): pb.DTYPE_BOOL,
    np.dtype(np.complex64): pb.DTYPE_COMPLEX64,
    np.dtype(np.complex128): pb.DTYPE_COMPLEX128,
}
_FROM_PB: Dict[int, np.dtype] = {v: k for k, v in _TO_PB.items()}
_NAMES = {
    "float32": np.float32,
    "float": np.float32,
    "float64": np.float64,
    "double": np.float64,
    "int32": np.int32,
    "int64": np.int64,
    "bool": np.bool_,
    "complex64": np.complex64,
    "complex128": np.complex128,
}

DTypeLike = Union[str, type, np.dtype]


def as_numpy_dtype(dtype: Any) -> np.dtype:
    """A numpy dtype from a numpy dtype, a scalar type or a name like "float32"."""
    if isinstance(dtype, str) and dtype.lower() in _NAMES:
        return np.dtype(_NAMES[dtype.lower()])
    if isinstance(dtype, (float, complex, bool)):
        raise TypeError(f"not a dtype: {dtype!r}")
    if isinstance(dtype, int) and dtype in _FROM_PB:
        known: np.dtype = _FROM_PB[dtype]
        return known
    if hasattr(dtype, "as_numpy_dtype"):  # a tf.DType (tf.float32, ...)
        dtype = dtype.as_numpy_dtype
    d: np.dtype = np.dtype(dtype)
    return d


def to_pb_dtype(dtype: Any) -> int:
    d = as_numpy_dtype(dtype)
    if d not in _TO_PB:
        raise TypeError(f"gradtape has no dtype for numpy {d}")
    return _TO_PB[d]


def from_pb_dtype(value: int) -> np.dtype:
    if value == pb.DTYPE_RESOURCE:
        return RESOURCE
    return _FROM_PB[value]


def to_value(array: np.ndarray) -> pb.TensorValue:
    """Encodes an array (row-major, little-endian)."""
    dtype = to_pb_dtype(array.dtype)
    data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
    return pb.TensorValue(dtype=cast("pb.DType.ValueType", dtype), shape=list(array.shape), data=data)


def from_value(value: pb.TensorValue) -> np.ndarray:
    """Decodes a TensorValue into a fresh, writable array (a resource handle
    decodes to int64 handle ids)."""
    if value.dtype == pb.DTYPE_RESOURCE:
        dtype = np.dtype("<i8")
    else:
        dtype = _FROM_PB[value.dtype].newbyteorder("<")
    array = np.frombuffer(value.data, dtype=dtype).reshape(tuple(value.shape))
    return array.astype(dtype.newbyteorder("="), copy=True)


# ---------------------------------------------------------------------------
# Python and numpy values -> arrays, by TensorFlow's rules (TF 2.21 eager)
#
# Without a dtype (tf.constant, tf.Variable): Python floats are float32,
# ints int32 (int64 when out of int32's range, ValueError beyond int64),
# bools bool, complex numbers complex128; numpy arrays and scalars keep
# their dtype (a list that holds numpy values too).
#
# To a given dtype (an operand of the other's dtype, tf.constant(v, dtype)):
# numpy values are cast (astype: rounds, truncates, wraps, as TF does);
# Python values convert only up the chain bool -> int -> float -> complex
# (TypeError otherwise: 0.5 or 1.0 to int32, 1 to bool, 1j to float32),
# rounding to the dtype's precision (0.1 * float32 is float32(0.1)) and
# wrapping ints to the dtype's width, as TF does.

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_I32 = np.dtype(np.int32)
_I64 = np.dtype(np.int64)
_BOOL = np.dtype(np.bool_)
_C128 = np.dtype(np.complex128)
# Python kinds each dtype kind accepts (numpy kind letters).
_ACCEPTS = {"b": "b", "i": "bi", "u": "bi", "f": "bif", "c": "bifc"}


def _has_numpy(value: Any) -> bool:
    for v in value:
        if isinstance(v, (np.ndarray, np.generic)):
            return True
        if isinstance(v, (list, tuple)) and _has_numpy(v):
            return True
    return False


def _python_array(value: Any) -> np.ndarray:
    """A Python scalar or (nested) list as numpy infers it; ValueError for
    ints beyond int64 (TF: "out-of-range integer"), TypeError for strings."""
    array = np.asarray(value)
    kind = array.dtype.kind
    if kind in "OuUS":
        if kind in "US":
            raise TypeError(f"gradtape has no string tensors (got {value!r})")
        raise ValueError(f"cannot convert {value!r} to a tensor: an integer out of int64's range or mixed types")
    return array


def default_array(value: Any) -> np.ndarray:
    """`value` as an array of TensorFlow's default dtype (see above)."""
    t = type(value)
    if t is float:
        with np.errstate(over="ignore"):
            return np.array(value, _F32)
    if t is int:
        if _INT32_MIN <= value <= _INT32_MAX:
            return np.array(value, _I32)
        if _INT64_MIN <= value <= _INT64_MAX:
            return np.array(value, _I64)
        raise ValueError(f"cannot convert {value!r} to a tensor: out of int64's range")
    if t is bool:
        return np.array(value, _BOOL)
    if t is complex:
        return np.array(value, _C128)
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, (list, tuple)):
        array = _python_array(value)
        if array.dtype == _F64 and not _has_numpy(value):
            with np.errstate(over="ignore"):
                return array.astype(_F32)
        if array.dtype == _I64 and not _has_numpy(value):
            if array.size == 0 or (array.min() >= _INT32_MIN and array.max() <= _INT32_MAX):
                return array.astype(_I32)
        return array
    return np.asarray(value)


def convert_array(value: Any, dtype: np.dtype) -> np.ndarray:
    """`value` (not a Tensor) as an array of `dtype` (see above); TypeError
    where TensorFlow raises one."""
    if isinstance(value, (np.ndarray, np.generic)):
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy's ComplexWarning: TF drops the imaginary part too
            return np.asarray(value).astype(dtype, copy=False)
    if isinstance(value, (list, tuple)) and _has_numpy(value):
        return np.asarray(value).astype(dtype)
    array = _python_array(value)
    if array.size and array.dtype.kind not in _ACCEPTS.get(dtype.kind, ""):
        raise TypeError(f"cannot convert {value!r} to a tensor of dtype {dtype.name}")
    with np.errstate(over="ignore"):
        return array.astype(dtype)
