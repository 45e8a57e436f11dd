#!/usr/bin/env python3
"""The Python load of tests/load/soak.sh: training sessions and session churn.

    soak_clients.py train --address=HOST:PORT --seconds=S [--worker=I]
    soak_clients.py churn --address=HOST:PORT --seconds=S [--lease=2] [--rate=4]

train: until S seconds have passed, opens a session with the Python client
(gradtape.connect), trains an MLP (32-64-64-10, ReLU, softmax cross-entropy,
Adam; synthetic data put once per session) for --steps steps, checks that
every fetched loss is finite and that the last is below the first, closes
the session and starts again. So sessions are created, trained and closed
for the whole run. Odd-numbered workers capture the step
(gradtape.function: a program the server plans and fuses,
docs/CAPTURE.md) and check, before closing, that it was planned.

churn: until S seconds have passed, --rate times a second, creates a session
with a --lease seconds lease on its own channel, uses it (a Run batch: put,
MatMul under a tape, gradient with values, a fetch checked against numpy;
every third session also opens a Stream, sends a batch that leaves a tape
and a few tensors, reads its reply and cancels the stream) and abandons it:
closes the channel without CloseSession, as a client that dies does. The
server must reap it after the lease. Every tenth session is probed again
once lease + 3 s have passed: KeepAlive must then fail with NOT_FOUND (not
reaped: the run fails).

Both print one line at the end ("train 0: ...", "churn: ...") and exit 1,
with a message, on the first error (any exception or unexpected status).
Everything talks to 127.0.0.1 only (the address is checked).
"""

from __future__ import annotations

import argparse
import collections
import secrets
import sys
import time
import traceback
from typing import Deque, List, Tuple

import grpc
import numpy as np

import gradtape
from gradtape import optimizers
from gradtape.v1 import tape_service_pb2 as pb
from gradtape.v1 import tape_service_pb2_grpc as pb_grpc

ID_HEADER = "gradtape-session-id"
TOKEN_HEADER = "gradtape-session-token"


def glorot(rng: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=(fan_in, fan_out)).astype(np.float32)


def train_session(address: str, seed: int, steps: int, batch: int = 32,
                  captured: bool = False) -> Tuple[float, float]:
    """One session: trains `steps` Adam steps, returns (first, last) loss.
    With `captured` the step is a gradtape.function, which must end up
    planned."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((512, 32)).astype(np.float32)
    teacher = rng.standard_normal((32, 10)).astype(np.float32)
    y = (x @ teacher).argmax(axis=1).astype(np.int64)
    sizes = [32, 64, 64, 10]
    losses: List[float] = []
    with gradtape.connect(address) as session:
        ops = session.ops
        train_x, train_y = session.constant(x), session.constant(y)
        params = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            params.append(session.Variable(glorot(rng, fan_in, fan_out)))
            params.append(session.Variable(np.zeros(fan_out, dtype=np.float32)))
        opt = optimizers.Adam(learning_rate=1e-2)

        def train_step(idx: gradtape.Tensor) -> gradtape.Tensor:
            xb = ops.gather_v2(train_x, idx, axis=0)
            yb = ops.gather_v2(train_y, idx, axis=0)
            with session.GradientTape() as tape:
                h = xb
                for i in range(len(params) // 2):
                    h = ops.bias_add(h @ params[2 * i], params[2 * i + 1])
                    if i < len(params) // 2 - 1:
                        h = ops.relu(h)
                loss = ops.mean(ops.sparse_softmax_cross_entropy_with_logits(h, yb).loss, axis=[0])
            grads = tape.gradient(loss, params)
            opt.apply_gradients(zip(grads, params))
            return loss

        run_step = gradtape.function(train_step, session=session) if captured else train_step
        for step in range(steps):
            idx = session.constant(rng.integers(0, len(x), size=batch).astype(np.int32))
            loss = run_step(idx)
            if step % 10 == 0 or step == steps - 1:  # a wait point
                value = float(loss)
                if not np.isfinite(value):
                    raise RuntimeError(f"session {session.id} step {step}: loss {value}")
                losses.append(value)
        if captured and not any(p.plan_steps > 0 for p in session.programs()):
            raise RuntimeError(f"session {session.id}: the captured step was not planned: "
                               f"{[p.not_planned for p in session.programs()]}")
    if not losses[-1] < losses[0]:
        raise RuntimeError(f"loss did not fall in {steps} steps: {losses[0]} -> {losses[-1]}")
    return losses[0], losses[-1]


def train(args: argparse.Namespace) -> str:
    deadline = time.monotonic() + args.seconds
    sessions = steps = 0
    first = last = float("nan")
    while time.monotonic() < deadline:
        first, last = train_session(args.address, args.worker * 100003 + sessions, args.steps,
                                    captured=args.worker % 2 == 1)
        sessions += 1
        steps += args.steps
    kind = "captured" if args.worker % 2 == 1 else "eager"
    return (f"train {args.worker}: {sessions} sessions, {steps} {kind} Adam steps, "
            f"loss {first:.3f} -> {last:.3f} in the last session")


def tensor(a: np.ndarray) -> pb.TensorValue:
    return pb.TensorValue(dtype=pb.DTYPE_FLOAT32, shape=a.shape, data=a.astype("<f4").tobytes())


def checked(reply: pb.BatchReply, what: str) -> pb.BatchReply:
    for result in reply.results:
        if result.HasField("error"):
            raise RuntimeError(f"{what}: command {result.seq} failed: "
                               f"code {result.error.code}: {result.error.message}")
    return reply


def use_session(stub: pb_grpc.TapeServiceStub, md, rng: np.random.Generator, stream: bool) -> None:
    """Put, record, differentiate and fetch on a fresh session; optionally
    leave more on it through a Stream that is then cancelled."""
    a = rng.standard_normal((64, 64)).astype(np.float32)
    b = rng.standard_normal((64, 64)).astype(np.float32)
    cmds = [
        pb.Command(seq=1, push_tape=pb.PushTape(tape_id=1, persistent=True)),
        pb.Command(seq=2, put=pb.PutTensor(id=1, value=tensor(a))),
        pb.Command(seq=3, put=pb.PutTensor(id=2, value=tensor(b))),
        pb.Command(seq=4, watch=pb.Watch(tape_id=1, ids=[1])),
        pb.Command(seq=5, execute=pb.ExecuteOp(op="MatMul", input_ids=[1, 2], output_ids=[3])),
        pb.Command(seq=6, gradient=pb.Gradient(tape_id=1, target_ids=[3], source_ids=[1],
                                               result_ids=[4], return_values=True)),
        pb.Command(seq=7, fetch=pb.FetchTensor(id=3)),
    ]
    reply = checked(stub.Run(pb.CommandBatch(batch_id=1, commands=cmds), metadata=md, timeout=10),
                    "churn Run")
    by_seq = {r.seq: r for r in reply.results}
    got = np.frombuffer(by_seq[7].tensor.data, dtype="<f4").reshape(64, 64)
    if not np.allclose(got, a @ b, rtol=1e-4, atol=1e-3):
        raise RuntimeError("churn: fetched MatMul differs from numpy")
    grad = np.frombuffer(by_seq[6].gradient.values[0].data, dtype="<f4").reshape(64, 64)
    if not np.allclose(grad, np.ones((64, 64), np.float32) @ b.T, rtol=1e-4, atol=1e-3):
        raise RuntimeError("churn: gradient differs from numpy")
    if not stream:
        return
    more = [
        pb.Command(seq=8, push_tape=pb.PushTape(tape_id=2)),
        pb.Command(seq=9, watch=pb.Watch(tape_id=2, ids=[3])),
        pb.Command(seq=10, execute=pb.ExecuteOp(op="Tanh", input_ids=[3], output_ids=[5])),
        pb.Command(seq=11, execute=pb.ExecuteOp(op="Mul", input_ids=[5, 5], output_ids=[6])),
        pb.Command(seq=12, fetch=pb.FetchTensor(id=6)),
    ]
    calls = stub.Stream(iter([pb.CommandBatch(batch_id=2, commands=more)]), metadata=md, timeout=10)
    checked(next(calls), "churn Stream")
    calls.cancel()  # abandon the stream too


def churn(args: argparse.Namespace) -> str:
    deadline = time.monotonic() + args.seconds
    rng = np.random.default_rng(7)
    probes: Deque[Tuple[float, str, str]] = collections.deque()  # (due, id, token)
    created = probed = 0
    next_start = time.monotonic()
    options = [("grpc.max_receive_message_length", -1)]
    while time.monotonic() < deadline or probes:
        now = time.monotonic()
        while probes and probes[0][0] <= now:
            _, sid, token = probes.popleft()
            with grpc.insecure_channel(args.address, options=options) as channel:
                try:
                    pb_grpc.TapeServiceStub(channel).KeepAlive(
                        pb.KeepAliveRequest(), metadata=[(ID_HEADER, sid), (TOKEN_HEADER, token)],
                        timeout=10)
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.NOT_FOUND:
                        raise
                else:
                    raise RuntimeError(f"churn: session {sid} abandoned {args.lease + 3} s ago "
                                       f"with a {args.lease} s lease is still open")
            probed += 1
        if now >= deadline:
            time.sleep(min(0.2, max(0.0, probes[0][0] - now)) if probes else 0)
            continue
        if now < next_start:
            time.sleep(min(next_start - now, 0.2))
            continue
        next_start += 1.0 / args.rate
        proposed = secrets.token_hex(16)
        channel = grpc.insecure_channel(args.address, options=options)
        try:
            stub = pb_grpc.TapeServiceStub(channel)
            response = stub.CreateSession(
                pb.CreateSessionRequest(session_id=proposed, keep_alive_seconds=args.lease),
                metadata=[(ID_HEADER, proposed)], timeout=10, wait_for_ready=True)
            md = [(ID_HEADER, response.session_id), (TOKEN_HEADER, response.token)]
            use_session(stub, md, rng, stream=created % 3 == 0)
        finally:
            channel.close()  # abandoned: no CloseSession
        if created % 10 == 0:
            probes.append((time.monotonic() + args.lease + 3, response.session_id, response.token))
        created += 1
    return f"churn: {created} sessions created, used and abandoned; {probed} probed: reaped"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["train", "churn"])
    parser.add_argument("--address", required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--worker", type=int, default=0)
    parser.add_argument("--steps", type=int, default=500, help="train: Adam steps per session")
    parser.add_argument("--lease", type=int, default=2, help="churn: keep_alive_seconds")
    parser.add_argument("--rate", type=float, default=4.0, help="churn: sessions per second")
    args = parser.parse_args()
    if not args.address.startswith("127.0.0.1:"):
        print(f"soak_clients.py: not loopback: {args.address}", file=sys.stderr)
        return 2
    try:
        line = train(args) if args.mode == "train" else churn(args)
    except Exception:  # any failure fails the soak, with its traceback
        traceback.print_exc()
        print(f"soak_clients.py {args.mode} {args.worker}: FAILED", file=sys.stderr)
        return 1
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
