"""tf.train: Checkpoint over the server's checkpoints."""

from __future__ import annotations

import os
from typing import Any, List

from gradtape import _tape
from gradtape._tensor import Variable as _Variable
from gradtape.tf._base import _session

class Checkpoint:
    """tf.train.Checkpoint over the server's checkpoints: the keyword
    arguments are Variables (or lists / dicts of them), each with a distinct
    ``name=`` (the server matches variables by name). ``save(name)`` /
    ``write(name)`` and ``restore(name)`` / ``read(name)`` are wait points;
    `name` is a checkpoint name in the server's --checkpoint_dir
    ([A-Za-z0-9._-]; a path's last component is taken)."""

    def __init__(self, **objects: Any) -> None:
        self._variables: List[_Variable] = [
            v for v in _tape._flatten(list(objects.values())) if isinstance(v, _Variable)
        ]
        for v in self._variables:
            if not v.name:
                raise ValueError(
                    "tf.train.Checkpoint: every variable needs a name (Variable(..., name='w')): "
                    "the server matches checkpoint entries by name"
                )

    def _name(self, prefix: str) -> str:
        return os.path.basename(str(prefix)) or str(prefix)

    def save(self, file_prefix: str, options: Any = None) -> str:
        _session().save_checkpoint(self._name(file_prefix), self._variables)
        return self._name(file_prefix)

    write = save

    def restore(self, save_path: str, options: Any = None) -> "Checkpoint":
        _session().restore_checkpoint(self._name(save_path), self._variables)
        return self

    read = restore


