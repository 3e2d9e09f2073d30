"""Python constants: numbers, strings, None, dtypes, devices, slices, ranges and tuples of them."""
from __future__ import annotations

from typing import Any, Dict, List

import inspect
import types

import torch

from ..exc import raise_folded, unimplemented
from .base import VariableTracker

_SCALARS = (int, float, bool, str, bytes, complex, type(None), type(Ellipsis), type(NotImplemented))
_OPAQUE = (torch.dtype, torch.device, torch.layout, torch.memory_format, types.CodeType, inspect.Signature,
           inspect.Parameter, torch.finfo, torch.iinfo, types.GenericAlias, types.UnionType)


def is_constant_value(value: Any) -> bool:
    if isinstance(value, _SCALARS + _OPAQUE):
        return True
    if type(value) in (tuple, torch.Size, frozenset):
        return all(is_constant_value(v) for v in value)
    if type(value) is slice:
        return all(is_constant_value(v) for v in (value.start, value.stop, value.step))
    return type(value) is range


# Methods of immutable constants that are pure: evaluated while tracing.
PURE_METHOD_TYPES = (int, float, bool, str, bytes, complex, tuple, torch.Size, range, slice, frozenset)


class ConstantVariable(VariableTracker):
    def __init__(self, value: Any, source=None) -> None:
        super().__init__(source)
        self.value = value

    def python_type(self) -> type:
        return type(self.value)

    def describe(self) -> str:
        return f"constant {self.value!r}"

    def as_python_constant(self) -> Any:
        return self.value

    def has_unpack_var_sequence(self, tx) -> bool:
        return isinstance(self.value, (tuple, range, str, bytes, frozenset, torch.Size))

    def unpack_var_sequence(self, tx) -> List[VariableTracker]:
        if not self.has_unpack_var_sequence(tx):
            unimplemented(f"iterating over {self.describe()}")
        return [ConstantVariable(v) for v in self.value]

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if isinstance(self.value, PURE_METHOD_TYPES + _OPAQUE) and not name.startswith("__"):
            value = getattr(self.value, name)
            return tx.wrap(value) if isinstance(value, types.BuiltinMethodType) else tx.wrap_constant(value)
        if isinstance(self.value, (types.UnionType, types.GenericAlias)) and name in ("__args__", "__origin__"):
            return tx.wrap(getattr(self.value, name))  # classes, fixed: the alias is guarded by equality
        return super().var_getattr(tx, name)

    def call_method(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        args = [_argument_value(tx, a) for a in args]
        if not isinstance(self.value, PURE_METHOD_TYPES) or not all(
            a.is_python_constant() for a in [*args, *kwargs.values()]
        ):
            unimplemented(f"method {name} of {self.describe()} with non-constant arguments")
        method = getattr(self.value, name, None)
        if method is None:
            unimplemented(f"{type(self.value).__name__} has no method {name}")
        try:
            result = method(*[a.as_python_constant() for a in args],
                            **{k: v.as_python_constant() for k, v in kwargs.items()})
        except Exception as e:  # noqa: BLE001 - what eager raises there, caught or not by the user's code
            raise_folded(e, f"{type(self.value).__name__}.{name}()")
        return same_constant(result, [self, *args]) or tx.wrap_constant(result)

    def reads_source(self) -> bool:
        """Whether generated code takes the value from its source: the caller's own object (a tuple,
        a string, a large int), where another equal object would be another object."""
        value = self.value
        shared = value is None or value is Ellipsis or value is NotImplemented or type(value) is bool or (
            type(value) is int and -5 <= value <= 256) or isinstance(value, (torch.dtype, torch.layout))
        return self.source is not None and not shared

    def reconstruct(self, codegen) -> None:
        if self.reads_source():
            self.source.reconstruct(codegen)
        else:
            codegen.load_const(self.value)


def same_constant(result: Any, inputs: List[VariableTracker]) -> "ConstantVariable | None":
    """The input a call on constants gave back itself (`t[:]`, `s.strip()` with nothing to strip), so
    that it stays the caller's object; None when the result is another object."""
    for value in inputs:
        if isinstance(value, ConstantVariable) and value.value is result:
            return value
    return None


def _argument_value(tx, arg: VariableTracker) -> VariableTracker:
    """An iterator of constants passed to a method of a constant (`", ".join(str(i) for i in r)`)
    becomes the list of its items, as the method would consume it."""
    if arg.is_python_constant() or not arg.has_unpack_var_sequence(tx):
        return arg
    items = arg.unpack_var_sequence(tx)
    if not all(item.is_python_constant() for item in items):
        unimplemented("an iterator of non-constant values passed to a method of a constant")
    return ConstantVariable([item.as_python_constant() for item in items])


def is_none(value: VariableTracker) -> bool:
    return isinstance(value, ConstantVariable) and value.value is None
