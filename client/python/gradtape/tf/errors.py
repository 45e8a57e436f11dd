"""tf.errors: TensorFlow's exception classes. A server error is raised as
the gradtape.errors subclass of GradtapeError for its status code (so
``except tf.errors.InvalidArgumentError`` works); OpError is GradtapeError."""

from gradtape.errors import (  # noqa: F401 (re-exported: TensorFlow's names)
    AbortedError,
    AlreadyExistsError,
    CancelledError,
    DataLossError,
    DeadlineExceededError,
    FailedPreconditionError,
    GradtapeError as OpError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
    UnknownError,
)
