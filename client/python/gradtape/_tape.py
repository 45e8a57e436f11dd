"""Gradient tapes, and what the client knows of what records (internal; the
names are gradtape's).

How it works
------------
The server records an op on a tape when one of its inputs is on that tape
(watched, or produced by an op the tape recorded) and has a trainable dtype
(core/autodiff/tape.h, ShouldRecord). The client sees every op it sends, so
it can follow the same rule itself and know, without asking, which gradients
are None: ``TapeSet`` below keeps, for every tensor handle, a bit mask
(``Tensor._conn``) of the watched sources it depends on, one bit per source
per recorder (a gradient tape or a forward accumulator). An op's outputs get
the OR of its differentiable inputs' masks, restricted to the recorders that
record right now; an output whose dtype is not trainable gets nothing (the
server records it, but no op consuming it is recorded). ``gradient`` then
gives None for a source whose bit the targets do not carry, without sending
that source to the server, and ``jvp`` None for a tensor without any of its
accumulator's bits.

Where the client cannot know, it over-approximates and says so with one
more bit per recorder, its *maybe* bit: the results of a gradient computed
while another recorder records (their connection depends on what each op's
backward reads), and ops with a client-given backward. A gradient whose
answer depends on a maybe bit asks the server (``return_values``: the reply's
``is_none`` tells), a round trip the other cases do not make.

Variables: the client watches them itself. Tapes are pushed on the server
with watch_accessed_variables off; when a trainable Variable is read
(``Variable.read_value``) under a recording tape that watches accessed
variables, and that tape does not watch it yet, a Watch of its handle is
buffered before the read. So ``Variable(trainable=False)`` is not watched,
``watched_variables()`` needs no round trip, and the server sees exactly
the watches the client counted.

Bits are reused (oldest freed first, and only once more than ``_REUSE_AFTER``
are free) after their recorder is deleted; a tensor kept that long with a
stale bit and then combined under a new recorder could claim a connection
it does not have (a None gradient then comes back as a handle that fails
when used, as it did before this bookkeeping).
"""

from __future__ import annotations

import collections
import logging
import warnings
import weakref
from typing import (
    TYPE_CHECKING,
    Any,
    Deque,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import contextlib

import grpc
import numpy as np

from gradtape import _dtypes
from gradtape._tensor import Tensor, Variable
from gradtape.errors import GradtapeError
from gradtape.v1 import tape_service_pb2 as pb

if TYPE_CHECKING:
    from gradtape import _backend
    from gradtape.session import Session

_log = logging.getLogger("gradtape")

Sources = Any  # a Tensor, a Variable, or a (nested) list / tuple / dict of them

# Dtypes the server records through (core/tensor/tensor.h, IsTrainable).
TRAINABLE_DTYPES = frozenset(
    [
        np.dtype(np.float16),
        np.dtype(np.float32),
        np.dtype(np.float64),
        np.dtype(np.complex64),
        np.dtype(np.complex128),
        _dtypes.RESOURCE,
    ]
)

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)

# TapeSet.connection's answers.
NOT_CONNECTED = 0
CONNECTED = 1
MAYBE = 2  # only the server knows

_REUSE_AFTER = 192  # freed bits wait until this many are free


def is_trainable(dtype: Optional[np.dtype]) -> bool:
    """Whether tapes record through tensors of `dtype` (None: unknown, so
    yes: the conservative answer)."""
    return dtype is None or dtype in TRAINABLE_DTYPES


class Recorder:
    """One gradient tape or forward accumulator as the TapeSet sees it.

    Attributes:
      kind: "tape" or "accumulator".
      id: the server's tape or accumulator id.
      watch_accessed_variables: reads of trainable variables watch them
        (tapes only).
      persistent: a persistent tape (many gradients).
      bits: watched source id (a tensor id, a variable's handle id) -> its bit.
      maybe_bit: this recorder's "over-approximated" bit.
      all_bits: OR of `bits` and `maybe_bit`.
      variables: handle id -> Variable, the variables it watches.
      recording: pushed and not paused (the session's stop_recording aside).
    """

    __slots__ = (
        "kind",
        "id",
        "watch_accessed_variables",
        "persistent",
        "bits",
        "maybe_bit",
        "all_bits",
        "variables",
        "recording",
        "pushed",
        "deleted",
        "_watched",
    )

    def __init__(self, kind: str, server_id: int, watch_accessed_variables: bool, persistent: bool) -> None:
        self.kind = kind
        self.id = server_id
        self.watch_accessed_variables = watch_accessed_variables
        self.persistent = persistent
        self.bits: Dict[int, int] = {}
        self.maybe_bit = 0
        self.all_bits = 0
        self.variables: Dict[int, Variable] = {}
        self.recording = False
        self.pushed = False
        self.deleted = False
        # (weak reference to the watched handle, its bit): cleared on delete.
        self._watched: List[Tuple["weakref.ReferenceType[Tensor]", int]] = []

    def __repr__(self) -> str:
        return f"<gradtape Recorder {self.kind} {self.id} sources={len(self.bits)} recording={self.recording}>"


class TapeSet:
    """What the client knows of the session's recording state: the recorders
    (gradient tapes and forward accumulators) pushed, what each watches, and
    for each tensor (``Tensor._conn``, an int bit mask or None) its
    connection to watched sources, so that gradients the server would return
    as None are None here without a round trip. The module docstring says
    how.

    Session.execute calls ``on_execute`` after buffering every op, and only
    while ``active`` is true (some recorder records and the session's
    recording is not stopped), so an op costs nothing extra when nothing
    records. ``Variable.read_value`` calls ``on_read_variable`` before its
    ReadVariableOp under the same condition.

    The API a recorder uses (GradientTape here; ForwardAccumulator the same
    way, with kind "accumulator"), each call after the matching server
    command is buffered unless said otherwise:

    * ``new_recorder(kind, server_id, watch_accessed_variables, persistent)``
      -> Recorder (no command);
    * ``push(rec)`` (after PushTape / PushAccumulator), ``pop(rec)`` (after
      PopTape / PopAccumulator), ``delete(rec)`` (after DeleteTape /
      DeleteAccumulator; frees its bits);
    * ``pause(rec)`` / ``resume(rec)``: ``tape.stop_recording()``;
      ``stop_all()`` / ``start_all()``: the session's StopRecording /
      StartRecording;
    * ``watch(rec, items)`` BEFORE the Watch / AccumulatorWatch command: gives
      each trainable item its bit and returns, aligned with `items`, the id to
      send (a tensor's id, a variable's handle id) or None for an item that
      cannot be watched (int or bool: TensorFlow's warning is logged; it stays
      unconnected);
    * ``connection(rec, targets, source)`` -> NOT_CONNECTED / CONNECTED /
      MAYBE: whether d targets / d source can be non-None on `rec`;
      ``jvp_connection(rec, tensor)``: the same for an accumulator's jvp;
    * ``on_gradient(computing, inputs, results)`` after a Gradient (or any
      command whose results are computed by backward functions, e.g. a
      forward-over-backward product): marks `results` maybe-connected on
      every other recorder that records and that `inputs` (targets, output
      gradients, sources) touch; ``computing`` records its own gradient only
      if it is a persistent tape still pushed (the server's rule);
    * ``on_custom_execute(inputs, outputs)`` after an op with a client-given
      backward: like on_execute, plus the maybe bits;
    * ``watched_variables(rec)``: its variables in creation order.
    """

    def __init__(
        self, core: Optional["_backend.Backend"] = None, op_infos: Optional[Iterable[pb.OpInfo]] = None
    ) -> None:
        self.active = False
        self._core = core
        self._stopped = 0  # nested session-wide stop_recording blocks
        self._recording: List[Recorder] = []  # pushed and not paused, in push order
        self._mask = 0  # OR of the recording recorders' all_bits (0 while stopped)
        # While a forward accumulator is entered: every op output, kept alive
        # until the outermost accumulator exits (_forward.py says why).
        self.held: Optional[List[Tensor]] = None
        self._next_bit = 0
        self._free: Deque[int] = collections.deque()
        # op name -> the differentiable input indices when some are not, ()
        # when the op is not differentiable (the server records it on no tape).
        self._rules: Dict[str, Tuple[int, ...]] = {}
        for info in op_infos or ():
            if not info.differentiable:
                self._rules[info.name] = ()
            elif info.non_differentiable_inputs and not info.HasField("list_input"):
                # (A list op's declared indices are not its flat ones: its
                # inputs all count; its non-differentiable ones are index
                # tensors, which carry no tape bit.)
                nd = set(info.non_differentiable_inputs)
                self._rules[info.name] = tuple(i for i in range(len(info.input_names)) if i not in nd)

    # -- bits ----------------------------------------------------------------
    def _new_bit(self) -> int:
        if len(self._free) > _REUSE_AFTER:
            return self._free.popleft()
        bit = 1 << self._next_bit
        self._next_bit += 1
        return bit

    def _update(self) -> None:
        mask = 0
        for rec in self._recording:
            mask |= rec.all_bits
        self._mask = 0 if self._stopped else mask
        self.active = bool(self._recording) and not self._stopped

    # -- recorders -----------------------------------------------------------
    def new_recorder(
        self, kind: str, server_id: int, watch_accessed_variables: bool = False, persistent: bool = False
    ) -> Recorder:
        rec = Recorder(kind, server_id, watch_accessed_variables, persistent)
        rec.maybe_bit = self._new_bit()
        rec.all_bits = rec.maybe_bit
        return rec

    def push(self, rec: Recorder) -> None:
        rec.pushed = True
        self.resume(rec)

    def pop(self, rec: Recorder) -> None:
        rec.pushed = False
        self.pause(rec)

    def pause(self, rec: Recorder) -> None:
        if rec.recording:
            rec.recording = False
            self._recording.remove(rec)
            self._update()

    def resume(self, rec: Recorder) -> None:
        if not rec.recording and not rec.deleted:
            rec.recording = True
            self._recording.append(rec)
            self._update()

    def delete(self, rec: Recorder) -> None:
        """Forgets `rec`: its bits leave the sources it watched and become
        free (finalizer-safe)."""
        if rec.deleted:
            return
        self.pop(rec)
        rec.deleted = True
        for ref, bit in rec._watched:
            t = ref()
            if t is not None and t._conn:
                c = t._conn & ~bit
                t._conn = c if c else None
        self._free.extend(rec.bits.values())
        self._free.append(rec.maybe_bit)
        rec.bits = {}
        rec.all_bits = 0
        rec.variables = {}
        rec._watched = []

    def stop_all(self) -> None:
        self._stopped += 1
        self._update()

    def start_all(self) -> None:
        self._stopped = max(0, self._stopped - 1)
        self._update()

    @property
    def stopped(self) -> bool:
        return self._stopped > 0

    def recording(self) -> List[Recorder]:
        """The recorders that record right now (none while stopped)."""
        return [] if self._stopped else list(self._recording)

    # -- watching --------------------------------------------------------------
    def watch(self, rec: Recorder, items: Sequence[Union[Tensor, Variable]]) -> List[Optional[int]]:
        ids: List[Optional[int]] = []
        for x in items:
            if isinstance(x, Variable):
                handle = x.handle
                if not is_trainable(x.dtype):
                    _warn_watch_dtype(x.dtype)
                rec.variables[handle.id] = x
                ids.append(handle.id)
                self._give_bit(rec, handle, handle.id)
                continue
            dtype = x.dtype  # waits only when the client does not know it
            if not is_trainable(dtype):
                _warn_watch_dtype(dtype)
                ids.append(None)
                continue
            ids.append(x.id)
            self._give_bit(rec, x, x.id)
        return ids

    def _give_bit(self, rec: Recorder, t: Tensor, source_id: int) -> None:
        bit = rec.bits.get(source_id)
        if bit is None:
            bit = rec.bits[source_id] = self._new_bit()
            rec.all_bits |= bit
            rec._watched.append((weakref.ref(t), bit))
            if rec.recording:
                self._update()
        t._conn = (t._conn or 0) | bit

    def on_read_variable(self, var: Variable) -> None:
        """Before `var`'s ReadVariableOp: buffers a Watch of its handle on
        every recording tape that watches accessed variables and does not
        watch it yet (trainable variables only)."""
        if not var.trainable or self._stopped:
            return
        handle = var.handle
        for rec in self._recording:
            if rec.watch_accessed_variables and handle.id not in rec.bits:
                rec.variables[handle.id] = var
                self._give_bit(rec, handle, handle.id)
                if self._core is not None:
                    self._core.enqueue(pb.Command(watch=pb.Watch(tape_id=rec.id, ids=[handle.id])))

    def watched_variables(self, rec: Recorder) -> List[Variable]:
        return [rec.variables[k] for k in sorted(rec.variables)]

    # -- propagation -----------------------------------------------------------
    def on_execute(self, op: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor]) -> None:
        # The hot path (one call per op while something records): OR the
        # inputs' masks, keep the recording recorders' bits, give them to
        # the outputs of a trainable dtype.
        held = self.held
        if held is not None:
            held.extend([o for o in outputs if o._id > 0])  # not ops traced for a custom gradient
        m = 0
        for t in inputs:
            c = t._conn
            if c:
                m |= c
        if m:
            m &= self._mask
            if m:
                if op in self._rules:
                    m = self._through_rule(self._rules[op], inputs)
                    if not m:
                        return
                for o in outputs:
                    d = o._dtype
                    if d is _F32 or d is _F64 or d is None or d in TRAINABLE_DTYPES:
                        o._conn = m

    def _through_rule(self, rule: Tuple[int, ...], inputs: Sequence[Tensor]) -> int:
        """The mask through the differentiable inputs only (0 for an op the
        server records on no tape)."""
        m = 0
        for i in rule:
            c = inputs[i]._conn
            if c:
                m |= c
        return m & self._mask

    def on_custom_execute(self, inputs: Sequence[Tensor], outputs: Sequence[Tensor]) -> None:
        m = 0
        for t in inputs:
            if t._conn is not None:
                m |= t._conn
        m = self._with_maybe(m & self._mask)
        if m:
            for o in outputs:
                if is_trainable(o._dtype):
                    o._conn = m

    def _with_maybe(self, m: int) -> int:
        if m:
            for rec in self._recording:
                if m & rec.all_bits:
                    m |= rec.maybe_bit
        return m

    def on_gradient(self, computing: Optional[Recorder], inputs: Iterable[Tensor], results: Iterable[Optional[Tensor]]) -> None:
        m = 0
        for t in inputs:
            if t._conn is not None:
                m |= t._conn
        m &= self._mask
        if computing is not None and not (computing.persistent and computing.recording):
            m &= ~computing.all_bits  # the server suspends it during its own gradient
        m = self._with_maybe(m)
        for r in results:
            if r is not None:
                r._conn = m if m and is_trainable(r._dtype) else None

    # -- questions -------------------------------------------------------------
    def connection(self, rec: Recorder, targets: Sequence[Tensor], source: Union[Tensor, Variable]) -> int:
        """Whether d(targets)/d(source) on `rec` can be non-None."""
        sdtype: Optional[np.dtype]
        if isinstance(source, Variable):
            sid, sdtype, sconn = source.handle.id, source.dtype, source.handle._conn
        else:
            sid, sdtype, sconn = source.id, source._dtype, source._conn
        if not is_trainable(sdtype):
            return NOT_CONNECTED
        tc = 0
        for t in targets:
            if t.id == sid:
                return CONNECTED  # the seed reaches it unchanged
            if t._conn is not None and is_trainable(t._dtype):
                tc |= t._conn
        tc &= rec.all_bits
        if not tc:
            return NOT_CONNECTED
        bit = rec.bits.get(sid)
        if bit is not None:
            if tc & rec.maybe_bit:
                return MAYBE
            return CONNECTED if tc & bit else NOT_CONNECTED
        # Not a watched source: an intermediate on the tape (or nothing).
        s = (sconn or 0) & rec.all_bits
        if not s:
            return NOT_CONNECTED
        return MAYBE if (s & ~rec.maybe_bit) & ~tc == 0 else NOT_CONNECTED

    def jvp_connection(self, rec: Recorder, tensor: Tensor) -> int:
        """Whether `tensor` can have a tangent in accumulator `rec`."""
        c = (tensor._conn or 0) & rec.all_bits
        if not c or not is_trainable(tensor._dtype):
            return NOT_CONNECTED
        return MAYBE if c & rec.maybe_bit else CONNECTED


def _warn_watch_dtype(dtype: np.dtype) -> None:
    # TensorFlow's text (backprop.py), gradtape's dtype names.
    _log.warning("The dtype of the watched tensor must be floating (e.g. tf.float32), got %s", dtype.name)


# ---------------------------------------------------------------------------
# Gradient tapes


class GradientTape:
    """A gradient tape on the server, used as a context manager::

        with session.GradientTape() as tape:
            tape.watch(x)
            y = session.ops.tanh(x @ w)
        dx = tape.gradient(y, x)      # a Tensor handle (or None), no wait
        dx.numpy()                    # waits

    TensorFlow's semantics: entering pushes the tape (it records every op
    that touches what it watches, and trainable variables read while
    ``watch_accessed_variables``); leaving pops it (it stops recording but
    can still compute gradients). A source the targets do not depend on gets
    ``None`` (known on the client: no round trip). A non-persistent tape
    computes one gradient or Jacobian (RuntimeError at a second call) and
    stops recording at the first; a persistent one called inside its
    ``with`` block records the gradient (second derivatives that way).
    The server frees the tape when this object is garbage collected. Tapes
    nest: an outer tape records the ops the inner tape's gradient runs.
    """

    def __init__(
        self, session: "Session", persistent: bool = False, watch_accessed_variables: bool = True
    ) -> None:
        self._session = session
        self._persistent = persistent
        self._watch_accessed_variables = watch_accessed_variables
        self._id = 0
        self._rec: Optional[Recorder] = None
        self._used = False

    @property
    def id(self) -> int:
        return self._id

    @property
    def persistent(self) -> bool:
        return self._persistent

    @property
    def _recording(self) -> bool:
        return self._rec is not None and self._rec.pushed

    def __enter__(self) -> "GradientTape":
        if self._recording:
            raise ValueError(
                "Tape is still recording, This can happen if you try to re-enter an already-active tape."
            )
        if self._id and self._rec is not None and not self._rec.deleted:
            # Entered again (TensorFlow): the same tape resumes recording.
            self._session._core.enqueue(
                pb.Command(
                    push_tape=pb.PushTape(
                        tape_id=self._id, persistent=self._persistent, watch_accessed_variables=False
                    )
                )
            )
            self._session._tapes.push(self._rec)
            return self
        self._push()
        return self

    def _push(self) -> None:
        s = self._session
        core = s._core
        self._id = core.new_tape_id()
        core.enqueue(
            pb.Command(
                push_tape=pb.PushTape(
                    tape_id=self._id,
                    persistent=self._persistent,
                    # The client watches accessed variables itself (TapeSet).
                    watch_accessed_variables=False,
                )
            )
        )
        self._rec = s._tapes.new_recorder("tape", self._id, self._watch_accessed_variables, self._persistent)
        s._tapes.push(self._rec)
        self._used = False

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        """Pops the tape (idempotent)."""
        if self._recording:
            assert self._rec is not None
            if self._rec.recording:  # not inside its stop_recording() block
                self._session._core.enqueue(pb.Command(pop_tape=pb.PopTape(tape_id=self._id)))
            self._session._tapes.pop(self._rec)

    def __del__(self) -> None:
        try:
            self._delete()
        except Exception:
            pass

    def _delete(self) -> None:
        if self._id and self._rec is not None and not self._rec.deleted:
            self._session._core.delete_tape(self._id, pop_first=self._rec.recording)
            self._session._tapes.delete(self._rec)

    def _check_entered(self, what: str) -> Recorder:
        if not self._id or self._rec is None:
            raise RuntimeError(f"GradientTape.{what}: use the tape in a `with` block first")
        return self._rec

    def _check_unused(self) -> None:
        if self._used and not self._persistent:
            raise RuntimeError(
                "A non-persistent GradientTape can only be used to compute one set of gradients (or jacobians)"
            )

    def _no_sources(self, sources: Any) -> Any:
        """gradient(target, []) (or an empty structure): the empty structure,
        as TensorFlow returns it; a non-persistent tape is used up."""
        self._check_entered("gradient")
        self._check_unused()
        self._start_computing()
        if not self._persistent:
            self._used = True
        return _pack_like(sources, [])

    def _start_computing(self) -> None:
        """TensorFlow: a non-persistent tape stops recording at its gradient;
        a persistent one inside its block records it (and warns)."""
        if not self._recording:
            return
        if not self._persistent:
            self.stop()
        else:
            _log.warning(
                "Calling GradientTape.gradient on a persistent tape inside its context is significantly less "
                "efficient than calling it outside the context (it causes the gradient ops to be recorded on "
                "the tape, leading to increased CPU and memory usage). Only call GradientTape.gradient inside "
                "the context if you actually want to trace the gradient in order to compute higher order "
                "derivatives."
            )

    # -- the TensorFlow tape API ------------------------------------------
    def watch(self, tensors: Sources) -> None:
        """Watches tensors or variables (a single one or a nested
        structure). An int or bool tensor is not watched (TensorFlow's
        warning is logged) and its gradient is None."""
        rec = self._check_entered("watch")
        s = self._session
        flat = _flatten(tensors)
        for i, t in enumerate(flat):
            if isinstance(t, Variable):
                s._source_id(t, f"watch[{i}]")
            elif not isinstance(t, Tensor):
                raise ValueError(
                    f"Passed in object {t!r} of type {type(t).__name__!r}, not tf.Tensor or tf.Variable "
                    "or ExtensionType."
                )
            else:
                s._input_id(t, f"watch[{i}]")
        ids = [i for i in s._tapes.watch(rec, flat) if i is not None]
        if ids:
            s._core.enqueue(pb.Command(watch=pb.Watch(tape_id=self._id, ids=ids)))

    def watched_variables(self) -> Tuple[Variable, ...]:
        """The variables this tape watches (explicitly, or read while
        watch_accessed_variables), in creation order, as TensorFlow."""
        if self._rec is None:
            return ()
        return tuple(self._session._tapes.watched_variables(self._rec))

    @contextlib.contextmanager
    def stop_recording(self) -> Iterator[None]:
        """Ops inside the block are not recorded on this tape."""
        if not self._recording:
            raise RuntimeError("Trying to stop recording a tape which is not recording.")
        assert self._rec is not None
        s = self._session
        others = [r for r in s._tapes.recording() if r is not self._rec]
        if not others:
            # Only this tape records: the session's switch is exact and cheap.
            with s.stop_recording():
                yield
            return
        # Others keep recording: pop this tape and push it back.
        s._core.enqueue(pb.Command(pop_tape=pb.PopTape(tape_id=self._id)))
        s._tapes.pause(self._rec)
        try:
            yield
        finally:
            if self._rec.pushed and not self._rec.deleted:  # not stopped inside the block
                s._core.enqueue(
                    pb.Command(
                        push_tape=pb.PushTape(
                            tape_id=self._id, persistent=self._persistent, watch_accessed_variables=False
                        )
                    )
                )
                s._tapes.resume(self._rec)

    def reset(self) -> None:
        """Clears everything the tape recorded and watched, as leaving and
        entering the block again with a new tape (TensorFlow's reset)."""
        if not self._recording:
            raise ValueError("Tape is not recording.")
        self._delete()
        self._push()

    # -- gradients ---------------------------------------------------------
    def _gradient_command(
        self,
        target: Any,
        sources: Sources,
        output_gradients: Any,
        unconnected_gradients: Any,
    ) -> Tuple[Optional[pb.Command], List[Optional[Tensor]], List[Tensor], List[int]]:
        """The Gradient command for the connected sources (None if none is),
        the results (one per source, None where unconnected), the tensors
        the command names that must live until it is buffered, and the
        indices of the results only the server can tell None."""
        rec = self._check_entered("gradient")
        self._check_unused()
        s = self._session
        if target is None:
            raise TypeError(
                "Argument `target` should be a list or nested structure of Tensors, Variables or "
                "CompositeTensors to be differentiated, but received None."
            )
        targets = _flatten(target)
        flat_sources = _flatten(sources)
        if not targets or not flat_sources:
            raise ValueError(
                f"GradientTape.gradient on tape {self._id}: needs at least one target and one "
                f"source, got {len(targets)} and {len(flat_sources)}"
            )
        for t in targets:
            _check_differentiable(t, "target")
        for x in flat_sources:
            _check_differentiable(x, "source")
        unconnected = _unconnected(unconnected_gradients)
        keep: List[Tensor] = []  # every temporary the command names
        target_tensors = [s._read_if_variable(t) for t in targets]
        keep.extend(target_tensors)
        out_ids: List[int] = []
        if output_gradients is not None:
            grads = _flatten(output_gradients, keep_none=True)
            if len(grads) != len(targets):
                raise ValueError(
                    f"GradientTape.gradient on tape {self._id}: output_gradients must have one "
                    f"entry per target ({len(targets)}), got {len(grads)}"
                )
            for i, (g, t) in enumerate(zip(grads, target_tensors)):
                if g is None:
                    out_ids.append(0)  # ones
                else:
                    gt = s.convert_to_tensor(g, dtype_hint=t._dtype)
                    keep.append(gt)
                    out_ids.append(s._input_id(gt, f"output_gradients[{i}]"))
        target_ids = [s._input_id(t, f"target[{i}]") for i, t in enumerate(target_tensors)]
        source_ids = [s._source_id(x, f"source[{i}]") for i, x in enumerate(flat_sources)]
        self._start_computing()
        results, sent, maybe = self._results_for(rec, target_tensors, flat_sources, unconnected)
        sent_sources = [source_ids[i] for i in sent]
        sent_results = [r for r in (results[i] for i in sent) if r is not None]
        if not self._persistent:
            self._used = True
        if not sent_results:
            return None, results, keep, maybe
        command = pb.Command(
            gradient=pb.Gradient(
                tape_id=self._id,
                target_ids=target_ids,
                source_ids=sent_sources,
                output_gradient_ids=out_ids,
                unconnected=unconnected,
                result_ids=[r.id for r in sent_results],
            )
        )
        keep.extend(x.handle if isinstance(x, Variable) else x for x in flat_sources)
        return command, results, keep, maybe

    def _results_for(
        self, rec: Recorder, targets: Sequence[Tensor], sources: Sequence[Any], unconnected: int
    ) -> Tuple[List[Optional[Tensor]], List[int], List[int]]:
        """One result per source: None (or zeros) where the client knows
        the targets do not reach it (TapeSet), else a handle the Gradient
        command fills; the indices of those, and of the ones only the
        server can tell None (maybe bits)."""
        s = self._session
        results: List[Optional[Tensor]] = []
        sent: List[int] = []
        maybe: List[int] = []
        for i, x in enumerate(sources):
            conn = s._tapes.connection(rec, targets, x)
            if conn == NOT_CONNECTED:
                results.append(self._zeros_like(x) if unconnected == pb.UNCONNECTED_ZERO else None)
                continue
            dtype = x.dtype if isinstance(x, Variable) else x._dtype
            shape = x.shape if isinstance(x, Variable) else x._shape
            results.append(Tensor(s, s._core.new_id(), dtype, shape))
            sent.append(i)
            if conn == MAYBE:
                maybe.append(i)
        return results, sent, maybe

    def _zeros_like(self, x: Union[Tensor, Variable]) -> Tensor:
        s = self._session
        with s.stop_recording():
            value = x.read_value() if isinstance(x, Variable) else x
            (z,) = s.execute("ZerosLike", [value])
        z._shape = x.shape if isinstance(x, Variable) else x._shape
        return z

    def gradient(
        self,
        target: Any,
        sources: Sources,
        output_gradients: Any = None,
        unconnected_gradients: Union[str, "UnconnectedGradients"] = "none",
    ) -> Any:
        """d(sum of targets)/d(source) for each source, as Tensor handles in
        the structure of `sources` (no wait), ``None`` for a source the
        targets do not depend on (TensorFlow's default).

        Args:
          target: a Tensor or Variable, or a nested structure of them (their
            gradients are summed).
          sources: a Tensor, a Variable, or a nested list / tuple / dict of them.
          output_gradients: None, or one per target: the gradient flowing into
            that target (None entries mean ones); numpy values are converted.
          unconnected_gradients: "none" or "zero". With "zero" an unconnected
            source gets zeros.

        The client knows which gradients are None from what it recorded
        (TapeSet), except for the results of a gradient taken while this
        tape recorded (a gradient of a gradient): then, with "none", this
        call waits for the server's answer (one round trip).
        """
        flat_targets = _flatten(target) if target is not None else []
        if target is not None and isinstance(sources, (list, tuple, Mapping)) and not _flatten(sources):
            return self._no_sources(sources)  # TensorFlow: [] for [] (the tape is used)
        if flat_targets and output_gradients is None and all(isinstance(t, Variable) for t in flat_targets):
            return self._variable_targets(flat_targets, sources, unconnected_gradients)
        command, results, keep, maybe = self._gradient_command(
            target, sources, output_gradients, unconnected_gradients
        )
        s = self._session
        if command is not None:
            if maybe and command.gradient.unconnected == pb.UNCONNECTED_NONE:
                self._ask_server(command, results)
            else:
                s._core.enqueue(command)
        if command is not None:
            sent = set(command.gradient.result_ids)
            s._tapes.on_gradient(self._rec, keep, [r for r in results if r is not None and r.id in sent])
        del keep  # released after the command is buffered
        return _pack_like(sources, results)

    def _variable_targets(self, targets: List[Any], sources: Sources, unconnected_gradients: Any) -> Any:
        """TensorFlow differentiates a Variable target as its handle, which
        no op produces: d v / d v is ones (once per time v is a target),
        every other source is unconnected. No Gradient command is needed."""
        self._check_entered("gradient")
        self._check_unused()
        if not self._persistent:
            self._used = True
        unconnected = _unconnected(unconnected_gradients)
        results: List[Optional[Tensor]] = []
        for x in _flatten(sources):
            _check_differentiable(x, "source")
            times = sum(1 for t in targets if t is x)
            if times:
                ones = self._session.execute("OnesLike", [x.read_value()])[0]
                results.append(ones if times == 1 else ones * float(times))
            else:
                results.append(self._zeros_like(x) if unconnected == pb.UNCONNECTED_ZERO else None)
        return _pack_like(sources, results)

    def _ask_server(self, command: pb.Command, results: List[Optional[Tensor]]) -> None:
        """Sends a Gradient with return_values and sets to None the results
        the server reports None (wait point)."""
        command.gradient.return_values = True
        result = self._session._core.call(command)
        sent = [i for i, r in enumerate(results) if r is not None]
        is_none = result.gradient.is_none
        if len(result.gradient.values) != len(sent):
            raise GradtapeError(
                grpc.StatusCode.INTERNAL,
                f"gradient on tape {self._id}: the server's result for command {result.seq} "
                "does not hold one value per source",
                seq=result.seq,
            )
        for k, i in enumerate(sent):
            if k < len(is_none) and is_none[k]:
                results[i] = None

    def gradient_values(
        self,
        target: Any,
        sources: Sources,
        output_gradients: Any = None,
        unconnected_gradients: Union[str, "UnconnectedGradients"] = "none",
    ) -> Any:
        """Wait point: like ``gradient`` but returns numpy arrays (``None`` for
        an unconnected source with unconnected_gradients="none")."""
        command, results, keep, _ = self._gradient_command(
            target, sources, output_gradients, unconnected_gradients
        )
        out: List[Optional[np.ndarray]] = [None] * len(results)
        if command is not None:
            command.gradient.return_values = True
            result = self._session._core.call(command)
            values = result.gradient
            sent = [i for i, r in enumerate(results) if r is not None and r.id in command.gradient.result_ids]
            if len(values.values) != len(sent):
                raise GradtapeError(
                    grpc.StatusCode.INTERNAL,
                    f"gradient on tape {self._id}: the server's result for command {result.seq} "
                    "does not hold one value per source",
                    seq=result.seq,
                )
            for k, i in enumerate(sent):
                none = k < len(values.is_none) and values.is_none[k]
                out[i] = None if none else _dtypes.from_value(values.values[k])
        for i, r in enumerate(results):
            if r is not None and out[i] is None and (command is None or r.id not in command.gradient.result_ids):
                out[i] = r.numpy()  # zeros made on the client's side
        del keep  # released after the command is buffered (values: no handles)
        return _pack_like(sources, out)

    def jacobian(
        self,
        target: Any,
        sources: Sources,
        unconnected_gradients: Union[str, "UnconnectedGradients"] = "none",
        parallel_iterations: Optional[int] = None,
        experimental_use_pfor: bool = True,
    ) -> Any:
        """d target / d source for each source (TensorFlow's
        ``tape.jacobian``), computed on the server by one Jacobian command (no
        round trip per row): Tensor handles of shape target.shape +
        source.shape, in the structure of `sources`, without waiting;
        ``None`` for an unconnected source with "none", zeros with "zero".
        A non-persistent tape computes one Jacobian. The Jacobian is recorded
        on no tape (the server's rule). `parallel_iterations` and
        `experimental_use_pfor` are accepted for TensorFlow's signature."""
        return self._jacobian(target, sources, unconnected_gradients, batch=False)

    def batch_jacobian(
        self,
        target: Any,
        source: Sources,
        unconnected_gradients: Union[str, "UnconnectedGradients"] = "none",
        parallel_iterations: Optional[int] = None,
        experimental_use_pfor: bool = True,
    ) -> Any:
        """TensorFlow's ``tape.batch_jacobian``: target and sources share
        their first (batch) dim, row b of the target depends only on row b of
        the sources; results have shape [batch] + target.shape[1:] +
        source.shape[1:]. Handles, no wait. ValueError for a target or
        source of rank below 2 (when the client knows the shapes)."""
        for what, x in (("target", target), ("source", source)):
            shape = x.shape if isinstance(x, Variable) else getattr(x, "_shape", None)
            if shape is not None and len(shape) < 2:
                raise ValueError(f"Shape {tuple(shape)} must have rank at least 2")
        return self._jacobian(target, source, unconnected_gradients, batch=True)

    def _jacobian(self, target: Any, sources: Sources, unconnected_gradients: Any, batch: bool) -> Any:
        rec = self._check_entered("jacobian")
        self._check_unused()
        s = self._session
        _check_differentiable(target, "target")
        flat_sources = _flatten(sources)
        if not flat_sources:
            raise ValueError(f"GradientTape.jacobian on tape {self._id}: needs at least one source")
        for x in flat_sources:
            _check_differentiable(x, "source")
        unconnected = _unconnected(unconnected_gradients)
        t = s._read_if_variable(target)
        target_id = s._input_id(t, "target")
        source_ids = [s._source_id(x, f"source[{i}]") for i, x in enumerate(flat_sources)]
        self._start_computing()
        if not self._persistent:
            self._used = True
        results: List[Optional[Tensor]] = []
        sent_sources: List[int] = []
        maybe = False
        for i, x in enumerate(flat_sources):
            conn = s._tapes.connection(rec, [t], x)
            if conn == NOT_CONNECTED and unconnected == pb.UNCONNECTED_NONE:
                results.append(None)
                continue
            maybe = maybe or conn == MAYBE
            dtype = x.dtype if isinstance(x, Variable) else x._dtype
            results.append(Tensor(s, s._core.new_id(), dtype))
            sent_sources.append(source_ids[i])
        sent = [r for r in results if r is not None]
        if sent:
            command = pb.Command(
                jacobian=pb.Jacobian(
                    tape_id=self._id,
                    target_id=target_id,
                    source_ids=sent_sources,
                    unconnected=unconnected,
                    batch=batch,
                    result_ids=[r.id for r in sent],
                )
            )
            if maybe and unconnected == pb.UNCONNECTED_NONE:
                command.jacobian.return_values = True
                reply = s._core.call(command).jacobian
                positions = [i for i, r in enumerate(results) if r is not None]
                for k, i in enumerate(positions):
                    if k < len(reply.is_none) and reply.is_none[k]:
                        results[i] = None
            else:
                s._core.enqueue(command)
        del t  # the target read lives until the command is buffered
        return _pack_like(sources, results)


class UnconnectedGradients:
    """TensorFlow's names for the unconnected-gradient modes."""

    NONE = "none"
    ZERO = "zero"


def _check_differentiable(x: Any, what: str) -> None:
    """TensorFlow's exception classes for a target or source that is not a
    tensor: TypeError for a string, AttributeError otherwise."""
    if isinstance(x, (Tensor, Variable)):
        return
    if isinstance(x, str):
        raise TypeError(f"Cannot convert the argument `type_value`: {x!r} to a TensorFlow DType.")
    raise AttributeError(f"{type(x).__name__!r} object has no attribute 'dtype' (a gradient {what} must be a Tensor or Variable)")


def _unconnected(value: Any) -> "pb.UnconnectedGradients.ValueType":
    v = str(value).lower()
    if v in ("none", "unconnectedgradients.none"):
        return pb.UNCONNECTED_NONE
    if v in ("zero", "unconnectedgradients.zero"):
        return pb.UNCONNECTED_ZERO
    raise ValueError(f'unconnected_gradients must be "none" or "zero", got {value!r}')


def _flatten(structure: Any, keep_none: bool = False) -> List[Any]:
    if isinstance(structure, (list, tuple)):
        return [y for x in structure for y in _flatten(x, keep_none)]
    if isinstance(structure, Mapping):
        return [y for k in sorted(structure) for y in _flatten(structure[k], keep_none)]
    if structure is None and not keep_none:
        return []
    return [structure]


def _pack_like(structure: Any, flat: List[Any]) -> Any:
    it = iter(flat)

    def pack(s: Any) -> Any:
        if isinstance(s, (list, tuple)):
            items = [pack(x) for x in s]
            return type(s)(items) if not hasattr(s, "_fields") else type(s)(*items)
        if isinstance(s, Mapping):
            return {k: pack(s[k]) for k in sorted(s)}
        return next(it)

    return pack(structure)
