"""Captured steps: ``gradtape.function`` (and ``gradtape.tf.function``).

A decorated function runs on the server as one command per call::

    @gradtape.function
    def train_step(x, y):
        with session.GradientTape() as tape:
            loss = loss_fn(model(x), y)
        opt.apply_gradients(zip(tape.gradient(loss, model.params), model.params))
        return loss

How (record, then replay; see docs/CAPTURE.md and the "Captured steps"
block of proto/gradtape/v1/tape_service.proto):

* The FIRST call for an input signature runs the Python function for real,
  eagerly, its commands sent as usual, while a recorder wraps the session's
  backend and writes down what it sends: every op becomes a ``ProgramOp``
  step, every PushTape / Watch / Gradient / PopTape of a tape made inside
  the call a tape step (program tape numbers 0, 1, ...). Then one
  ``DefineProgram`` is buffered and the eager results are returned.
* Later calls with the same signature send one ``CallProgram`` (the input
  ids, fresh output ids) and return new Tensors with the traced outputs'
  dtypes and shapes: no round trip, no Python run of the function.

What a program refers to: the call's Tensor arguments (params); outputs of
earlier steps; anything else is a *captured* tensor, held by the program
from its definition: variables' handles (so reads and assignments reach the
live variable) and constants, whether put before or during the trace. A
constant is captured BY VALUE, as ``tf.function`` captures eager tensors:
a value the function computes in Python from non-tensor state (a step
counter, a dropout seed, ``time.time()``) is baked into the program, so it
must be an argument for each call to see a new one.

The signature: arguments and keyword arguments are flattened (lists,
tuples, dicts); a Tensor counts by its dtype and shape (numpy arrays are
converted to Tensors first, as TensorFlow converts them), a Variable by its
identity, any other Python value by its value (a new value traces again,
as in TensorFlow). A program has fixed shapes (the server's params carry
concrete shapes): ``input_signature`` checks the arguments against its
specs (TypeError, TensorFlow's class, on a mismatch) and a spec with None
dimensions traces once per concrete shape it meets; ``reduce_retracing``
is accepted and changes nothing (shapes cannot be generalised).

Python side effects (prints, appends, counters) run only when tracing.

Not every trace can be a program. The function then keeps running eagerly
for that signature, with one RuntimeWarning saying why, when the trace
read a value (``numpy()``, ``float()``, printing a tensor, ``gradient_values``,
a None check that asks the server), computed a Jacobian, used a forward
accumulator, a custom gradient (ExecuteWithGradient), a checkpoint, session stats, or
a tape the call did not make (or pushed a tape twice). ``stop_recording``
blocks are program steps, as in an eager run. A trace that created a
variable (VarHandleOp: Keras layers and optimizer slots are built on their
first call) is not kept: the next call traces again, as TensorFlow traces
twice then.

Tapes made inside the function are the program's own (the server deletes
them at the end of each call); the tape object of the trace may outlive it,
its DeleteTape is not part of the program. A call inside an outer
``GradientTape`` is recorded by it (the server records the program's ops),
so it is differentiable; the variables the trace read are watched on the
outer tapes as an eager run would watch them.

A program lives as long as its Function: when the Function is
garbage-collected, its programs are deleted on the server (DeleteProgram,
sent with the session's next definition), and all of them go when the
session closes. While a first call traces, the recorder is the session's
backend, but it records only what the tracing thread sends: other threads'
commands pass through it as they would without a trace.
"""

from __future__ import annotations

import functools
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, cast

import numpy as np

from gradtape import _backend, _default, _dtypes
from gradtape._tensor import Tensor, Variable
from gradtape.v1 import tape_service_pb2 as pb

if TYPE_CHECKING:
    from gradtape.session import Session

__all__ = ["Function", "TensorSpec", "function"]

# Ops that read a variable through its handle (watched on outer tapes at a call).
_READS = frozenset({"ReadVariableOp", "ResourceGather"})


class TensorSpec:
    """The dtype and shape a traced argument must have (tf.TensorSpec).
    ``None`` dimensions (or shape None) accept any size; a program still
    has fixed shapes, so each concrete shape met is traced once."""

    def __init__(self, shape: Optional[Sequence[Optional[int]]], dtype: Any = np.float32, name: Optional[str] = None) -> None:
        self.shape: Optional[Tuple[Optional[int], ...]] = None if shape is None else tuple(
            None if d is None else int(d) for d in shape
        )
        self.dtype: np.dtype = _dtypes.as_numpy_dtype(dtype)
        self.name = name

    def is_compatible_with(self, dtype: np.dtype, shape: Tuple[int, ...]) -> bool:
        if dtype != self.dtype:
            return False
        if self.shape is None:
            return True
        return len(shape) == len(self.shape) and all(s is None or s == d for s, d in zip(self.shape, shape))

    def __repr__(self) -> str:
        shape = None if self.shape is None else tuple(self.shape)
        return f"TensorSpec(shape={shape}, dtype={self.dtype.name}, name={self.name!r})"


def _spec_of(spec: Any) -> TensorSpec:
    """gradtape's TensorSpec of `spec` (ours, or any object with ``shape``
    and ``dtype``: tf.TensorSpec's, whose shape is a TensorShape)."""
    if isinstance(spec, TensorSpec):
        return spec
    if not (hasattr(spec, "shape") and hasattr(spec, "dtype")):
        raise TypeError(f"input_signature: {spec!r} is not a TensorSpec (an object with shape and dtype)")
    shape = spec.shape
    dims: Optional[List[Optional[int]]]
    if hasattr(shape, "as_list"):  # a TensorShape
        dims = None if getattr(shape, "rank", 0) is None else shape.as_list()
    else:
        dims = None if shape is None else list(shape)
    dtype = spec.dtype
    dtype = getattr(dtype, "as_numpy_dtype", dtype)
    return TensorSpec(dims, dtype, getattr(spec, "name", None))


# -- structures ------------------------------------------------------------------


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _leaves(x: Any) -> Iterator[Any]:
    """The leaves of nested lists, tuples and dicts, in order (dicts by
    insertion order)."""
    if isinstance(x, (list, tuple)):
        for item in x:
            yield from _leaves(item)
    elif isinstance(x, dict):
        for item in x.values():
            yield from _leaves(item)
    else:
        yield x


def _map(x: Any, fn: Callable[[Any], Any]) -> Any:
    """`x` with each leaf replaced by fn(leaf), the containers rebuilt."""
    if _is_namedtuple(x):
        return type(x)(*[_map(item, fn) for item in x])
    if isinstance(x, (list, tuple)):
        return type(x)(_map(item, fn) for item in x)
    if isinstance(x, dict):
        return type(x)((k, _map(v, fn)) for k, v in x.items())
    return fn(x)


def _structure_key(x: Any, leaf: Callable[[Any], Any]) -> Any:
    """A hashable key of `x`'s containers with leaf(leaf) at each leaf."""
    if isinstance(x, (list, tuple)):
        return (type(x), tuple(_structure_key(item, leaf) for item in x))
    if isinstance(x, dict):
        return (type(x), tuple((k, _structure_key(v, leaf)) for k, v in x.items()))
    return leaf(x)


class _Out:
    """An output's place in the returned structure (the template; not a
    tuple, so that _map takes it for a leaf)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


# -- the recorder --------------------------------------------------------------


class _Recorder:
    """The session's backend during a trace: sends everything, as the eager
    run does, and records what it can hold as program steps (module
    docstring). Releases and DeleteTapes wait in `deferred` until the
    DefineProgram is buffered, so every captured id is still alive when the
    server resolves it."""

    def __init__(self, real: _backend.Backend, params: Dict[int, int]) -> None:
        self._real = real
        self.params = params  # tensor id -> param index
        self.produced: Dict[int, Tuple[int, int]] = {}  # tensor id -> (step, output)
        self.steps: List[pb.ProgramStep] = []
        self.tapes: Dict[int, int] = {}  # client tape id -> program tape number
        self.popped: Dict[int, bool] = {}
        self.deferred: List[Tuple[str, int, bool]] = []  # ("release", id, _) / ("tape", id, pop_first)
        self.cannot: Optional[str] = None  # why no program can hold the trace
        self.created_variable = False
        self.read_handles: List[int] = []  # handle ids of variables the trace read
        self.outer_watches: List[int] = []  # ids watched on tapes made before the call

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def _refuse(self, why: str) -> None:
        if self.cannot is None:
            self.cannot = why

    def ref(self, tensor_id: int) -> pb.ProgramRef:
        param = self.params.get(tensor_id)
        if param is not None:
            return pb.ProgramRef(param=param)
        produced = self.produced.get(tensor_id)
        if produced is not None:
            return pb.ProgramRef(step=pb.ProgramRef.StepOutput(step=produced[0], output=produced[1]))
        return pb.ProgramRef(captured_id=tensor_id)

    def _produce(self, ids: Sequence[int]) -> None:
        step = len(self.steps)
        for k, i in enumerate(ids):
            self.produced[i] = (step, k)

    # -- recorded ------------------------------------------------------------
    def execute(
        self, op: str, input_ids: Sequence[int], num_outputs: int, attrs: Optional[List[_backend.EncodedAttr]]
    ) -> int:
        first = self._real.execute(op, input_ids, num_outputs, attrs)
        step = pb.ProgramOp(op=op, inputs=[self.ref(i) for i in input_ids])
        for name, kind, value in attrs or ():
            _backend.to_pb_attr(step.attrs[name], kind, value)
        if op == "VarHandleOp":
            self.created_variable = True
        elif op in _READS and input_ids:
            self.read_handles.append(input_ids[0])
        self._produce(range(first, first + num_outputs))
        self.steps.append(pb.ProgramStep(op=step))
        return first

    def enqueue(self, command: pb.Command) -> int:
        seq = self._real.enqueue(command)
        kind = command.WhichOneof("kind")
        if kind == "push_tape":
            c = command.push_tape
            if c.tape_id in self.tapes:
                self._refuse("a tape was entered twice")
            else:
                self.tapes[c.tape_id] = len(self.tapes)
                self.popped[c.tape_id] = False
                self.steps.append(pb.ProgramStep(push_tape=pb.ProgramPushTape(
                    tape=self.tapes[c.tape_id], persistent=c.persistent,
                    watch_accessed_variables=c.watch_accessed_variables)))
        elif kind == "pop_tape":
            self._pop(command.pop_tape.tape_id)
        elif kind == "watch":
            w = command.watch
            if w.tape_id in self.tapes:
                self.steps.append(pb.ProgramStep(watch=pb.ProgramWatch(
                    tape=self.tapes[w.tape_id], values=[self.ref(i) for i in w.ids])))
            else:  # a tape of the caller: redone at each call if it is a variable read
                self.outer_watches.extend(w.ids)
        elif kind == "gradient":
            g = command.gradient
            if g.tape_id not in self.tapes:
                self._refuse(f"a gradient on tape {g.tape_id}, made outside the function")
            elif g.return_values:
                self._refuse("a gradient whose values were read (gradient_values, or a None check)")
            else:
                step = pb.ProgramGradient(
                    tape=self.tapes[g.tape_id],
                    targets=[self.ref(i) for i in g.target_ids],
                    sources=[self.ref(i) for i in g.source_ids],
                    output_gradients=[pb.ProgramRef() if i == 0 else self.ref(i) for i in g.output_gradient_ids],
                    unconnected=g.unconnected,
                )
                self._produce(g.result_ids)
                self.steps.append(pb.ProgramStep(gradient=step))
        elif kind == "stop_recording":
            self.steps.append(pb.ProgramStep(stop_recording=pb.StopRecording()))
        elif kind == "start_recording":
            self.steps.append(pb.ProgramStep(start_recording=pb.StartRecording()))
        else:
            self._refuse(f"a {kind} command")
        return seq

    def _pop(self, tape_id: int) -> None:
        if tape_id not in self.tapes:
            self._refuse(f"a pop of tape {tape_id}, made outside the function")
        elif not self.popped[tape_id]:
            self.popped[tape_id] = True
            self.steps.append(pb.ProgramStep(pop_tape=pb.ProgramPopTape(tape=self.tapes[tape_id])))

    def delete_tape(self, tape_id: int, pop_first: bool = False) -> None:
        if pop_first and tape_id in self.tapes:
            self._pop(tape_id)  # the program's tape stops recording here too
        self.deferred.append(("tape", tape_id, pop_first))

    def release(self, tensor_id: int) -> None:
        self.deferred.append(("release", tensor_id, False))

    # -- sent, and not holdable ------------------------------------------------
    def fetch(self, tensor_id: int) -> np.ndarray:
        self._refuse(f"a value read (tensor {tensor_id}: numpy(), float(), printing a value)")
        return self._real.fetch(tensor_id)

    def call(self, command: pb.Command) -> pb.CommandResult:
        kind = command.WhichOneof("kind")
        self._refuse("a value read (gradient_values, or a None check)" if kind == "gradient" else f"a {kind} command")
        return self._real.call(command)

    def send_for_result(self, command: pb.Command) -> Any:
        self._refuse("a value read (a chunked fetch)")
        return self._real.send_for_result(command)  # type: ignore[attr-defined]

    def finish(self) -> None:
        """Sends the deferred releases and tape deletions."""
        for kind, i, pop_first in self.deferred:
            if kind == "release":
                self._real.release(i)
            else:
                self._real.delete_tape(i, pop_first)
        self.deferred = []


class _TracingBackend:
    """The session's backend while a first call traces: the recorder for
    the tracing thread, the real backend for every other thread (so another
    thread's commands are neither recorded nor held back)."""

    def __init__(self, real: _backend.Backend, recorder: _Recorder) -> None:
        self._real = real
        self._recorder = recorder
        self._thread = threading.get_ident()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._recorder if threading.get_ident() == self._thread else self._real, name)


def _forget_program(session_ref: "weakref.ReferenceType[Session]", program_id: int) -> None:
    """A Function was garbage-collected: its session deletes the program at
    its next definition (Session._new_program_id)."""
    session = session_ref()
    if session is not None and not session.closed:
        session._dead_programs.append(program_id)


# -- programs ---------------------------------------------------------------------


class _Program(NamedTuple):
    """A defined program and how to call it."""

    program_id: int
    template: Any  # the returned structure, outputs as _Out(k)
    outputs: List[Tuple[Optional[np.dtype], Optional[Tuple[int, ...]]]]
    read_handles: List[int]


class _Eager(NamedTuple):
    why: str


class Function:
    """A function whose calls are captured as server programs (module
    docstring). Use ``gradtape.function`` / ``gradtape.tf.function``."""

    def __init__(
        self,
        fn: Callable[..., Any],
        input_signature: Optional[Sequence[Any]] = None,
        reduce_retracing: bool = False,
        name: Optional[str] = None,
        session: Optional["Session"] = None,
    ) -> None:
        self._fn = fn
        self._signature = None if input_signature is None else [_spec_of(s) for s in _leaves(list(input_signature))]
        self._signature_structure = input_signature
        self._reduce_retracing = reduce_retracing  # accepted; programs are fixed-shape
        self._name = name or getattr(fn, "__name__", "function")
        self._session = session
        self._cache: Dict[Any, Any] = {}
        self._tracing_count = 0
        self._warned = False
        functools.update_wrapper(self, fn)

    @property
    def python_function(self) -> Callable[..., Any]:
        return self._fn

    @property
    def input_signature(self) -> Optional[Sequence[Any]]:
        return self._signature_structure

    def experimental_get_tracing_count(self) -> int:
        """How many times the Python function was traced (TF's name)."""
        return self._tracing_count

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        """A method: the instance is the first argument (a Python value: its
        identity is part of the signature)."""
        if instance is None:
            return self
        import types

        return types.MethodType(self, instance)

    # -- calls -------------------------------------------------------------------
    def _find_session(self, args: Any) -> "Session":
        if self._session is not None:
            return self._session
        for leaf in _leaves(args):
            if isinstance(leaf, Tensor):
                return leaf._session
            if isinstance(leaf, Variable):
                return leaf.session
        return _default.get_default_session()

    def _check_signature(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
        assert self._signature is not None
        leaves = list(_leaves(list(args))) + list(_leaves(dict(kwargs)))
        if len(leaves) != len(self._signature):
            raise TypeError(
                f"Binding inputs to gradtape.function {self._name!r} failed: the input_signature has "
                f"{len(self._signature)} tensors, the call gives {len(leaves)}"
            )
        for leaf, spec in zip(leaves, self._signature):
            if isinstance(leaf, Tensor):
                dtype, shape = leaf.dtype, tuple(leaf.shape)
            elif isinstance(leaf, Variable):
                dtype, shape = leaf.dtype, tuple(leaf.shape)
            else:
                array = np.asarray(leaf)
                try:
                    array = _dtypes.convert_array(leaf, spec.dtype) if not isinstance(leaf, np.ndarray) else array
                except (TypeError, ValueError):
                    pass
                dtype, shape = array.dtype, tuple(array.shape)
            if not spec.is_compatible_with(dtype, shape):
                got = TensorSpec(shape, dtype)
                raise TypeError(
                    f"Binding inputs to gradtape.function {self._name!r} failed due to `Can not cast {got} to {spec}`"
                )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._signature is not None:
            self._check_signature(args, kwargs)
        session = self._find_session((args, kwargs))

        # Numpy arrays (and, with an input_signature, every value) become Tensors.
        specs = iter(self._signature or ())

        def convert(leaf: Any) -> Any:
            if self._signature is not None:
                spec = next(specs)
                if isinstance(leaf, Variable):
                    return leaf
                return session.convert_to_tensor(leaf, dtype=spec.dtype)
            if isinstance(leaf, np.ndarray):
                return session.constant(leaf)
            return leaf

        args, kwargs = _map((args, kwargs), convert)

        params: List[Tensor] = []
        param_of: Dict[int, int] = {}

        def leaf_key(leaf: Any) -> Any:
            if isinstance(leaf, Tensor):
                if leaf._session is not session:
                    raise ValueError(f"gradtape.function {self._name!r}: tensor {leaf.id} belongs to another session")
                first = param_of.get(leaf._id)
                if first is None:
                    first = param_of[leaf._id] = len(params)
                    params.append(leaf)
                return ("T", leaf.dtype.str, tuple(leaf.shape), first)
            if isinstance(leaf, Variable):
                return ("V", leaf.handle.id)
            try:
                hash(leaf)
                return ("P", type(leaf), leaf)
            except TypeError:
                return ("O", id(leaf))

        key = (session.id, _structure_key((args, kwargs), leaf_key))
        entry = self._cache.get(key)
        if isinstance(entry, _Program):
            return self._call_program(session, entry, params)
        if isinstance(entry, _Eager):
            return self._fn(*args, **kwargs)
        return self._trace(session, key, args, kwargs, params)

    def _call_program(self, session: "Session", program: _Program, params: List[Tensor]) -> Any:
        core = session._core
        out_ids = [core.new_id() for _ in program.outputs]
        tapes = session._tapes
        handles: List[Tensor] = []
        if tapes.active:  # outer tapes watch what an eager run would read
            for h in program.read_handles:
                v = session._variables.get(h)
                if v is not None:
                    tapes.on_read_variable(v)
                    handles.append(v.handle)
        core.enqueue(pb.Command(call_program=pb.CallProgram(
            program_id=program.program_id, input_ids=[t._id for t in params], output_ids=out_ids)))
        outputs = [Tensor(session, i, d, s) for i, (d, s) in zip(out_ids, program.outputs)]
        if tapes.active:
            tapes.on_custom_execute(list(params) + handles, outputs)
        return _map(program.template, lambda leaf: outputs[leaf.index] if isinstance(leaf, _Out) else leaf)

    def _trace(self, session: "Session", key: Any, args: Any, kwargs: Any, params: List[Tensor]) -> Any:
        self._tracing_count += 1
        real = session._core
        recorder = _Recorder(real, {t._id: i for i, t in enumerate(params)})
        tapes = session._tapes
        session._core = tapes._core = cast(_backend.Backend, _TracingBackend(real, recorder))
        try:
            try:
                result = self._fn(*args, **kwargs)
            finally:
                session._core = tapes._core = real
            outputs: List[Tensor] = []

            def to_template(leaf: Any) -> Any:
                if isinstance(leaf, Tensor):
                    if leaf._session is not session:
                        raise ValueError(f"gradtape.function {self._name!r} returned a tensor of another session")
                    outputs.append(leaf)
                    return _Out(len(outputs) - 1)
                return leaf

            template = _map(result, to_template)
            if recorder.cannot is None and any(i not in recorder.read_handles for i in recorder.outer_watches):
                recorder.cannot = "a watch on a tape made outside the function"
            if recorder.created_variable:
                pass  # traced again at the next call (the variables exist then)
            elif recorder.cannot is not None:
                self._cache[key] = _Eager(recorder.cannot)
                if not self._warned:
                    self._warned = True
                    warnings.warn(
                        f"gradtape.function {self._name!r} runs eagerly for this input signature: its trace "
                        f"did what a program cannot hold ({recorder.cannot})",
                        RuntimeWarning,
                        stacklevel=3,
                    )
            else:
                program_id = session._new_program_id()
                define = pb.DefineProgram(
                    program_id=program_id,
                    params=[pb.ProgramParam(dtype=cast("pb.DType.ValueType", _dtypes.to_pb_dtype(t.dtype)), shape=list(t.shape)) for t in params],
                    steps=recorder.steps,
                    outputs=[recorder.ref(t._id) for t in outputs],
                )
                real.enqueue(pb.Command(define_program=define))
                weakref.finalize(self, _forget_program, weakref.ref(session), program_id).atexit = False
                self._cache[key] = _Program(
                    program_id,
                    template,
                    [(t._dtype, t._shape) for t in outputs],
                    list(dict.fromkeys(recorder.read_handles)),
                )
        finally:
            recorder.finish()
        return result


def function(
    func: Optional[Callable[..., Any]] = None,
    input_signature: Optional[Sequence[Any]] = None,
    reduce_retracing: bool = False,
    name: Optional[str] = None,
    session: Optional["Session"] = None,
) -> Any:
    """Captures `func`'s calls as server programs (see gradtape._function):
    the first call per input signature runs eagerly and is recorded; later
    ones are one CallProgram each. A decorator, with or without arguments.

    Args:
      func: the function (None: returns the decorator).
      input_signature: TensorSpecs (gradtape's or tf's) the arguments must
        match (TypeError otherwise); None dimensions trace per shape.
      reduce_retracing: accepted; programs have fixed shapes, so it cannot
        generalise them.
      name: the name warnings and errors use.
      session: the session; by default that of the first Tensor or Variable
        argument, else gradtape's default session.
    """
    if func is None:
        return lambda f: Function(f, input_signature, reduce_retracing, name, session)
    return Function(func, input_signature, reduce_retracing, name, session)
