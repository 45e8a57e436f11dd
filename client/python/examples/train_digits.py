#!/usr/bin/env python3
"""Trains an MLP on scikit-learn's bundled handwritten digits through a
gradtape server.

Everything that is state lives on the server: the training and test sets
(put once), the parameters (variables), every activation, the tapes and
Adam's slots. A step sends only a batch of row indices and then buffered
commands (gather, forward, loss, gradient, Adam update); the client waits
only to show the running loss every few steps and to score the test split
once per epoch.

    gradtape-server --address=127.0.0.1:50051 &
    python client/python/examples/train_digits.py --address 127.0.0.1:50051 [--captured]

Prints steps per second and the held-out accuracy, and writes a PNG plot of
the training loss and test accuracy per epoch.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable, Dict, List, Optional, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from tqdm import tqdm  # noqa: E402

import gradtape  # noqa: E402
from gradtape import optimizers  # noqa: E402


def glorot(rng: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=(fan_in, fan_out)).astype(np.float32)


class MLP:
    """x -> relu(x W1 + b1) -> relu(. W2 + b2) -> . W3 + b3 (logits); all
    parameters are server variables."""

    def __init__(self, session: gradtape.Session, sizes: Sequence[int], seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.session = session
        self.params: List[gradtape.Variable] = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            self.params.append(session.Variable(glorot(rng, fan_in, fan_out)))
            self.params.append(session.Variable(np.zeros(fan_out, dtype=np.float32)))

    def __call__(self, x: gradtape.Tensor) -> gradtape.Tensor:
        ops = self.session.ops
        h = x
        layers = len(self.params) // 2
        for i in range(layers):
            w, b = self.params[2 * i], self.params[2 * i + 1]
            h = ops.bias_add(h @ w, b)
            if i < layers - 1:
                h = ops.relu(h)
        return h


def make_step(model: MLP, opt: optimizers.Optimizer, train_x: gradtape.Tensor, train_y: gradtape.Tensor,
              captured: bool = False) -> Callable[[gradtape.Tensor], gradtape.Tensor]:
    """The training step as a function of the batch's row indices (int32):
    one Adam step on those rows of the training set; returns the loss (not
    waited for). With `captured` it is a gradtape.function: its first calls
    run eagerly and are recorded (Adam creates its slots on the first),
    later ones are one command each (docs/CAPTURE.md)."""
    session = model.session
    ops = session.ops

    def train_step(idx: gradtape.Tensor) -> gradtape.Tensor:
        xb = ops.gather_v2(train_x, idx, axis=0)
        yb = ops.gather_v2(train_y, idx, axis=0)
        with session.GradientTape() as tape:
            logits = model(xb)
            loss = ops.mean(ops.sparse_softmax_cross_entropy_with_logits(logits, yb).loss, axis=[0])
        grads = tape.gradient(loss, model.params)
        opt.apply_gradients(zip(grads, model.params))
        return loss

    return gradtape.function(train_step, session=session) if captured else train_step


def train(
    address: str,
    epochs: int = 20,
    batch_size: int = 32,
    hidden: int = 128,
    learning_rate: float = 1e-3,
    seed: int = 0,
    plot: Optional[str] = "train_digits.png",
    loss_every: int = 10,
    progress: bool = True,
    captured: bool = False,
) -> Dict[str, object]:
    """Trains (with `captured`, the step is a gradtape.function) and returns
    {"accuracy", "losses", "accuracies", "steps_per_second", "params" (the
    final values)}."""
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, random_state=seed, stratify=y
    )
    rng = np.random.default_rng(seed)

    losses: List[float] = []
    accuracies: List[float] = []
    with gradtape.connect(address) as session:
        train_x, train_y = session.constant(x_train), session.constant(y_train)
        test_x = session.constant(x_test)
        model = MLP(session, [x.shape[1], hidden, hidden, 10], seed)
        opt = optimizers.Adam(learning_rate=learning_rate)
        train_step = make_step(model, opt, train_x, train_y, captured)
        steps_per_epoch = int(np.ceil(len(x_train) / batch_size))
        total_steps = 0
        train_time = 0.0
        bar = tqdm(total=epochs * steps_per_epoch, disable=not progress, unit="step")
        for epoch in range(epochs):
            start = time.perf_counter()
            order = rng.permutation(len(x_train)).astype(np.int32)
            epoch_loss = session.constant(np.float32(0.0))
            for step in range(steps_per_epoch):
                idx = session.constant(order[step * batch_size : (step + 1) * batch_size])
                loss = train_step(idx)
                epoch_loss = epoch_loss + loss
                total_steps += 1
                bar.update(1)
                if (step + 1) % loss_every == 0:  # a wait point: the only one in the loop
                    bar.set_postfix(epoch=epoch + 1, loss=f"{float(epoch_loss) / (step + 1):.4f}")
            mean_loss = float(epoch_loss) / steps_per_epoch
            train_time += time.perf_counter() - start
            predictions = model(test_x).numpy().argmax(axis=1)
            accuracy = float((predictions == y_test).mean())
            losses.append(mean_loss)
            accuracies.append(accuracy)
            bar.set_postfix(epoch=epoch + 1, loss=f"{mean_loss:.4f}", test_acc=f"{accuracy:.4f}")
        bar.close()
        params = [p.numpy() for p in model.params]
        stats = session.stats()

    steps_per_second = total_steps / train_time
    print(f"trained {total_steps} steps in {train_time:.2f} s: {steps_per_second:.1f} steps/s")
    print(f"final training loss {losses[-1]:.4f}; test accuracy {accuracies[-1]:.4f} "
          f"({len(y_test)} held-out digits)")
    print(f"server session at the end: {stats.live_tensors} live tensors, "
          f"{stats.bytes_in_use} bytes")
    if plot:
        fig, ax1 = plt.subplots(figsize=(6, 4))
        epochs_axis = np.arange(1, epochs + 1)
        ax1.plot(epochs_axis, losses, "o-", color="tab:blue", label="training loss")
        ax1.set_xlabel("epoch")
        ax1.set_ylabel("training loss", color="tab:blue")
        ax2 = ax1.twinx()
        ax2.plot(epochs_axis, accuracies, "s-", color="tab:orange", label="test accuracy")
        ax2.set_ylabel("test accuracy", color="tab:orange")
        ax1.set_title("MLP on sklearn digits, trained through gradtape")
        fig.tight_layout()
        fig.savefig(plot, dpi=100)
        plt.close(fig)
        print(f"wrote {plot}")
    return {
        "accuracy": accuracies[-1],
        "losses": losses,
        "accuracies": accuracies,
        "steps_per_second": steps_per_second,
        "params": params,
    }


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default="127.0.0.1:50051", help="gradtape-server host:port")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", default="train_digits.png", help="PNG path ('' for none)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--captured", action="store_true",
                        help="capture the step (gradtape.function): one command per step after the first ones")
    args = parser.parse_args(argv)
    return train(
        args.address,
        epochs=args.epochs,
        batch_size=args.batch_size,
        hidden=args.hidden,
        learning_rate=args.learning_rate,
        seed=args.seed,
        plot=args.plot or None,
        progress=not args.no_progress,
        captured=args.captured,
    )


if __name__ == "__main__":
    main()
