"""tf.random over the server's random ops.

Stateless ops (``stateless_uniform``, ``stateless_normal``,
``stateless_truncated_normal``) give TensorFlow's numbers bit for bit: the
server's StatelessRandom* kernels scramble the seed into a Philox key and
counter as TF does (floats only; integer dtypes and alg="threefry" raise
NotImplementedError).

Seeded stateful ops (``uniform``, ``normal``, ``truncated_normal``) follow
TF's shapes, dtypes and determinism rules, not its values: with
``tf.random.set_seed(g)`` and/or an op ``seed``, (global, op) seeds are
derived as TF's ``get_seed`` does (global only: op seeds drawn from a
generator seeded by g; op only: global 87654321), and each call with the
same pair continues one stream (Philox with key = global seed, counter =
(call number, op seed)); ``set_seed`` restarts every stream. The same
program therefore gives the same numbers on every run; without any seed
the numbers differ from run to run. The numbers themselves differ from
TensorFlow's (TF keeps the state in per-kernel generators).
"""

from __future__ import annotations

import os
import random as _pyrandom
from typing import Any, Dict, Optional, Tuple

import numpy as np

from gradtape import _dtypes
from gradtape._tensor import Tensor, Variable as _Variable
from gradtape.tf._base import _run, _session, cast, convert_to_tensor
from gradtape.tf.math import add, multiply

_DEFAULT_GRAPH_SEED = 87654321
_MAXINT32 = 2**31 - 1


class _State:
    global_seed: Optional[int] = None
    rng: _pyrandom.Random = _pyrandom.Random()
    calls: Dict[Tuple[int, int], int] = {}


def set_seed(seed: Optional[int]) -> None:
    """tf.random.set_seed: sets the global seed and restarts every seeded
    stream (op seeds drawn afresh from it, as TF's eager context does)."""
    _State.global_seed = None if seed is None else int(seed)
    _State.rng = _pyrandom.Random(_State.global_seed)
    _State.calls = {}


def _get_seed(op_seed: Optional[int]) -> Tuple[int, int]:
    """TF's random_seed.get_seed (eager): (global seed, op seed)."""
    g = _State.global_seed
    if g is not None:
        if op_seed is None:
            op_seed = _State.rng.randint(0, _MAXINT32)
        seeds = (g, int(op_seed))
    elif op_seed is not None:
        seeds = (_DEFAULT_GRAPH_SEED, int(op_seed))
    else:
        r = np.frombuffer(os.urandom(16), dtype=np.int64)
        return int(r[0]), int(r[1])
    if seeds == (0, 0):
        return 0, _MAXINT32  # as TF: (0, 0) means "nondeterministic" to the kernels
    return seeds


def _shape_tensor(shape: Any) -> Tensor:
    if isinstance(shape, (Tensor, _Variable)):
        t = convert_to_tensor(shape)
        return t if t.dtype.kind == "i" else cast(t, np.int32)
    dims = [int(d) for d in np.asarray(shape, dtype=np.int64).reshape(-1)]
    return _session().constant(np.asarray(dims, dtype=np.int32))


def _stateful(op: str, shape: Any, dtype: np.dtype, seed: Optional[int]) -> Tensor:
    """One call of a seeded stream: StatelessRandom*V2 with key = the
    global seed and counter = (0, call number << 32 | op seed)."""
    g, o = _get_seed(seed)
    n = _State.calls.get((g, o), 0)
    _State.calls[(g, o)] = n + 1
    s = _session()
    key = np.asarray([g & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64).view(np.int64)
    hi = (np.uint64(n) << np.uint64(32)) | np.uint64(o & 0xFFFFFFFF)
    counter = np.asarray([0, hi], dtype=np.uint64).view(np.int64)
    inputs = [_shape_tensor(shape), s.constant(key), s.constant(counter), s.constant(np.int32(1))]
    return _run(op + "V2", inputs, {"dtype": dtype})


def _float_dtype(dtype: Any, fn: str) -> np.dtype:
    d = _dtypes.as_numpy_dtype(dtype)
    if d not in (np.float32, np.float64):
        raise NotImplementedError(f"tf.random.{fn}: dtype {d.name} is not in gradtape.tf (float32, float64)")
    return d


def _scaled(rnd: Tensor, scale: Any, shift: Any, d: np.dtype) -> Tensor:
    """TF's `add(rnd * scale, shift)` with scale and shift as tensors of d."""
    return add(multiply(rnd, convert_to_tensor(scale, dtype=d)), convert_to_tensor(shift, dtype=d))


def uniform(shape: Any, minval: Any = 0, maxval: Any = None, dtype: Any = np.float32, seed: Optional[int] = None, name: Optional[str] = None) -> Tensor:
    """tf.random.uniform (floats: rnd * (maxval - minval) + minval; ints:
    floor of a float64 draw scaled to [minval, maxval), maxval required)."""
    d = _dtypes.as_numpy_dtype(dtype)
    if d.kind in "iu":
        if maxval is None:
            raise ValueError("Must specify maxval for integer dtype " + d.name)
        rnd = _stateful("StatelessRandomUniform", shape, np.dtype(np.float64), seed)
        lo, hi = convert_to_tensor(minval, dtype=np.float64), convert_to_tensor(maxval, dtype=np.float64)
        scaled = add(multiply(rnd, _run("Sub", [hi, lo])), lo)
        return cast(_run("Floor", [scaled]), d)
    d = _float_dtype(d, "uniform")
    rnd = _stateful("StatelessRandomUniform", shape, d, seed)
    lo_t, hi_t = convert_to_tensor(minval, dtype=d), convert_to_tensor(1 if maxval is None else maxval, dtype=d)
    return add(multiply(rnd, _run("Sub", [hi_t, lo_t])), lo_t)


def normal(shape: Any, mean: Any = 0.0, stddev: Any = 1.0, dtype: Any = np.float32, seed: Optional[int] = None, name: Optional[str] = None) -> Tensor:
    """tf.random.normal: rnd * stddev + mean."""
    d = _float_dtype(dtype, "normal")
    return _scaled(_stateful("StatelessRandomNormal", shape, d, seed), stddev, mean, d)


def truncated_normal(shape: Any, mean: Any = 0.0, stddev: Any = 1.0, dtype: Any = np.float32, seed: Optional[int] = None, name: Optional[str] = None) -> Tensor:
    """tf.random.truncated_normal: rnd * stddev + mean, rnd within 2 stddevs."""
    d = _float_dtype(dtype, "truncated_normal")
    return _scaled(_stateful("StatelessTruncatedNormal", shape, d, seed), stddev, mean, d)


def _stateless(op: str, shape: Any, seed: Any, d: np.dtype, alg: Any, fn: str) -> Tensor:
    if alg not in (None, "auto_select", "philox", 1, 3):
        raise NotImplementedError(f"tf.random.{fn}: alg={alg!r} is not in gradtape.tf (philox / auto_select only)")
    sd = convert_to_tensor(seed)
    if sd.dtype.kind != "i":
        raise ValueError(f"tf.random.{fn}: seed must be an int32/int64 tensor of shape [2], got {sd.dtype.name}")
    return _run(op, [_shape_tensor(shape), sd], {"dtype": d})


def stateless_uniform(
    shape: Any, seed: Any, minval: Any = 0, maxval: Any = None, dtype: Any = np.float32, name: Optional[str] = None, alg: Any = "auto_select"
) -> Tensor:
    """tf.random.stateless_uniform (floats; TF's bits)."""
    d = _dtypes.as_numpy_dtype(dtype)
    if d.kind in "iu":
        raise NotImplementedError("tf.random.stateless_uniform: integer dtypes are not in gradtape.tf (the server has no StatelessRandomUniformIntV2)")
    d = _float_dtype(d, "stateless_uniform")
    rnd = _stateless("StatelessRandomUniform", shape, seed, d, alg, "stateless_uniform")
    lo_t = convert_to_tensor(minval, dtype=d)
    hi_t = convert_to_tensor(1 if maxval is None else maxval, dtype=d)
    return add(multiply(rnd, _run("Sub", [hi_t, lo_t])), lo_t)


def stateless_normal(
    shape: Any, seed: Any, mean: Any = 0.0, stddev: Any = 1.0, dtype: Any = np.float32, name: Optional[str] = None, alg: Any = "auto_select"
) -> Tensor:
    """tf.random.stateless_normal (TF's bits)."""
    d = _float_dtype(dtype, "stateless_normal")
    return _scaled(_stateless("StatelessRandomNormal", shape, seed, d, alg, "stateless_normal"), stddev, mean, d)


def stateless_truncated_normal(
    shape: Any, seed: Any, mean: Any = 0.0, stddev: Any = 1.0, dtype: Any = np.float32, name: Optional[str] = None, alg: Any = "auto_select"
) -> Tensor:
    """tf.random.stateless_truncated_normal (TF's bits)."""
    d = _float_dtype(dtype, "stateless_truncated_normal")
    return _scaled(_stateless("StatelessTruncatedNormal", shape, seed, d, alg, "stateless_truncated_normal"), stddev, mean, d)
