"""gradtape.tf's top-level array functions: concat, stack, unstack, split,
expand_dims, squeeze, tile, fill, range, reverse, pad, broadcast_to,
one_hot, gather, gather_nd, scatter_nd, slice, strided_slice (internal).

Each runs the server op TensorFlow's function runs (ConcatV2, Pack, Unpack,
Split / SplitV, ExpandDims, Squeeze, Tile, Fill, Range, ReverseV2, Pad /
PadV2 / MirrorPad, BroadcastTo, OneHot, GatherV2, GatherNd, ScatterNd,
Slice, StridedSlice) with TensorFlow's argument names and defaults; shape
arithmetic on known shapes is done here, values are computed on the server.
"""

from __future__ import annotations

import builtins
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from gradtape import _dtypes
from gradtape._tensor import Tensor, Variable as _Variable
from gradtape.tf._base import TensorLike, _run, _session, _shape_list, _tf_array, cast, convert_to_tensor, identity

newaxis = None


def _ints(session: Any, values: Any, dtype: Any = np.int32) -> Tensor:
    """An int32 (or `dtype`) constant of `values` on `session`; a Tensor of
    ints passes unchanged."""
    if isinstance(values, (Tensor, _Variable)):
        return convert_to_tensor(values)
    out: Tensor = session.constant(np.asarray(values, dtype=dtype))
    return out


def _int(value: Any) -> int:
    """A Python int of a static argument (an int, a numpy int or a scalar
    Tensor, whose value is read)."""
    if isinstance(value, (Tensor, _Variable)):
        return int(np.asarray(value))
    return int(value)


def _shaped(out: Tensor, shape: Optional[Sequence[int]]) -> Tensor:
    """`out` with its shape set from the inputs' known shapes (so that
    asking for it later does not fetch the value)."""
    if out._shape is None and shape is not None:
        out._shape = tuple(int(d) for d in shape)
    return out


def _norm_axis(axis: Any, rank: int, fn: str) -> int:
    a = _int(axis)
    if not -rank <= a < rank:
        raise ValueError(f"{fn}: axis {a} is out of range for a tensor of rank {rank}")
    return a + rank if a < 0 else a


# -- concat, stack, split --------------------------------------------------


def _same_dtype(values: Sequence[TensorLike]) -> List[Tensor]:
    """A list op's values: Python values take the dtype of the first Tensor
    among them (the op's one T, as TF infers it), else TF's inference."""
    hint = next((v.dtype for v in values if isinstance(v, (Tensor, _Variable))), None)
    return [convert_to_tensor(v) if hint is None or isinstance(v, (Tensor, _Variable)) else convert_to_tensor(v, dtype=hint) for v in values]


def concat(values: Sequence[TensorLike], axis: Any, name: str = "concat") -> Tensor:
    """tf.concat: ConcatV2 along `axis` (one value: its identity, as TF)."""
    if not isinstance(values, (list, tuple)):
        values = [values]
    ts = _same_dtype(values)
    if len(ts) == 1:
        return identity(ts[0])
    a = _int(axis)
    out = _run("ConcatV2", ts + [_ints(ts[0].session, a)])
    shapes = [t._shape for t in ts]
    if all(sh is not None and len(sh) == len(shapes[0] or ()) for sh in shapes) and shapes[0]:
        n = len(shapes[0] or ())
        if -n <= a < n:
            ax = a % n
            dims = list(shapes[0] or ())
            dims[ax] = sum((sh or ())[ax] for sh in shapes)
            _shaped(out, dims)
    return out


def stack(values: Sequence[TensorLike], axis: int = 0, name: str = "stack") -> Tensor:
    """tf.stack: Pack along a new `axis`."""
    ts = _same_dtype(values)
    if not ts:
        raise ValueError("tf.stack: values must be a non-empty list")
    a = _int(axis)
    out: Tensor = ts[0].session.execute("Pack", ts, {"axis": a})[0]
    first = ts[0]._shape
    if first is not None and all(t._shape == first for t in ts) and -len(first) - 1 <= a <= len(first):
        dims = list(first)
        dims.insert(a % (len(first) + 1), len(ts))
        _shaped(out, dims)
    return out


def unstack(value: TensorLike, num: Optional[int] = None, axis: int = 0, name: str = "unstack") -> List[Tensor]:
    """tf.unstack: Unpack along `axis` (`num` defaults to that dim)."""
    t = convert_to_tensor(value)
    a = _norm_axis(axis, t.ndim, "tf.unstack")
    n = t.shape[a] if num is None else _int(num)
    if num is not None and n != t.shape[a]:
        raise ValueError(f"tf.unstack: num {n} is not the size {t.shape[a]} of axis {a}")
    rest = [d for i, d in enumerate(t.shape) if i != a]
    return [_shaped(o, rest) for o in t.session.execute("Unpack", [t], {"num": n, "axis": a})]


def split(value: TensorLike, num_or_size_splits: Any, axis: Any = 0, num: Optional[int] = None, name: str = "split") -> List[Tensor]:
    """tf.split: Split into `num_or_size_splits` equal pieces (an int), or
    SplitV into pieces of the given sizes (one may be -1: the rest)."""
    t = convert_to_tensor(value)
    s = t.session
    ax = _ints(s, _int(axis))
    if isinstance(num_or_size_splits, (Tensor, _Variable)) and convert_to_tensor(num_or_size_splits).ndim == 0:
        raise ValueError(
            "Rank-0 tensors are not supported as the num_or_size_splits argument to split. "
            f"Argument provided: {num_or_size_splits}"
        )
    if isinstance(num_or_size_splits, (int, np.integer)):
        n = int(num_or_size_splits)
        outs = list(s.execute("Split", [ax, t], {"num_split": n}))
        if t._shape is not None and n > 0 and -t.ndim <= _int(axis) < t.ndim and t._shape[_int(axis) % t.ndim] % n == 0:
            dims = list(t._shape)
            dims[_int(axis) % t.ndim] //= n
            outs = [_shaped(o, dims) for o in outs]
        return outs
    sizes = _shape_list(num_or_size_splits)
    n = len(sizes) if num is None else _int(num)
    if n != len(sizes):
        raise ValueError(f"tf.split: num {n} is not the number {len(sizes)} of size_splits")
    outs = list(s.execute("SplitV", [t, _ints(s, sizes), ax], {"num_split": n}))
    if t._shape is not None and -t.ndim <= _int(axis) < t.ndim and sizes.count(-1) <= 1:
        a = _int(axis) % t.ndim
        rest = t._shape[a] - sum(v for v in sizes if v != -1)
        if rest >= 0 and (rest == 0 or -1 in sizes):
            for o, size in zip(outs, sizes):
                dims = list(t._shape)
                dims[a] = rest if size == -1 else size
                _shaped(o, dims)
    return outs


# -- layout ----------------------------------------------------------------


def expand_dims(input: TensorLike, axis: Any, name: Optional[str] = None) -> Tensor:  # noqa: A002
    """tf.expand_dims: ExpandDims at `axis` (in [-rank - 1, rank])."""
    t = convert_to_tensor(input)
    a = _int(axis)
    out = _run("ExpandDims", [t, _ints(t.session, a)])
    if t._shape is not None and -len(t._shape) - 1 <= a <= len(t._shape):
        dims = list(t._shape)
        dims.insert(a % (len(dims) + 1), 1)
        _shaped(out, dims)
    return out


def squeeze(input: TensorLike, axis: Any = None, name: Optional[str] = None) -> Tensor:  # noqa: A002
    """tf.squeeze: Squeeze `axis` (an int or a list; None: every size-1 dim)."""
    t = convert_to_tensor(input)
    dims = [] if axis is None else _shape_list(axis)
    out = _run("Squeeze", [t], {"squeeze_dims": dims})
    sh = t._shape
    if sh is not None and all(-len(sh) <= d < len(sh) and sh[d] == 1 for d in dims):
        drop = {d % len(sh) for d in dims} if dims else {i for i, d in enumerate(sh) if d == 1}
        _shaped(out, [d for i, d in enumerate(sh) if i not in drop])
    return out


def tile(input: TensorLike, multiples: Any, name: Optional[str] = None) -> Tensor:  # noqa: A002
    """tf.tile: Tile by `multiples`."""
    t = convert_to_tensor(input)
    m = _shape_list(multiples)
    out = _run("Tile", [t, _ints(t.session, m)])
    if t._shape is not None and len(m) == len(t._shape) and min(m, default=0) >= 0:
        _shaped(out, [d * k for d, k in zip(t._shape, m)])
    return out


def fill(dims: Any, value: TensorLike, name: Optional[str] = None, layout: Any = None) -> Tensor:
    """tf.fill: Fill (the gradient reaches `value`, as TF's)."""
    v = convert_to_tensor(value)
    d = _shape_list(dims)
    return _shaped(_run("Fill", [_ints(v.session, d), v]), d)


_RANGE_ORDER = [np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.float32), np.dtype(np.float64)]


def range(start: Any, limit: Any = None, delta: Any = 1, dtype: Optional[Any] = None, name: str = "range") -> Tensor:  # noqa: A001
    """tf.range: Range, with TF's dtype inference (the widest of the
    arguments' dtypes in int32 < int64 < float32 < float64; Python ints
    int32, floats float32) or `dtype`."""
    if limit is None:
        start, limit = 0, start
    args = [start, limit, delta]
    if dtype is not None:
        d = _dtypes.as_numpy_dtype(dtype)
    else:
        kinds = [a.dtype if isinstance(a, (Tensor, _Variable)) else _tf_array(a, None).dtype for a in args]
        d = builtins.max(kinds, key=lambda k: _RANGE_ORDER.index(k) if k in _RANGE_ORDER else -1)
    ts = [cast(convert_to_tensor(a), d) if isinstance(a, (Tensor, _Variable)) else convert_to_tensor(np.asarray(a, dtype=d)) for a in args]
    return _run("Range", ts)


def reverse(tensor: TensorLike, axis: Any, name: Optional[str] = None) -> Tensor:
    """tf.reverse: ReverseV2 along the dims in `axis`."""
    t = convert_to_tensor(tensor)
    return _shaped(_run("ReverseV2", [t, _ints(t.session, _shape_list(axis))]), t._shape)


def pad(tensor: TensorLike, paddings: Any, mode: str = "CONSTANT", constant_values: Any = 0, name: Optional[str] = None) -> Tensor:
    """tf.pad: Pad (zeros), PadV2 (`constant_values`) or MirrorPad
    (REFLECT, SYMMETRIC); `mode` is case-insensitive, as in TF."""
    t = convert_to_tensor(tensor)
    pairs = np.asarray(paddings).reshape(-1, 2)
    p = _ints(t.session, pairs.astype(np.int64) if pairs.dtype == np.int64 else pairs.astype(np.int32))
    padded = None if t._shape is None or len(pairs) != len(t._shape) else [d + int(b) + int(e) for d, (b, e) in zip(t._shape, pairs)]
    return _shaped(_pad(t, p, str(mode).upper(), mode, constant_values), padded)


def _pad(t: Tensor, p: Tensor, m: str, mode: Any, constant_values: Any) -> Tensor:
    if m == "CONSTANT":
        if not isinstance(constant_values, (Tensor, _Variable)) and np.all(np.asarray(constant_values) == 0):
            return _run("Pad", [t, p])
        c = constant_values if isinstance(constant_values, (Tensor, _Variable)) else np.asarray(constant_values, dtype=t.dtype)
        return _run("PadV2", [t, p, convert_to_tensor(c, dtype=t.dtype)])
    if m in ("REFLECT", "SYMMETRIC"):
        return _run("MirrorPad", [t, p], {"mode": m})
    raise ValueError(f'tf.pad: unknown padding mode: {mode} (CONSTANT, REFLECT or SYMMETRIC)')


def broadcast_to(input: TensorLike, shape: Any, name: Optional[str] = None) -> Tensor:  # noqa: A002
    """tf.broadcast_to: BroadcastTo."""
    return _run("BroadcastTo", [convert_to_tensor(input)], {"shape": _shape_list(shape)})


def one_hot(
    indices: TensorLike,
    depth: Any,
    on_value: Any = None,
    off_value: Any = None,
    axis: Optional[int] = None,
    dtype: Optional[Any] = None,
    name: Optional[str] = None,
) -> Tensor:
    """tf.one_hot: OneHot; the dtype is `dtype`, else that of on_value or
    off_value, else float32 (TF's rule). on_value and off_value are the op's
    float attrs here: no gradient reaches them (TF's does)."""
    t = convert_to_tensor(indices)
    given = [v for v in (on_value, off_value) if v is not None]
    if dtype is not None:
        d = _dtypes.as_numpy_dtype(dtype)
    elif given:
        g = given[0]
        d = g.dtype if isinstance(g, (Tensor, _Variable)) else _tf_array(g, None).dtype
    else:
        d = np.dtype(np.float32)
    on = 1 if on_value is None else np.asarray(on_value).item()
    off = 0 if off_value is None else np.asarray(off_value).item()
    # The server's OneHot makes float32 / float64: other dtypes are made as
    # float64 (exact for ints below 2**53) and cast.
    made = d if d in (np.dtype(np.float32), np.dtype(np.float64)) else np.dtype(np.float64)
    attrs = {"depth": _int(depth), "T": made, "on_value": float(on), "off_value": float(off), "axis": -1 if axis is None else _int(axis)}
    out = _run("OneHot", [t], attrs)
    return out if made == d else cast(out, d)


# -- gather, scatter, slices ------------------------------------------------


def gather(
    params: TensorLike,
    indices: TensorLike,
    validate_indices: Any = None,
    axis: Any = None,
    batch_dims: int = 0,
    name: Optional[str] = None,
) -> Tensor:
    """tf.gather: GatherV2 (`axis` defaults to `batch_dims`; negative ones
    count from the end, as TF's)."""
    p, i = convert_to_tensor(params), convert_to_tensor(indices)
    b = _int(batch_dims)
    if b < 0:
        b += i.ndim
    a = b if axis is None else _int(axis)
    if a < 0:
        a += p.ndim
    return _run("GatherV2", [p, i], {"axis": a, "batch_dims": b})


def _batch_coordinates(index_shape: Sequence[int], batch_dims: int, dtype: np.dtype) -> np.ndarray:
    """The first `batch_dims` coordinates of every index position: shape
    index_shape + [batch_dims] (from the shape only)."""
    grids = np.indices(tuple(index_shape[:batch_dims]), dtype=dtype)  # [b, B1..Bb]
    grids = np.moveaxis(grids, 0, -1).reshape(tuple(index_shape[:batch_dims]) + (1,) * (len(index_shape) - batch_dims) + (batch_dims,))
    return np.broadcast_to(grids, tuple(index_shape) + (batch_dims,)).copy()


def gather_nd(params: TensorLike, indices: TensorLike, batch_dims: int = 0, name: Optional[str] = None, bad_indices_policy: str = "") -> Tensor:
    """tf.gather_nd: GatherNd; with batch_dims > 0 the batch coordinates are
    put in front of each index (the same result as TF's batch_gather_nd)."""
    p, i = convert_to_tensor(params), convert_to_tensor(indices)
    if bad_indices_policy not in ("", "DEFAULT", "ERROR"):
        raise NotImplementedError(f"tf.gather_nd: bad_indices_policy={bad_indices_policy!r} (out of range is an error here)")
    b = _int(batch_dims)
    if b == 0:
        return _run("GatherNd", [p, i])
    if b < 0 or b >= i.ndim:
        raise ValueError(f"tf.gather_nd: batch_dims {b} must be in [0, rank(indices)) = [0, {i.ndim})")
    coords = i.session.constant(_batch_coordinates(i.shape[:-1], b, i.dtype))
    full = concat([coords, i], axis=-1)
    return _run("GatherNd", [p, full])


def scatter_nd(indices: TensorLike, updates: TensorLike, shape: Any, bad_indices_policy: str = "", name: Optional[str] = None) -> Tensor:
    """tf.scatter_nd: ScatterNd (duplicates add up)."""
    i, u = convert_to_tensor(indices), convert_to_tensor(updates)
    d = _shape_list(shape)
    return _shaped(_run("ScatterNd", [i, u, _ints(i.session, d, i.dtype)]), d)


def slice(input_: TensorLike, begin: Any, size: Any, name: Optional[str] = None) -> Tensor:  # noqa: A001
    """tf.slice: Slice (a size of -1: to the end)."""
    t = convert_to_tensor(input_)
    b, n = _shape_list(begin), _shape_list(size)
    out = _run("Slice", [t, _ints(t.session, b), _ints(t.session, n)])
    if t._shape is not None and len(b) == len(n) == len(t._shape) and all(0 <= x <= d for x, d in zip(b, t._shape)):
        sizes = [d - x if k == -1 else k for x, k, d in zip(b, n, t._shape)]
        if all(0 <= k and x + k <= d for x, k, d in zip(b, sizes, t._shape)):
            _shaped(out, sizes)
    return out


def strided_slice(
    input_: TensorLike,
    begin: Any,
    end: Any,
    strides: Any = None,
    begin_mask: int = 0,
    end_mask: int = 0,
    ellipsis_mask: int = 0,
    new_axis_mask: int = 0,
    shrink_axis_mask: int = 0,
    var: Any = None,
    name: Optional[str] = None,
) -> Tensor:
    """tf.strided_slice: StridedSlice with TF's five masks (strides default
    to ones)."""
    t = convert_to_tensor(input_)
    b, e = _shape_list(begin), _shape_list(end)
    st = [1] * len(b) if strides is None else _shape_list(strides)
    masks = {
        "begin_mask": _int(begin_mask),
        "end_mask": _int(end_mask),
        "ellipsis_mask": _int(ellipsis_mask),
        "new_axis_mask": _int(new_axis_mask),
        "shrink_axis_mask": _int(shrink_axis_mask),
    }
    s = t.session
    return _run("StridedSlice", [t, _ints(s, b), _ints(s, e), _ints(s, st)], masks)


# -- composed: repeat, roll, meshgrid, sequence_mask, eye ---------------------


def repeat(input: TensorLike, repeats: Any, axis: Any = None, name: Optional[str] = None) -> Tensor:  # noqa: A002
    """tf.repeat: a GatherV2 of each index `repeats` times along `axis` (the
    flattened input when None); the gradient sums the copies, as TF's. The
    repeats are read as Python ints (their values set the output shape)."""
    t = convert_to_tensor(input)
    if axis is None:
        t = _run("Reshape", [t], {"shape": [-1]})
        a = 0
    else:
        a = _norm_axis(axis, t.ndim, "tf.repeat")
    n = t.shape[a]
    reps = np.broadcast_to(np.asarray(repeats, dtype=np.int64).reshape(-1), (n,))
    index = np.repeat(np.arange(n, dtype=np.int32), reps)
    return _run("GatherV2", [t, t.session.constant(index)], {"axis": a, "batch_dims": 0})


def roll(input: TensorLike, shift: Any, axis: Any, name: Optional[str] = None) -> Tensor:  # noqa: A002
    """tf.roll: per axis a GatherV2 of the indices rolled by the shift
    (shifts of one axis add up, as TF's); the same values and gradient as
    TF's Roll."""
    t = convert_to_tensor(input)
    shifts, axes = _shape_list(shift), _shape_list(axis)
    if len(shifts) != len(axes):
        raise ValueError(f"tf.roll: shift and axis must have the same size, got {len(shifts)} and {len(axes)}")
    total: Dict[int, int] = {}
    for s, a in zip(shifts, axes):
        ax = _norm_axis(a, t.ndim, "tf.roll")
        total[ax] = total.get(ax, 0) + s
    out = t
    for ax, s in sorted(total.items()):
        n = t.shape[ax]
        if n == 0 or s % n == 0:
            continue
        index = (np.arange(n, dtype=np.int64) - s) % n
        out = _run("GatherV2", [out, t.session.constant(index.astype(np.int32))], {"axis": ax, "batch_dims": 0})
    return out if out is not t else identity(t)


def meshgrid(*args: TensorLike, **kwargs: Any) -> List[Tensor]:
    """tf.meshgrid, composed as TF: each vector reshaped to its own axis and
    multiplied by ones of the grid's shape (indexing 'xy' swaps the first
    two axes)."""
    indexing = kwargs.pop("indexing", "xy")
    kwargs.pop("name", None)
    if kwargs:
        raise TypeError(f"'{list(kwargs)[0]}' is an invalid keyword argument for this function")
    if indexing not in ("xy", "ij"):
        raise ValueError(f"Argument `indexing` parameter must be either 'xy' or 'ij', got '{indexing}'")
    ts = [convert_to_tensor(a) for a in args]
    ndim = len(ts)
    ones1 = [1] * ndim
    out = [_run("Reshape", [t], {"shape": ones1[:i] + [-1] + ones1[i + 1:]}) for i, t in enumerate(ts)]
    sizes = [int(np.prod(t.shape)) for t in ts]
    if indexing == "xy" and ndim > 1:
        out[0] = _run("Reshape", [out[0]], {"shape": [1, -1] + [1] * (ndim - 2)})
        out[1] = _run("Reshape", [out[1]], {"shape": [-1, 1] + [1] * (ndim - 2)})
        sizes[0], sizes[1] = sizes[1], sizes[0]
    if not ts:
        return []
    ones = ts[0].session.constant(np.ones(sizes, dtype=ts[0].dtype))
    return [_run("Mul", [x, ones]) for x in out]


def sequence_mask(lengths: TensorLike, maxlen: Any = None, dtype: Any = np.bool_, name: Optional[str] = None) -> Tensor:
    """tf.sequence_mask, composed as TF: range(maxlen) < lengths[..., None]
    (maxlen: max(lengths, 0) when None), cast to `dtype`."""
    lens = convert_to_tensor(lengths)
    s = lens.session
    if maxlen is None:
        top = _run("Max", [lens, s.constant(np.arange(lens.ndim, dtype=np.int32))], {"keep_dims": False})
        m = _run("Maximum", [s.constant(np.zeros((), dtype=lens.dtype)), top])
    else:
        m = convert_to_tensor(maxlen)
        if m.ndim != 0:
            raise ValueError(f"Argument `maxlen` must be scalar for sequence_mask, received `maxlen` = {maxlen}")
    row = _run("Range", [s.constant(np.zeros((), dtype=m.dtype)), m, s.constant(np.ones((), dtype=m.dtype))])
    matrix = cast(_run("ExpandDims", [lens, _ints(s, -1)]), m.dtype)
    result = _run("Less", [row, matrix])
    d = _dtypes.as_numpy_dtype(dtype)
    return result if d == np.bool_ else cast(result, d)


def eye(num_rows: Any, num_columns: Any = None, batch_shape: Any = None, dtype: Any = np.float32, name: Optional[str] = None) -> Tensor:
    """tf.eye: an identity matrix (a constant, like zeros / ones)."""
    rows = _int(num_rows)
    cols = rows if num_columns is None else _int(num_columns)
    batch = [] if batch_shape is None else _shape_list(batch_shape)
    matrix = np.eye(rows, cols, dtype=_dtypes.as_numpy_dtype(dtype))
    out: Tensor = _session().constant(np.broadcast_to(matrix, tuple(batch) + (rows, cols)).copy())
    return out


def tensor_scatter_nd_add(tensor: TensorLike, indices: TensorLike, updates: TensorLike, name: Optional[str] = None, bad_indices_policy: str = "") -> Tensor:
    """tf.tensor_scatter_nd_add = tensor + scatter_nd(indices, updates,
    shape(tensor)): TensorScatterAdd's values and gradients."""
    t = convert_to_tensor(tensor)
    return _shaped(_run("AddV2", [t, scatter_nd(indices, updates, t.shape)]), t._shape)


def tensor_scatter_nd_sub(tensor: TensorLike, indices: TensorLike, updates: TensorLike, name: Optional[str] = None, bad_indices_policy: str = "") -> Tensor:
    """tf.tensor_scatter_nd_sub = tensor - scatter_nd(indices, updates,
    shape(tensor)): TensorScatterSub's values and gradients."""
    t = convert_to_tensor(tensor)
    return _shaped(_run("Sub", [t, scatter_nd(indices, updates, t.shape)]), t._shape)
