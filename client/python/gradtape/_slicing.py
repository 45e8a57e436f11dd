"""``tensor[key]`` as TensorFlow's StridedSlice (internal).

The key is parsed as TensorFlow's ``_slice_helper`` parses it: a list is a
tuple of indices (``x[[0, 1]]`` is ``x[0, 1]``), ints shrink an axis,
slices set begin / end / strides with begin_mask / end_mask for missing
bounds, ``...`` sets ellipsis_mask, ``None`` new_axis_mask. The output
shape is known without a round trip when the input's is (numpy's basic
indexing agrees with StridedSlice on every such key; an index out of range
leaves the shape unknown and the server reports it).
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

import numpy as np

from gradtape import _backend

if TYPE_CHECKING:
    from gradtape._tensor import Tensor

_INT32_MAX = (1 << 31) - 1


def _index(value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not (
        isinstance(value, (int, np.integer)) or hasattr(value, "__index__")
    ):
        raise TypeError(
            "Only integers, slices (`:`), ellipsis (`...`), None (newaxis) and scalar int32/int64 "
            f"tensors are valid indices, got {value!r}"
        )
    try:
        return operator.index(value)
    except (AttributeError, TypeError):
        raise TypeError(f"a slice index must be an integer scalar, got {value!r}") from None


def parse(key: Any) -> Tuple[List[int], List[int], List[int], List[Tuple[str, int]], Tuple[Any, ...]]:
    """(begin, end, strides, masks as (attr, value), the key as a tuple)."""
    if isinstance(key, (bool, np.bool_)):
        raise ValueError("gradtape: a bool index (a boolean mask) is not supported; mask cannot be scalar")
    spec = tuple(key) if isinstance(key, (list, tuple)) else (key,)
    begin: List[int] = []
    end: List[int] = []
    strides: List[int] = []
    masks = {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0}
    normalized: List[Any] = []
    for i, s in enumerate(spec):
        bit = 1 << i
        if isinstance(s, slice):
            start, stop, step = (None if v is None else _index(v) for v in (s.start, s.stop, s.step))
            begin.append(0 if start is None else start)
            end.append(0 if stop is None else stop)
            strides.append(1 if step is None else step)
            if start is None:
                masks["begin_mask"] |= bit
            if stop is None:
                masks["end_mask"] |= bit
            normalized.append(slice(start, stop, step))
        elif s is Ellipsis:
            begin.append(0)
            end.append(0)
            strides.append(1)
            masks["ellipsis_mask"] |= bit
            normalized.append(s)
        elif s is None:
            begin.append(0)
            end.append(0)
            strides.append(1)
            masks["new_axis_mask"] |= bit
            normalized.append(s)
        else:
            v = _index(s)
            begin.append(v)
            end.append(v + 1)
            strides.append(1)
            masks["shrink_axis_mask"] |= bit
            normalized.append(v)
    return begin, end, strides, sorted(masks.items()), tuple(normalized)


def result_shape(shape: Optional[Tuple[int, ...]], key: Tuple[Any, ...]) -> Optional[Tuple[int, ...]]:
    """The output shape of the slice of a tensor of `shape`; None if unknown
    (also when the server will refuse the key: out-of-range index, step 0,
    two ellipses, too many indices)."""
    if shape is None:
        return None
    try:
        view = np.broadcast_to(np.empty((), dtype=np.bool_), shape)  # no memory of `shape`'s size
        if any(isinstance(k, slice) and k.step == 0 for k in key):
            return None
        return tuple(view[key].shape)
    except (IndexError, ValueError, TypeError):
        return None


def _cache_key(key: Any) -> Any:
    """A hashable form of a key made of ints, None, ... and slices of ints
    (None for anything else: numpy ints, Tensors, bools are not cached)."""
    spec = key if type(key) is tuple else (key,)
    out: List[Any] = []
    for k in spec:
        t = type(k)
        if t is int or k is None or k is Ellipsis:
            out.append(k)
        elif t is slice:
            for v in (k.start, k.stop, k.step):
                if v is not None and type(v) is not int:
                    return None
            out.append((k.start, k.stop, k.step))
        else:
            return None
    return tuple(out)


_MAX_CACHED = 256


def strided_slice(x: "Tensor", key: Any) -> "Tensor":
    """x[key] (buffered; see the module's docstring). The inputs and attrs
    of a key seen before on the same shape come from a per-session cache."""
    s = x._session
    ck = _cache_key(key)
    if ck is not None:
        hit = s._slices.get((ck, x._shape))
        if hit is not None:
            return s._execute_encoded("StridedSlice", [x] + hit[0], hit[1], x._dtype, hit[2])
    begin, end, strides, masks, normalized = parse(key)
    shape = result_shape(x._shape, normalized)
    spec = s._specs.get("StridedSlice")
    if spec is None:
        raise NotImplementedError("gradtape: slicing needs the server op StridedSlice, which this server does not register")
    encoded: List[_backend.EncodedAttr] = [(name, _backend.ATTR_INT, value) for name, value in masks if name in spec.attr_types]
    if spec.num_inputs >= 4:  # TensorFlow's signature: begin, end, strides are tensors
        wide = any(abs(v) > _INT32_MAX for v in begin + end + strides)
        dtype = np.dtype(np.int64) if wide else np.dtype(np.int32)
        inputs = [s._index_vector(v, dtype) for v in (begin, end, strides)]
    else:  # begin, end, strides as list(int) attrs
        inputs = []
        encoded += [(n, _backend.ATTR_INTS, v) for n, v in (("begin", begin), ("end", end), ("strides", strides))]
    if ck is not None and len(s._slices) < _MAX_CACHED:
        s._slices[(ck, x._shape)] = (inputs, encoded, shape)
    return s._execute_encoded("StridedSlice", [x] + inputs, encoded, x._dtype, shape)
