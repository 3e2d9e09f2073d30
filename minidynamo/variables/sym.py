"""Symbolic sizes: Python ints (bools, floats) computed from dynamic tensor sizes while tracing."""
from __future__ import annotations

from typing import Any, List, Optional, Union

import torch
import torch.fx

from ..exc import unimplemented
from .base import VariableTracker
from .constant import ConstantVariable
from .named_tuple import NamedTupleVariable

SymValue = Union[torch.SymInt, torch.SymBool, torch.SymFloat]
SYM_TYPES = (torch.SymInt, torch.SymBool, torch.SymFloat)
_PYTHON_TYPES = {torch.SymInt: int, torch.SymBool: bool, torch.SymFloat: float}


def specialized_value(value: Any) -> Any:
    """A symbolic value as a plain Python value when the shape env knows it to be a constant (no
    guard needed); other values are returned as they are."""
    if isinstance(value, torch.SymInt):
        known: Optional[Union[int, bool, float]] = value.node.maybe_as_int()
    elif isinstance(value, torch.SymBool):
        known = value.node.maybe_as_bool()
    elif isinstance(value, torch.SymFloat):
        known = value.node.maybe_as_float()
    else:
        return value
    return value if known is None else known


class SymNodeVariable(VariableTracker):
    """An fx node whose value is a symbolic int/bool/float (`example`). Branching on it asks the
    shape env, which records the relation the branch relied on as a guard."""

    def __init__(self, node: torch.fx.Node, example: SymValue, source=None) -> None:
        super().__init__(source)
        self.node = node
        self.example = example
        node.meta.setdefault("example_value", example)  # for subgraphs that read this node (higher_order)

    def python_type(self) -> type:
        return _PYTHON_TYPES[type(self.example)]

    def describe(self) -> str:
        return f"symbolic {self.python_type().__name__} {self.node.name} ({self.example})"

    def as_python_constant(self) -> Any:
        unimplemented(f"using the dynamic size {self.example} as a Python constant")

    def truthy(self, tx) -> bool:
        return bool(self.example)

    def exact_value(self) -> Union[int, bool, float]:
        return self.python_type()(self.example)  # converting asks the shape env, which guards it

    def var_getattr(self, tx, name: str) -> VariableTracker:
        # attributes without a symbolic form (int.bit_length, float.hex) are read off the exact value
        return ConstantVariable(self.exact_value()).var_getattr(tx, name)


class SliceVariable(VariableTracker):
    """A slice with a symbolic bound (slices of constants are ConstantVariables)."""

    def __init__(self, parts: List[VariableTracker]) -> None:
        super().__init__()
        self.parts = parts

    def python_type(self) -> type:
        return slice

    def describe(self) -> str:
        return f"slice({', '.join(p.describe() for p in self.parts)})"

    def subvalues(self) -> List[VariableTracker]:
        return list(self.parts)

    def reconstruct(self, codegen) -> None:
        for part in self.parts:
            codegen.reconstruct(part)
        codegen.append("BUILD_SLICE", len(self.parts))


def make_slice(parts: List[VariableTracker]) -> VariableTracker:
    """`slice(*parts)`, for BUILD_SLICE and the slice builtin."""
    if any(isinstance(p, SymNodeVariable) for p in parts):
        return SliceVariable(parts)
    return ConstantVariable(slice(*[p.as_python_constant() for p in parts]))


class SizeVariable(NamedTupleVariable):
    """A torch.Size with symbolic items (sizes of constants are ConstantVariables)."""

    def __init__(self, items: List[VariableTracker]) -> None:
        super().__init__(items, torch.Size)

    def as_python_constant(self) -> Any:
        return torch.Size([item.as_python_constant() for item in self.items])

    def getitem(self, tx, index: Any) -> VariableTracker:
        return SizeVariable(self.items[index]) if isinstance(index, slice) else self.items[index]
