"""Tensors, Variables, conversions and the Python protocol against
TensorFlow 2 eager as the reference.

Each case is written once, as a function of a "side" (TensorFlow or a
gradtape session) that gives constants, variables and raw ops; it runs on
both, and the outcomes must match: the value (exactly, unless the case
says otherwise), its dtype and shape, or the exception class (TF's
InvalidArgumentError, a kernel's refusal, is gradtape's GradtapeError
INVALID_ARGUMENT, raised at the wait point). gradtape must also know each
result's dtype, and its shape where the case says so, before any fetch.
"""

import operator
import os

import grpc
import numpy as np
import pytest

import gradtape


@pytest.fixture(scope="module")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow  # CI installs tensorflow-cpu (tests/python/requirements.txt)

    return tensorflow


class TFSide:
    def __init__(self, tf):
        self.tf = tf
        self.f = tf.constant([1.0, 2.0])
        self.i = tf.constant([1, 2])
        self.b = tf.constant([True, False])
        self.c = tf.constant([1 + 1j])
        self.f64 = tf.constant(np.array([1.0, 2.0]))
        self.m = tf.constant(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
        self.mat = tf.constant([[1.0, 2.0]])

    def constant(self, value, dtype=None):
        return self.tf.constant(value, dtype=dtype)

    def Variable(self, value, dtype=None):  # noqa: N802
        return self.tf.Variable(value, dtype=dtype)

    def raw(self, op, **kwargs):
        return getattr(self.tf.raw_ops, op)(**kwargs)


class GradtapeSide:
    def __init__(self, session):
        self.s = session
        self.f = session.constant([1.0, 2.0])
        self.i = session.constant([1, 2])
        self.b = session.constant([True, False])
        self.c = session.constant([1 + 1j])
        self.f64 = session.constant(np.array([1.0, 2.0]))
        self.m = session.constant(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
        self.mat = session.constant([[1.0, 2.0]])

    def constant(self, value, dtype=None):
        return self.s.constant(value, dtype=dtype)

    def Variable(self, value, dtype=None):  # noqa: N802
        return self.s.Variable(value, dtype=dtype)

    def raw(self, op, **kwargs):
        return self.s.ops[op](**kwargs)


# name -> case. Marks in the name: "~" compare values to 1e-6 (pow), "?"
# the shape may be unknown before a fetch.
CASES = {
    # -- 1. Python literals on tensors ------------------------------------
    "f*0.1": lambda T: T.f * 0.1,
    "0.1*f": lambda T: 0.1 * T.f,
    "loss*0.5e-3": lambda T: T.f * 0.5e-3,
    "f*1e40": lambda T: T.f * 1e40,
    "f-0.1": lambda T: T.f - 0.1,
    "0.3-f": lambda T: 0.3 - T.f,
    "f+0.1": lambda T: T.f + 0.1,
    "i*0.5": lambda T: T.i * 0.5,
    "i*1.0": lambda T: T.i * 1.0,
    "i-0.5": lambda T: T.i - 0.5,
    "i+0.5": lambda T: T.i + 0.5,
    "0.5+i": lambda T: 0.5 + T.i,
    "i+2**31": lambda T: T.i + 2**31,
    "i+2**40": lambda T: T.i + 2**40,
    "i+2**64": lambda T: T.i + 2**64,
    "f*True": lambda T: T.f * True,
    "i*True": lambda T: T.i * True,
    "f*(1+2j)": lambda T: T.f * (1 + 2j),
    "c*2.5": lambda T: T.c * 2.5,
    "c*2": lambda T: T.c * 2,
    "f*np.float64(0.1)": lambda T: T.f * np.float64(0.1),
    "f*np.int64(2)": lambda T: T.f * np.int64(2),
    "i*np.int64(2)": lambda T: T.i * np.int64(2),
    "i+np.float64(0.5)": lambda T: T.i + np.float64(0.5),
    "f*np.array([1.,2.])": lambda T: T.f * np.array([1.0, 2.0]),
    "np.array([1.,2.])*f": lambda T: np.array([1.0, 2.0]) * T.f,
    "f*np.array([1,2],int32)": lambda T: T.f * np.array([1, 2], np.int32),
    "f+[1,2]": lambda T: T.f + [1, 2],
    "f+[1.5,2]": lambda T: T.f + [1.5, 2],
    "i+[1.5]": lambda T: T.i + [1.5],
    "i*[1.5]": lambda T: T.i * [1.5],
    "[1.5]+i": lambda T: [1.5] + T.i,
    "f*[1j]": lambda T: T.f * [1j],
    "f64*0.1": lambda T: T.f64 * 0.1,
    "f+f64": lambda T: T.f + T.f64,
    "f+i": lambda T: T.f + T.i,
    # -- division ------------------------------------------------------------
    "f/2": lambda T: T.f / 2,
    "f/3.0": lambda T: T.f / 3.0,
    "i/2": lambda T: T.i / 2,
    "2/f": lambda T: 2 / T.f,
    "0.1/f": lambda T: 0.1 / T.f,
    "1/i": lambda T: 1 / T.i,
    "1./i": lambda T: 1.0 / T.i,
    "i/0.5": lambda T: T.i / 0.5,
    "i/[1.5]": lambda T: T.i / [1.5],
    "f/1j": lambda T: T.f / 1j,
    "i/i": lambda T: T.i / T.i,
    # -- comparisons, equality ---------------------------------------------
    "f<1": lambda T: T.f < 1,
    "1<f": lambda T: 1 < T.f,
    "f>=1.5": lambda T: T.f >= 1.5,
    "i<0.5": lambda T: T.i < 0.5,
    "f<None": lambda T: T.f < None,
    "f==1": lambda T: T.f == 1,
    "f!=1": lambda T: T.f != 1,
    "f==f": lambda T: T.f == T.f,
    "f==None": lambda T: T.f == None,  # noqa: E711
    "f!=None": lambda T: T.f != None,  # noqa: E711
    "f=='a'": lambda T: T.f == "a",
    "f==[1,5]": lambda T: T.f == [1, 5],
    "i==1.5": lambda T: T.i == 1.5,
    "b==1": lambda T: T.b == 1,
    "b==True": lambda T: T.b == True,  # noqa: E712
    "f==3elem": lambda T: T.f == T.constant([1.0, 2.0, 3.0]),
    "f!=3elem": lambda T: T.f != T.constant([1.0, 2.0, 3.0]),
    "f==i": lambda T: T.f == T.i,
    # -- unary, powers, matmul ----------------------------------------------
    "-f": lambda T: -T.f,
    "abs(-f)": lambda T: abs(-T.f),
    "abs(i)": lambda T: abs(T.constant([-1, 2])),
    "~abs(c)": lambda T: abs(T.constant([3 + 4j, -1.5 + 0.5j])),
    "~abs(c64)": lambda T: abs(T.constant(np.array([3 + 4j], np.complex64))),
    "f**2": lambda T: T.f**2,
    "~f**0.5": lambda T: T.f**0.5,
    "~f**3": lambda T: T.f**3,
    "~2**f": lambda T: 2**T.f,
    "~f**[2,3]": lambda T: T.f ** [2, 3],
    "i**2": lambda T: T.i**2,
    "i**0.5": lambda T: T.i**0.5,
    "2.0**i": lambda T: 2.0**T.i,
    "f**i": lambda T: T.f**T.i,
    "mat@list": lambda T: T.mat @ [[1.0], [2.0]],
    "list@mat.T": lambda T: [[1.0], [2.0]] @ T.mat,
    "np@mat": lambda T: np.array([[1.0], [2.0]]) @ T.mat,
    "list-f": lambda T: [1.0, 2.0] - T.f,
    # -- 4. constants and variables: TF's dtypes ----------------------------
    "const 3.0": lambda T: T.constant(3.0),
    "const 10": lambda T: T.constant(10),
    "const 2**40": lambda T: T.constant(2**40),
    "const [1,2**40]": lambda T: T.constant([1, 2**40]),
    "const 2**64": lambda T: T.constant(2**64),
    "const True": lambda T: T.constant(True),
    "const 1j": lambda T: T.constant(1j),
    "const np.float64(1)": lambda T: T.constant(np.float64(1)),
    "const np f64": lambda T: T.constant(np.array([1.0, 2.0])),
    "const np i64": lambda T: T.constant(np.array([1, 2])),
    "const [1,2.5]": lambda T: T.constant([1, 2.5]),
    "const []": lambda T: T.constant([]),
    "const [np.float64(1),2.]": lambda T: T.constant([np.float64(1), 2.0]),
    "const 0.1 f64": lambda T: T.constant(0.1, np.float64),
    "const 0.1 f32": lambda T: T.constant(0.1, np.float32),
    "const 1.5 int32": lambda T: T.constant(1.5, np.int32),
    "const 1.0 int32": lambda T: T.constant(1.0, np.int32),
    "const 1 bool": lambda T: T.constant(1, np.bool_),
    "const True f32": lambda T: T.constant(True, np.float32),
    "const np [1.5] int32": lambda T: T.constant(np.array([1.5]), np.int32),
    "const np f64 f32": lambda T: T.constant(np.array([0.1]), np.float32),
    "var 3.0": lambda T: T.Variable(3.0).read_value(),
    "var 3": lambda T: T.Variable(3).read_value(),
    "var np f64": lambda T: T.Variable(np.array([1.0, 2.0])).read_value(),
    "var [1.,2.]": lambda T: T.Variable([1.0, 2.0]).read_value(),
    "var 3 f32": lambda T: T.Variable(3, dtype=np.float32).read_value(),
    "var 1.5 int32": lambda T: T.Variable(1.5, dtype=np.int32).read_value(),
    # -- 5. the protocol on Variables ----------------------------------------
    "var*0.1": lambda T: T.Variable([1.0, 2.0]) * 0.1,
    "0.1/var": lambda T: 0.1 / T.Variable([1.0, 2.0]),
    "var/var": lambda T: T.Variable([1.0, 2.0]) / T.Variable([4.0, 8.0]),
    "1-var": lambda T: 1 - T.Variable([1.0, 2.0]),
    "var**2": lambda T: T.Variable([1.0, 2.0]) ** 2,
    "~2**var": lambda T: 2 ** T.Variable([1.0, 2.0]),
    "var<1": lambda T: T.Variable([1.0, 2.0]) < 1,
    "var==var": lambda T: T.Variable([1.0, 2.0]) == T.Variable([1.0, 3.0]),
    "hash var": lambda T: hash(T.Variable(1.0)),
    "abs var": lambda T: abs(T.Variable([-1.0])),
    "bool var": lambda T: bool(T.Variable(1.0)),
    "-var": lambda T: -T.Variable([1.0]),
    "var@": lambda T: T.Variable([[1.0, 2.0]]) @ T.constant([[1.0], [1.0]]),
    "float var": lambda T: float(T.Variable(1.5)),
    "int var": lambda T: int(T.Variable(1.5)),
    "iter var": lambda T: list(T.Variable([1.0, 2.0])),
    "var[1]": lambda T: T.Variable([1.0, 2.0])[1],
    "var[::-1]": lambda T: T.Variable([1.0, 2.0])[::-1],
    # -- 5. the protocol on Tensors --------------------------------------------
    "hash": lambda T: hash(T.f),
    "{f}": lambda T: {T.f},
    "ref": lambda T: T.f.ref() in {T.f.ref()},
    "ref deref": lambda T: {T.f.ref(): 1}[T.f.ref()],
    "f in [f]": lambda T: T.f in [T.f],
    "f in [other]": lambda T: T.f in [T.constant([5.0, 5.0])],
    "bool(f)": lambda T: bool(T.f),
    "bool(0.)": lambda T: bool(T.constant(0.0)),
    "bool([1.])": lambda T: bool(T.constant([1.0])),
    "bool([[1.]])": lambda T: bool(T.constant([[1.0]])),
    "if f>1 (scalar)": lambda T: "yes" if T.constant(2.0) > 1 else "no",
    "len(f)": lambda T: len(T.f),
    "len(m)": lambda T: len(T.m),
    "len(scalar)": lambda T: len(T.constant(1.0)),
    "iter m": lambda T: list(T.m),
    "iter scalar": lambda T: list(T.constant(1.0)),
    "format .3f": lambda T: f"{T.constant(1.5):.3f}",
    "format vec .3f": lambda T: f"{T.f:.3f}",
    "format vec": lambda T: f"{T.f}",
    "index": lambda T: [1, 2, 3][T.constant(1)],
    "index i64": lambda T: [1, 2, 3][T.constant(1, np.int64)],
    "index f": lambda T: [1, 2, 3][T.constant(1.0)],
    "index vec": lambda T: [1, 2, 3][T.constant([1])],
    "range": lambda T: list(range(T.constant(3))),
    "int(2.7)": lambda T: int(T.constant(2.7)),
    "float(2)": lambda T: float(T.constant(2)),
    "int vec": lambda T: int(T.constant([2, 3])),
    # -- slicing (StridedSlice) --------------------------------------------------
    "m[:,1]": lambda T: T.m[:, 1],
    "m[1:3,...,None]": lambda T: T.m[1:3, ..., None],
    "m[-1]": lambda T: T.m[-1],
    "m[::2,::-1]": lambda T: T.m[::2, ::-1],
    "m[...,1]": lambda T: T.m[..., 1],
    "m[None]": lambda T: T.m[None],
    "m[0,0,0]": lambda T: T.m[0, 0, 0],
    "m[[0,1]]": lambda T: T.m[[0, 1]],
    "m[np.int64(1)]": lambda T: T.m[np.int64(1)],
    "m[-2,-1:]": lambda T: T.m[-2, -1:],
    "m[10:]": lambda T: T.m[10:],
    "m[:,5:1]": lambda T: T.m[:, 5:1],
    "m[1,::-2,1:-1]": lambda T: T.m[1, ::-2, 1:-1],
    "m[:,None,2,...]": lambda T: T.m[:, None, 2, ...],
    "m[t1]": lambda T: T.m[T.constant(1)],
    "m[5]": lambda T: T.m[5],
    "m[-3]": lambda T: T.m[-3],
    "m[1.0]": lambda T: T.m[1.0],
    "m[True]": lambda T: T.m[True],
    "m[::0]": lambda T: T.m[::0],
    # -- 6. attrs and arity of raw ops --------------------------------------------
    "unknown attr": lambda T: T.raw("MatMul", a=T.mat, b=T.constant([[1.0], [2.0]]), foo=1),
    "bool attr 'yes'": lambda T: T.raw("MatMul", a=T.mat, b=T.mat, transpose_b="yes"),
    "bool attr 1": lambda T: T.raw("MatMul", a=T.mat, b=T.mat, transpose_b=1),
    "bool attr np.bool_": lambda T: T.raw("MatMul", a=T.mat, b=T.mat, transpose_b=np.bool_(True)),
    "bool attr None": lambda T: T.raw("MatMul", a=T.mat, b=T.constant([[1.0], [2.0]]), transpose_a=None),
    "bool attr True": lambda T: T.raw("MatMul", a=T.mat, b=T.mat, transpose_b=True),
    "type attr 'float64'": lambda T: T.raw("Cast", x=T.mat, DstT="float64"),
    "type attr np.int32": lambda T: T.raw("Cast", x=T.mat, DstT=np.int32),
    "type attr 1.5": lambda T: T.raw("Cast", x=T.mat, DstT=1.5),
    "type attr 'foo'": lambda T: T.raw("Cast", x=T.mat, DstT="foo"),
    "missing input": lambda T: T.raw("MatMul", a=T.mat),
    "raw AddV2(i, 0.5)": lambda T: T.raw("AddV2", x=T.i, y=0.5),
    "raw AddV2(0.5, i)": lambda T: T.raw("AddV2", x=0.5, y=T.i),
    "raw Mul(0.1, f)": lambda T: T.raw("Mul", x=0.1, y=T.f),
    "raw Mul(0.1, 2)": lambda T: T.raw("Mul", x=0.1, y=2),
    "raw Mul(2, 0.1)": lambda T: T.raw("Mul", x=2, y=0.1),
    "raw Mul(np f64, f)": lambda T: T.raw("Mul", x=np.array([0.1, 0.2]), y=T.f),
    "labels list": lambda T: T.raw("SparseSoftmaxCrossEntropyWithLogits", features=T.mat, labels=[1])[0],
    "segment ids list": lambda T: T.raw("SegmentSum", data=T.mat, segment_ids=[0]),
}

# Results whose shape the client may not know before a fetch.
SHAPE_MAY_BE_UNKNOWN = {"m[t1]", "segment ids list"}  # segments: the values decide


def _needs(name):
    """Server ops a case needs beyond main's registry."""
    if name.startswith("m[") or name in ("iter m", "var[1]", "var[::-1]", "iter var", "m[t1]"):
        return "StridedSlice"
    if "**" in name and name not in ("f**2", "var**2"):
        return "Pow"
    return None


def _outcome(fn, side, is_tf, tf=None):
    """('raises', class name) or a description of the value."""
    try:
        result = fn(side)
        return _describe(result, is_tf)
    except gradtape.GradtapeError as e:
        return ("raises", "InvalidArgumentError" if e.code == grpc.StatusCode.INVALID_ARGUMENT else f"GradtapeError {e.code}")
    except Exception as e:  # noqa: BLE001 (the class is what is compared)
        if tf is not None and isinstance(e, tf.errors.InvalidArgumentError):
            return ("raises", "InvalidArgumentError")
        return ("raises", type(e).__name__)


def _describe(r, is_tf):
    if isinstance(r, (list, tuple)):
        return ("list", [_describe(x, is_tf) for x in r])
    if hasattr(r, "numpy") and not isinstance(r, np.ndarray):
        known = None if is_tf else (r._dtype, r._shape)
        a = np.asarray(r.numpy())
        return ("value", a.dtype.name, tuple(a.shape), a, known)
    return ("python", r)


def _assert_same(name, want, got):
    assert got[0] == want[0], f"{name}: TF {want[:2]}, gradtape {got[:2]}"
    if want[0] == "raises" or want[0] == "python":
        assert got[1] == want[1], f"{name}: TF {want[1]!r}, gradtape {got[1]!r}"
        return
    if want[0] == "list":
        assert len(got[1]) == len(want[1]), name
        for w, g in zip(want[1], got[1]):
            _assert_same(name, w, g)
        return
    _, dtype, shape, value, _ = want
    _, gdtype, gshape, gvalue, (kdtype, kshape) = got
    assert gdtype == dtype, f"{name}: dtype TF {dtype}, gradtape {gdtype}"
    assert gshape == shape, f"{name}: shape TF {shape}, gradtape {gshape}"
    if name.startswith("~"):
        np.testing.assert_allclose(gvalue, value, rtol=1e-6, err_msg=name)
    else:
        np.testing.assert_array_equal(gvalue, value, err_msg=name)
    assert kdtype is not None and kdtype == np.dtype(dtype), f"{name}: dtype not known before the fetch ({kdtype})"
    if name not in SHAPE_MAY_BE_UNKNOWN:
        assert kshape == shape, f"{name}: shape not known before the fetch ({kshape})"


@pytest.mark.parametrize("name", list(CASES))
def test_case_matches_tensorflow(gt, tf, name):
    needed = _needs(name)
    if needed and not gt.has_op(needed):
        pytest.skip(f"the server has no {needed} yet")
    fn = CASES[name]
    want = _outcome(fn, TFSide(tf), True, tf)
    got = _outcome(fn, GradtapeSide(gt), False)
    _assert_same(name, want, got)
    try:  # nothing may be left failing behind the case
        gt.sync()
    except gradtape.GradtapeError as e:
        pytest.fail(f"{name}: an unreported server error after the case: {e}")


# -- slicing: the StridedSlice attrs and inputs TF's _slice_helper builds --

SLICE_KEYS = [
    (slice(None), 1),
    (slice(1, 3), Ellipsis, None),
    -1,
    (slice(None, None, 2), slice(None, None, -1)),
    (Ellipsis, 1),
    None,
    (0, 0, 0),
    [0, 1],
    (-2, slice(-1, None)),
    (slice(10, None),),
    (1, slice(None, None, -2), slice(1, -1)),
    (slice(None), None, 2, Ellipsis),
]


@pytest.mark.no_client  # compares the spec the client builds, without a server
@pytest.mark.parametrize("key", SLICE_KEYS, ids=repr)
def test_slice_spec_matches_tensorflow_graph(tf, key):
    """The begin / end / strides values and the five masks gradtape sends
    are TF's for the same key (read from a traced tf.function's
    StridedSlice node): runs without the server op."""

    @tf.function(input_signature=[tf.TensorSpec([2, 3, 4], tf.float32)])
    def sliced(x):
        return x[key]

    from gradtape import _slicing

    graph = sliced.get_concrete_function().graph
    (node,) = [op for op in graph.get_operations() if op.type == "StridedSlice"]
    consts = {op.outputs[0].name: op.get_attr("value") for op in graph.get_operations() if op.type == "Const"}

    def const(i):
        return list(tf.make_ndarray(consts[node.inputs[i].name]))

    begin, end, strides, masks, _ = _slicing.parse(key)
    assert (begin, end, strides) == (const(1), const(2), const(3))
    assert dict(masks) == {m: node.get_attr(m) for m in dict(masks)}


def test_slice_shapes_known_without_the_server_op(gt, tf):
    """The client's shape of x[key] is TF's for every key above."""
    from gradtape import _slicing

    m = tf.zeros([2, 3, 4])
    for key in SLICE_KEYS:
        _, _, _, _, normalized = _slicing.parse(key)
        assert _slicing.result_shape((2, 3, 4), normalized) == tuple(m[key].shape), key


def test_index_inputs_take_tensorflows_dtypes(gt):
    """Python lists at index inputs take the dtype TF gives them there
    (Tlabels defaults to int64, Tindices / Tsegmentids to int32), not the
    other input's float dtype; a float list at the main inputs converts
    to their dtype."""
    x = gt.constant(np.zeros((2, 3), np.float32))
    fn = gt.ops["SparseSoftmaxCrossEntropyWithLogits"]
    _, labels = fn._convert_inputs([x, [0, 2]])
    assert labels.dtype == np.int64
    _, ids = gt.ops["SegmentSum"]._convert_inputs([x, [0, 0]])
    assert ids.dtype == np.int32
    _, idx = gt.ops["GatherV2"]._convert_inputs([x, [1]])
    assert idx.dtype == np.int32
    a, b = gt.ops["AddV2"]._convert_inputs([[1, 2, 3], x])
    assert a.dtype == np.float32 and b is x
    loss, _ = fn(x, [0, 2])
    np.testing.assert_allclose(loss.numpy(), [np.log(3.0)] * 2, rtol=1e-6)


def test_operator_literals_are_put_once_in_a_loop(gt):
    """0.1 * g in a loop puts the literal once (from its second use), and
    -0.0 stays apart from 0.0."""
    g = gt.constant(np.ones(3, np.float32))
    gt.sync()
    before = gt.counters["commands_sent"]
    for _ in range(10):
        _ = 0.1 * g
    gt.sync()
    sent = gt.counters["commands_sent"] - before
    assert sent <= 10 + 2 + 10, sent  # 10 Mul, 2 puts, releases batched with them
    assert np.signbit((g * -0.0).numpy()).all() and not np.signbit((g * 0.0).numpy()).any()
    assert np.signbit((g * -0.0).numpy()).all()


def test_unknown_shapes_are_fetched_once(gt):
    """A result whose shape rule is missing still reports it (by a fetch)."""
    x = gt.constant(np.ones((2, 3), np.float32))
    y = gt.ops.cumsum(x, axis=1)
    assert y._shape == (2, 3)  # known: elementwise
    z = gt.ops.tile(gt.constant(np.ones((1, 3, 1, 1), np.float32)), [1, 1, 3, 1])  # Tile: no rule
    assert z._shape is None and z.shape == (1, 3, 3, 1)


def test_attrs_of_session_execute_are_checked(gt):
    with pytest.raises(TypeError, match="unknown attr 'axes'"):
        gt.execute("Sum", [gt.constant([1.0])], {"axes": [0]})
    x = gt.constant([1.0])
    with pytest.raises(TypeError, match="takes 1 inputs, got 2"):
        gt.ops.tanh(x, x)
    with pytest.raises(TypeError, match="expected list\\(int\\) for attr 'axis'"):
        gt.ops.sum(x, axis=0)
    with pytest.raises(TypeError, match="expected bool for attr 'keep_dims'"):
        gt.ops.sum(x, keep_dims=1)
    gt.sync()


def test_tensor_and_variable_are_unhashable_with_refs(gt):
    x = gt.constant([1.0])
    v = gt.Variable([1.0])
    with pytest.raises(TypeError, match="ref"):
        {x: 1}
    with pytest.raises(TypeError, match="ref"):
        {v}
    refs = {x.ref(): "x", v.ref(): "v"}
    assert refs[x.ref()] == "x" and refs[v.ref()] == "v"
    assert x.ref().deref() is x
    assert operator.index(gt.constant(3)) == 3


@pytest.mark.parametrize(
    "name, fn",
    [
        ("x**2", lambda x: x**2),  # Square: the same gradient as TF's Pow
        ("x**3 * 0.1", lambda x: x**3 * 0.1),
        ("2**x", lambda x: 2**x),
        ("x[:, 1:] / 3", lambda x: x[:, 1:] / 3),
        ("x[::-1, None, 0]", lambda x: x[::-1, None, 0]),
        ("abs(x - 1.5)", lambda x: abs(x - 1.5)),
        ("1 / x", lambda x: 1 / x),
        ("x - x[0]", lambda x: x - x[0]),
    ],
)
def test_gradients_of_the_protocol_match_tensorflow(gt, tf, name, fn):
    """d sum(fn(x)) / dx through the operators and slicing, against TF."""
    if not (gt.has_op("StridedSlice") and gt.has_op("Pow")):
        pytest.skip("the server has no StridedSlice / Pow yet")
    value = np.array([[0.5, 1.25, 2.0], [3.0, -1.0, 0.75]], np.float32)
    tx = tf.constant(value)
    with tf.GradientTape() as tape:
        tape.watch(tx)
        ty = tf.reduce_sum(fn(tx))
    want = tape.gradient(ty, tx).numpy()
    x = gt.constant(value)
    with gt.GradientTape() as gtape:
        gtape.watch(x)
        y = gt.ops.sum(fn(x))
    got = gtape.gradient(y, x).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=name)


def test_shapes_known_without_a_fetch_are_the_servers(gt):
    """The client's shape rules (_shapes) agree with what the server
    computes, for each rule and the attrs that change it."""
    x = gt.constant(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    a = gt.constant(np.ones((3, 2), np.float32))
    b = gt.constant(np.ones((3, 5), np.float32))
    row = gt.constant(np.ones((1, 4), np.float32))
    ops = gt.ops
    results = {
        "broadcast": x * row,
        "broadcast scalar": 2.0 - x,
        "compare": x < row,
        "matmul ta": ops.mat_mul(a, b, transpose_a=True),
        "matmul tb": ops.mat_mul(b, b, transpose_b=True),
        "batch matmul": ops.batch_mat_mul_v2(x, gt.constant(np.ones((4, 6), np.float32))),
        "@ rank 3": x @ gt.constant(np.ones((2, 4, 1), np.float32)),
        "sum all": ops.sum(x),
        "sum -1 keep": ops.sum(x, axis=[-1], keep_dims=True),
        "mean 0,2": ops.mean(x, axis=[0, 2]),
        "prod 1": ops.prod(x, axis=[1]),
        "reshape -1": ops.reshape(x, shape=[4, -1]),
        "transpose": ops.transpose(x, perm=[2, 0, 1]),
        "transpose reverse": ops.transpose(x),
        ".T": a.T,
        "broadcast_to": ops.broadcast_to(row, shape=[3, 2, 4]),
        "cast": ops.cast(x, DstT=np.int32),
        "shape": ops.shape(x),
        "l2loss": ops.l2_loss(x),
        "gather axis 1": ops.gather_v2(x, [0, 2, 2, 1], axis=1),
        "one_hot": ops.one_hot(gt.constant([0, 2, 1]), depth=5),
        "xent loss": ops.sparse_softmax_cross_entropy_with_logits(b, [0, 1, 4]).loss,
        "xent backprop": ops.sparse_softmax_cross_entropy_with_logits(b, [0, 1, 4]).backprop,
        "bias_add_grad": ops.bias_add_grad(x),
        "softmax": ops.softmax(b),
        "select": ops.select(b > 0.5, b, b * 2.0),
        "var read": gt.Variable(np.ones((3, 1), np.float32)).read_value(),
    }
    if gt.has_op("StridedSlice"):
        results["slice"] = x[1:, ::-2, None, 3]
    for name, t in results.items():
        known = t._shape
        assert known is not None, f"{name}: shape not known before the fetch"
        assert known == t.numpy().shape, f"{name}: client {known}, server {t.numpy().shape}"
