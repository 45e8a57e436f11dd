"""One source for every rule the Python client predicts: the server's.

The client knows some things without a round trip: each output's dtype
(ListOps' rules), many output shapes (gradtape/_shapes.py), which ops a tape
records and so which gradients are None (gradtape/_tape.py). Each rule is a
copy of the server's, so each is held to it here: every op sample of the
registry (tests/core/ops/op_samples.h, printed by gradtape_dump_op_samples)
runs through the client, implementation by implementation, and

* every output dtype and shape the client predicted is what the server
  computed (a prediction may be "unknown", never wrong);
* for every trainable output and every watched input, the client's answer
  to "is this gradient None?" (given without asking the server) is the
  server's answer to the same Gradient sent with every source.

And no op name in a client table is one the registry lacks.

GRADTAPE_OP_SAMPLES_BIN names the dumper (default: tests/core/
gradtape_dump_op_samples in the build folder of GRADTAPE_SERVER_BIN).
"""
import base64
import json
import os
import pathlib
import subprocess
from typing import Any, Dict, List, Optional

import grpc
import numpy as np
import pytest

from server_process import server_binary

try:
    from gradtape import _dtypes
    from gradtape.errors import GradtapeError
except ImportError:  # the client is not installed: the tests fail at connect
    GradtapeError = Exception  # type: ignore

TIMEOUT_S = 60


def _dumper() -> pathlib.Path:
    given = os.environ.get("GRADTAPE_OP_SAMPLES_BIN")
    if given:
        return pathlib.Path(given)
    build = server_binary().resolve().parents[1]
    return build / "tests" / "core" / "gradtape_dump_op_samples"


@pytest.fixture(scope="module")
def samples() -> List[Dict[str, Any]]:
    path = _dumper()
    if not path.exists():
        message = f"{path} is not built (cmake --build build --target gradtape_dump_op_samples)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    out = subprocess.run([str(path)], capture_output=True, text=True, timeout=TIMEOUT_S, check=True)
    found = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(found) > 500, f"{path} printed only {len(found)} samples"
    return found


def _array(value: Dict[str, Any]) -> np.ndarray:
    dtype = np.dtype(value["dtype"] if value["dtype"] != "bool" else np.bool_)
    data = base64.b64decode(value["data"])
    return np.frombuffer(data, dtype=dtype).reshape(value["shape"]).copy()


def _attr(attr: Dict[str, Any]) -> Any:
    return np.dtype(attr["value"]) if attr["type"] == "type" else attr["value"]


def _trainable(dtype: Optional[np.dtype]) -> bool:
    return dtype is not None and dtype.kind in "fc"


class _Run:
    """One sample run through a session under a persistent tape that
    watches every trainable input (a variable by its handle)."""

    def __init__(self, session: Any, sample: Dict[str, Any]) -> None:
        self.session = session
        self.sample = sample
        self.name = f"{sample['op']} ({sample['label']})"
        self.inputs: List[Any] = []  # what the op takes: Tensors, handles
        self.sources: List[Any] = []  # what the tape watches
        for value in sample["inputs"]:
            if "variable" in value:
                var = session.Variable(_array(value["variable"]))
                self.inputs.append(var.handle)
                self.sources.append(var)
            else:
                t = session.constant(_array(value))
                self.inputs.append(t)
                if _trainable(t._dtype):
                    self.sources.append(t)
        attrs = {k: _attr(v) for k, v in sample["attrs"].items()}
        self.tape = session.GradientTape(persistent=True, watch_accessed_variables=False)
        with self.tape:
            for x in self.sources:
                self.tape.watch(x)
            self.outputs = session.execute(sample["op"], self.inputs, attrs)
        self.predicted = [(t._dtype, t._shape) for t in self.outputs]

    def check_outputs(self) -> List[str]:
        wrong = []
        for i, (t, (dtype, shape)) in enumerate(zip(self.outputs, self.predicted)):
            value = t.numpy()  # the server's tensor, whatever the client believes
            made = value.dtype
            if dtype is not None and dtype == _dtypes.RESOURCE and made == np.int64:
                made = _dtypes.RESOURCE  # a handle is fetched as its 8-byte id
            if dtype is not None and dtype != made:
                wrong.append(f"{self.name} output {i}: client predicted dtype {dtype}, server made {made}")
            if shape is not None and tuple(shape) != value.shape:
                wrong.append(f"{self.name} output {i}: client predicted shape {shape}, server made {value.shape}")
        return wrong

    def check_gradients(self, pb: Any) -> List[str]:
        wrong = []
        s = self.session
        for j, out in enumerate(self.outputs):
            if not self.sources or not _trainable(out._dtype):
                continue
            try:
                server = self._server_is_none(pb, out)
            except GradtapeError as e:  # PreventGradient: the client's call fails alike
                assert e.code == grpc.StatusCode.UNIMPLEMENTED, f"{self.name}: {e}"
                continue
            client = self.tape.gradient(out, self.sources)
            for k, (c, none) in enumerate(zip(client, server)):
                if (c is None) != none:
                    said = "None" if c is None else "a gradient"
                    wrong.append(
                        f"{self.name}: d output {j} / d source {k}: client said {said}, "
                        f"server {'None' if none else 'a gradient'}"
                    )
        s.sync(timeout=TIMEOUT_S)
        return wrong

    def _server_is_none(self, pb: Any, target: Any) -> List[bool]:
        """The server's answer for every source, none left out."""
        s = self.session
        command = pb.Command(
            gradient=pb.Gradient(
                tape_id=self.tape.id,
                target_ids=[target.id],
                source_ids=[s._source_id(x, "source") for x in self.sources],
                result_ids=[s._core.new_id() for _ in self.sources],
                unconnected=pb.UNCONNECTED_NONE,
                return_values=True,
            )
        )
        result = s._core.call(command)
        return list(result.gradient.is_none)


def test_every_sample_meets_the_clients_predictions(samples: List[Dict[str, Any]], server_address: str) -> None:
    import gradtape
    from gradtape.v1 import tape_service_pb2 as pb

    wrong: List[str] = []
    checked = {"outputs": 0, "gradients": 0}
    with gradtape.connect(server_address, timeout=TIMEOUT_S) as session:
        for sample in samples:
            run = _Run(session, sample)
            wrong += run.check_outputs()
            wrong += run.check_gradients(pb)
            checked["outputs"] += len(run.outputs)
            checked["gradients"] += bool(run.sources)
            run.tape._delete()
            del run
    assert checked["outputs"] > 600 and checked["gradients"] > 400, checked
    assert not wrong, f"{len(wrong)} client predictions differ from the server:\n" + "\n".join(wrong[:60])


@pytest.mark.no_client
def test_client_tables_name_only_registered_ops(pb: Any, stub: Any) -> None:
    """A name in a client table that ListOps does not list is a typo or an
    op the server never had: a rule no call can reach."""
    from gradtape import _ops, _shapes

    registry = {op.name for op in stub.ListOps(pb.pb2.ListOpsRequest(), timeout=TIMEOUT_S).ops}
    assert len(registry) > 150
    tables = {
        "_shapes._RULES": set(_shapes._RULES),
        "_ops._OWN_DTYPE_OVERRIDES": {op for op, _ in _ops._OWN_DTYPE_OVERRIDES},
        "_ops._READS_VARIABLE": set(_ops._READS_VARIABLE),
    }
    unknown = {name: sorted(ops - registry) for name, ops in tables.items() if ops - registry}
    assert not unknown, f"client tables name ops the server does not register: {unknown}"
