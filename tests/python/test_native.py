"""The compiled extension gradtape._native (client/python/native) and its
fallback: it loads and is the default; without it the package warns once
and works in pure Python; GRADTAPE_NATIVE=1 without it is an ImportError
with the reason; both backends in one process (beside grpcio) compute the
same and report the same errors; a long fetch lets other Python threads run.
"""

import gc
import os
import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import pytest

pytestmark = pytest.mark.picks_implementation  # native=..., GRADTAPE_NATIVE: each test's own

TIMEOUT_S = 60

# Run in a subprocess with the extension hidden (None in sys.modules makes
# its import fail, as a missing build does).
_HIDDEN = """
import sys, warnings
sys.modules["gradtape._native"] = None
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import gradtape
    import gradtape.session
    import importlib
    importlib.import_module("gradtape")
runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)]
print("WARNINGS", len(runtime))
for w in runtime:
    print("WARNING", w.message)
import numpy as np
mode = sys.argv[2]
try:
    with gradtape.connect(sys.argv[1], native=None if mode == "default" else True) as s:
        a = s.constant(np.array([1.0, 2.0], np.float32))
        print("BACKEND", type(s._core).__name__)
        print("VALUE", (a + a).numpy().tolist())
except ImportError as e:
    print("IMPORTERROR", e)
"""


def _run_hidden(address, mode, native_env=None):
    env = {k: v for k, v in os.environ.items() if k != "GRADTAPE_NATIVE"}
    if native_env is not None:
        env["GRADTAPE_NATIVE"] = native_env
    done = subprocess.run(
        [sys.executable, "-c", _HIDDEN, address, mode],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout
    return done.stdout


def test_the_extension_loads_and_is_the_default(server_address, monkeypatch):
    import gradtape
    from gradtape import _backend
    from gradtape._native_core import NativeCore

    assert _backend.native_unavailable() is None
    monkeypatch.delenv("GRADTAPE_NATIVE", raising=False)
    with gradtape.connect(server_address) as s:
        assert isinstance(s._core, NativeCore)
        # The hot methods are the extension's own: no Python frame between.
        assert type(NativeCore.execute).__name__ == "nb_method"
        assert type(NativeCore.release).__name__ == "nb_method"
        x = s.constant(np.arange(4, dtype=np.float32))
        np.testing.assert_array_equal((x * x).numpy(), np.arange(4, dtype=np.float32) ** 2)
    monkeypatch.setenv("GRADTAPE_NATIVE", "0")
    with gradtape.connect(server_address) as s:
        assert type(s._core).__name__ == "StreamCore"


def test_without_the_extension_the_package_warns_once_and_works(server_address):
    out = _run_hidden(server_address, "default")
    assert "WARNINGS 1\n" in out, out
    assert "gradtape._native is not available" in out and "None in sys.modules" in out, out
    assert "scripts/setup.sh" in out, out  # how to build it
    assert "BACKEND StreamCore" in out and "VALUE [2.0, 4.0]" in out, out


def test_native_required_without_the_extension_is_an_import_error(server_address):
    out = _run_hidden(server_address, "required", native_env="1")
    assert "IMPORTERROR connect(native=True): gradtape's native extension is not available" in out
    assert "None in sys.modules" in out, out  # the reason
    assert "BACKEND" not in out, out


def _train(session):
    """A few SGD steps of a linear model; the losses and the weights."""
    import gradtape

    rng = np.random.default_rng(7)
    x = session.constant(rng.normal(size=(32, 3)).astype(np.float32))
    y = session.constant(rng.normal(size=(32, 1)).astype(np.float32))
    w = session.Variable(np.full((3, 1), 0.1, np.float32))
    b = session.Variable(np.zeros((1,), np.float32))
    opt = gradtape.optimizers.SGD(0.1)
    losses = []
    for _ in range(5):
        with session.GradientTape() as tape:
            err = x @ w + b - y
            loss = session.ops.mean(err * err, axis=[0, 1])
        grads = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(grads, [w, b]))
        losses.append(loss.numpy())
    return losses, w.numpy(), b.numpy()


def test_both_backends_in_one_process_train_the_same(server_address):
    import gradtape
    from gradtape._core import StreamCore
    from gradtape._native_core import NativeCore

    with gradtape.connect(server_address, native=True) as native:
        with gradtape.connect(server_address, native=False) as pure:
            assert isinstance(native._core, NativeCore) and isinstance(pure._core, StreamCore)
            got = _train(native)
            want = _train(pure)
    for g, w in zip(got[0] + list(got[1:]), want[0] + list(want[1:])):
        np.testing.assert_array_equal(g, w)  # the same ops on the same server
    assert got[0][-1] < got[0][0]


def _errors(session):
    """The errors of a bad op, a bad id, several errors at once and a
    closed session, as (type, code, seq, op, message)."""
    import gradtape

    def caught(f):
        with pytest.raises(gradtape.GradtapeError) as info:
            f()
        e = info.value
        result = type(e).__name__, e.code, e.seq, e.op, e.message.replace(session.id, "<id>")
        del e, info
        # A traceback's frames may hold handles in a reference cycle: collect
        # now, so that both implementations release them at the same seq.
        gc.collect()
        return result

    a = session.constant(np.ones(4, np.float32))
    out = [caught(lambda: session.ops.mat_mul(a, a).numpy())]
    bad = session._core.execute("AddV2", [a.id, 1 << 40], 1, None)
    out.append(caught(lambda: session._core.fetch(bad)))
    session._core.execute("NoSuchOp", [a.id], 1, None)
    session._core.execute("Neg", [1 << 41], 1, None)
    out.append(caught(session.sync))
    out.append(caught(lambda: session._core.call(_bad_fetch())))
    session.close()
    out.append(caught(session.sync))
    return out


def _bad_fetch():
    from gradtape.v1 import tape_service_pb2 as pb

    return pb.Command(fetch=pb.FetchTensor(id=1 << 42))


def test_errors_carry_the_same_code_seq_and_message_on_both(server_address):
    import gradtape

    with gradtape.connect(server_address, native=True) as s:
        native = _errors(s)
    with gradtape.connect(server_address, native=False) as s:
        pure = _errors(s)
    assert native == pure
    kinds = [e[1] for e in native]
    assert kinds[0] == grpc.StatusCode.INVALID_ARGUMENT and native[0][3] == "MatMul"
    assert native[0][2] is not None and f"command {native[0][2]}" in native[0][4]
    assert "later command error" in native[2][4]
    assert native[3][3] == "FetchTensor"
    assert kinds[4] == grpc.StatusCode.FAILED_PRECONDITION and "is closed" in native[4][4]


def test_a_long_fetch_lets_other_python_threads_run(server_address):
    import gradtape

    with gradtape.connect(server_address, native=True, chunk_bytes=64 << 10) as s:
        value = np.random.default_rng(0).random(4 << 20, dtype=np.float32)  # 16 MiB
        t = s.constant(value)
        s.sync()
        span = {}
        got = {}

        def fetch():
            span["start"] = time.perf_counter()
            got["value"] = t.numpy()  # 256 chunks: many round trips
            span["end"] = time.perf_counter()

        ticks = []
        reader = threading.Thread(target=fetch)
        reader.start()
        deadline = time.monotonic() + TIMEOUT_S
        while reader.is_alive() and time.monotonic() < deadline:
            ticks.append(time.perf_counter())
        reader.join(TIMEOUT_S)
        assert not reader.is_alive()
        np.testing.assert_array_equal(got["value"], value)
        start, end = span["start"], span["end"]
        # The middle of the fetch, away from the GIL hand-overs at its ends.
        lo, hi = start + 0.25 * (end - start), end - 0.1 * (end - start)
        inside = sum(1 for x in ticks if lo < x < hi)
        assert end - start > 0.02, f"the fetch took only {end - start:.4f} s"
        assert inside > 100, (inside, end - start)


_AFTER_TENSORFLOW = """
import sys
import tensorflow as tf  # first: its wheels export their own protobuf, absl, gRPC
import gradtape
with gradtape.connect(sys.argv[1], native=True) as s:
    assert type(s._core).__name__ == "NativeCore"
    print("VALUE", float((s.constant([1.5, 2.0]) * 2.0).numpy().sum()), float(tf.constant(2.0) * 3.0))
"""


def test_the_extension_works_with_tensorflow_imported_first(server_address):
    """`import tensorflow` before gradtape (a port from tf.GradientTape): the
    extension is loaded with RTLD_DEEPBIND so TF's symbols do not replace
    the system gRPC's (without it the first connect crashed with SIGSEGV)."""
    pytest.importorskip("tensorflow")
    done = subprocess.run(
        [sys.executable, "-c", _AFTER_TENSORFLOW, server_address],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "VALUE 7.0 6.0" in done.stdout
