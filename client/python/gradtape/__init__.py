"""gradtape: a Python client for the gradtape gradient-tape service.

TensorFlow-eager-like API over a pipelined gRPC stream; tensors, tapes,
variables and optimizer state live on the server::

    import numpy as np
    import gradtape

    with gradtape.connect("127.0.0.1:50051") as session:
        x = session.constant(np.array([[1.0, 2.0]]))
        w = session.Variable(np.ones((2, 3)))
        with session.GradientTape() as tape:
            loss = session.ops.sum(session.ops.tanh(x @ w))
        dw = tape.gradient(loss, w)       # a handle; nothing waited yet
        print(loss.numpy(), dw.numpy())   # wait points

Ops come from the server's registry (ListOps) at connect time, named in
snake_case like TensorFlow's raw ops: ``session.ops.mat_mul(a, b,
transpose_b=True)``.
"""

from gradtape import optimizers
from gradtape._custom import custom_gradient
from gradtape._default import get_default_session, set_default_session
from gradtape._forward import ForwardAccumulator
from gradtape._function import Function, TensorSpec, function
from gradtape.errors import GradtapeError, SessionLostError
from gradtape.session import (
    CheckpointInfo,
    GradientTape,
    Ops,
    ProgramInfo,
    Session,
    SessionStats,
    Tensor,
    UnconnectedGradients,
    Variable,
    connect,
    snake_case,
)

__all__ = [
    "CheckpointInfo",
    "ForwardAccumulator",
    "Function",
    "TensorSpec",
    "function",
    "ProgramInfo",
    "custom_gradient",
    "get_default_session",
    "set_default_session",
    "GradientTape",
    "GradtapeError",
    "Ops",
    "Session",
    "SessionLostError",
    "SessionStats",
    "Tensor",
    "UnconnectedGradients",
    "Variable",
    "connect",
    "optimizers",
    "snake_case",
]
__version__ = "0.1.0"

# The compiled extension (gradtape._native_core): one RuntimeWarning here if
# it was not built (the pure-Python client is used then).
from gradtape import _native_build

_native_build.warn_if_unavailable()
