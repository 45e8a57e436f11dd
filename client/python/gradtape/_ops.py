"""Ops built from the server's registry (ListOps), and attr encoding
(internal; the names are gradtape's)."""

from __future__ import annotations

import keyword
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from gradtape import _backend, _dtypes, _shapes
from gradtape._tensor import Tensor, TensorLike, Variable
from gradtape.v1 import tape_service_pb2 as pb

if TYPE_CHECKING:
    from gradtape.session import Session

def snake_case(name: str) -> str:
    """TensorFlow's op-name -> Python function name rule (python_op_gen):
    MatMul -> mat_mul, AddV2 -> add_v2, Conv2D -> conv2d, L2Loss -> l2_loss,
    MaxPool3DGrad -> max_pool3d_grad."""
    out = []
    for i, c in enumerate(name):
        if c.isupper() and i > 0 and name[i - 1] != "_":
            prev_lower = name[i - 1].islower()
            next_lower = i + 1 < len(name) and name[i + 1].islower()
            if prev_lower or next_lower:
                out.append("_")
        out.append(c.lower())
    result = "".join(out)
    return result + "_" if keyword.iskeyword(result) else result


# ---------------------------------------------------------------------------
# Per-op specs: everything execute needs, computed once per op from ListOps


_TO_REAL: Dict[np.dtype, np.dtype] = {np.dtype(np.complex64): np.dtype(np.float32), np.dtype(np.complex128): np.dtype(np.float64)}
_TO_COMPLEX: Dict[np.dtype, np.dtype] = {v: k for k, v in _TO_REAL.items()}
_NO_ATTRS: Mapping[str, Any] = {}
DTypeFn = Callable[[Sequence[Optional[np.dtype]], Mapping[str, Any]], Optional[np.dtype]]

# Inputs that do not take the op's main type attr (TensorFlow's "T") but an
# index or mask type of their own, by TensorFlow's input names, with the
# dtype TF gives a Python value there (its type attr's default, else int32).
# ListOps does not declare input types yet, so the names decide.
_OWN_DTYPE_INPUTS: Dict[str, np.dtype] = {
    name: np.dtype(np.int32)
    for name in (
        "indices segment_ids begin end strides axis shape perm multiples paddings dims size "
        "num_segments depth split_dim size_splits"
    ).split()
}
_OWN_DTYPE_INPUTS["labels"] = np.dtype(np.int64)  # Tlabels defaults to int64
_OWN_DTYPE_INPUTS["condition"] = np.dtype(np.bool_)
_OWN_DTYPE_OVERRIDES: Dict[Tuple[str, str], np.dtype] = {("OneHot", "indices"): np.dtype(np.int64)}


def _type_attr_value(value: Any) -> Optional[np.dtype]:
    try:
        return _dtypes.as_numpy_dtype(value)
    except TypeError:
        return None  # the server reports the bad attr


def _declared_default_type(info: pb.OpInfo, name: str) -> Optional[np.dtype]:
    for a in info.attrs:
        if a.name == name and a.default_value.WhichOneof("value") == "type" and a.default_value.type:
            return _dtypes.from_pb_dtype(a.default_value.type)
    return None


def _compile_dtype_rule(info: pb.OpInfo, rule: pb.OutputDTypeRule) -> DTypeFn:
    """One OutputDTypeRule as a small closure over (input dtypes, attrs)."""
    kind = rule.WhichOneof("rule")
    if kind == "fixed":
        fixed = _dtypes.from_pb_dtype(rule.fixed) if rule.fixed else None
        return lambda dtypes, attrs: fixed
    if kind == "from_attr":
        name = rule.from_attr
        default = _declared_default_type(info, name)

        def from_attr(dtypes: Sequence[Optional[np.dtype]], attrs: Mapping[str, Any]) -> Optional[np.dtype]:
            value = attrs.get(name)
            return default if value is None else _type_attr_value(value)

        return from_attr
    if kind is None:
        return lambda dtypes, attrs: None
    i: int = getattr(rule, kind)
    if kind == "same_as_input":
        return lambda dtypes, attrs: dtypes[i] if i < len(dtypes) else None
    table = _TO_REAL if kind == "real_of_input" else _TO_COMPLEX
    keep = kind == "real_of_input"  # real dtypes stay as they are

    def convert(dtypes: Sequence[Optional[np.dtype]], attrs: Mapping[str, Any]) -> Optional[np.dtype]:
        d = dtypes[i] if i < len(dtypes) else None
        if d is None:
            return None
        out: Optional[np.dtype] = table.get(d, d if keep else None)
        return out

    return convert


class OpSpec:
    """What the client knows of one op, compiled from its OpInfo once:
    arity, declared attrs, the output dtype rules (closures), the shape
    rule (_shapes), which inputs take a handle and which have an index
    dtype of their own."""

    __slots__ = (
        "info", "name", "input_names", "num_inputs", "num_outputs", "attr_types", "dtype_fns",
        "same0", "fixed_dtype", "shape_rule", "resource_inputs", "own_dtypes",
        "list_input", "list_output", "_instances",
    )

    def __init__(self, info: pb.OpInfo) -> None:
        self.info = info
        self.name = info.name
        self.input_names: Tuple[str, ...] = tuple(info.input_names)
        self.num_inputs = len(self.input_names)
        self.num_outputs = len(info.output_names)
        self.attr_types: Dict[str, str] = {a.name: a.type for a in info.attrs}
        self.dtype_fns: List[DTypeFn] = [_compile_dtype_rule(info, r) for r in info.output_dtypes]
        kinds = [r.WhichOneof("rule") for r in info.output_dtypes]
        # Fast paths: every output has input 0's dtype, or one fixed dtype.
        self.same0 = bool(kinds) and all(k == "same_as_input" and r.same_as_input == 0 for k, r in zip(kinds, info.output_dtypes))
        self.fixed_dtype: Optional[np.dtype] = (
            _dtypes.from_pb_dtype(info.output_dtypes[0].fixed)
            if len(kinds) == 1 and kinds[0] == "fixed" and info.output_dtypes[0].fixed
            else None
        )
        self.shape_rule = _shapes.rule_for(info.name)
        # List arguments (OpInfo.list_input / list_output): (declared index,
        # length attr) of the list input; the length attr of the list output.
        self.list_input: Optional[Tuple[int, str]] = (
            (info.list_input.index, info.list_input.length_attr) if info.HasField("list_input") and info.list_input.length_attr else None
        )
        self.list_output: Optional[str] = (
            info.list_output.length_attr if info.HasField("list_output") and info.list_output.length_attr else None
        )
        self._instances: Dict[Tuple[int, int], OpSpec] = {}
        self.resource_inputs = frozenset(info.resource_inputs)
        self.own_dtypes: Dict[int, np.dtype] = {}
        for i, n in enumerate(self.input_names):
            d = _OWN_DTYPE_OVERRIDES.get((info.name, n), _OWN_DTYPE_INPUTS.get(n))
            if d is not None and i not in self.resource_inputs:
                self.own_dtypes[i] = d

    @property
    def has_lists(self) -> bool:
        return self.list_input is not None or self.list_output is not None

    def instance(self, n: int, m: int) -> "OpSpec":
        """The flat spec of a list op for a list input of `n` tensors and a
        list output of `m` (each ignored without that list), as the server
        instantiates it: names, indices and dtype rules expanded. A few are
        cached (the lengths of a training loop repeat)."""
        key = (n if self.list_input is not None else 1, m if self.list_output is not None else 1)
        hit = self._instances.get(key)
        if hit is not None:
            return hit
        spec = OpSpec(expand_op_info(self.info, key[0], key[1]))
        if len(self._instances) >= 16:
            self._instances.clear()
        self._instances[key] = spec
        return spec

    def output_dtypes(self, dtypes: Sequence[Optional[np.dtype]], attrs: Mapping[str, Any]) -> List[Optional[np.dtype]]:
        if self.same0:
            d = dtypes[0] if dtypes else None
            return [d] * self.num_outputs
        return [f(dtypes, attrs) for f in self.dtype_fns]

    def output_shapes(self, shapes: Sequence[Optional[Tuple[int, ...]]], attrs: Mapping[str, Any]) -> Optional[List[Optional[Tuple[int, ...]]]]:
        return _shapes.output_shapes(self.shape_rule, shapes, attrs)

    def check_attrs(self, attrs: Mapping[str, Any]) -> None:
        """TypeError (as TensorFlow raises at the call) for an attr the op
        does not declare."""
        for name in attrs:
            if name not in self.attr_types:
                declared = ", ".join(sorted(self.attr_types)) or "none"
                raise TypeError(f"{self.name}: unknown attr {name!r} (declared: {declared})")


def expand_op_info(info: pb.OpInfo, n: int, m: int) -> pb.OpInfo:
    """The flat OpInfo of a list op (tape_service.proto, OpInfo.list_input):
    declared list input `i` becomes n inputs <name>_0.., later inputs move
    up by n - 1; a list output becomes m outputs <name>_0..; every index
    list and dtype rule follows."""
    flat = pb.OpInfo()
    flat.CopyFrom(info)
    flat.ClearField("list_input")
    flat.ClearField("list_output")
    li = info.list_input.index if info.HasField("list_input") and info.list_input.length_attr else -1

    def expand(indices: Iterable[int]) -> List[int]:
        out: List[int] = []
        for i in indices:
            out.extend(range(i, i + n) if i == li else [i if li < 0 or i < li else i + n - 1])
        return out

    if li >= 0:
        del flat.input_names[:]
        for i, name in enumerate(info.input_names):
            flat.input_names.extend([f"{name}_{k}" for k in range(n)] if i == li else [name])
        for field in ("saved_inputs", "non_differentiable_inputs", "resource_inputs", "any_kind_inputs"):
            values = expand(getattr(info, field))
            getattr(flat, field)[:] = values
    rules = list(info.output_dtypes)
    if info.HasField("list_output") and info.list_output.length_attr:
        del flat.output_names[:]
        flat.output_names.extend([f"{info.output_names[0]}_{k}" for k in range(m)] if info.output_names else [])
        flat.saved_outputs[:] = list(range(m)) if 0 in info.saved_outputs else []
        rules = rules[:1] * m
    del flat.output_dtypes[:]
    for rule in rules:
        r = flat.output_dtypes.add()
        r.CopyFrom(rule)
        kind = r.WhichOneof("rule")
        if li >= 0 and kind in ("same_as_input", "real_of_input", "complex_of_input"):
            i = getattr(r, kind)
            setattr(r, kind, i if i <= li else i + n - 1)
    return flat


def output_dtypes(info: Optional[pb.OpInfo], inputs: Sequence[Tensor], attrs: Mapping[str, Any]) -> List[Optional[np.dtype]]:
    """Each output's dtype by the rules the server declares in ListOps
    (OpInfo.output_dtypes); None where a rule leaves it open (an input of
    unknown dtype, ReadVariableOp without its dtype attr, a server that
    sends no rules): Tensor.dtype then asks the server."""
    if info is None:
        return []
    dtypes = [t._dtype for t in inputs]
    return [_compile_dtype_rule(info, r)(dtypes, attrs) for r in info.output_dtypes]


class OpFunction:
    """A callable for one registered op: inputs positionally or by their
    names, attrs by name. Returns a Tensor (one output), a tuple named after
    the outputs (several) or None (none).

    Inputs convert as TensorFlow's raw ops convert them: the inputs that
    share the op's type attr take the dtype of the first Tensor or Variable
    among them (else of the first value, by TF's defaults), Python values
    convert to it strictly (0.5 to int32: TypeError), numpy values are cast;
    index inputs (indices, labels, segment ids, ...) take TF's index dtype.
    An unknown attr, an attr of the wrong type or a wrong number of inputs
    raises TypeError at the call, as in TensorFlow."""

    def __init__(self, session: "Session", info: pb.OpInfo, spec: Optional[OpSpec] = None) -> None:
        self._session = session
        self.info = info
        self.name = info.name
        self.__name__ = snake_case(info.name)
        self._spec = spec if spec is not None else OpSpec(info)
        self._inputs = list(info.input_names)
        self._num_inputs = len(self._inputs)
        self._attr_cache: Dict[Any, Tuple[Mapping[str, Any], Optional[List[_backend.EncodedAttr]]]] = {}
        # The direct routes for calls with Tensors only and no attrs: 1 an
        # elementwise unary op (same dtype, same shape), 2 a binary op with
        # broadcasting (Session._execute1), 0 Session.execute.
        rule = self._spec.shape_rule
        one = self._spec.num_outputs == 1 and (self._spec.same0 or self._spec.fixed_dtype is not None)
        self._route = (
            1 if one and self._num_inputs == 1 and rule is _shapes.rule_for("Neg") and self._spec.same0
            else 2 if one and self._num_inputs == 2 and rule is _shapes.rule_for("AddV2")
            else 0
        )
        self._attrs = {a.name: a for a in info.attrs}
        # Inputs that take a variable handle (ListOps): a Variable passed
        # there is passed as its handle, elsewhere read.
        self._resource_inputs = set(info.resource_inputs)
        self._outputs_type: Any = (
            NamedTuple(info.name + "Outputs", [(snake_case(n) or f"output_{i}", Any) for i, n in enumerate(info.output_names)])
            if len(info.output_names) > 1
            else None
        )
        self.__doc__ = self._doc()

    def _doc(self) -> str:
        info = self.info
        lines = [f"{info.name}({', '.join(info.input_names)}) -> {', '.join(info.output_names) or 'nothing'}"]
        if info.summary:
            lines += ["", info.summary]
        if info.attrs:
            lines += ["", "Attrs:"]
            for a in info.attrs:
                default = "required" if a.required else f"default {_attr_python(a.default_value)!r}"
                lines.append(f"  {a.name}: {a.type} ({default})")
        lines += [
            "",
            f"differentiable: {info.differentiable}; the tape keeps inputs "
            f"{list(info.saved_inputs)} and outputs {list(info.saved_outputs)}",
        ]
        return "\n".join(lines)

    def __call__(self, *args: TensorLike, **kwargs: Any) -> Any:
        if self._spec.has_lists:
            return self._call_lists(list(args), kwargs)
        s = self._session
        n = self._num_inputs
        if kwargs and len(args) == n:  # Tensors and attrs only: the attrs cached
            for a in args:
                if type(a) is not Tensor or a._session is not s:
                    break
            else:
                attrs, encoded = self._attrs_of(kwargs)
                return self._pack(s._execute_spec(self._spec, args, attrs, encoded, self._spec.num_outputs))  # type: ignore[arg-type]
        if not kwargs and len(args) == n:
            route = self._route
            if route == 1 and type(args[0]) is Tensor:  # elementwise unary: x's dtype and shape
                return s._execute_unary(self.name, args[0])
            if route == 2 and type(args[0]) is Tensor and type(args[1]) is Tensor and args[1]._session is s:
                return s._execute1(self.name, args[0], args[1])
            for a in args:
                if type(a) is not Tensor or a._session is not s:
                    break
            else:  # all Tensors of this session, no attrs
                return self._pack(s._execute_spec(self._spec, args, _NO_ATTRS, None, self._spec.num_outputs))  # type: ignore[arg-type]
        if len(args) > n:
            raise TypeError(f"{self.__name__}: {self.name} takes {n} inputs, got {len(args)}")
        values: List[Any] = list(args)
        for name in self._inputs[len(args):]:
            if name not in kwargs:
                raise TypeError(f"{self.__name__}: missing input {name!r} of {self.name}")
            values.append(kwargs.pop(name))
        attrs, encoded = self._attrs_of(kwargs)
        outputs = s._execute_spec(self._spec, self._convert_inputs(values), attrs, encoded, self._spec.num_outputs)
        return self._pack(outputs)

    def _call_lists(self, args: List[Any], kwargs: Dict[str, Any]) -> Any:
        """A list op (ConcatV2, Split, ...): the list input is one argument
        (a list or tuple), its length attr is filled in when left out, and
        a list output comes back as a list of its length attr's Tensors."""
        spec = self._spec
        names = self._inputs
        if len(args) > len(names):
            raise TypeError(f"{self.__name__}: {self.name} takes {len(names)} inputs, got {len(args)}")
        values: List[Any] = list(args)
        for name in names[len(args):]:
            if name not in kwargs:
                raise TypeError(f"{self.__name__}: missing input {name!r} of {self.name}")
            values.append(kwargs.pop(name))
        n = m = 1
        if spec.list_input is not None:
            index, attr = spec.list_input
            items = values[index]
            if not isinstance(items, (list, tuple)):
                raise TypeError(
                    f"{self.__name__}: input {names[index]!r} of {self.name} takes a list or tuple of tensors, "
                    f"not {type(items).__name__}"
                )
            n = len(items)
            given = kwargs.get(attr)
            if given is None:
                kwargs[attr] = n
            elif not isinstance(given, (int, np.integer)) or int(given) != n:
                raise TypeError(f"{self.__name__}: attr {attr!r} = {given!r} of {self.name} is not the length {n} of {names[index]!r}")
            values = values[:index] + list(items) + values[index + 1:]
        if spec.list_output is not None:
            count = kwargs.get(spec.list_output)
            if count is None:
                raise TypeError(f"{self.__name__}: {self.name} needs attr {spec.list_output!r} (its number of outputs)")
            check_attr_type(self.name, spec.list_output, "int", count)
            m = max(int(count), 0)  # the server refuses a negative one
        attrs, encoded = self._attrs_of(kwargs)
        flat = spec.instance(n, m)
        outputs = self._session._execute_spec(flat, self._convert_inputs(values, flat), attrs, encoded, flat.num_outputs)
        return list(outputs) if spec.list_output is not None else self._pack(outputs)

    def _attrs_of(self, kwargs: Dict[str, Any]) -> Tuple[Mapping[str, Any], Optional[List[_backend.EncodedAttr]]]:
        """The attrs given (None: the default, as in TF), checked as TF's raw
        ops check them, and encoded; cached per op for hashable values (a
        training loop passes the same attrs every step)."""
        if not kwargs:
            return _NO_ATTRS, None
        try:
            key: Any = (tuple(kwargs.items()), tuple(map(type, kwargs.values())))
            hit = self._attr_cache.get(key)
        except TypeError:  # a list value (axis=[0]): its tuple in the key
            try:
                key = tuple((k, type(v), tuple(v) if type(v) is list else v) for k, v in kwargs.items())
                hit = self._attr_cache.get(key)
            except TypeError:
                key, hit = None, None
        if hit is not None:
            return hit
        attrs = {k: v for k, v in kwargs.items() if v is not None}
        self._spec.check_attrs(attrs)
        for name, value in attrs.items():
            check_attr_type(self.name, name, self._spec.attr_types[name], value)
        result = (attrs, encode_attrs(attrs, self._spec.attr_types, self.name) if attrs else None)
        if key is not None and len(self._attr_cache) < 64:
            self._attr_cache[key] = result
        return result

    def _pack(self, outputs: List[Tensor]) -> Any:
        if not outputs:
            return None
        if len(outputs) == 1:
            return outputs[0]
        assert self._outputs_type is not None
        return self._outputs_type(*outputs)

    def _convert_inputs(self, values: List[Any], spec: Optional[OpSpec] = None) -> List[Tensor]:
        s = self._session
        for v in values:
            if type(v) is not Tensor or v._session is not s:
                break
        else:
            return values  # this session's Tensors already
        spec = self._spec if spec is None else spec
        names = spec.input_names
        own = spec.own_dtypes
        group: Optional[np.dtype] = None  # the type attr's dtype
        for i, v in enumerate(values):
            if i in own:
                continue
            d = v._dtype if type(v) is Tensor else v.dtype if isinstance(v, Variable) else None
            if d is not None and d != _dtypes.RESOURCE:
                group = d
                break
        tensors: List[Tensor] = []
        for i, v in enumerate(values):
            if isinstance(v, Variable):
                if v.session is not s:
                    raise ValueError(f"{self.name}: input {names[i]!r}: the variable belongs to another gradtape session")
                tensors.append(v.handle if i in spec.resource_inputs else v.read_value())
            elif type(v) is Tensor and v._session is s:
                tensors.append(v)
            elif type(v) is Tensor:
                tensors.append(s.convert_to_tensor(v))  # raises: another session
            elif i in own:
                tensors.append(s._index_input(v, own[i], f"{self.name}: input {names[i]!r}"))
            elif group is None:
                t = s.constant(v)
                group = t._dtype
                tensors.append(t)
            else:
                tensors.append(s._operand(v, group, True))
        return tensors

    def __repr__(self) -> str:
        return f"<gradtape op {self.name} as {self.__name__}>"


def _attr_python(value: pb.AttrValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ints":
        return list(value.ints.values)
    if kind == "type":
        return _dtypes.from_pb_dtype(value.type).name if value.type else None
    return getattr(value, kind)


class Ops:
    """The server's ops as Python functions, built from ListOps when the
    session connects, named like TensorFlow's raw ops in snake_case
    (``MatMul`` -> ``mat_mul``, ``AddV2`` -> ``add_v2``, ``Conv2D`` ->
    ``conv2d``). ``ops["MatMul"]`` also works. A new server op is usable
    without a client release; ``help(session.ops.mat_mul)`` shows its
    inputs, attrs and what the tape keeps for its backward."""

    def __init__(self, session: "Session", infos: Iterable[pb.OpInfo], specs: Optional[Mapping[str, OpSpec]] = None) -> None:
        self._by_name: Dict[str, OpFunction] = {}
        for info in infos:
            fn = OpFunction(session, info, specs.get(info.name) if specs is not None else None)
            self._by_name[info.name] = fn
            setattr(self, fn.__name__, fn)

    def __getitem__(self, op_name: str) -> OpFunction:
        return self._by_name[op_name]

    def __getattr__(self, name: str) -> OpFunction:
        """Only for names not set at construction: an AttributeError naming
        the op (and, for type checkers, every op is an OpFunction)."""
        raise AttributeError(f"this gradtape server has no op {name!r} (session.ops lists ListOps' ops in snake_case)")

    def __contains__(self, op_name: str) -> bool:
        return op_name in self._by_name

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._by_name))

    def __dir__(self) -> List[str]:
        return sorted(fn.__name__ for fn in self._by_name.values())


def encode_attrs(
    attrs: Mapping[str, Any], declared: Mapping[str, str], op: str
) -> List[_backend.EncodedAttr]:
    """`attrs` as the backend's (name, kind, value) triples, each converted
    by its declared type (ListOps; by the Python type when undeclared):
    bool, int, float, string, type (numpy dtype or name), list(int)."""
    return [_encode_attr(value, declared.get(name), op, name) for name, value in attrs.items()]


def _encode_attr(value: Any, declared: Optional[str], op: str, name: str) -> _backend.EncodedAttr:
    try:
        if declared == "bool" or (declared is None and isinstance(value, (bool, np.bool_))):
            return (name, _backend.ATTR_BOOL, bool(value))
        if declared == "int" or (declared is None and isinstance(value, (int, np.integer))):
            return (name, _backend.ATTR_INT, int(value))
        if declared == "float" or (declared is None and isinstance(value, (float, np.floating))):
            return (name, _backend.ATTR_FLOAT, float(value))
        if declared == "string" and isinstance(value, bytes):
            return (name, _backend.ATTR_STRING, value.decode())
        if declared == "string" or (declared is None and isinstance(value, str)):
            return (name, _backend.ATTR_STRING, str(value))
        if declared == "type" or (declared is None and isinstance(value, (np.dtype, type))):
            return (name, _backend.ATTR_TYPE, _dtypes.to_pb_dtype(value))
        if declared == "list(int)" or (declared is None and isinstance(value, (list, tuple))):
            return (name, _backend.ATTR_INTS, [int(v) for v in value])
        raise TypeError(f"unsupported attr type {declared or type(value).__name__}")
    except (TypeError, ValueError) as e:
        raise TypeError(f"{op}: attr {name!r} ({declared or 'undeclared'}): {e}") from None


def check_attr_type(op: str, name: str, declared: str, value: Any) -> None:
    """TypeError where TensorFlow's raw ops refuse an attr value of the
    wrong Python type: a bool attr takes only True / False, an int attr
    anything int() takes but a string, a float attr anything float() takes
    but a string, a string attr a str, a type attr a dtype or its name, a
    list(int) attr a list or tuple."""
    ok = True
    if declared == "bool":
        ok = type(value) is bool
    elif declared in ("int", "float"):
        if isinstance(value, (str, bytes)):
            ok = False
        else:
            try:
                int(value) if declared == "int" else float(value)
            except (TypeError, ValueError, OverflowError):
                ok = False
    elif declared == "string":
        ok = isinstance(value, (str, bytes))
    elif declared == "type":
        try:
            _dtypes.to_pb_dtype(value)
        except TypeError:
            ok = False
    elif declared == "list(int)":
        if isinstance(value, (list, tuple)):
            try:
                [int(v) for v in value]
            except (TypeError, ValueError):
                ok = False
        else:
            ok = False
    if not ok:
        raise TypeError(f"{op}: expected {declared} for attr {name!r}, not {value!r}")
