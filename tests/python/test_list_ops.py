"""The list ops (ConcatV2, Pack, Unpack, Split, SplitV) through the real
server: a list input is one Python argument whose length attr the client
fills in, a list output comes back as a list of Tensors whose dtypes the
client knows from ListOps (OpInfo.list_input / list_output) without a round
trip. Values against numpy, float64 gradients against TensorFlow's."""

from typing import Any

import grpc
import numpy as np
import pytest

import gradtape

RTOL, ATOL = 1e-12, 1e-12
TIMEOUT_S = 10


@pytest.fixture(scope="module")
def tf() -> Any:
    import tensorflow  # heavy: imported only when these tests run

    return tensorflow


@pytest.mark.no_client
def test_list_ops_declares_the_lists(pb: Any, stub: Any) -> None:
    ops = {op.name: op for op in stub.ListOps(pb.pb2.ListOpsRequest(), timeout=TIMEOUT_S).ops}
    concat = ops["ConcatV2"]
    assert concat.HasField("list_input") and not concat.HasField("list_output")
    assert (concat.list_input.index, concat.list_input.length_attr, concat.list_input.min_length) == (0, "N", 2)
    assert list(concat.input_names) == ["values", "axis"]
    for name, attr in (("Split", "num_split"), ("SplitV", "num_split"), ("Unpack", "num")):
        assert ops[name].HasField("list_output") and ops[name].list_output.length_attr == attr, name
    assert not ops["Exp"].HasField("list_input") and not ops["Exp"].HasField("list_output")


def test_concat_and_pack_fill_n_and_match_numpy(gt: Any) -> None:
    rng = np.random.default_rng(1)
    a, b, c = rng.normal(size=(2, 3)), rng.normal(size=(2, 1)), rng.normal(size=(2, 2))
    y = gt.ops.concat_v2(values=[gt.constant(a), gt.constant(b), c], axis=1)
    assert y._dtype == np.float64  # from ListOps' rule, before any fetch
    np.testing.assert_array_equal(y.numpy(), np.concatenate([a, b, c], axis=1))
    # Positional, a tuple, a negative axis, int32 values.
    i = np.array([[1, 2]], np.int32)
    y = gt.ops["ConcatV2"]((gt.constant(i), gt.constant(i * 3)), -2)
    np.testing.assert_array_equal(y.numpy(), np.concatenate([i, i * 3], axis=0))
    assert y.numpy().dtype == np.int32
    p = gt.ops.pack([gt.constant(a), gt.constant(a + 1)], axis=1)
    np.testing.assert_array_equal(p.numpy(), np.stack([a, a + 1], axis=1))


def test_split_unpack_return_lists_with_known_dtypes(gt: Any) -> None:
    x = np.arange(12.0).reshape(2, 6)
    parts = gt.ops.split(1, gt.constant(x), num_split=3)
    assert isinstance(parts, list) and len(parts) == 3
    assert all(t._dtype == np.float64 for t in parts)  # no round trip
    for got, want in zip(parts, np.split(x, 3, axis=1)):
        np.testing.assert_array_equal(got.numpy(), want)
    pieces = gt.ops.split_v(gt.constant(x), [1, -1, 2], -1, num_split=3)
    for got, want in zip(pieces, np.split(x, [1, 4], axis=1)):
        np.testing.assert_array_equal(got.numpy(), want)
    cols = gt.ops.unpack(gt.constant(x), num=6, axis=1)
    assert len(cols) == 6
    np.testing.assert_array_equal(cols[4].numpy(), x[:, 4])
    # Session.execute with flat inputs: N filled in, Split's count known.
    s = gt.execute("Split", [gt.constant(np.int32(0)), gt.constant(x)], {"num_split": 2})
    assert len(s) == 2
    np.testing.assert_array_equal(s[1].numpy(), x[1:])


def test_list_ops_refuse_bad_calls(gt: Any) -> None:
    a = gt.constant(np.ones((2, 2)))
    with pytest.raises(TypeError, match="list or tuple"):
        gt.ops.concat_v2(a, 0)
    with pytest.raises(TypeError, match="attr 'N'"):
        gt.ops.concat_v2([a, a], 0, N=3)
    with pytest.raises(TypeError, match="num_split"):
        gt.ops.split(0, a)
    bad = gt.ops.concat_v2([a, gt.constant(np.ones((3, 3)))], 0)
    with pytest.raises(gradtape.GradtapeError) as err:
        bad.numpy()
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.op == "ConcatV2"
    assert "values_1" in err.value.message
    gt.sync()  # the session runs on
    np.testing.assert_array_equal(gt.ops.concat_v2([a, a], 1).numpy(), np.ones((2, 4)))


def test_gradients_match_tensorflow(gt: Any, tf: Any) -> None:
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(2, 3)), rng.normal(size=(2, 2))
    x = rng.normal(size=(3, 4))
    w = rng.normal(size=(2, 5))
    with tf.GradientTape(persistent=True) as ttape:
        ta, tb, tx = tf.constant(a), tf.constant(b), tf.constant(x)
        ttape.watch([ta, tb, tx])
        ty = tf.raw_ops.ConcatV2(values=[ta, tb], axis=1)
        tloss_concat = tf.reduce_sum(ty * w)
        tparts = tf.raw_ops.Split(axis=1, value=tx, num_split=2)
        trows = tf.raw_ops.Unpack(value=tx, num=3, axis=0)
        # Output 1 of Split and row 1 of Unpack get no gradient: zeros there.
        tloss_split = tf.reduce_sum(tparts[0] * 2.0) + tf.reduce_sum(trows[2] * trows[0])
    tda, tdb = ttape.gradient(tloss_concat, [ta, tb])
    tdx = ttape.gradient(tloss_split, tx)

    ga, gb, gx = gt.constant(a), gt.constant(b), gt.constant(x)
    with gt.GradientTape(persistent=True) as tape:
        tape.watch([ga, gb, gx])
        gy = gt.ops.concat_v2([ga, gb], 1)
        parts = gt.ops.split(1, gx, num_split=2)
        rows = gt.ops.unpack(gx, num=3)
        loss = gt.ops.sum(parts[0] * gt.constant(np.float64(2.0)), axis=[0, 1]) + gt.ops.sum(rows[2] * rows[0], axis=[0])
    gda, gdb = tape.gradient_values(gy, [ga, gb], output_gradients=[gt.constant(w)])
    (gdx,) = tape.gradient_values(loss, [gx])
    np.testing.assert_allclose(gda, tda.numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(gdb, tdb.numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(gdx, tdx.numpy(), rtol=RTOL, atol=ATOL)
