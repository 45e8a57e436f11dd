"""The Python client knows each output's dtype before the server answers,
from the rules ListOps serves (OpInfo.output_dtypes), and passes a Variable
as its handle exactly where ListOps says an input takes one
(OpInfo.resource_inputs)."""
import numpy as np


def _known_then_fetched(t):
    known = t._dtype  # what the client derived without a round trip
    return known, t.numpy().dtype


def test_listops_serves_output_dtype_rules(gt):
    infos = {info.name: info for info in gt.list_ops()}
    for info in infos.values():
        assert len(info.output_dtypes) == len(info.output_names), info.name
    assert infos["Less"].output_dtypes[0].WhichOneof("rule") == "fixed"
    assert infos["Cast"].output_dtypes[0].from_attr == "DstT"
    assert infos["Select"].output_dtypes[0].same_as_input == 1
    assert infos["Real"].output_dtypes[0].WhichOneof("rule") == "real_of_input"
    assert list(infos["ResourceApplyAdam"].resource_inputs) == [0, 1, 2]
    assert list(infos["Identity"].any_kind_inputs) == [0]


def test_output_dtypes_are_known_before_fetching(gt):
    x = gt.constant(np.array([[1.0, -2.0], [3.0, 0.5]], dtype=np.float32))
    z = gt.constant(np.array([1.0 + 2.0j, -0.5j], dtype=np.complex128))
    cases = {
        "less": gt.ops.less(x, x * 2.0),
        "cast": gt.ops.cast(x, DstT=np.int64),
        "shape": gt.ops.shape(x),
        "shape_int64": gt.ops.shape(x, out_type=np.int64),
        "select": gt.ops.select(gt.ops.less(x, 0.0), x, x * 3.0),
        "one_hot": gt.ops.one_hot(gt.constant(np.array([0, 2], dtype=np.int32)), depth=3),
        "real": gt.ops.real(z),
        "angle": gt.ops.angle(z),
        "complex": gt.ops.complex(x, x),
        "exp": gt.ops.exp(x),
    }
    want = {
        "less": np.bool_,
        "cast": np.int64,
        "shape": np.int32,
        "shape_int64": np.int64,
        "select": np.float32,
        "one_hot": np.float32,
        "real": np.float64,
        "angle": np.float64,
        "complex": np.complex64,
        "exp": np.float32,
    }
    for name, t in cases.items():
        known, fetched = _known_then_fetched(t)
        assert known == np.dtype(want[name]), name
        assert fetched == known, name


def test_variables_by_resource_inputs(gt):
    v = gt.Variable(np.array([1.0, 2.0], dtype=np.float64))
    read = gt.ops.identity(v)  # not a resource input: the value is read
    assert read._dtype == np.float64
    np.testing.assert_array_equal(read.numpy(), [1.0, 2.0])
    gt.ops.assign_add_variable_op(v, np.array([0.5, 0.5]))  # input 0 takes the handle
    np.testing.assert_array_equal(v.numpy(), [1.5, 2.5])
