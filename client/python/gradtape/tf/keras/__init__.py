"""tf.keras: the optimizers (the training loop is yours: model.fit, tf.data
and SavedModel are not in gradtape.tf)."""

from gradtape.tf.keras import optimizers

__all__ = ["optimizers"]
