"""Dicts with constant keys, and their live views."""
from __future__ import annotations

import operator
from typing import Any, Dict, List

from ..exc import unimplemented
from .base import VariableTracker
from .constant import ConstantVariable
from .lists import TupleVariable


class ConstDictVariable(VariableTracker):
    def __init__(self, items: Dict[Any, VariableTracker], user_cls: type = dict, source=None) -> None:
        super().__init__(source)
        self.items = dict(items)
        self.user_cls = user_cls

    has_identity = True

    def python_type(self) -> type:
        return self.user_cls

    def subvalues(self) -> List[VariableTracker]:
        return list(self.items.values())

    def describe(self) -> str:
        return f"dict of {len(self.items)}"

    def as_python_constant(self) -> Any:
        return self.user_cls({k: v.as_python_constant() for k, v in self.items.items()})

    def truthy(self, tx) -> bool:
        return bool(self.items)

    def has_unpack_var_sequence(self, tx) -> bool:
        return True

    def unpack_var_sequence(self, tx) -> List[VariableTracker]:
        return [ConstantVariable(k) for k in self.items]

    def _check_mutable(self, tx) -> None:
        if self.source is not None:
            tx.output.side_effects.mutate_container(self)

    def call_method(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        const_args = [a.as_python_constant() for a in args] if name in ("__getitem__", "get", "__contains__", "pop", "__delitem__") else []
        if name == "__getitem__":
            if const_args[0] not in self.items:
                unimplemented(f"missing dict key {const_args[0]!r}")
            return self.items[const_args[0]]
        if name == "get":
            default = args[1] if len(args) > 1 else ConstantVariable(None)
            return self.items.get(const_args[0], default)
        if name == "__contains__":
            return ConstantVariable(const_args[0] in self.items)
        if name == "__len__":
            return ConstantVariable(len(self.items))
        if name in ("keys", "values", "items") and not args and not kwargs:
            return DictViewVariable(self, name)
        if name == "copy":
            return ConstDictVariable(self.items, self.user_cls)
        if name in ("__setitem__", "update", "pop", "__delitem__", "setdefault", "clear"):
            self._check_mutable(tx)
            if name == "__setitem__":
                self.items[args[0].as_python_constant()] = args[1]
            elif name == "update":
                for source in args:
                    if not isinstance(source, ConstDictVariable):
                        unimplemented("dict.update with a non-dict argument")
                    self.items.update(source.items)
                self.items.update(kwargs)
            elif name == "pop":
                if const_args[0] in self.items:
                    return self.items.pop(const_args[0])
                if len(args) > 1:
                    return args[1]
                unimplemented(f"popping a missing dict key {const_args[0]!r}")
            elif name == "__delitem__":
                del self.items[const_args[0]]
            elif name == "setdefault":
                key = args[0].as_python_constant()
                return self.items.setdefault(key, args[1] if len(args) > 1 else ConstantVariable(None))
            else:
                self.items.clear()
            return ConstantVariable(None)
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, codegen) -> None:
        if self.source is not None:  # the caller's own dict object
            self.source.reconstruct(codegen)
            return
        if self.user_cls is not dict:
            unimplemented(f"returning a {self.user_cls.__name__} built while tracing")
        for key, value in self.items.items():
            codegen.load_const(key)
            codegen.reconstruct(value)
        codegen.append("BUILD_MAP", len(self.items))


class DictViewVariable(VariableTracker):
    """`d.keys()`, `d.values()` or `d.items()`: a live view, so it reads the dict when used and sees
    the dict's later changes, as the real view does."""

    def __init__(self, mapping: ConstDictVariable, kind: str) -> None:
        super().__init__()
        self.mapping = mapping
        self.kind = kind

    def python_type(self) -> type:
        return type(getattr({}, self.kind)())

    def describe(self) -> str:
        return f"dict_{self.kind}"

    def subvalues(self) -> List[VariableTracker]:
        return [self.mapping]

    def current(self) -> List[VariableTracker]:
        if self.kind == "keys":
            return [ConstantVariable(k) for k in self.mapping.items]
        if self.kind == "values":
            return list(self.mapping.items.values())
        return [TupleVariable([ConstantVariable(k), v]) for k, v in self.mapping.items.items()]

    def as_python_constant(self) -> Any:
        if self.kind == "keys":
            return dict.fromkeys(self.mapping.items).keys()
        return getattr(self.mapping.as_python_constant(), self.kind)()

    def truthy(self, tx) -> bool:
        return bool(self.mapping.items)

    def has_unpack_var_sequence(self, tx) -> bool:
        return True

    def unpack_var_sequence(self, tx) -> List[VariableTracker]:
        return self.current()

    def call_method(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        if name == "__len__" and not args:
            return ConstantVariable(len(self.mapping.items))
        if name == "__contains__" and len(args) == 1:
            return tx.call_operator(operator.contains, TupleVariable(self.current()), args[0])
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, codegen) -> None:
        codegen.load_function(getattr(self.mapping.user_cls, self.kind))
        codegen.reconstruct(self.mapping)
        codegen.call(1)
