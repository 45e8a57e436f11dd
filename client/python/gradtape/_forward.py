"""Forward-mode autodiff: TensorFlow's ``ForwardAccumulator`` over the
server's accumulators (PushAccumulator, AccumulatorWatch, FetchJvp,
PopAccumulator, DeleteAccumulator).

How it works: the accumulator lives on the server. Entering the ``with``
block pushes it and gives each primal its tangent; while it is pushed, every
op whose input carries a tangent computes its outputs' tangents on the
server (by the op's forward rule, or by the double-VJP trick). ``jvp(t)``
names the tangent of `t` as a new handle (FetchJvp): no value moves until
it is read. Accumulators nest with tapes in both orders, as in TensorFlow's
advanced autodiff guide: a gradient computed while an accumulator is pushed
gets tangents (forward-over-backward Hessian-vector products), and a tape
that watches the primals records the tangent computations
(backward-over-forward).

``jvp`` returns None for a tensor without a tangent, as TensorFlow does,
without a round trip where the client knows: the accumulator is a recorder
of the session's TapeSet (gradtape._tape), which follows every op's
connection to the watched primals; only where it cannot know (results of a
gradient computed while the accumulator records, ops with a custom
gradient) does ``jvp`` ask the server (one round trip, which also brings
the value).

Variables as primals: the server's accumulators carry tangents of tensors
only, so while the accumulator is entered each read of a primal variable
(``Variable.read_value``, wrapped for that time) gives the value read the
variable's tangent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

import numpy as np

from gradtape import _dtypes
from gradtape._tape import CONNECTED, NOT_CONNECTED, Recorder, _flatten, _pack_like, _unconnected
from gradtape._tensor import Tensor, Variable
from gradtape.errors import GradtapeError
from gradtape.v1 import tape_service_pb2 as pb

if TYPE_CHECKING:
    from gradtape.session import Session

def _can_carry_tangent(dtype: Optional[np.dtype]) -> bool:
    return dtype is None or dtype.kind in "fc"


class ForwardAccumulator:
    """TensorFlow's ``tf.autodiff.ForwardAccumulator(primals, tangents)``::

        with gradtape.ForwardAccumulator(x, tangent) as acc:
            y = session.ops.sin(x) * x
        acc.jvp(y)                     # d y / d x . tangent, a Tensor handle

    Args:
      primals: a Tensor or a nested structure of Tensors (of one session).
      tangents: the same structure: one tangent per primal, of its shape
        (numpy values and Python numbers are converted to its dtype).
    """

    def __init__(self, primals: Any, tangents: Any) -> None:
        flat_primals = _flatten(primals)
        flat_tangents = _flatten(tangents)
        if len(flat_primals) != len(flat_tangents):
            raise ValueError(
                f"ForwardAccumulator: {len(flat_primals)} primals but {len(flat_tangents)} tangents "
                "(give one tangent per primal, in the same structure)"
            )
        if not flat_primals:
            raise ValueError("ForwardAccumulator: needs at least one primal")
        seen: Dict[int, int] = {}
        session: Optional["Session"] = None
        for i, p in enumerate(flat_primals):
            if not isinstance(p, (Tensor, Variable)):
                raise TypeError(f"ForwardAccumulator: primal {i} is a {type(p).__name__}, not a gradtape Tensor")
            if id(p) in seen:
                raise ValueError(f"ForwardAccumulator: primal {i} was specified as a primal multiple times")
            seen[id(p)] = i
            if session is None:
                session = p.session
            elif p.session is not session:
                raise ValueError(f"ForwardAccumulator: primal {i} belongs to another gradtape session")
        assert session is not None
        self._session: "Session" = session
        self._primals: List[Any] = flat_primals
        self._tangents: List[Tensor] = []
        for i, (p, t) in enumerate(zip(flat_primals, flat_tangents)):
            dtype = p.dtype if isinstance(p, Variable) else p._dtype
            if dtype is not None and not _can_carry_tangent(dtype):
                raise ValueError(
                    f"ForwardAccumulator: primal {i} has dtype {dtype.name}; only "
                    "floating and complex tensors carry tangents"
                )
            # (a shape mismatch fails on the server, at the next wait point)
            tangent = session.convert_to_tensor(t, dtype=None if isinstance(t, Tensor) else dtype)
            self._tangents.append(tangent)
        # Variables: the server's accumulators carry tangents of tensors, so
        # each read of a primal variable while entered gets its tangent.
        self._variables = [(p, t) for p, t in zip(flat_primals, self._tangents) if isinstance(p, Variable)]
        self._tensor_pairs = [(p, t) for p, t in zip(flat_primals, self._tangents) if isinstance(p, Tensor)]
        self._patch: Optional[_ReadPatch] = None
        self._id = 0
        self._recording = False
        self._rec: Optional[Recorder] = None
        self._owns_held = False

    @property
    def id(self) -> int:
        return self._id

    def __enter__(self) -> "ForwardAccumulator":
        if self._id:
            raise ValueError("a ForwardAccumulator can be entered once")
        core = self._session._core
        tapes = self._session._tapes
        self._id = core.new_tape_id()
        core.enqueue(pb.Command(push_accumulator=pb.PushAccumulator(accumulator_id=self._id)))
        self._rec = tapes.new_recorder("accumulator", self._id)
        tapes.push(self._rec)
        self._recording = True
        self._watch([p for p, _ in self._tensor_pairs], [t for _, t in self._tensor_pairs])
        if self._variables:
            self._patch = _ReadPatch(self)
            self._patch.install()
        self._hold_outputs()
        return self

    def _hold_outputs(self) -> None:
        """Keeps the handle of every op output made while entered alive
        until the outermost accumulator exits (TapeSet.held, filled by
        TapeSet.on_execute, which every op path calls while something
        records). The server forgets a tensor's tangent when its id is
        released, even while a tape still holds the value for its backward,
        so a gradient computed inside the block (forward-over-backward)
        would lose the tangents of released intermediates (x * x in
        x * x * x). TensorFlow's tape keeps them alive the same way."""
        tapes = self._session._tapes
        self._owns_held = tapes.held is None
        if self._owns_held:
            tapes.held = []

    def _release_outputs(self) -> None:
        if self._owns_held:
            self._session._tapes.held = None
            self._owns_held = False

    def _watch(self, primals: List[Tensor], tangents: List[Tensor]) -> None:
        """Gives each primal its tangent: TapeSet first (the bits; None for
        an int or bool primal, which TF warns about and leaves alone), then
        AccumulatorWatch."""
        assert self._rec is not None
        ids = self._session._tapes.watch(self._rec, primals)
        pairs = [(i, t.id) for i, t in zip(ids, tangents) if i is not None]
        if pairs:
            self._session._core.enqueue(
                pb.Command(
                    accumulator_watch=pb.AccumulatorWatch(
                        accumulator_id=self._id, ids=[i for i, _ in pairs], tangent_ids=[t for _, t in pairs]
                    )
                )
            )

    def __exit__(self, *exc: Any) -> None:
        if self._recording:
            self._recording = False
            if self._patch is not None:
                self._patch.uninstall()
                self._patch = None
            self._release_outputs()
            self._session._core.enqueue(pb.Command(pop_accumulator=pb.PopAccumulator(accumulator_id=self._id)))
            if self._rec is not None:
                self._session._tapes.pop(self._rec)

    def _on_read(self, var: Variable, value: Tensor) -> None:
        """A read of a primal variable while entered: its value gets the tangent."""
        if not self._recording or self._session._tapes.stopped:
            return
        for v, t in self._variables:
            if v is var:
                self._watch([value], [t])
                return

    def __del__(self) -> None:
        try:
            if self._id:
                core = self._session._core
                if self._recording:
                    core.enqueue(pb.Command(pop_accumulator=pb.PopAccumulator(accumulator_id=self._id)))
                core.enqueue(pb.Command(delete_accumulator=pb.DeleteAccumulator(accumulator_id=self._id)))
                if self._rec is not None:
                    self._session._tapes.delete(self._rec)
        except Exception:
            pass

    def _jvp_one(self, t: Any, unconnected: "pb.UnconnectedGradients.ValueType") -> Optional[Tensor]:
        s = self._session
        if isinstance(t, Variable):
            for v, tangent in self._variables:
                if v is t:
                    return tangent  # a primal variable's JVP is its tangent
            return None if unconnected == pb.UNCONNECTED_NONE else s.execute("ZerosLike", [t.read_value()])[0]
        if not isinstance(t, Tensor) or t.session is not s:
            return None
        dtype = t._dtype
        result_id = s._core.new_id()
        command = pb.Command(
            fetch_jvp=pb.FetchJvp(accumulator_id=self._id, id=t.id, result_id=result_id, unconnected=unconnected)
        )
        assert self._rec is not None
        connection = s._tapes.jvp_connection(self._rec, t)
        if connection == NOT_CONNECTED and unconnected == pb.UNCONNECTED_NONE:
            return None
        if connection == CONNECTED or unconnected == pb.UNCONNECTED_ZERO:
            s._core.enqueue(command)
            return self._result(Tensor(s, result_id, dtype, t._shape), t)
        command.fetch_jvp.return_value = True
        result = s._core.call(command)
        jvp = result.jvp
        if len(jvp.values) != 1:
            raise GradtapeError(
                _grpc_internal(),
                f"FetchJvp (command {result.seq}): the server's result holds {len(jvp.values)} values, not one",
                seq=result.seq,
            )
        out = Tensor(s, result_id, dtype, t._shape)  # released when unused
        if len(jvp.is_none) > 0 and jvp.is_none[0]:
            return None
        array = _dtypes.from_value(jvp.values[0])
        out._dtype, out._shape = array.dtype, tuple(array.shape)
        return self._result(out, t)

    def _result(self, out: Tensor, t: Tensor) -> Tensor:
        """The JVP was computed by tangent ops the recording tapes recorded
        (backward-over-forward): it is connected to what `t` and the
        tangents are connected to, as far as the client knows."""
        self._session._tapes.on_gradient(None, [t] + self._tangents, [out])
        return out

    def jvp(self, primals: Any, unconnected_gradients: Any = "none") -> Any:
        """The JVP of each tensor in `primals` (a nested structure), in that
        structure: Tensor handles, None for a tensor without a tangent (zeros
        with unconnected_gradients="zero"). Inside or after the ``with``
        block; only ops run while it was entered have tangents."""
        if not self._id:
            raise ValueError("ForwardAccumulator.jvp: enter the accumulator in a `with` block first")
        unconnected = _unconnected(unconnected_gradients)
        flat = _flatten(primals)
        return _pack_like(primals, [self._jvp_one(t, unconnected) for t in flat])


class _ReadPatch:
    """Wraps Variable.read_value while an accumulator with variable primals
    is entered (LIFO with other wrappers: installed on enter, removed on
    exit)."""

    def __init__(self, acc: ForwardAccumulator) -> None:
        self._acc = acc
        self._original: Any = None

    def install(self) -> None:
        original = Variable.read_value
        self._original = original
        acc = self._acc

        def read_value(var: Variable) -> Tensor:
            value = original(var)
            acc._on_read(var, value)
            return value

        Variable.read_value = read_value  # type: ignore[method-assign,assignment]
        Variable.value = read_value  # type: ignore[assignment]

    def uninstall(self) -> None:
        Variable.read_value = self._original  # type: ignore[method-assign]
        Variable.value = self._original


def _grpc_internal() -> Any:
    import grpc

    return grpc.StatusCode.INTERNAL
