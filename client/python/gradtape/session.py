"""Sessions, tensor handles, variables and gradient tapes.

Everything here is a thin, pipelined view of server state: a ``Tensor`` is an
id in one session, a ``Variable`` is a VarHandleOp resource, a
``GradientTape`` is a tape id. Calls that only change server state are
buffered and return at once; ``Tensor.numpy()``, ``Session.sync()``,
``GradientTape.gradient_values()``, ``Session.stats()`` and closing wait, and
raise a ``GradtapeError`` for the earliest failed command not reported yet.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import grpc
import numpy as np

from gradtape import _backend, _dtypes, _shapes, _transport
from gradtape._core import StreamCore
from gradtape._ops import Ops, OpFunction, OpSpec, encode_attrs, snake_case
from gradtape._tape import GradientTape, TapeSet, UnconnectedGradients
from gradtape._tensor import ArrayLike, Tensor, TensorLike, Variable
from gradtape.errors import GradtapeError
from gradtape.v1 import tape_service_pb2 as pb

__all__ = [
    "ArrayLike",
    "CheckpointInfo",
    "GradientTape",
    "OpFunction",
    "Ops",
    "ProgramInfo",
    "Session",
    "SessionStats",
    "Tensor",
    "TensorLike",
    "UnconnectedGradients",
    "Variable",
    "connect",
    "snake_case",
]

# ---------------------------------------------------------------------------
# Sessions

_NO_ATTRS: Mapping[str, Any] = {}
_BROADCASTING = _shapes.rule_for("AddV2")  # the elementwise ops' rule (numpy broadcasting)


def _refused(op: str, inputs: Sequence[Tensor], refusal: _shapes.Refusal) -> GradtapeError:
    """The error raised at the call for inputs the server is sure to refuse
    (an InvalidArgumentError, as TensorFlow eager raises; nothing is sent)."""
    ids = [t._id for t in inputs]
    return GradtapeError(grpc.StatusCode.INVALID_ARGUMENT, f"{op} (not sent; input ids {ids}): {refusal}", op=op)
_SUPPORTED = frozenset(np.dtype(d) for d in (np.float32, np.float64, np.int32, np.int64, np.bool_, np.complex64, np.complex128))
_MAX_CACHED_OPERANDS = 4096


class SessionStats(NamedTuple):
    """gradtape.v1.SessionStats."""

    live_tensors: int
    poisoned_ids: int
    bytes_in_use: int
    tapes: int
    tape_entries: int
    tape_saved_bytes: int
    # Commands applied (or failed) since the session was created, and
    # duplicates the server skipped (resent after a reconnect).
    commands_applied: int = 0
    duplicate_commands: int = 0


class Session:
    """A session on a gradtape server. Use ``gradtape.connect(address)``.

    A context manager: leaving the ``with`` block closes the session
    (waiting for outstanding commands, then CloseSession). Thread-safe for
    buffering; typically one thread drives a session.
    """

    def __init__(self, core: _backend.Backend) -> None:
        self._core = core
        response = core.list_ops()
        self._op_infos = {op.name: op for op in response.ops}
        self._specs: Dict[str, OpSpec] = {op.name: OpSpec(op) for op in response.ops}
        self.ops = Ops(self, response.ops, self._specs)
        self._tapes = TapeSet(core, response.ops)
        self._constants: Dict[Tuple[Any, str], Tensor] = {}
        # Operands converted by operators (0.1 * x): (value, type, dtype) -> constant.
        self._operands: Dict[Tuple[Any, type, np.dtype], Tensor] = {}
        self._seen_operands: Dict[Tuple[Any, type, np.dtype], bool] = {}
        # Slices seen before: (key, input shape) -> (begin/end/strides, attrs, output shape).
        self._slices: Dict[Any, Tuple[List[Tensor], List[_backend.EncodedAttr], Optional[Tuple[int, ...]]]] = {}
        # Variables by handle id (captured steps watch them on outer tapes).
        self._variables: "weakref.WeakValueDictionary[int, Variable]" = weakref.WeakValueDictionary()
        self._last_program_id = 0
        # Programs of garbage-collected Functions, deleted on the server at
        # the next definition (appended by a finalizer: any thread, any time).
        self._dead_programs: List[int] = []

    # -- lifecycle -------------------------------------------------------
    @property
    def id(self) -> str:
        """The session id (32 hex digits)."""
        return self._core.session_id

    @property
    def keep_alive_seconds(self) -> int:
        return self._core.keep_alive_seconds

    @property
    def closed(self) -> bool:
        return self._core.closed

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.close()
        else:  # keep the original exception
            try:
                self.close()
            except GradtapeError:
                pass

    def close(self) -> None:
        """Waits for outstanding commands (bounded), ends the stream and
        closes the server session. Raises the first unreported error.
        Idempotent."""
        self._constants.clear()
        self._operands.clear()
        self._seen_operands.clear()
        self._slices.clear()
        self._core.close()

    def sync(self, timeout: Optional[float] = None) -> None:
        """Wait point: sends everything buffered and waits for the replies;
        raises the earliest unreported command error."""
        self._core.sync(timeout)

    def flush(self) -> None:
        """Sends the buffered commands without waiting."""
        self._core.flush()

    def keep_alive(self) -> None:
        """Refreshes the session's lease (unary KeepAlive)."""
        self._core.keep_alive()

    def stats(self) -> SessionStats:
        """Wait point: the server's statistics for this session."""
        r = self._core.call(pb.Command(stats=pb.Stats())).stats
        return SessionStats(
            r.live_tensors,
            r.poisoned_ids,
            r.bytes_in_use,
            r.tapes,
            r.tape_entries,
            r.tape_saved_bytes,
            r.commands_applied,
            r.duplicate_commands,
        )

    def programs(self) -> List["ProgramInfo"]:
        """Wait point: the session's captured-step programs
        (gradtape.function), as the server holds them (ListPrograms)."""
        r = self._core.call(pb.Command(list_programs=pb.ListPrograms())).programs
        return [ProgramInfo(p.program_id, p.params, p.steps, p.outputs, p.bytes, p.calls,
                            p.plan_steps, p.not_planned) for p in r.programs]

    def _new_program_id(self) -> int:
        """A program id of this session (never reused). First sends the
        DeleteProgram of every program whose Function was garbage-collected
        (a finalizer only appends to a list: it may run in the middle of
        another command, so it sends nothing itself)."""
        while self._dead_programs:
            dead = self._dead_programs.pop()
            self._core.enqueue(pb.Command(delete_program=pb.DeleteProgram(program_id=dead)))
        self._last_program_id += 1
        return self._last_program_id

    @property
    def last_seq(self) -> int:
        """Sequence number of the last command buffered (what error messages
        quote as "command N")."""
        return self._core.last_seq()

    @property
    def counters(self) -> Dict[str, int]:
        """Client-side counters: commands and batches sent."""
        return {"commands_sent": self._core.commands_sent, "batches_sent": self._core.batches_sent}

    def transport_stats(self) -> Dict[str, int]:
        """Client-side counters of transport failures and resumes:
        transport_failures, reconnect_attempts, reconnects, batches_resent,
        commands_resent, resent_already_applied (resent commands the server
        had applied: it skips them), duplicate_results, refetches."""
        return self._core.transport_stats()

    # -- tensors -----------------------------------------------------------
    def constant(self, value: ArrayLike, dtype: Optional[_dtypes.DTypeLike] = None) -> Tensor:
        """Buffers a PutTensor of `value` (anything np.asarray accepts), with
        TensorFlow's dtypes: Python floats float32, ints int32 (int64 beyond
        int32's range), bools bool, complex numbers complex128; numpy values
        keep theirs. With `dtype`, numpy values are cast, Python values
        convert only losslessly up bool -> int -> float -> complex (floats
        round; TypeError for 1.5 or 1.0 to int32, as in TF)."""
        if type(value) is Tensor or isinstance(value, Variable):
            t = self.convert_to_tensor(value)
            if dtype is None or _dtypes.as_numpy_dtype(dtype) == t.dtype:
                return t
            return self.execute("Cast", [t], {"DstT": _dtypes.as_numpy_dtype(dtype)})[0]
        if dtype is None:
            array = _dtypes.default_array(value)
        else:
            array = _dtypes.convert_array(value, _dtypes.as_numpy_dtype(dtype))
        return self._put(array)

    def _put(self, array: np.ndarray) -> Tensor:
        if array.dtype not in _SUPPORTED:
            raise TypeError(f"gradtape has no dtype for numpy {array.dtype}")
        _dtypes.to_pb_dtype(array.dtype)  # TypeError before any id is taken
        tensor_id = self._core.new_id()
        self._core.put(tensor_id, array)  # chunked if large
        # The handle exists only once its put is buffered: a failed put
        # leaves no handle whose finalizer would release an unknown id.
        return Tensor(self, tensor_id, array.dtype, tuple(array.shape))

    def convert_to_tensor(
        self,
        value: TensorLike,
        dtype: Optional[_dtypes.DTypeLike] = None,
        dtype_hint: Optional[_dtypes.DTypeLike] = None,
    ) -> Tensor:
        """`value` as a Tensor of this session (tf.convert_to_tensor):
        Tensors pass through (checked to belong here; ValueError if `dtype`
        differs), Variables are read, the rest becomes a constant: of
        `dtype` by TF's rules (see ``constant``), else of `dtype_hint` when
        it converts to it, else of TF's default dtype."""
        if type(value) is Tensor or isinstance(value, Variable):
            if isinstance(value, Tensor):
                if value._session is not self:
                    raise ValueError(f"tensor {value.id} belongs to another gradtape session")
                t = value
            else:
                if value.session is not self:
                    raise ValueError("the variable belongs to another gradtape session")
                t = value.read_value()
            if dtype is not None and t._dtype is not None and t._dtype != _dtypes.as_numpy_dtype(dtype):
                raise ValueError(
                    f"tensor conversion requested dtype {_dtypes.as_numpy_dtype(dtype).name} for "
                    f"tensor {t.id} of dtype {t._dtype.name}"
                )
            return t
        if dtype is not None:
            return self.constant(value, dtype)
        if dtype_hint is not None:
            hint = _dtypes.as_numpy_dtype(dtype_hint)
            if hint != _dtypes.RESOURCE:
                return self._operand(value, hint, False)
        return self.constant(value)

    def _operand(self, value: Any, dtype: np.dtype, strict: bool) -> Tensor:
        """`value`, the other operand of an op whose type is `dtype`, as a
        Tensor. Python and numpy values convert as TensorFlow converts them
        (_dtypes.convert_array); with `strict` False (TF's dtype_hint:
        ``x + v``, ``x / v``, ``x @ v``) a value that does not convert takes
        its default dtype instead (the op then fails, as in TF). Python
        scalars are cached per session (a training loop's ``0.1 * g`` puts
        one constant)."""
        t = type(value)
        if t is Tensor:
            if value._session is not self:
                raise ValueError(f"tensor {value._id} belongs to another gradtape session")
            return value  # type: ignore[no-any-return]
        if t is float or t is int or t is bool or t is complex:
            key = (value if value or t is not float else repr(value), t, dtype)
            c = self._operands.get(key)
            if c is not None:
                return c
            array = self._operand_array(value, dtype, strict)
            c = self._put(array)
            # Cached from its second use on (a loop's literal), so that a
            # one-off value is released with its last use.
            if array.dtype == dtype and len(self._operands) < _MAX_CACHED_OPERANDS:
                if key in self._seen_operands:
                    self._operands[key] = c
                elif len(self._seen_operands) < _MAX_CACHED_OPERANDS:
                    self._seen_operands[key] = True
            return c
        if isinstance(value, Variable):
            return self.convert_to_tensor(value)
        if dtype == _dtypes.RESOURCE:
            return self.constant(value)
        return self._put(self._operand_array(value, dtype, strict))

    @staticmethod
    def _operand_array(value: Any, dtype: np.dtype, strict: bool) -> np.ndarray:
        if strict:
            return _dtypes.convert_array(value, dtype)
        try:
            return _dtypes.convert_array(value, dtype)
        except (TypeError, ValueError):
            return _dtypes.default_array(value)

    def _index_input(self, value: Any, dtype: np.dtype, role: str) -> Tensor:
        """An index or mask input (indices, labels, condition, ...): Tensors
        and numpy values as they are, Python ints as `dtype` (TF's default
        for that input; int64 when they do not fit int32), Python bools for
        a bool input."""
        if isinstance(value, Variable):
            return self.convert_to_tensor(value)
        if dtype.kind == "b":
            return self._put(_dtypes.convert_array(value, dtype))
        array = _dtypes.default_array(value)
        if array.dtype.kind == "i" and not isinstance(value, (np.ndarray, np.generic)) and array.dtype.itemsize < dtype.itemsize:
            array = array.astype(dtype)
        return self._put(array)

    def _index_vector(self, values: List[int], dtype: np.dtype) -> Tensor:
        """A cached constant vector of ints (a slice's begin, end, strides)."""
        key = (tuple(values), int, dtype)
        c = self._operands.get(key)
        if c is None:
            c = self._put(np.array(values, dtype=dtype))
            if len(self._operands) < _MAX_CACHED_OPERANDS:
                self._operands[key] = c
        return c

    def _read_if_variable(self, value: Any) -> Tensor:
        if type(value) is Tensor:
            t: Tensor = value
            return t
        if isinstance(value, Variable):
            return value.read_value()
        raise TypeError(f"expected a gradtape Tensor or Variable, got {type(value).__name__}")

    def _input_id(self, t: Tensor, role: str) -> int:
        if type(t) is not Tensor:
            raise TypeError(f"{role}: expected a gradtape Tensor, got {type(t).__name__}")
        if t._session is not self:
            raise ValueError(f"{role} (id {t.id}) belongs to another gradtape session")
        return t._id

    def _source_id(self, x: Any, role: str) -> int:
        """Gradient sources and watched things: a Variable's handle, a Tensor's id."""
        if isinstance(x, Variable):
            if x.session is not self:
                raise ValueError(f"{role}: the variable belongs to another gradtape session")
            return x.handle.id
        return self._input_id(x, role)

    def execute(
        self,
        op: str,
        inputs: Sequence[Tensor],
        attrs: Optional[Mapping[str, Any]] = None,
        num_outputs: Optional[int] = None,
    ) -> List[Tensor]:
        """Buffers an ExecuteOp of `op` and returns handles to its outputs,
        their dtypes (ListOps' rules) and, where the client can tell, shapes
        known without a round trip.

        Attrs are converted by their declared type (ListOps): bool, int,
        float, string, type (numpy dtype or name), list(int); an attr the op
        does not declare raises TypeError. `num_outputs` defaults to the
        registry's count for `op`.
        """
        spec = self._specs.get(op)
        for t in inputs:
            if type(t) is not Tensor or t._session is not self:
                self._input_id(t, f"{op}: input {list(inputs).index(t)}")  # raises
        if spec is None:  # not in the registry: the server reports it
            n = 1 if num_outputs is None else num_outputs
            encoded = encode_attrs(attrs, {}, op) if attrs else None
            first = self._core.execute(op, [t._id for t in inputs], n, encoded)
            outputs = [Tensor(self, first + i) for i in range(n)]
            if self._tapes.active:
                self._tapes.on_execute(op, inputs, outputs)
            return outputs
        if spec.has_lists:  # flat inputs; the list input's length attr filled in
            n = len(inputs) - spec.num_inputs + 1
            filled: Dict[str, Any] = dict(attrs or {})
            if spec.list_input is not None and filled.get(spec.list_input[1]) is None:
                filled[spec.list_input[1]] = n
            m = filled.get(spec.list_output) if spec.list_output is not None else None
            attrs = filled
            spec = spec.instance(n, max(int(m), 0) if isinstance(m, (int, np.integer)) else 1)
        if attrs:
            spec.check_attrs(attrs)
            encoded = encode_attrs(attrs, spec.attr_types, op)
        else:
            encoded = None
            attrs = _NO_ATTRS
        return self._execute_spec(spec, inputs, attrs, encoded, spec.num_outputs if num_outputs is None else num_outputs)

    def _execute_spec(
        self,
        spec: OpSpec,
        inputs: Sequence[Tensor],
        attrs: Mapping[str, Any],
        encoded: Optional[List[_backend.EncodedAttr]],
        n: int,
    ) -> List[Tensor]:
        """execute() after its checks: `inputs` are Tensors of this session,
        `attrs` declared and `encoded` from them."""
        op = spec.name
        shapes = None
        if spec.shape_rule is not None:
            try:
                shapes = spec.shape_rule([t._shape for t in inputs], attrs)
            except _shapes.Refusal as refusal:  # sure to fail: raised now, nothing sent
                raise _refused(op, inputs, refusal) from None
            except Exception:  # any other failure of a rule is the server's to report
                shapes = None
        if n == 1 and spec.same0:
            first = self._core.execute(op, [t._id for t in inputs], 1, encoded)
            outputs = [Tensor(self, first, inputs[0]._dtype if inputs else None, shapes[0] if shapes else None)]
            if self._tapes.active:
                self._tapes.on_execute(op, inputs, outputs)
            return outputs
        if spec.same0:
            d0 = inputs[0]._dtype if inputs else None
            dtypes = [d0] * n
        else:
            dtypes = [f([t._dtype for t in inputs], attrs) for f in spec.dtype_fns]
        first = self._core.execute(op, [t._id for t in inputs], n, encoded)
        if n == 1:
            outputs = [Tensor(self, first, dtypes[0] if dtypes else None, shapes[0] if shapes else None)]
        else:
            outputs = [
                Tensor(
                    self,
                    first + i,
                    dtypes[i] if i < len(dtypes) else None,
                    shapes[i] if shapes is not None and i < len(shapes) else None,
                )
                for i in range(n)
            ]
        if self._tapes.active:
            self._tapes.on_execute(op, inputs, outputs)
        return outputs

    def _execute1(self, op: str, x: Tensor, y: Tensor) -> Tensor:
        """The operators' route for two Tensors of this session and a
        registered op with one output (``a + b``): no attrs, no lists."""
        spec = self._specs.get(op)
        if spec is None or spec.num_outputs != 1:
            return self.execute(op, [x, y])[0]  # the server reports a missing op
        d = spec.fixed_dtype if spec.fixed_dtype is not None else x._dtype if spec.same0 else spec.dtype_fns[0]((x._dtype, y._dtype), _NO_ATTRS)
        xs, ys = x._shape, y._shape
        shape = xs if xs == ys or ys == () else ys if xs == () else _shapes.broadcast(xs, ys)
        if shape is None and xs is not None and ys is not None and spec.shape_rule is _BROADCASTING:
            raise _refused(op, (x, y), _shapes.Refusal(f"shapes {list(xs)} and {list(ys)} do not broadcast"))
        t = Tensor(self, self._core.execute(op, (x._id, y._id), 1, None), d, shape)
        if self._tapes.active:
            self._tapes.on_execute(op, (x, y), (t,))
        return t

    def _execute_encoded(
        self,
        op: str,
        inputs: Sequence[Tensor],
        encoded: Optional[List[_backend.EncodedAttr]],
        dtype: Optional[np.dtype],
        shape: Optional[Tuple[int, ...]],
    ) -> Tensor:
        """One output of known dtype and shape, attrs encoded beforehand
        (a variable's reads, slices): the route of ops whose caller knows
        more than the registry."""
        t = Tensor(self, self._core.execute(op, [x._id for x in inputs], 1, encoded), dtype, shape)
        if self._tapes.active:
            self._tapes.on_execute(op, inputs, (t,))
        return t

    def _execute_unary(self, op: str, x: Tensor) -> Tensor:
        """The operators' route for one Tensor and a registered elementwise
        op with one output (``-x``, ``abs(x)``)."""
        spec = self._specs.get(op)
        if spec is None or spec.num_outputs != 1 or x._session is not self:
            return self.execute(op, [x])[0]  # the server reports a missing op
        d = x._dtype if spec.same0 else spec.dtype_fns[0]((x._dtype,), _NO_ATTRS)
        t = Tensor(self, self._core.execute(op, (x._id,), 1, None), d, x._shape)
        if self._tapes.active:
            self._tapes.on_execute(op, (x,), (t,))
        return t

    def has_op(self, op: str) -> bool:
        """Whether the server registers `op` (as of connecting)."""
        return op in self._op_infos

    def list_ops(self) -> List[pb.OpInfo]:
        """The registry as the server reported it when the session connected."""
        return list(self._op_infos.values())

    def scalar(self, value: float, dtype: _dtypes.DTypeLike) -> Tensor:
        """A cached scalar constant (for learning rates and the like)."""
        d = _dtypes.as_numpy_dtype(dtype)
        key = (value, d.str)
        t = self._constants.get(key)
        if t is None:
            t = self._constants[key] = self._put(np.asarray(value, dtype=d))
        return t

    # -- variables and tapes ---------------------------------------------
    def Variable(  # noqa: N802 (TensorFlow's spelling)
        self,
        initial_value: TensorLike,
        dtype: Optional[_dtypes.DTypeLike] = None,
        name: Optional[str] = None,
        trainable: bool = True,
    ) -> "Variable":
        """A server-side variable holding `initial_value` (VarHandleOp +
        AssignVariableOp, buffered). Its shape is fixed at creation."""
        return Variable(self, initial_value, dtype=dtype, name=name, trainable=trainable)

    def GradientTape(  # noqa: N802 (TensorFlow's spelling)
        self, persistent: bool = False, watch_accessed_variables: bool = True
    ) -> GradientTape:
        """A tape to use in a ``with`` block; see gradtape.GradientTape."""
        return GradientTape(self, persistent=persistent, watch_accessed_variables=watch_accessed_variables)

    @contextlib.contextmanager
    def stop_recording(self) -> Iterator[None]:
        """Stops recording on every tape and accumulator of the session
        inside the block (blocks nest: the outermost one restarts)."""
        if not self._tapes.stopped:
            self._core.enqueue(pb.Command(stop_recording=pb.StopRecording()))
        self._tapes.stop_all()
        try:
            yield
        finally:
            self._tapes.start_all()
            if not self._tapes.stopped:
                self._core.enqueue(pb.Command(start_recording=pb.StartRecording()))


    # -- checkpoints and stop_gradient (compat) ----------------------------
    def save_checkpoint(self, name: str, variables: Optional[Sequence[_VariableT]] = None) -> "CheckpointInfo":
        """Wait point: writes the variables (default: every variable of the
        session) to the server's checkpoint `name` (SaveCheckpoint; the
        server needs --checkpoint_dir). Variables are matched by name
        (``Variable(..., name=...)``, VarHandleOp's shared_name): each must
        have a distinct one."""
        ids = self._checkpoint_ids("save_checkpoint", variables)
        r = self._core.call(pb.Command(save_checkpoint=pb.SaveCheckpoint(name=name, variable_ids=ids)))
        return CheckpointInfo(r.checkpoint.name, list(r.checkpoint.variable_names), r.checkpoint.file_bytes)

    def restore_checkpoint(self, name: str, variables: Optional[Sequence[_VariableT]] = None) -> "CheckpointInfo":
        """Wait point: assigns each variable (default: every variable of the
        session) the value of the same name in checkpoint `name`
        (RestoreCheckpoint: all or nothing)."""
        ids = self._checkpoint_ids("restore_checkpoint", variables)
        r = self._core.call(pb.Command(restore_checkpoint=pb.RestoreCheckpoint(name=name, variable_ids=ids)))
        return CheckpointInfo(r.checkpoint.name, list(r.checkpoint.variable_names), r.checkpoint.file_bytes)

    def _checkpoint_ids(self, what: str, variables: Optional[Sequence[_VariableT]]) -> List[int]:
        ids: List[int] = []
        for i, v in enumerate(variables or []):
            if not isinstance(v, Variable):
                raise TypeError(f"{what}: variables[{i}] is a {type(v).__name__}, not a gradtape Variable")
            ids.append(self._source_id(v, f"{what}: variables[{i}]"))
        return ids

    def stop_gradient(self, x: TensorLike) -> Tensor:
        """TensorFlow's stop_gradient: x's value with no gradient (nor
        tangent) through it (StopGradient)."""
        return self.execute("StopGradient", [self.convert_to_tensor(x)])[0]


_VariableT = Variable  # (inside Session, `Variable` names the method)


class ProgramInfo(NamedTuple):
    """gradtape.v1.ProgramInfo: one program of the session."""

    program_id: int
    params: int
    steps: int
    outputs: int
    bytes: int  # charged to the session's memory (the plan's too)
    calls: int  # calls that succeeded
    plan_steps: int = 0  # the plan's steps (its gradient planned); 0: none
    not_planned: str = ""  # why there is no plan (empty: there is one, or
    # the next call makes it)


class CheckpointInfo(NamedTuple):
    """gradtape.v1.CheckpointInfo: what a save or restore touched."""

    name: str
    variable_names: List[str]
    file_bytes: int


def connect(
    address: str,
    *,
    session_id: Optional[str] = None,
    keep_alive_seconds: int = 0,
    batch_size: int = 512,
    max_batch_bytes: int = 16 << 20,
    chunk_bytes: int = 64 << 20,
    timeout: float = 10.0,
    credentials: Optional[grpc.ChannelCredentials] = None,
    root_certificates: Optional[bytes] = None,
    private_key: Optional[bytes] = None,
    certificate_chain: Optional[bytes] = None,
    server_name_override: Optional[str] = None,
    keepalive_time: Optional[float] = None,
    keepalive_timeout: float = 20.0,
    keepalive_permit_without_calls: bool = False,
    api_key: Optional[str] = None,
    reconnect_timeout: float = 30.0,
    native: Optional[bool] = None,
) -> Session:
    """Connects to a gradtape server and creates a session.

    Args:
      address: "host:port".
      session_id: proposed id (32 lowercase hex digits); default 128 random
        bits. Sent as `gradtape-session-id` metadata so a proxy can route on it.
      keep_alive_seconds: idle time after which the server collects the
        session (0: the server's default).
      batch_size: commands per batch; the buffer is also sent at wait points.
      max_batch_bytes: the buffer is also sent once it holds this many bytes.
      chunk_bytes: tensors larger than this move in chunks of this many bytes
        (puts: PutTensorBegin, then one PutTensorChunk per batch; fetches ask
        for at most this many bytes, the rest pipelined). A chunk must fit
        the server's message limit (--max_message_mb, 256 MiB by default).
      timeout: seconds for connecting and for each unary call.
      credentials: a grpc.ChannelCredentials; None (with no PEM argument) for
        plaintext, fine on loopback. Exclusive with the PEM arguments below
        (ValueError).
      root_certificates: PEM bytes of the CAs that sign the server's
        certificate: the channel uses TLS (None with a key: gRPC's default
        roots).
      private_key, certificate_chain: PEM bytes of the client's certificate
        (mTLS, for a server started with --tls_client_ca_file); both or
        neither (ValueError).
      server_name_override: the name the server's certificate must hold
        instead of the address's host.
      keepalive_time: seconds between HTTP/2 keepalive pings (None: no pings).
        gradtape-server refuses pings more often than every
        --keepalive_min_ping_interval_seconds (10 s by default).
      keepalive_timeout: seconds to wait for a ping's acknowledgement.
      keepalive_permit_without_calls: also ping with no call open.
      api_key: the key of a server started with --api_keys_file, sent as
        `authorization: Bearer <key>` on every call; None for none. Send keys
        over TLS except on loopback.
      reconnect_timeout: after a transport failure (the stream ends with
        UNAVAILABLE, INTERNAL or UNKNOWN not sent by the server: a dropped
        connection, a proxy's reset), the client reconnects with backoff for
        at most this many seconds since the last reply, opens a new stream
        on the same session and resends the commands not yet acknowledged
        (the server applies each seq once). Past it, every wait point raises
        a SessionLostError (UNAVAILABLE "... unreachable for T s ..."),
        and sooner when probes in a row carry the proxy's replica-unreachable
        verdict for 2 s (docs/RELIABILITY.md "A replica lost behind the proxy"). 0: off, the first transport failure loses the session. Also bounds
        retries of a CreateSession that fails in transport (each with a new
        random id, unless `session_id` is given).
      native: which client implementation carries the session: None (the
        default) the compiled extension when it is built (unless
        GRADTAPE_NATIVE=0 or `credentials` is given), True the extension
        (ImportError if it is not built), False the pure-Python one. Both
        behave the same; the extension costs far less per op.

    Returns:
      A Session (a context manager that closes it).
    """
    use_native = _backend.use_native(native, credentials is not None)
    options = _transport.ConnectOptions(
        session_id=session_id,
        keep_alive_seconds=keep_alive_seconds,
        batch_size=batch_size,
        max_batch_bytes=max_batch_bytes,
        chunk_bytes=chunk_bytes,
        timeout=timeout,
        credentials=credentials,
        root_certificates=root_certificates,
        private_key=private_key,
        certificate_chain=certificate_chain,
        server_name_override=server_name_override,
        keepalive_time=keepalive_time,
        keepalive_timeout=keepalive_timeout,
        keepalive_permit_without_calls=keepalive_permit_without_calls,
        api_key=api_key,
        reconnect_timeout=reconnect_timeout,
    )
    core: _backend.Backend
    if use_native:
        from gradtape._native_core import NativeCore

        core = NativeCore(address, options)
    else:
        core = StreamCore(address, options)
    try:
        return Session(core)
    except BaseException:
        core.close()
        raise
