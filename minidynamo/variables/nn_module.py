"""nn.Module instances: parameters and buffers become graph attributes, forward is inlined."""
from __future__ import annotations

import inspect
import types
from typing import Any, Dict, List

import torch

from ..exc import unimplemented
from ..source import AttrSource, GetItemSource
from .base import VariableTracker
from .constant import ConstantVariable
from .lists import ListIteratorVariable, TupleVariable


def _has_hooks(module: torch.nn.Module) -> bool:
    from torch.nn.modules import module as module_impl

    return bool(
        module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
        or getattr(module, "_backward_pre_hooks", None)
        or module_impl._global_forward_hooks or module_impl._global_forward_pre_hooks
        or module_impl._global_backward_hooks
    )


class NNModuleVariable(VariableTracker):
    def __init__(self, module: torch.nn.Module, source=None) -> None:
        super().__init__(source)
        self.module = module

    def python_type(self) -> type:
        return type(self.module)

    def real_object(self) -> Any:
        return self.module

    def describe(self) -> str:
        return f"module {type(self.module).__name__}"

    def _child(self, tx, name: str, value: Any, source) -> VariableTracker:
        from .builder import VariableBuilder

        return VariableBuilder(tx, source)(value)

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        if self.source is None or name in self.module._parameters or name in self.module._modules:
            super().store_attr(tx, name, value)
        tx.output.side_effects.store_attr(self, self.module, name, value)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        pending = tx.output.side_effects.pending_attr(self.module, name)
        if pending is not None:
            return pending
        module = self.module
        source = self.source and AttrSource(self.source, name)
        if name in module._parameters or name in module._buffers:
            tensor = module._parameters.get(name, module._buffers.get(name))
            if tensor is None:
                return ConstantVariable(None)
            return tx.output.register_module_tensor(tx, module, name, tensor, self.source)
        if name in module._modules:
            return self._child(tx, name, module._modules[name], source)
        if name in module.__dict__:
            return self._child(tx, name, module.__dict__[name], source)
        if name == "__class__":
            from .user_defined import UserDefinedClassVariable

            return UserDefinedClassVariable(type(module))
        from .user_defined import lookup_class_attribute

        if inspect.getattr_static(type(module), name, None) is None:
            unimplemented(f"{type(module).__name__} has no attribute '{name}'")
        return lookup_class_attribute(tx, self, type(module), name, source)

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        module = self.module
        if _has_hooks(module):
            unimplemented(f"calling {type(module).__name__} with hooks registered")
        forward = inspect.getattr_static(type(module), "forward", None)
        if not isinstance(forward, types.FunctionType):
            unimplemented(f"{type(module).__name__}.forward is not a Python function")
        from .functions import UserMethodVariable

        return UserMethodVariable(forward, self).call_function(tx, args, kwargs)

    def _descendant(self, tx, qualified_name: str) -> VariableTracker:
        value: VariableTracker = self
        for part in filter(None, qualified_name.split(".")):
            value = value.var_getattr(tx, part)
        return value

    def has_unpack_var_sequence(self, tx) -> bool:
        return isinstance(self.module, (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict))

    def unpack_var_sequence(self, tx) -> List[VariableTracker]:
        if isinstance(self.module, torch.nn.ModuleDict):
            return [ConstantVariable(k) for k in self.module.keys()]
        if not self.has_unpack_var_sequence(tx):
            unimplemented(f"iterating over {type(self.module).__name__}")
        return [self.getitem(tx, i) for i in range(len(self.module))]

    def getitem(self, tx, index: Any) -> VariableTracker:
        module = self.module
        if isinstance(index, slice):
            unimplemented("slicing a module container")
        value = module[index]
        return self._child(tx, str(index), value, self.source and GetItemSource(self.source, index))

    def call_method(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        module = self.module
        if name == "__getitem__" and len(args) == 1:
            return self.getitem(tx, args[0].as_python_constant())
        if name == "__len__":
            return ConstantVariable(len(module))
        if name in ("keys", "values", "items") and isinstance(module, torch.nn.ModuleDict):
            keys = list(module.keys())
            if name == "keys":
                return ListIteratorVariable([ConstantVariable(k) for k in keys])
            values = [self.getitem(tx, k) for k in keys]
            if name == "values":
                return ListIteratorVariable(values)
            return ListIteratorVariable([TupleVariable([ConstantVariable(k), v]) for k, v in zip(keys, values)])
        if name in ("parameters", "buffers") and not args:
            owner = module.named_parameters() if name == "parameters" else module.named_buffers()
            items = []
            for qualified, _ in owner:
                value: VariableTracker = self
                for part in qualified.split("."):
                    value = value.var_getattr(tx, part)
                items.append(value)
            return ListIteratorVariable(items)
        if name == "children" and not args:
            return ListIteratorVariable([self.var_getattr(tx, n) for n in module._modules])
        if name in ("modules", "named_modules") and not args and not kwargs:
            found = [(qualified, self._descendant(tx, qualified)) for qualified, _ in module.named_modules()]
            if name == "modules":
                return ListIteratorVariable([vt for _, vt in found])
            return ListIteratorVariable([TupleVariable([ConstantVariable(q), vt]) for q, vt in found])
        if name == "forward":
            return self.call_function(tx, args, kwargs)
        return super().call_method(tx, name, args, kwargs)
