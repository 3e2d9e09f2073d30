"""Functions and objects from the torch namespace."""
from __future__ import annotations

from typing import Any, Dict, List

import torch

from ..exc import unimplemented
from ..guards import Guard, GuardKind
from .base import VariableTracker
from .constant import ConstantVariable, is_constant_value
from .misc import GradModeVariable


def _existing(*paths: str) -> set:
    found = set()
    for path in paths:
        value: Any = torch
        for part in path.split(".")[1:]:
            value = getattr(value, part, None)
        if value is not None:
            found.add(value)
    return found


# Calls answered while tracing, from global state or metadata.
_CONSTANT_FUNCTIONS = _existing(
    "torch.get_default_dtype", "torch.is_tensor", "torch.is_floating_point", "torch.is_complex", "torch.numel",
    "torch.is_autocast_enabled", "torch.are_deterministic_algorithms_enabled", "torch.cuda.is_available",
    "torch.jit.is_scripting", "torch.jit.is_tracing", "torch._C._get_tracing_state",
)
# Code asking "am I being compiled?" takes its compile-friendly path, as under torch.compile.
_IS_COMPILING = _existing(
    "torch.compiler.is_compiling", "torch.compiler.is_dynamo_compiling", "torch._dynamo.is_compiling",
    "torch._utils.is_compiling",
)
_NOT_IN_GRAPH = {
    torch.manual_seed: "seeding the random generator",
    torch.save: "torch.save",
    torch.load: "torch.load",
}


class TorchVariable(VariableTracker):
    """A function, class or submodule of torch; calling a function records it in the graph."""

    def __init__(self, value: Any, source=None) -> None:
        super().__init__(source)
        self.value = value

    def python_type(self) -> type:
        return type(self.value)

    def describe(self) -> str:
        return f"torch.{getattr(self.value, '__name__', self.value)}"

    def as_python_constant(self) -> Any:
        return self.value

    def real_object(self) -> Any:
        return self.value

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        fn = self.value
        if fn in (torch.no_grad, torch.enable_grad) and not args:
            return GradModeVariable(fn is torch.enable_grad)
        if fn is torch.set_grad_enabled and len(args) == 1:
            context = GradModeVariable(bool(args[0].as_python_constant()))
            context.enter(tx)
            return context
        if fn is torch.is_grad_enabled:
            tx.output.add_guard(Guard(None, GuardKind.GRAD_MODE, torch.is_grad_enabled()))
            return ConstantVariable(torch.is_grad_enabled())
        if fn in _IS_COMPILING:
            return ConstantVariable(True)
        if fn in _NOT_IN_GRAPH:
            unimplemented(_NOT_IN_GRAPH[fn])
        if fn is torch.Size or fn in (torch.device, torch.dtype, torch.finfo, torch.iinfo):
            return ConstantVariable(fn(*[a.as_python_constant() for a in args]))
        if fn in _CONSTANT_FUNCTIONS:
            from .tensor import TensorVariable

            values = [a.example if isinstance(a, TensorVariable) else a.as_python_constant() for a in args]
            return ConstantVariable(fn(*values, **{k: v.as_python_constant() for k, v in kwargs.items()}))
        if isinstance(fn, type):
            unimplemented(f"constructing {fn.__qualname__} inside a compiled region")
        return tx.output.call_graph_op(tx, "call_function", fn, args, kwargs)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        from .builder import VariableBuilder

        value = getattr(self.value, name)
        if is_constant_value(value):
            return ConstantVariable(value)
        return VariableBuilder(tx, None)(value)
