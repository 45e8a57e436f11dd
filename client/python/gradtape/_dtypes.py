"""numpy dtypes <-> gradtape.v1.DType, TensorValue encoding (internal)."""

from __future__ import annotations

from typing import Any, Union

import numpy as np

from gradtape.v1 import tape_service_pb2 as pb

RESOURCE = np.dtype([("resource", "<i8")])  # marks a variable handle

_TO_PB = {
    np.dtype(np.float32): pb.DTYPE_FLOAT32,
    np.dtype(np.float64): pb.DTYPE_FLOAT64,
    np.dtype(np.int32): pb.DTYPE_INT32,
    np.dtype(np.int64): pb.DTYPE_INT64,
    np.dtype(np.bool_): pb.DTYPE_BOOL,
    np.dtype(np.complex64): pb.DTYPE_COMPLEX64,
    np.dtype(np.complex128): pb.DTYPE_COMPLEX128,
}
_FROM_PB = {v: k for k, v in _TO_PB.items()}
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
    if isinstance(dtype, int) and dtype in _FROM_PB:
        return _FROM_PB[dtype]
    return np.dtype(dtype)


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
    return pb.TensorValue(dtype=dtype, shape=list(array.shape), data=data)


def from_value(value: pb.TensorValue) -> np.ndarray:
    """Decodes a TensorValue into a fresh, writable array (a resource handle
    decodes to int64 handle ids)."""
    if value.dtype == pb.DTYPE_RESOURCE:
        dtype = np.dtype("<i8")
    else:
        dtype = _FROM_PB[value.dtype].newbyteorder("<")
    array = np.frombuffer(value.data, dtype=dtype).reshape(tuple(value.shape))
    return array.astype(dtype.newbyteorder("="), copy=True)
