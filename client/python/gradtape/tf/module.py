"""tf.Module: a container of variables and submodules, with TensorFlow's
traversal (``variables``, ``trainable_variables``, ``submodules``: the
attributes in sorted order, lists / tuples in order, dicts by sorted key,
a module's own leaves before its submodules', each object once) and
name scopes. gradtape is eager and names no ops, so a name scope only
gives ``name_scope.name`` (variable names are not prefixed: the server
uses a Variable's name as its shared name)."""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, Iterator, List, Mapping, Optional, Set, Tuple

from gradtape._tensor import Variable as _Variable

_IGNORED = frozenset(("_self_unconditional_checkpoint_dependencies", "_self_unconditional_dependency_names"))
_VALID_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/]*$")


def _camel_to_snake(value: str) -> str:
    intermediate = re.sub(r"(.)([A-Z][a-z0-9]+)", r"\1_\2", value)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", intermediate).lower()


class name_scope:  # noqa: N801 (TensorFlow's name)
    """tf.name_scope: a context manager whose ``name`` is the scope; it
    names nothing (gradtape's ops and variables carry no scoped names)."""

    _stack: List[str] = []

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def __enter__(self) -> str:
        prefix = name_scope._stack[-1] if name_scope._stack else ""
        scope = self._name if self._name.endswith("/") else f"{prefix}{self._name}/"
        name_scope._stack.append(scope)
        return scope

    def __exit__(self, *exc: Any) -> None:
        name_scope._stack.pop()


def _leaves(value: Any) -> Iterator[Any]:
    """nest.flatten: lists / tuples in order, dicts by sorted key."""
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    elif isinstance(value, Mapping):
        for k in sorted(value):
            yield from _leaves(value[k])
    else:
        yield value


def _flatten(module: "Module", predicate: Callable[[Any], bool], recursive: bool, seen: Set[int]) -> Iterator[Any]:
    submodules = []
    attrs = vars(module)
    for key in sorted(attrs):
        if key in _IGNORED:
            continue
        for leaf in _leaves(attrs[key]):
            if id(leaf) in seen:
                continue
            seen.add(id(leaf))
            if predicate(leaf):
                yield leaf
            if recursive and isinstance(leaf, Module):
                submodules.append(leaf)
    for sub in submodules:
        yield from _flatten(sub, predicate, recursive, seen)


class Module:
    """tf.Module (see the module docstring)."""

    def __init__(self, name: Optional[str] = None) -> None:
        if name is None:
            name = _camel_to_snake(type(self).__name__)
        elif not _VALID_NAME.match(name):
            raise ValueError(
                f"'{name}' is not a valid module name. Module names must be valid Python 3 identifiers."
            )
        self._name = name
        self._scope_name = name + "/"

    @property
    def name(self) -> str:
        return self._name

    @property
    def name_scope(self) -> name_scope:
        return name_scope(self._scope_name)

    def _flatten(self, recursive: bool = True, predicate: Optional[Callable[[Any], bool]] = None) -> Tuple[Any, ...]:
        pred = predicate or (lambda _: True)
        return tuple(_flatten(self, pred, recursive, {id(self)}))

    @property
    def variables(self) -> Tuple[_Variable, ...]:
        """Every Variable of this module and its submodules (TF's order)."""
        return self._flatten(predicate=lambda v: isinstance(v, _Variable))

    @property
    def trainable_variables(self) -> Tuple[_Variable, ...]:
        return self._flatten(predicate=lambda v: isinstance(v, _Variable) and v.trainable)

    @property
    def non_trainable_variables(self) -> Tuple[_Variable, ...]:
        return self._flatten(predicate=lambda v: isinstance(v, _Variable) and not v.trainable)

    @property
    def submodules(self) -> Tuple["Module", ...]:
        """Every Module reachable from this one (breadth of each level first,
        as TF)."""
        return self._flatten(predicate=lambda m: isinstance(m, Module))

    @classmethod
    def with_name_scope(cls, method: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: runs the method inside the module's name scope."""

        @functools.wraps(method)
        def wrapped(self: "Module", *args: Any, **kwargs: Any) -> Any:
            with self.name_scope:
                return method(self, *args, **kwargs)

        return wrapped

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__name__} object named {self._name}>"
