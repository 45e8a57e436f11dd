"""The example's character transformer (client/python/examples/
train_transformer.py) against the same model written in TensorFlow: the same
initial weights (made on the server by its seeded stateless random ops and
fetched), the same batches, dropout off; the first 20 training losses agree
within float32 tolerance. And the server-trained model's loss falls below a
stated threshold with dropout on."""

from __future__ import annotations

import gzip
import importlib.util
import math
import pathlib
import sys
from typing import Any, Dict, List

import numpy as np
import pytest

import gradtape

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "client" / "python" / "examples" / "train_transformer.py"
# 20 AdamW steps of a float32 model, two implementations with their own
# summation orders (TF's Eigen and oneDNN kernels, the server's). Adam
# amplifies float32 rounding differences from step to step, and the batches
# come from the repository's docs, which change: the largest relative
# difference measured was 3.3e-6 on one version of the docs and 4.5e-5 on
# the next (both clients). 2e-4 is float32 tolerance for 20 such steps.
LOSS_RTOL = 2e-4


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("train_transformer", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tt() -> Any:
    return _example()


@pytest.fixture(scope="module")
def tf() -> Any:
    import tensorflow  # heavy: imported only when these tests run

    return tensorflow


class TfTransformer:
    """The same architecture in TensorFlow (eager), from given weights."""

    def __init__(self, tf: Any, cfg: Any, weights: Dict[str, np.ndarray]) -> None:
        self.tf, self.cfg = tf, cfg
        self.vars = {name: tf.Variable(value, name=name.replace(".", "_")) for name, value in weights.items()}
        t = cfg.context
        self.mask = tf.constant(np.triu(np.full((t, t), -1e9, dtype=np.float32), k=1))

    def _ln(self, x: Any, p: str) -> Any:
        tf = self.tf
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        c = x - mean
        var = tf.reduce_mean(c * c, axis=-1, keepdims=True)
        return c * tf.math.rsqrt(var + self.cfg.layer_norm_epsilon) * self.vars[p + ".g"] + self.vars[p + ".b"]

    def loss(self, windows: np.ndarray) -> Any:
        tf, cfg, v = self.tf, self.cfg, self.vars
        b, t, d, h = windows.shape[0], cfg.context, cfg.d_model, cfg.n_head
        hd = d // h
        x = tf.gather(v["wte"], windows[:, :t]) + v["wpe"]
        for i in range(cfg.n_layer):
            p = f"h{i}."
            a = tf.reshape(self._ln(x, p + "ln1"), [b * t, d]) @ v[p + "attn.w_qkv"] + v[p + "attn.b_qkv"]
            a = tf.transpose(tf.reshape(a, [b, t, 3, h, hd]), [2, 0, 3, 1, 4])
            scores = tf.matmul(a[0], a[1], transpose_b=True) * (1.0 / math.sqrt(hd))
            out = tf.matmul(tf.nn.softmax(scores + self.mask), a[2])
            out = tf.reshape(tf.transpose(out, [0, 2, 1, 3]), [b * t, d]) @ v[p + "attn.w_o"] + v[p + "attn.b_o"]
            x = x + tf.reshape(out, [b, t, d])
            m = tf.reshape(self._ln(x, p + "ln2"), [b * t, d]) @ v[p + "mlp.w_in"] + v[p + "mlp.b_in"]
            m = m * (tf.math.erf(m * (1.0 / math.sqrt(2.0))) + 1.0) * 0.5
            m = m @ v[p + "mlp.w_out"] + v[p + "mlp.b_out"]
            x = x + tf.reshape(m, [b, t, d])
        logits = tf.reshape(self._ln(x, "ln_f"), [b * t, d]) @ v["head.w"]
        labels = tf.reshape(windows[:, 1:], [b * t])
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def _tf_losses(tf: Any, tt: Any, cfg: Any, weights: Dict[str, np.ndarray], tokens: np.ndarray,
               starts: List[np.ndarray], lr: float, wd: float) -> List[float]:
    model = TfTransformer(tf, cfg, weights)
    decayed = [v for n, v in model.vars.items() if tt.decays(n)]
    rest = [v for n, v in model.vars.items() if not tt.decays(n)]
    opts = [(tf.keras.optimizers.AdamW(learning_rate=lr, weight_decay=wd, epsilon=1e-7), decayed),
            (tf.keras.optimizers.AdamW(learning_rate=lr, weight_decay=0.0, epsilon=1e-7), rest)]
    losses = []
    for s in starts:
        windows = tokens[tt.window_indices(s, cfg.context)]
        with tf.GradientTape() as tape:
            loss = model.loss(windows)
        # tf.gather's gradient to the embedding is IndexedSlices, which Keras
        # applies sparsely: its v sums each occurrence's squared slice
        # (duplicate characters in a batch), not the square of their sum.
        # gradtape's ResourceGather gradient is dense (docs/OP_FAMILIES.md, variable), which
        # is dense Adam: densify TF's so both run the same algorithm.
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, decayed + rest)]
        opts[0][0].apply_gradients(zip(grads[: len(decayed)], decayed))
        opts[1][0].apply_gradients(zip(grads[len(decayed) :], rest))
        losses.append(float(loss))
    return losses


# The text the TensorFlow comparison trains on: the example's own text
# (README.md and docs/*.md) as it stood at the commit that froze it. The
# docs change with nearly every commit, and 20 float32 steps at lr 3e-3 on
# batches of 8 are chaotic past a loss spike: a spike multiplies the two
# frameworks' last-bit differences by ~1000 (4.5e-4 relative at one step,
# 3e-7 at the others, on one edit's text). A fixed text keeps the
# comparison about the engine, not about the last doc edit.
FROZEN_TEXT = pathlib.Path(__file__).parent / "testdata" / "transformer_text.txt.gz"


def test_first_20_losses_match_tensorflow(gt: gradtape.Session, tt: Any, tf: Any) -> None:
    cfg = tt.Config(dropout=0.0)
    with gzip.open(FROZEN_TEXT, "rt", encoding="utf-8") as f:
        text = f.read()
    vocab = tt.Vocab(text)
    tokens = vocab.encode(text)
    rng = np.random.default_rng(3)
    starts = [tt.batch_starts(rng, len(tokens), 8, cfg.context) for _ in range(20)]
    lr, wd = 3e-3, 0.01

    model = tt.Transformer(gt, cfg, len(vocab), seed=7)
    weights = {name: v.numpy() for name, v in model.vars.items()}
    # The initialisation is the seeded stateless ops': a truncated normal of
    # std 0.02 (|z| < 2 std), and another session with the same seed gets the
    # same numbers.
    w = weights["h0.attn.w_qkv"]
    assert 0.015 < w.std() < 0.025 and np.abs(w).max() < 2 * cfg.init_std
    again = tt.Transformer(gt, cfg, len(vocab), seed=7)
    np.testing.assert_array_equal(again.vars["head.w"].numpy(), weights["head.w"])
    assert not np.array_equal(weights["wte"], weights["wpe"][: weights["wte"].shape[0]])

    data = gt.constant(tokens)
    opts = tt.make_optimizers(model, lr, wd)
    ours = [float(tt.train_step(model, data, s, opts, None)) for s in starts]
    theirs = _tf_losses(tf, tt, cfg, weights, tokens, starts, lr, wd)
    np.testing.assert_allclose(ours, theirs, rtol=LOSS_RTOL)
    assert ours[-1] < ours[0] - 0.5  # it learns (not a pair of constant curves)


# The example's command line with 300 steps of batch 16 (dropout 0.1, seed
# 0): the mean loss of its last 50 steps. On the shipped text (README.md and
# docs/*.md, 100 distinct characters) the untrained model scores about
# ln(100) = 4.6 nats per character and a unigram model of the text 3.44
# (computed in the test); getting below 3.0 needs the context. Measured
# when the test was written: 2.81.
LOSS_THRESHOLD = 3.0


def test_example_trains_below_the_threshold(server_address: str, tt: Any, tmp_path: pathlib.Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "transformer.png"
    result = tt.main(["--address", server_address, "--steps", "300", "--batch-size", "16",
                      "--sample-length", "40", "--plot", str(plot), "--no-progress"])
    out = capsys.readouterr().out
    losses = result["losses"]
    assert len(losses) == 300
    counts = np.bincount(tt.Vocab(tt.load_text()).encode(tt.load_text()))
    p = counts[counts > 0] / counts.sum()
    unigram = float(-(p * np.log(p)).sum())
    assert LOSS_THRESHOLD < unigram - 0.3  # the bar is well below what needs no context
    assert np.mean(losses[:5]) > unigram  # it starts worse than a unigram model
    assert np.mean(losses[-50:]) < LOSS_THRESHOLD, (unigram, losses[-50:])
    assert "steps/s" in out and "sample:" in out
    assert len(result["sample"]) == len("The server ") + 40
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
