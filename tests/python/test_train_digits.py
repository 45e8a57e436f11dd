"""client/python/examples/train_digits.py reaches the accuracy bar through
the server (parameters, activations, tapes and Adam state all server-side)."""

import importlib.util

from conftest import REPO_ROOT

EXAMPLE = REPO_ROOT / "client" / "python" / "examples" / "train_digits.py"
ACCURACY_BAR = 0.96


def load_example():
    spec = importlib.util.spec_from_file_location("train_digits", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_digits_reaches_the_accuracy_bar(server_address, tmp_path, capsys):
    plot = tmp_path / "digits.png"
    # The example's defaults (20 epochs, Adam 1e-3, batch 32, seed 0): about
    # 2 s on loopback.
    result = load_example().main(
        ["--address", server_address, "--plot", str(plot), "--no-progress"]
    )
    out = capsys.readouterr().out
    assert result["accuracy"] >= ACCURACY_BAR, result["accuracies"]
    assert len(result["losses"]) == 20
    assert result["losses"][-1] < 0.25 * result["losses"][0]
    assert result["steps_per_second"] > 0
    assert "steps/s" in out and "test accuracy" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
