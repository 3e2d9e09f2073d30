"""Instances and classes defined by users: attribute reads, methods, properties, namedtuples."""
from __future__ import annotations

import inspect
import types
from typing import Any, Dict, List

from ..exc import unimplemented
from ..source import AttrSource
from .base import VariableTracker


def lookup_class_attribute(tx, obj_vt: VariableTracker, cls: type, name: str, attr_source) -> VariableTracker:
    """What `obj.name` gives when `name` is found on the class (methods, properties, descriptors)."""
    from .builder import VariableBuilder
    from .functions import UserFunctionVariable, UserMethodVariable

    static = inspect.getattr_static(cls, name)
    if isinstance(static, staticmethod):
        return VariableBuilder(tx, None)(static.__func__)
    if isinstance(static, classmethod):
        return UserMethodVariable(static.__func__, UserDefinedClassVariable(cls))
    if isinstance(static, property):
        if not isinstance(static.fget, types.FunctionType):
            unimplemented(f"property {name} with a non-Python getter")
        return UserFunctionVariable(static.fget).call_function(tx, [obj_vt], {})
    if isinstance(static, types.FunctionType):
        return UserMethodVariable(static, obj_vt)
    if hasattr(type(static), "__get__"):
        unimplemented(f"attribute '{name}' is a {type(static).__name__} descriptor")
    return VariableBuilder(tx, attr_source)(static)


class UserDefinedClassVariable(VariableTracker):
    def __init__(self, cls: type, source=None) -> None:
        super().__init__(source)
        self.cls = cls

    def python_type(self) -> type:
        return type(self.cls)

    def describe(self) -> str:
        return f"class {self.cls.__qualname__}"

    def as_python_constant(self) -> Any:
        return self.cls

    def var_getattr(self, tx, name: str) -> VariableTracker:
        from .builder import VariableBuilder

        static = inspect.getattr_static(self.cls, name, None)
        if isinstance(static, (staticmethod, classmethod)):
            return lookup_class_attribute(tx, self, self.cls, name, None)
        if isinstance(static, types.FunctionType):
            return VariableBuilder(tx, self.source and AttrSource(self.source, name))(static)
        if name in ("__name__", "__qualname__"):
            from .constant import ConstantVariable

            return ConstantVariable(getattr(self.cls, name))
        return VariableBuilder(tx, self.source and AttrSource(self.source, name))(getattr(self.cls, name))

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        from .lists import NamedTupleVariable

        if issubclass(self.cls, tuple) and hasattr(self.cls, "_fields") and hasattr(self.cls, "_make"):
            from .builder import VariableBuilder

            values = list(args)
            defaults = getattr(self.cls, "_field_defaults", {})
            for name in self.cls._fields[len(values):]:
                if name in kwargs:
                    values.append(kwargs[name])
                elif name in defaults:
                    values.append(VariableBuilder(tx, None)(defaults[name]))
                else:
                    unimplemented(f"{self.cls.__name__}() missing field {name}")
            return NamedTupleVariable(values, self.cls)
        unimplemented(f"creating an instance of {self.cls.__qualname__} inside a compiled region")


class UserDefinedObjectVariable(VariableTracker):
    def __init__(self, obj: Any, source=None) -> None:
        super().__init__(source)
        self.obj = obj

    def python_type(self) -> type:
        return type(self.obj)

    def describe(self) -> str:
        return f"{type(self.obj).__qualname__} object"

    def var_getattr(self, tx, name: str) -> VariableTracker:
        from .builder import VariableBuilder

        attr_source = self.source and AttrSource(self.source, name)
        cls = type(self.obj)
        if "__getattribute__" in vars(cls) or (type(cls).__getattribute__ is not type.__getattribute__):
            unimplemented(f"{cls.__qualname__} overrides __getattribute__")
        instance_dict = getattr(self.obj, "__dict__", {})
        static = inspect.getattr_static(cls, name, None)
        is_data_descriptor = static is not None and hasattr(type(static), "__set__")
        if name in instance_dict and not is_data_descriptor:
            return VariableBuilder(tx, attr_source)(instance_dict[name])
        if static is not None or hasattr(cls, name):
            return lookup_class_attribute(tx, self, cls, name, attr_source)
        if hasattr(cls, "__getattr__"):
            unimplemented(f"{cls.__qualname__}.__getattr__")
        unimplemented(f"{cls.__qualname__} object has no attribute '{name}'")

    def call_function(self, tx, args, kwargs) -> VariableTracker:
        call = inspect.getattr_static(type(self.obj), "__call__", None)
        if isinstance(call, types.FunctionType):
            from .functions import UserMethodVariable

            return UserMethodVariable(call, self).call_function(tx, args, kwargs)
        return super().call_function(tx, args, kwargs)
