"""Instances and classes defined by users: attribute reads, methods, properties, namedtuples."""
from __future__ import annotations

import abc
import collections.abc
import dataclasses
import functools
import inspect
import types
from typing import Any, Dict, List

from ..exc import unimplemented
from ..source import AttrSource
from .base import VariableTracker
from .constant import ConstantVariable


# Methods of builtin types that only read: called on the real object while tracing, their
# results guarded through a source that repeats the call.
_MAPPING_READS = {"get", "__getitem__", "__contains__", "__len__", "keys", "values", "items"}
READ_ONLY_METHODS: Dict[type, set] = {
    dict: _MAPPING_READS,
    types.MappingProxyType: _MAPPING_READS,
    list: {"__getitem__", "__contains__", "__len__", "index", "count"},
    tuple: {"__getitem__", "__contains__", "__len__", "index", "count"},
    set: {"__contains__", "__len__"},
    frozenset: {"__contains__", "__len__"},
    str: {"__contains__", "__len__", "startswith", "endswith", "lower", "upper", "split", "format", "join"},
}


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
    if isinstance(static, functools.cached_property) and isinstance(static.func, types.FunctionType):
        # computed once, then stored in the instance dict, which later reads find first
        value = UserFunctionVariable(static.func).call_function(tx, [obj_vt], {})
        obj_vt.store_attr(tx, static.attrname or name, value)
        return value
    if isinstance(static, types.FunctionType):
        return UserMethodVariable(static, obj_vt)
    owner = next((base for base in cls.__mro__ if name in vars(base)), None)
    if owner in READ_ONLY_METHODS and name in READ_ONLY_METHODS[owner]:
        return BuiltinMethodVariable(obj_vt, owner, name)
    if hasattr(type(static), "__get__"):
        unimplemented(f"attribute '{name}' is a {type(static).__name__} descriptor")
    return VariableBuilder(tx, attr_source)(static)


def iterate_object(tx, obj: VariableTracker, cls: type) -> List[VariableTracker]:
    """The items of a user object: through a generator __iter__, or __len__ and __getitem__."""
    from .functions import UserMethodVariable

    iter_method = inspect.getattr_static(cls, "__iter__", None)
    if iter_method in (None, collections.abc.Sequence.__iter__) and inspect.getattr_static(cls, "__getitem__", None):
        length = obj.call_method(tx, "__len__", [], {}).as_python_constant()
        return [obj.call_method(tx, "__getitem__", [ConstantVariable(i)], {}) for i in range(length)]
    if isinstance(iter_method, types.FunctionType):
        return UserMethodVariable(iter_method, obj).call_function(tx, [], {}).unpack_var_sequence(tx)
    unimplemented(f"iterating over {cls.__qualname__} objects")


class UserDefinedClassVariable(VariableTracker):
    def __init__(self, cls: type, source=None) -> None:
        super().__init__(source)
        self.cls = cls

    def python_type(self) -> type:
        return type(self.cls)

    def real_object(self) -> Any:
        return self.cls

    def describe(self) -> str:
        return f"class {self.cls.__qualname__}"

    def as_python_constant(self) -> Any:
        return self.cls

    def var_getattr(self, tx, name: str) -> VariableTracker:
        from .builder import VariableBuilder

        static = inspect.getattr_static(self.cls, name, None)
        if static is object.__setattr__ or static is object.__init__:
            from .builtin import BuiltinVariable

            return BuiltinVariable(static)
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
        return NewObjectVariable.create(tx, self.cls, args, kwargs)


class UserDefinedObjectVariable(VariableTracker):
    def __init__(self, obj: Any, source=None) -> None:
        super().__init__(source)
        self.obj = obj

    def python_type(self) -> type:
        return type(self.obj)

    def real_object(self) -> Any:
        return self.obj

    def describe(self) -> str:
        return f"{type(self.obj).__qualname__} object"

    def var_getattr(self, tx, name: str) -> VariableTracker:
        from .builder import VariableBuilder

        pending = tx.output.side_effects.pending_attr(self.obj, name)
        if pending is not None:
            return pending
        attr_source = self.source and AttrSource(self.source, name)
        cls = type(self.obj)
        if isinstance(inspect.getattr_static(cls, "__getattribute__"), types.FunctionType):
            # e.g. configuration objects that map attribute aliases: read through the real object,
            # and the guard repeats the read
            return VariableBuilder(tx, attr_source)(getattr(self.obj, name))
        instance_dict = getattr(self.obj, "__dict__", {})
        static = inspect.getattr_static(cls, name, None)
        is_data_descriptor = static is not None and hasattr(type(static), "__set__")
        if name in instance_dict and not is_data_descriptor:
            return VariableBuilder(tx, attr_source)(instance_dict[name])
        if isinstance(static, (types.MemberDescriptorType, types.GetSetDescriptorType)):  # __slots__ and C fields
            return VariableBuilder(tx, attr_source)(getattr(self.obj, name))
        if static is not None or hasattr(cls, name):
            return lookup_class_attribute(tx, self, cls, name, attr_source)
        if hasattr(cls, "__getattr__"):
            unimplemented(f"{cls.__qualname__}.__getattr__")
        unimplemented(f"{cls.__qualname__} object has no attribute '{name}'")

    def has_unpack_var_sequence(self, tx) -> bool:
        return True

    def unpack_var_sequence(self, tx) -> List[VariableTracker]:
        return iterate_object(tx, self, type(self.obj))

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        if self.source is None or _has_custom_setattr(type(self.obj)):
            super().store_attr(tx, name, value)
        tx.output.side_effects.store_attr(self, self.obj, name, value)

    def call_function(self, tx, args, kwargs) -> VariableTracker:
        call = inspect.getattr_static(type(self.obj), "__call__", None)
        if isinstance(call, types.FunctionType):
            from .functions import UserMethodVariable

            return UserMethodVariable(call, self).call_function(tx, args, kwargs)
        return super().call_function(tx, args, kwargs)


def _has_custom_setattr(cls: type) -> bool:
    return cls.__setattr__ is not object.__setattr__ or any(vars(c).get("__slots__") for c in cls.__mro__[:-1])


def rebuild_object(cls: type, attrs: Dict[str, Any]) -> Any:
    """Recreate, in generated code, an object that the traced code constructed."""
    obj = object.__new__(cls)
    for name, value in attrs.items():
        object.__setattr__(obj, name, value)
    return obj


class NewObjectVariable(VariableTracker):
    """An instance of a plain user class created while tracing: its attributes are trackers."""

    def __init__(self, cls: type) -> None:
        super().__init__()
        self.cls = cls
        self.attrs: Dict[str, VariableTracker] = {}

    @staticmethod
    def create(tx, cls: type, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        from .functions import UserMethodVariable

        if type(cls) not in (type, abc.ABCMeta) or cls.__new__ is not object.__new__ or any(
            vars(c).get("__slots__") for c in cls.__mro__[:-1]
        ):
            return ConstructedObjectVariable(cls, args, kwargs)
        obj = NewObjectVariable(cls)
        init = inspect.getattr_static(cls, "__init__")
        if init is object.__init__:
            if args or kwargs:
                unimplemented(f"{cls.__qualname__}() takes no arguments")
        elif isinstance(init, types.FunctionType):
            UserMethodVariable(init, obj).call_function(tx, args, kwargs)
        else:
            unimplemented(f"{cls.__qualname__}.__init__ is not a Python function")
        return obj

    has_identity = True

    def python_type(self) -> type:
        return self.cls

    def subvalues(self) -> List[VariableTracker]:
        return list(self.attrs.values())

    def describe(self) -> str:
        return f"new {self.cls.__qualname__} object"

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name in self.attrs:
            return self.attrs[name]
        if name == "__class__":
            return UserDefinedClassVariable(self.cls)
        if inspect.getattr_static(self.cls, name, None) is None:
            unimplemented(f"{self.cls.__qualname__} object has no attribute '{name}'")
        return lookup_class_attribute(tx, self, self.cls, name, None)

    def has_unpack_var_sequence(self, tx) -> bool:
        return True

    def unpack_var_sequence(self, tx) -> List[VariableTracker]:
        return iterate_object(tx, self, self.cls)

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        if self.cls.__setattr__ is not object.__setattr__:
            unimplemented(f"{self.cls.__qualname__} defines __setattr__")
        self.attrs[name] = value

    def reconstruct(self, codegen) -> None:
        codegen.load_function(rebuild_object)
        codegen.load_const(self.cls)
        for name, value in self.attrs.items():
            codegen.load_const(name)
            codegen.reconstruct(value)
        codegen.append("BUILD_MAP", len(self.attrs))
        codegen.call(2)


class ConstructedObjectVariable(VariableTracker):
    """An instance of a class whose construction is not traced (a custom __new__, a builtin base
    such as dict): generated code constructs it with the same arguments, as eager does. Using it
    while tracing is a graph break."""

    has_identity = True

    def __init__(self, cls: type, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> None:
        super().__init__()
        self.cls = cls
        self.args = args
        self.kwargs = kwargs

    def python_type(self) -> type:
        return self.cls

    def describe(self) -> str:
        return f"new {self.cls.__qualname__} object"

    def subvalues(self) -> List[VariableTracker]:
        return [*self.args, *self.kwargs.values()]

    def var_getattr(self, tx, name: str) -> VariableTracker:
        """A dataclass field holds what was passed for it (or its default)."""
        from .builder import VariableBuilder

        fields = [f for f in dataclasses.fields(self.cls) if f.init] if dataclasses.is_dataclass(self.cls) else []
        for i, field in enumerate(fields):
            if field.name != name:
                continue
            if name in self.kwargs:
                return self.kwargs[name]
            if i < len(self.args):
                return self.args[i]
            if field.default is not dataclasses.MISSING:
                return VariableBuilder(tx, None)(field.default)
        return super().var_getattr(tx, name)

    def reconstruct(self, codegen) -> None:
        from ..eval_frame import disable

        codegen.load_function(disable(self.cls))  # its construction was not traced: not converted either
        for arg in self.args:
            codegen.reconstruct(arg)
        for value in self.kwargs.values():
            codegen.reconstruct(value)
        if self.kwargs:
            codegen.append("KW_NAMES", tuple(self.kwargs))
        codegen.call(len(self.args) + len(self.kwargs))


class SuperVariable(VariableTracker):
    """`super()` inside a traced method: attribute lookup starts after `cls` in the object's MRO."""

    def __init__(self, cls: type, obj: VariableTracker) -> None:
        super().__init__()
        self.cls = cls
        self.obj = obj

    def describe(self) -> str:
        return f"super({self.cls.__qualname__})"

    def subvalues(self) -> List[VariableTracker]:
        return [self.obj]

    def reconstruct(self, codegen) -> None:
        codegen.load_function(super)
        codegen.load_const(self.cls)
        codegen.reconstruct(self.obj)
        codegen.call(2)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        from .functions import UserMethodVariable

        mro = self.obj.python_type().__mro__
        for klass in mro[mro.index(self.cls) + 1 :]:
            if name in vars(klass):
                static = vars(klass)[name]
                if isinstance(static, types.FunctionType):
                    return UserMethodVariable(static, self.obj)
                if static is object.__init__ or static is object.__setattr__:
                    from .builtin import BuiltinVariable
                    from .functions import PartialVariable

                    return PartialVariable(BuiltinVariable(static), [self.obj], {})
                return lookup_class_attribute(tx, self.obj, klass, name, None)
        unimplemented(f"super() has no attribute '{name}'")



class BuiltinMethodVariable(VariableTracker):
    """A read-only method of a builtin base type (dict.get, ...) on an existing object."""

    def __init__(self, obj: VariableTracker, owner: type, name: str) -> None:
        super().__init__()
        self.obj = obj
        self.owner = owner
        self.name = name

    def describe(self) -> str:
        return f"method {self.owner.__name__}.{self.name} of {self.obj.describe()}"

    def subvalues(self) -> List[VariableTracker]:
        return [self.obj]

    def reconstruct(self, codegen) -> None:
        codegen.reconstruct(self.obj)
        codegen.load_attr(self.name)

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        from ..source import MethodCallSource
        from .builder import VariableBuilder

        real = self.obj.real_object()
        if real is None or self.obj.source is None or kwargs or not all(a.is_python_constant() for a in args):
            unimplemented(f"calling {self.describe()}")
        values = tuple(a.as_python_constant() for a in args)
        result = getattr(self.owner, self.name)(real, *values)
        if self.name in ("keys", "values", "items"):
            result = list(result)
        source = MethodCallSource(self.obj.source, self.owner, self.name, values)
        return VariableBuilder(tx, source)(result)
