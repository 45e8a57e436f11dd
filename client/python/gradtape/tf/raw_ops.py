"""tf.raw_ops: every op of the default session's server by its name, called
as TensorFlow's raw ops are: keyword arguments only, inputs and attrs by
their names, e.g. ``tf.raw_ops.MatMul(a=x, b=y, transpose_a=True)``.

Inputs are converted with TensorFlow's rules (tf.convert_to_tensor); a list
input (ConcatV2's ``values``) takes a list and its length attr is filled
in; an op with several outputs returns a named tuple of them (TopKV2's
values, indices), a list output a list. Where TensorFlow's op takes a host tensor that gradtape's op
takes as an attr (Reshape's ``shape``, Transpose's ``perm``, Sum's
``axis``, GatherV2's ``axis``, UnsortedSegmentSum's ``num_segments``,
OneHot's ``depth``, ``on_value``, ``off_value``), a Tensor or array given
for it is read into the attr. TF's Python names are used where its api_def
renames an op's (Split's ``axis``, Select's ``x`` / ``y``); TF's hints
(``use_cudnn_on_gpu``, ``grad_a``, ...) and inferred attrs are accepted,
and a value gradtape does not compute (``Truncate=True``,
``incompatible_shape_error=False``, another ``Tout``) is a
NotImplementedError. ``name`` is accepted and ignored. An op the server does not register is an AttributeError.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

import numpy as np

from gradtape._tensor import Tensor, Variable as _Variable
from gradtape.tf._base import _session, convert_to_tensor


def _attr_value(kind: str, value: Any) -> Any:
    """An attr given as TF passes the host tensor it replaces."""
    if not isinstance(value, (Tensor, _Variable, np.ndarray, np.generic)):
        return value
    array = np.asarray(value)
    if kind == "int":
        return int(array)
    if kind == "float":
        return float(array)
    if kind == "bool":
        return bool(array)
    if kind == "list(int)":
        return [int(v) for v in array.reshape(-1)]
    return value


def _input(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [convert_to_tensor(v) for v in value]
    return convert_to_tensor(value)


# TF's Python argument names where its api_def renames the op's own.
_RENAMES: Dict[str, Dict[str, str]] = {
    "Select": {"x": "t", "y": "e"},
    "ExpandDims": {"axis": "dim"},
    "Squeeze": {"axis": "squeeze_dims"},
    "Split": {"axis": "split_dim"},
    "SplitV": {"axis": "split_dim"},
}

# TF arguments the server's ops do not declare: hints that never change
# the result (None: any value), or the only value gradtape computes.
_TF_ONLY: Dict[str, Any] = {
    "use_cudnn_on_gpu": None,
    "grad_a": None,
    "grad_b": None,
    "grad_x": None,
    "grad_y": None,
    "debug_name": None,
    "allowed_devices": None,
    "validate_shape": None,
    "incompatible_shape_error": True,
    "Truncate": False,
    "sparse_gradient": False,
    "bad_indices_policy": "",
}


def arguments(op: str) -> List[str]:
    """The keyword arguments tf.raw_ops.<op> takes here: the op's inputs (by
    TF's Python names) and attrs, TF's hints and ``Tout``, ``name``."""
    spec = _session()._specs[op]
    back = {v: k for k, v in _RENAMES.get(op, {}).items()}
    names = [back.get(n, n) for n in spec.input_names] + sorted(back.get(n, n) for n in spec.attr_types)
    return names + sorted(_TF_ONLY) + ["Tout", "name"]


def _split_kwargs(op: str, spec: Any, kwargs: Dict[str, Any]) -> Tuple[List[Any], Dict[str, Any], Any]:
    """(inputs in order, attrs, Tout) from TF's keyword arguments."""
    renames = _RENAMES.get(op, {})
    kwargs = {renames.get(k, k): v for k, v in kwargs.items() if k != "name"}
    tout = kwargs.pop("Tout", None) if "Tout" not in spec.attr_types else None
    inputs: List[Any] = []
    for n in spec.input_names:
        if n not in kwargs:
            raise TypeError(f"{op}: missing required argument {n!r}")
        inputs.append(_input(kwargs.pop(n)))
    attrs: Dict[str, Any] = {}
    for n, v in kwargs.items():
        if n in spec.attr_types:
            attrs[n] = _attr_value(spec.attr_types[n], v)
        elif n in _TF_ONLY:
            if _TF_ONLY[n] is not None and v != _TF_ONLY[n]:
                raise NotImplementedError(f"tf.raw_ops.{op}: {n}={v!r} is not in gradtape (only {_TF_ONLY[n]!r})")
        else:
            declared = ", ".join(list(spec.input_names) + sorted(spec.attr_types))
            raise TypeError(f"{op} got an unexpected keyword argument {n!r} (its arguments: {declared})")
    if op == "OneHot" and "T" not in attrs and isinstance(inputs[0], Tensor) and "on_value" in kwargs:
        on = kwargs["on_value"]
        if isinstance(on, (Tensor, _Variable)):
            attrs["T"] = on.dtype  # TF infers T from on_value
    return inputs, attrs, tout


def _make(op: str) -> Callable[..., Any]:
    def raw(*args: Any, **kwargs: Any) -> Any:
        if args:
            raise TypeError(f"{op} only takes keyword args (possible keys: {list(kwargs)}). Please pass these args as kwargs instead.")
        s = _session()
        spec = s._specs.get(op)
        if spec is None:
            raise AttributeError(f"tf.raw_ops: this gradtape server has no op {op!r}")
        inputs, attrs, tout = _split_kwargs(op, spec, kwargs)
        out = s.ops[op](*inputs, **attrs)
        if tout is not None and isinstance(out, Tensor) and out.dtype != np.dtype(tout):
            raise NotImplementedError(f"tf.raw_ops.{op}: Tout={np.dtype(tout).name} (gradtape makes {out.dtype.name})")
        return out

    raw.__name__ = op
    raw.__qualname__ = op
    raw.__doc__ = f"tf.raw_ops.{op}: the server's {op} (keyword arguments only)."
    return raw


def __getattr__(name: str) -> Callable[..., Any]:
    if name.startswith("__") or not name[:1].isupper():
        raise AttributeError(name)
    return _make(name)


def __dir__() -> List[str]:
    return sorted(op.name for op in _session().list_ops())
