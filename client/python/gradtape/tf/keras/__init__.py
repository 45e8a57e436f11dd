"""tf.keras for custom training loops: layers (Dense, Embedding,
LayerNormalization, Dropout, Conv2D, MaxPooling2D, AveragePooling2D,
Flatten), Sequential as a callable, initializers, optimizers (SGD, Adam,
AdamW, RMSprop, Adagrad) and optimizers.schedules. Out of scope:
model.fit / compile / evaluate, tf.data and SavedModel (write the training
loop with tf.GradientTape and an optimizer)."""

from gradtape.tf.keras import initializers, layers, optimizers, schedules
from gradtape.tf.keras.layers import Sequential

__all__ = ["initializers", "layers", "optimizers", "schedules", "Sequential"]
