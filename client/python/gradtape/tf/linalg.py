"""tf.linalg."""

from gradtape.tf.math import matmul

__all__ = ["matmul"]
