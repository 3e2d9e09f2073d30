"""Custom torch.autograd.Function subclasses: `Fn.apply(...)` is one node of the graph that calls it."""
from __future__ import annotations

import types
from typing import Any, Dict, List

import torch

from ..exc import unimplemented
from ..source import AttrSource
from .base import VariableTracker
from .constant import ConstantVariable
from .functions import UserFunctionVariable
from .lists import TupleVariable
from .tensor import TensorVariable
from .user_defined import NewObjectVariable, UserDefinedClassVariable

_FUNCTION_APPLY = vars(torch.autograd.Function)["apply"]
_BASE_SETUP_CONTEXT = torch.autograd.function._SingleLevelFunction.setup_context


def is_custom_autograd_function(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, torch.autograd.Function) and value is not torch.autograd.Function


class AutogradFunctionClassVariable(UserDefinedClassVariable):
    """A user's torch.autograd.Function subclass; `apply` keeps the user's forward and backward."""

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name == "apply" and _class_lookup(self.cls, "apply") is _FUNCTION_APPLY:
            return AutogradFunctionApplyVariable(self)
        return super().var_getattr(tx, name)


def _graph_target(cls: type) -> Any:
    """What the graph calls for `cls.apply`: a function of this module, which graph code refers to
    as an object (fx would write a torch-named function as its dotted name)."""

    def apply(*args: Any) -> Any:
        return cls.apply(*args)

    apply.__name__ = apply.__qualname__ = f"{cls.__name__}_apply"
    return apply


def _class_lookup(cls: type, name: str) -> Any:
    return next((vars(klass)[name] for klass in cls.__mro__ if name in vars(klass)), None)


class AutogradFunctionApplyVariable(VariableTracker):
    """`Fn.apply`: the graph calls it as eager does (autograd records the user's backward); its
    forward is first traced on the side to show that running it (on fake tensors, to learn what it
    returns) changes nothing but its own tensors."""

    def __init__(self, fn_class: AutogradFunctionClassVariable) -> None:
        super().__init__(fn_class.source and AttrSource(fn_class.source, "apply"))
        self.fn_class = fn_class

    def describe(self) -> str:
        return f"{self.fn_class.cls.__qualname__}.apply"

    def python_type(self) -> type:
        return types.MethodType

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        cls = self.fn_class.cls
        forward = _class_lookup(cls, "forward")
        if kwargs or not isinstance(forward, staticmethod) or not isinstance(forward.__func__, types.FunctionType):
            unimplemented(f"{self.describe()} with keyword arguments or a forward that is not a Python staticmethod")
        if not any(isinstance(a, TensorVariable) for a in args) or not all(
                isinstance(a, TensorVariable) or a.is_python_constant() for a in args):
            unimplemented(f"{self.describe()} with arguments other than tensors and constants")
        forward_source = self.fn_class.source and AttrSource(self.fn_class.source, "forward")
        forward_fn = UserFunctionVariable(forward.__func__, forward_source)
        tx.output.speculate(lambda: self._trace_forward(tx, forward_fn, args))
        return tx.output.call_graph_op(tx, "call_function", _graph_target(cls), args, {})

    def _trace_forward(self, tx, forward: UserFunctionVariable, args: List[VariableTracker]) -> VariableTracker:
        if getattr(self.fn_class.cls, "setup_context", _BASE_SETUP_CONTEXT) is not _BASE_SETUP_CONTEXT:
            return forward.call_function(tx, list(args), {})
        grad = torch.is_grad_enabled()
        ctx = NewObjectVariable(torch.autograd.function.FunctionCtx)
        ctx.attrs["needs_input_grad"] = TupleVariable([
            ConstantVariable(grad and isinstance(a, TensorVariable) and a.example.requires_grad) for a in args])
        return forward.call_function(tx, [ctx, *args], {})
