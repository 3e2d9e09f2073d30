"""Instances and classes defined by users: attribute reads, methods, properties, namedtuples."""
from __future__ import annotations

import collections
import collections.abc
import dataclasses
import enum
import functools
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

from torch.distributions.utils import lazy_property

from ..exc import TracedException, no_attribute, no_class_attribute, no_getter, python_error, unimplemented
from ..frame_hook import disabled
from ..guards import Guard, GuardKind
from ..module_lookup import MISSING, class_attribute, getattr_static, instance_dict_of, is_data_descriptor
from ..skip_policy import is_user_function
from ..source import AttrSource, GetItemSource, MethodCallSource, Source
from .base import VariableTracker
from .constant import ConstantVariable
from .deques import DequeVariable
from .dicts import (ConstDictVariable, DictClassMethod, DictMethodVariable, MappingProxyVariable, construct_mapping,
                    mapping_type)
from .functions import PartialVariable, UserFunctionVariable, UserMethodVariable
from .lists import IteratorVariable, ListIteratorVariable, ListVariable, TupleVariable
from .named_tuple import NamedTupleVariable


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


def lookup_class_attribute(tx, obj_vt: VariableTracker, cls: type, name: str, attr_source,
                           cls_source: Optional[Source] = None, implicit: bool = False) -> VariableTracker:
    """What `obj.name` gives when `name` is found on the class (methods, properties, descriptors).
    `cls_source` reaches `cls` for guards (by default: the class of `obj_vt`); `implicit`: a lookup
    that skips the instance's __dict__ (special methods, super())."""
    static = class_attribute(cls, name)
    if static is MISSING:
        no_attribute(cls, name)
    if cls_source is None:
        cls_source = _class_source(obj_vt)
    guarded = functools.partial(_guard_class_lookup, tx, obj_vt, cls_source, name, static, implicit, cls)
    if isinstance(static, staticmethod):
        return tx.wrap(static.__func__, guarded())
    if isinstance(static, classmethod):
        return UserMethodVariable(static.__func__, UserDefinedClassVariable(cls, cls_source), guarded())
    if type(static) is property:
        if static.fget is None:
            no_getter(cls, name)
        if not isinstance(static.fget, types.FunctionType):
            unimplemented(f"property {name} with a non-Python getter")
        prop_source = guarded()
        return UserFunctionVariable(static.fget, prop_source and AttrSource(prop_source, "fget")).call_function(
            tx, [obj_vt], {})
    cached = _cached_property_function(static)
    if cached is not None:
        # computed once, then stored in the instance dict, which later reads find first
        prop_source = guarded()
        value = UserFunctionVariable(cached[0], prop_source and AttrSource(prop_source, cached[1])).call_function(
            tx, [obj_vt], {})
        obj_vt.store_attr(tx, getattr(static, "attrname", None) or name, value)
        return value
    if isinstance(static, types.FunctionType):
        return UserMethodVariable(static, obj_vt, guarded())
    if any(static is method for method in OBJECT_METHODS):
        guarded()
        return PartialVariable(tx.wrap(static), [obj_vt], {})
    builtin = obj_vt.builtin_method(static) if isinstance(obj_vt, NewObjectVariable) else None
    if builtin is not None:
        guarded()
        return builtin
    if isinstance(static, functools._lru_cache_wrapper) and isinstance(static.__wrapped__, types.FunctionType):
        wrapper_source = guarded()  # a cached method: its call runs the function it wraps
        return UserMethodVariable(static.__wrapped__, obj_vt, wrapper_source and AttrSource(wrapper_source, "__wrapped__"))
    owner = next((base for base in cls.__mro__ if name in vars(base)), None)
    storage = mapping_storage(tx, obj_vt) if owner in _MAPPING_BASES else None
    if storage is not None:  # a builtin dict method of a dict subclass's instance: run on its items
        guarded()
        return DictMethodVariable(storage, name)
    if owner in READ_ONLY_METHODS and name in READ_ONLY_METHODS[owner]:
        guarded()
        return BuiltinMethodVariable(obj_vt, owner, name)
    getter = _descriptor_method(tx, static, guarded, "__get__")
    if getter is not None:  # a descriptor written in Python: its __get__(instance, owner) traced
        return getter.call_function(tx, [obj_vt, UserDefinedClassVariable(cls, cls_source)], {})
    return tx.wrap(static, attr_source)


def _cached_property_function(static: Any) -> Optional[Tuple[types.FunctionType, str]]:
    """The function (and its attribute on the descriptor) of a property computed once per instance:
    functools.cached_property, torch.distributions' lazy_property."""
    if isinstance(static, functools.cached_property) and isinstance(static.func, types.FunctionType):
        return static.func, "func"
    if isinstance(static, lazy_property) and isinstance(static.wrapped, types.FunctionType):
        return static.wrapped, "wrapped"
    return None


def _descriptor_method(tx, static: Any, guarded: Callable[[], Optional[Source]], name: str) -> Optional[VariableTracker]:
    """`type(static).name` (`__get__`, `__set__`, `__delete__`) bound to the descriptor `static`,
    where the descriptor's class defines it in Python; None where it does not define it at all.
    `guarded()` guards the class lookup that found `static` and gives its source."""
    method = class_attribute(type(static), name)
    if method is MISSING:
        return None
    if not isinstance(method, types.FunctionType):
        unimplemented(f"a {type(static).__name__} descriptor's {name} (not a Python function)")
    source = guarded()
    method_source = source and AttrSource(AttrSource(source, "__class__"), name)
    if method_source is not None:
        tx.output.add_guard(Guard(method_source, GuardKind.ID_MATCH, method))
    return UserMethodVariable(method, tx.wrap(static, source), method_source)


def _user_code_on_read(static: Any) -> bool:
    """Whether reading `static` through its owner runs the user's own Python code: a property's
    getter, a descriptor's __get__ (a library's, enum's, runs no user code: read as it is)."""
    if static is MISSING:
        return False
    function = static.fget if isinstance(static, property) else class_attribute(type(static), "__get__")
    return isinstance(function, types.FunctionType) and is_user_function(function)


def _class_source(obj_vt: VariableTracker) -> Optional[Source]:
    """How guards reach the class whose attributes `obj_vt` looks up."""
    if isinstance(obj_vt, UserDefinedClassVariable):
        return obj_vt.source
    if isinstance(obj_vt, NewObjectVariable):
        return obj_vt.cls_source
    return obj_vt.source and AttrSource(obj_vt.source, "__class__")


def _guard_class_lookup(tx, obj_vt: VariableTracker, cls_source: Optional[Source], name: str, static: Any,
                        implicit: bool, cls: Optional[type] = None) -> Optional[Source]:
    """The trace resolved `name` to `static` on the class `cls`: guard that the class still resolves
    it so (methods patched on the class) and that the instance's own __dict__ does not shadow it
    (methods patched on the instance). Returns the source of what the class lookup gives (of the
    descriptor itself where reading it from the class would run its Python __get__)."""
    if cls_source is None:
        return None
    if cls is not None and isinstance(class_attribute(type(static), "__get__"), types.FunctionType):
        source = _class_dict_source(tx, cls, cls_source, name)
    else:
        source = AttrSource(cls_source, name)
    expected = static.__func__ if isinstance(static, (staticmethod, classmethod)) else static
    if isinstance(static, classmethod):  # `Cls.name` makes a new bound method each time
        source = AttrSource(source, "__func__")
    tx.output.add_guard(Guard(source, GuardKind.ID_MATCH, expected))
    if (not implicit and obj_vt.source is not None and not isinstance(obj_vt, UserDefinedClassVariable)
            and instance_dict_of(obj_vt.real_object()) is not None and not is_data_descriptor(static)):
        tx.output.add_guard(Guard(AttrSource(obj_vt.source, "__dict__"), GuardKind.DICT_CONTAINS, (name, False)))
    return source


HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class whose dict Python code can change


def guard_class_lacks(tx, cls: type, cls_source: Optional[Source], name: str, before: Optional[int] = None) -> None:
    """Guard that no class along `cls.__mro__` (before index `before`) defines `name`: one assigned
    there later is found. Builtin classes' dicts cannot change."""
    if cls_source is None:
        return
    mro_source = AttrSource(cls_source, "__mro__")
    for index, base in enumerate(type.__dict__["__mro__"].__get__(cls)[:before]):
        if base.__flags__ & HEAP_TYPE:
            tx.output.add_guard(Guard(AttrSource(GetItemSource(mro_source, index), "__dict__"),
                                      GuardKind.DICT_CONTAINS, (name, False)))


def _class_dict_source(tx, cls: type, cls_source: Source, name: str) -> Source:
    """`name` in the __dict__ of the first class along `cls.__mro__` that holds it (the classes before
    it guarded not to): a read that calls no descriptor."""
    index = next(i for i, base in enumerate(type.__dict__["__mro__"].__get__(cls)) if name in base.__dict__)
    guard_class_lacks(tx, cls, cls_source, name, index)
    return GetItemSource(AttrSource(GetItemSource(AttrSource(cls_source, "__mro__"), index), "__dict__"), name)


# Methods of `object` that traced code may call on a user object (through super() or the class):
# run on its tracker by the builtin that stands for each (see object_protocol.py).
OBJECT_METHODS = (object.__getattribute__, object.__setattr__, object.__delattr__, object.__reduce_ex__,
                  object.__init__)


def store_through_descriptor(tx, obj: VariableTracker, cls: type, name: str,
                             value: Optional[VariableTracker]) -> bool:
    """The first step of CPython's object.__setattr__ (`value`) and object.__delattr__ (`value` None):
    a data descriptor found along the class's MRO takes the store or the deletion: a property's
    fset or fdel, a Python __set__ or __delete__, traced. False where none does (no descriptor, or
    a __slots__ slot, which the caller stores)."""
    static = class_attribute(cls, name)
    if static is MISSING or not is_data_descriptor(static) or isinstance(static, types.MemberDescriptorType):
        return False
    guarded = functools.partial(_guard_class_lookup, tx, obj, _class_source(obj), name, static, False, cls)
    args = [obj] if value is None else [obj, value]
    if type(static) is property:
        field = "fdel" if value is None else "fset"
        function = getattr(static, field)
        if not isinstance(function, types.FunctionType):  # None: Python raises AttributeError
            unimplemented(f"property '{name}' of {cls.__qualname__} whose {field} is {type(function).__name__}")
        source = guarded()
        UserFunctionVariable(function, source and AttrSource(source, field)).call_function(tx, args, {})
        return True
    method = _descriptor_method(tx, static, guarded, "__delete__" if value is None else "__set__")
    if method is None:  # Python raises AttributeError
        unimplemented(f"{'deleting' if value is None else 'assigning'} '{name}' of {cls.__qualname__} through "
                      f"a {type(static).__name__} descriptor that does not define it")
    method.call_function(tx, args, {})
    return True


def has_python_getattribute(cls: type) -> bool:
    return isinstance(class_attribute(cls, "__getattribute__"), types.FunctionType)


def get_attribute(tx, obj: VariableTracker, cls: type, name: str) -> VariableTracker:
    """`obj.name` for a user object, as CPython's slot_tp_getattr_hook: its class's Python
    __getattribute__ traced, or the generic lookup; then, only where that lookup ends in
    AttributeError, the class's __getattr__ traced."""
    try:
        if has_python_getattribute(cls):
            method = lookup_class_attribute(tx, obj, cls, "__getattribute__", None, implicit=True)
            return method.call_function(tx, [ConstantVariable(name)], {})
        return obj.generic_getattr(tx, name)
    except TracedException as error:
        fallback = class_attribute(cls, "__getattr__")
        if fallback is MISSING or not issubclass(error.exc_type, AttributeError):
            raise
        if not isinstance(fallback, types.FunctionType):
            unimplemented(f"{cls.__qualname__}.__getattr__ is not a Python function")
    fallback = lookup_class_attribute(tx, obj, cls, "__getattr__", None, implicit=True)
    return fallback.call_function(tx, [ConstantVariable(name)], {})


# Builtin mappings whose subclasses' instances are traced with their items (defaultdict's are not).
_MAPPING_BASES = (collections.OrderedDict, dict)


def mapping_base(cls: type) -> Optional[type]:
    """The builtin dict type in which instances of `cls` keep their items, or None."""
    if issubclass(cls, collections.defaultdict):
        return None
    return next((base for base in cls.__mro__ if base in _MAPPING_BASES), None)


def mapping_storage(tx, obj: VariableTracker) -> Optional[ConstDictVariable]:
    """The items of an instance of a dict subclass, as a dict tracker that the builtin dict methods
    (reached through the class or super()) read and change."""
    storage = getattr(obj, "mapping_storage", None)
    return storage(tx) if storage is not None else None


def iterate_object(tx, obj: VariableTracker, cls: type) -> List[VariableTracker]:
    """The items of a user object: through its __iter__, or __len__ and __getitem__."""
    iter_method = getattr_static(cls, "__iter__", None)
    storage = mapping_storage(tx, obj)
    if storage is not None and not isinstance(iter_method, types.FunctionType):
        return storage.unpack_var_sequence(tx)
    if iter_method in (None, collections.abc.Sequence.__iter__) and getattr_static(cls, "__getitem__", None):
        length = obj.call_method(tx, "__len__", [], {}).as_python_constant()
        return [obj.call_method(tx, "__getitem__", [ConstantVariable(i)], {}) for i in range(length)]
    iterator = object_iterator(tx, obj, cls)
    if iterator is None:
        unimplemented(f"iterating over {cls.__qualname__} objects")
    return iterator.unpack_var_sequence(tx)


def object_iterator(tx, obj: VariableTracker, cls: type) -> Optional[IteratorVariable]:
    """iter(obj) through the __iter__ `cls` defines in Python (None where it has none): the iterator
    it returns, advanced lazily (a generator's frame runs as its items are asked for)."""
    iter_method = getattr_static(cls, "__iter__", None)
    if not isinstance(iter_method, types.FunctionType) or iter_method is collections.abc.Sequence.__iter__:
        return None
    iterate = lookup_class_attribute(tx, obj, cls, "__iter__", None, implicit=True)
    iterator = iterate.call_function(tx, [], {})
    if not isinstance(iterator, IteratorVariable):
        iterator = user_iterator(tx, iterator)
    if iterator is None:
        unimplemented(f"{cls.__qualname__}.__iter__ returning {iterator.describe()} (Python raises)")
    return iterator


def user_iterator(tx, obj: VariableTracker) -> Optional[IteratorVariable]:
    """`obj` as an iterator, where its class defines __next__ in Python (an object __iter__ returned,
    often itself); None for other values."""
    if not isinstance(obj, (UserDefinedObjectVariable, NewObjectVariable)):
        return None
    if not isinstance(getattr_static(obj.python_type(), "__next__", None), types.FunctionType):
        return None
    return UserIteratorVariable(obj)


class UserIteratorVariable(IteratorVariable):
    """An object whose class defines __next__ in Python, advanced by FOR_ITER and next(): each item
    is its __next__ traced, and the StopIteration that raises ends them."""

    def __init__(self, obj: VariableTracker) -> None:
        super().__init__()
        self.obj = obj

    def describe(self) -> str:
        return f"{self.obj.describe()} as an iterator"

    def python_type(self) -> type:
        return self.obj.python_type()

    def subvalues(self) -> List[VariableTracker]:
        return [self.obj]

    def next_item(self, tx) -> Optional[VariableTracker]:
        try:
            return self.obj.call_method(tx, "__next__", [], {})
        except TracedException as error:
            if not issubclass(error.exc_type, StopIteration):
                raise
            return None

    def reconstruct(self, codegen) -> None:
        codegen.reconstruct(self.obj)


def _real_value(value: VariableTracker) -> Any:
    """The real value a constant, an existing object, or a list or tuple of them stands for."""
    if value.is_python_constant():
        return value.as_python_constant()
    if type(value) in (ListVariable, TupleVariable):
        return value.python_type()(_real_value(v) for v in value.items)
    real = value.real_object()
    if real is None:
        unimplemented(f"{value.describe()} where an existing value is needed")
    return real


def _is_key_value(value: VariableTracker) -> bool:
    """A constant, or an enum member or class: values whose identity the guards keep."""
    return value.is_python_constant() or isinstance(value.real_object(), type)


# What EnumType calls for a value none of its members has, when the class keeps the standard one.
_STDLIB_ENUM_MISSING = (enum.Enum._missing_.__func__, enum.Flag._missing_.__func__)


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
        """`cls.name`, as CPython's type_getattro: a data descriptor of the metaclass (a property)
        first, then the class's MRO (a Python descriptor's __get__(None, cls) traced), then the
        metaclass's other attributes (its methods bound to the class)."""
        if name == "__members__" and self._plain_enum(name):
            members = {key: tx.wrap(member) for key, member in self.cls.__members__.items()}
            return MappingProxyVariable(ConstDictVariable(members))
        meta = type(self.cls)
        meta_static = class_attribute(meta, name)
        meta_source = self.source and AttrSource(self.source, "__class__")
        static = class_attribute(self.cls, name)
        if _user_code_on_read(meta_static) and (static is MISSING or is_data_descriptor(meta_static)) or (
                static is MISSING and isinstance(meta_static, types.FunctionType)):
            return lookup_class_attribute(tx, self, meta, name, None, meta_source, implicit=True)
        if static is MISSING and meta_static is MISSING:
            if class_attribute(meta, "__getattr__") is not MISSING:
                unimplemented(f"the metaclass {meta.__qualname__}'s __getattr__")
            guard_class_lacks(tx, self.cls, self.source, name)
            guard_class_lacks(tx, meta, meta_source, name)
            no_class_attribute(self.cls, name)
        if _user_code_on_read(static) and not isinstance(static, property):
            source = _guard_class_lookup(tx, self, self.source, name, static, True, self.cls)
            getter = UserMethodVariable(class_attribute(type(static), "__get__"), tx.wrap(static, source))
            return getter.call_function(tx, [ConstantVariable(None), self], {})
        static = meta_static if static is MISSING else static
        if static is object.__setattr__ or static is object.__init__:
            return tx.wrap(static)
        if isinstance(static, (staticmethod, classmethod)):
            return lookup_class_attribute(tx, self, self.cls, name, None)
        if isinstance(static, types.FunctionType):
            return tx.wrap(static, self.source and AttrSource(self.source, name))
        if name in ("__name__", "__qualname__"):
            return ConstantVariable(getattr(self.cls, name))
        if mapping_type(self.cls) is not None and not isinstance(static, types.FunctionType) and callable(static):
            return DictClassMethod(self.cls, name)
        return tx.wrap(getattr(self.cls, name), self.source and AttrSource(self.source, name))

    def _plain_enum(self, name: str) -> bool:
        """An Enum class whose metaclass reads `name` as EnumType does. Its members are fixed when the
        class is made (EnumType refuses to rebind them), so the class's identity stands for them."""
        return isinstance(self.cls, enum.EnumMeta) and class_attribute(type(self.cls), name) is vars(enum.EnumMeta)[name]

    def _enum_member_of(self, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> Any:
        """`SomeEnum(value)`: the member with that value (a Flag's combination made on demand), or
        the ValueError EnumType raises, in the trace. A `_missing_` of the class's own is user code."""
        if len(args) != 1 or kwargs or not args[0].is_python_constant():
            unimplemented(f"calling the enum {self.cls.__qualname__} with other than one constant")
        value = args[0].as_python_constant()
        found = self.cls._value2member_map_.get(value) if isinstance(value, collections.abc.Hashable) else None
        if found is not None:
            return found
        if getattr(self.cls._missing_, "__func__", None) not in _STDLIB_ENUM_MISSING:
            unimplemented(f"{self.cls.__qualname__}._missing_ runs for a value not among its members")
        try:
            return self.cls(value)
        except ValueError as error:
            python_error(ValueError, *error.args)

    def has_unpack_var_sequence(self, tx) -> bool:
        return self._plain_enum("__iter__")

    def unpack_var_sequence(self, tx) -> List[VariableTracker]:
        """`list(SomeEnum)`: its members in definition order, aliases left out."""
        if self._plain_enum("__iter__"):
            return [tx.wrap(member) for member in self.cls]
        return super().unpack_var_sequence(tx)

    def python_iterator(self, tx) -> Optional[IteratorVariable]:
        return ListIteratorVariable(self.unpack_var_sequence(tx)) if self._plain_enum("__iter__") else None

    def call_method(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        if name == "__getitem__" and len(args) == 1 and not kwargs and hasattr(self.cls, "__class_getitem__"):
            # a generic alias (`list[int]`, `Callable[[T], Any]` in annotations): made from the real values
            return tx.wrap(self.cls[_real_value(args[0])])
        return super().call_method(tx, name, args, kwargs)

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        if issubclass(self.cls, tuple) and hasattr(self.cls, "_fields") and hasattr(self.cls, "_make"):
            values = list(args)
            defaults = getattr(self.cls, "_field_defaults", {})
            for name in self.cls._fields[len(values):]:
                if name in kwargs:
                    values.append(kwargs[name])
                elif name in defaults:
                    values.append(tx.wrap(defaults[name]))
                else:
                    unimplemented(f"{self.cls.__name__}() missing field {name}")
            return NamedTupleVariable(values, self.cls)
        if mapping_type(self.cls) is not None:
            return construct_mapping(tx, self.cls, args, kwargs)
        if self._plain_enum("__call__"):
            return tx.wrap(self._enum_member_of(args, kwargs))
        if self.cls in (list, tuple, set, frozenset):  # `type(obj)(items)` on a builtin container
            return tx.wrap(self.cls).call_function(tx, args, kwargs)
        if self.cls is collections.deque:
            return DequeVariable.create(tx, args, kwargs)
        if self.cls is types.MappingProxyType and len(args) == 1 and not kwargs and isinstance(args[0], ConstDictVariable):
            return MappingProxyVariable(args[0])
        return NewObjectVariable.create(tx, self.cls, args, kwargs, self.source)


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

    def as_python_constant(self) -> Any:
        if isinstance(self.obj, enum.Enum):  # a member is guarded by identity: a constant (a dict key, ...)
            return self.obj
        return super().as_python_constant()

    def var_getattr(self, tx, name: str) -> VariableTracker:
        return get_attribute(tx, self, type(self.obj), name)

    def generic_getattr(self, tx, name: str) -> VariableTracker:
        """`object.__getattribute__(obj, name)`, as CPython's _PyObject_GenericGetAttrWithDict: a data
        descriptor of the class, the instance dict, then the class."""
        cls = type(self.obj)
        if isinstance(self.obj, enum.Enum) and name in ("name", "value"):  # the member itself is guarded
            return tx.wrap(getattr(self.obj, name))
        attr_source = self.source and AttrSource(self.source, name)
        if name == "__dict__" and instance_dict_of(self.obj) is not None:
            return self.instance_dict(tx)
        static = class_attribute(cls, name)
        if static is not MISSING and is_data_descriptor(static):
            if isinstance(static, (types.MemberDescriptorType, types.GetSetDescriptorType)):  # slots, C fields
                return self._read_builtin_descriptor(tx, static, name)
            return lookup_class_attribute(tx, self, cls, name, attr_source)
        found = self._instance_dict_item(tx, name)
        if found is not None:
            return found
        if static is not MISSING:
            if attr_source is not None and has_python_getattribute(cls):
                # guards read where this lookup found the value, not through the class's own lookup again
                attr_source = AttrSource(AttrSource(self.source, "__class__"), name)
            return lookup_class_attribute(tx, self, cls, name, attr_source)
        guard_class_lacks(tx, cls, _class_source(self), name)
        no_attribute(cls, name)

    def instance_dict(self, tx) -> ConstDictVariable:
        """The tracker of the object's __dict__, the one place the trace keeps its attributes from
        then on (attributes assigned before it was first read are put in it)."""
        real = instance_dict_of(self.obj)
        known = tx.output.tracked_containers.get(id(real))
        if known is not None and known[0] is real:
            return known[1]
        tracker = tx.wrap(real, self.source and AttrSource(self.source, "__dict__"))
        if not isinstance(tracker, ConstDictVariable):
            unimplemented(f"the __dict__ of {self.describe()} (keys that are not constants)")
        for key, value in tx.output.side_effects.pending_attrs(self.obj).items():
            tracker.call_method(tx, "__setitem__", [ConstantVariable(key), value], {})
        return tracker

    def _tracked_instance_dict(self, tx) -> Optional[ConstDictVariable]:
        real = instance_dict_of(self.obj)
        known = tx.output.tracked_containers.get(id(real)) if real is not None else None
        return known[1] if known is not None and known[0] is real else None

    def _instance_dict_item(self, tx, name: str) -> Optional[VariableTracker]:
        """`obj.__dict__[name]` as the trace has it so far, or None where the dict lacks it (guarded)."""
        tracked = self._tracked_instance_dict(tx)
        if tracked is not None:
            return tracked.items.get(name)
        pending = tx.output.side_effects.pending_attr(self.obj, name)
        if pending is not None:
            return pending
        real = instance_dict_of(self.obj)
        if real is None:
            return None
        dict_source = self.source and GetItemSource(AttrSource(self.source, "__dict__"), name)
        if name in real:
            # guards read the entry from the dict where a getattr could run user code or find
            # something else once it is gone: a Python __getattribute__ or __getattr__, or a class
            # attribute the entry shadows (a cached_property the guard itself would compute)
            cls = type(self.obj)
            through_dict = (has_python_getattribute(cls) or class_attribute(cls, name) is not MISSING
                            or class_attribute(cls, "__getattr__") is not MISSING)
            return tx.wrap(real[name], dict_source if through_dict else self.source and AttrSource(self.source, name))
        if self.source is not None:
            tx.output.add_guard(Guard(AttrSource(self.source, "__dict__"), GuardKind.DICT_CONTAINS, (name, False)))
        return None

    def _read_builtin_descriptor(self, tx, static: Any, name: str) -> VariableTracker:
        """A __slots__ slot or a C-level field (`__class__`, `__weakref__`): no user code runs."""
        pending = tx.output.side_effects.pending_attr(self.obj, name)
        if pending is not None:
            return pending
        if isinstance(static, types.MemberDescriptorType) and not slot_is_filled(tx, self, name):
            no_attribute(type(self.obj), name)
        return tx.wrap(static.__get__(self.obj, type(self.obj)), self.source and AttrSource(self.source, name))

    def has_unpack_var_sequence(self, tx) -> bool:
        return True

    def unpack_var_sequence(self, tx) -> List[VariableTracker]:
        return iterate_object(tx, self, type(self.obj))

    def python_iterator(self, tx) -> Optional[IteratorVariable]:
        """iter(self) through a Python __iter__, or None (see lists.iterate)."""
        return object_iterator(tx, self, type(self.obj))

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        if self.source is not None and _call_python_setattr(tx, self, type(self.obj), name, value):
            return
        if type(self.obj).__setattr__ is not object.__setattr__:
            unimplemented(f"{type(self.obj).__qualname__} has a __setattr__ not written in Python")
        self.generic_setattr(tx, name, value)

    def generic_setattr(self, tx, name: str, value: VariableTracker) -> None:
        """`object.__setattr__(obj, name, value)`, as CPython's _PyObject_GenericSetAttrWithDict: a data
        descriptor of the class takes it, else the instance dict."""
        if self.source is None:  # nothing in generated code reaches the object to assign it
            super().store_attr(tx, name, value)
        cls = type(self.obj)
        if store_through_descriptor(tx, self, cls, name, value):
            return
        if not isinstance(class_attribute(cls, name), types.MemberDescriptorType):
            if instance_dict_of(self.obj) is None:
                unimplemented(f"assigning '{name}' of a {cls.__qualname__}, which has no such slot (Python raises)")
            tracked = self._tracked_instance_dict(tx)
            if tracked is not None:
                tracked.call_method(tx, "__setitem__", [ConstantVariable(name), value], {})
                return
        tx.output.side_effects.store_attr(self, self.obj, name, value, object.__setattr__)

    def generic_delattr(self, tx, name: str) -> None:
        """`object.__delattr__(obj, name)`: a data descriptor's deleter, else the instance dict's item."""
        if self.source is None:
            unimplemented(f"deleting '{name}' of {self.describe()}")
        if store_through_descriptor(tx, self, type(self.obj), name, None):
            return
        if isinstance(class_attribute(type(self.obj), name), types.MemberDescriptorType) or \
                instance_dict_of(self.obj) is None:
            unimplemented(f"deleting the slot '{name}' of {self.describe()}")
        self.instance_dict(tx).call_method(tx, "__delitem__", [ConstantVariable(name)], {})

    def mapping_storage(self, tx) -> Optional[ConstDictVariable]:
        base = mapping_base(type(self.obj))
        if base is None or self.source is None:
            return None
        key = ("mapping storage", id(self.obj))
        known = tx.output.tracked_containers.get(key)
        if known is not None:
            return known[1]
        keys = list(base.keys(self.obj))
        tx.output.add_guard(Guard(MethodCallSource(self.source, base, "keys", ()), GuardKind.EQUALS_MATCH, keys))
        overridden = type(self.obj).__getitem__ is not base.__getitem__
        items = {k: tx.wrap(dict.__getitem__(self.obj, k), MethodCallSource(self.source, dict, "__getitem__", (k,))
                            if overridden else GetItemSource(self.source, k)) for k in keys}
        storage = ConstDictVariable(items, base, self.source)
        tx.output.tracked_containers[key] = (self.obj, storage)
        return storage

    def call_function(self, tx, args, kwargs) -> VariableTracker:
        return call_user_object(tx, self, type(self.obj), args, kwargs)


def call_user_object(tx, obj: VariableTracker, cls: type, args: List[VariableTracker],
                     kwargs: Dict[str, VariableTracker]) -> VariableTracker:
    """`obj(*args, **kwargs)` through the __call__ its class writes in Python."""
    if not isinstance(getattr_static(cls, "__call__", None), types.FunctionType):
        return VariableTracker.call_function(obj, tx, args, kwargs)
    method = lookup_class_attribute(tx, obj, cls, "__call__", None, implicit=True)
    return method.call_function(tx, args, kwargs)


def _call_python_setattr(tx, obj: VariableTracker, cls: type, name: str, value: VariableTracker) -> bool:
    """`obj.name = value` through the class's own __setattr__ written in Python: traced. Whether it was."""
    if not isinstance(getattr_static(cls, "__setattr__"), types.FunctionType):
        return False
    setattr_method = lookup_class_attribute(tx, obj, cls, "__setattr__", None, implicit=True)
    setattr_method.call_function(tx, [ConstantVariable(name), value], {})
    return True


def type_call(tx, cls_vt: "UserDefinedClassVariable", args: List[VariableTracker],
              kwargs: Dict[str, VariableTracker]) -> VariableTracker:
    """type.__call__(cls, *args, **kwargs), as CPython's type_call: `cls.__new__` (traced where
    written in Python), then, where it made an instance of `cls`, its __init__."""
    cls = cls_vt.cls
    new = class_attribute(cls, "__new__")
    new = new.__func__ if isinstance(new, staticmethod) else new
    if new is (mapping_base(cls) or object).__new__:
        obj = NewObjectVariable(cls, cls_vt.source)
        obj.run_init(tx, args, kwargs, own_new=False)
        return obj
    if not (isinstance(new, types.FunctionType) and is_user_function(new)):
        return _untraced_construction(cls, args, kwargs)
    made = lookup_class_attribute(tx, cls_vt, cls, "__new__", None, cls_vt.source, implicit=True).call_function(
        tx, [cls_vt, *args], kwargs)
    if isinstance(made, NewObjectVariable) and issubclass(made.cls, cls):
        made.run_init(tx, args, kwargs, own_new=True)
    elif isinstance(made.python_type(), type) and issubclass(made.python_type(), cls):
        unimplemented(f"{cls.__qualname__}.__new__ returned a {made.describe()}, whose __init__ is not traced")
    return made


def _untraced_construction(cls: type, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
    """`cls(...)` left to generated code (a builtin base's __new__, a library's metaclass): exact only
    where none of the user's own code runs in it (it would run later, out of order)."""
    for name in ("__new__", "__init__"):
        method = class_attribute(cls, name)
        method = getattr(method, "__func__", method)
        if isinstance(method, types.FunctionType) and is_user_function(method):
            unimplemented(f"constructing a {cls.__qualname__}, whose {name} is not traced")
    return ConstructedObjectVariable(cls, args, kwargs)


class TypeCallVariable(VariableTracker):
    """`type.__call__` bound to a class, as a metaclass's __call__ reaches it through super()."""

    def __init__(self, cls_vt: "UserDefinedClassVariable") -> None:
        super().__init__()
        self.cls_vt = cls_vt

    def describe(self) -> str:
        return f"type.__call__ of {self.cls_vt.describe()}"

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        return type_call(tx, self.cls_vt, args, kwargs)


def slot_is_filled(tx, obj: UserDefinedObjectVariable, name: str) -> bool:
    """Whether the C-level field `name` (a __slots__ slot) of an existing object holds a value,
    read through its descriptor and guarded (by hasattr, which runs no user code only where the
    class has no __getattr__ nor Python __getattribute__)."""
    cls = type(obj.obj)
    try:
        class_attribute(cls, name).__get__(obj.obj, cls)
        present = True
    except AttributeError:
        present = False
    if obj.source is not None:
        if class_attribute(cls, "__getattr__") is not MISSING or has_python_getattribute(cls):
            unimplemented(f"whether the slot '{name}' of {obj.describe()} is filled (its class's own lookup would tell)")
        tx.output.add_guard(Guard(obj.source, GuardKind.HASATTR, (name, present)))
    return present


def rebuild_object(cls: type, attrs: Dict[str, Any], items: Optional[Dict[Any, Any]] = None) -> Any:
    """Recreate, in generated code, an object that the traced code constructed (with its items, for
    a dict subclass)."""
    return fill_object((mapping_base(cls) or object).__new__(cls), attrs, items)


def fill_object(obj: Any, attrs: Dict[str, Any], items: Optional[Dict[Any, Any]] = None) -> Any:
    """Give an object rebuilt by generated code its attributes (and items)."""
    for name, value in attrs.items():
        object.__setattr__(obj, name, value)
    base = mapping_base(type(obj))
    for key, value in (items or {}).items():
        base.__setitem__(obj, key, value)
    return obj


class NewObjectVariable(VariableTracker):
    """An instance of a plain user class created while tracing: its attributes are trackers."""

    def __init__(self, cls: type, cls_source: Optional[Source] = None) -> None:
        super().__init__()
        self.cls = cls
        self.cls_source = cls_source  # how guards reach the class its methods are looked up on
        self.instance_dict = ConstDictVariable({})  # what its __dict__ holds
        base = mapping_base(cls)
        self.storage = ConstDictVariable({}, base) if base is not None else None  # a dict subclass's items
        if self.storage is not None and isinstance(getattr_static(cls, "__missing__", None), types.FunctionType):
            self.storage.missing = functools.partial(self.call_method, name="__missing__", kwargs={})

    @property
    def attrs(self) -> Dict[str, VariableTracker]:
        return self.instance_dict.items

    @staticmethod
    def create(tx, cls: type, args: List[VariableTracker], kwargs: Dict[str, VariableTracker],
               cls_source: Optional[Source] = None) -> VariableTracker:
        """`cls(*args, **kwargs)`: the metaclass's __call__ where the user wrote one (traced), else
        type.__call__'s steps."""
        meta_call = class_attribute(type(cls), "__call__")
        cls_vt = UserDefinedClassVariable(cls, cls_source)
        if meta_call is type.__call__:
            return type_call(tx, cls_vt, args, kwargs)
        if isinstance(meta_call, types.FunctionType) and is_user_function(meta_call):
            meta_source = cls_source and AttrSource(cls_source, "__class__")
            call = lookup_class_attribute(tx, cls_vt, type(cls), "__call__", None, meta_source, implicit=True)
            return call.call_function(tx, args, kwargs)
        return _untraced_construction(cls, args, kwargs)

    def run_init(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker], own_new: bool) -> None:
        """The __init__ step of type.__call__ on this new instance; `own_new`: its class defines
        __new__ (object.__init__ then accepts the arguments)."""
        cls = self.cls
        base = mapping_base(cls)
        init = class_attribute(cls, "__init__")
        if init is object.__init__:
            if (args or kwargs) and not own_new:
                unimplemented(f"{cls.__qualname__}() takes no arguments")
        elif isinstance(init, types.FunctionType):
            lookup_class_attribute(tx, self, cls, "__init__", None, implicit=True).call_function(tx, args, kwargs)
        elif base is not None and init is base.__init__:
            self.storage.call_method(tx, "__init__", args, kwargs)
        else:
            unimplemented(f"{cls.__qualname__}.__init__ is not a Python function")

    has_identity = True

    def python_type(self) -> type:
        return self.cls

    def subvalues(self) -> List[VariableTracker]:
        return [self.instance_dict] + ([self.storage] if self.storage is not None else [])

    def describe(self) -> str:
        return f"new {self.cls.__qualname__} object"

    def mapping_storage(self, tx) -> Optional[ConstDictVariable]:
        return self.storage

    def builtin_method(self, static: Any) -> Optional[VariableTracker]:
        """The tracker of a method of a builtin base class, `static`, bound to this object, where the
        trace runs it on the object's tracker (see ExceptionVariable); None for the others."""
        return None

    def truthy(self, tx) -> bool:
        for name in ("__bool__", "__len__"):
            if getattr_static(self.cls, name, None) is not None:
                return self.call_method(tx, name, [], {}).truthy(tx)
        return True

    def var_getattr(self, tx, name: str) -> VariableTracker:
        return get_attribute(tx, self, self.cls, name)

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        return call_user_object(tx, self, self.cls, args, kwargs)

    def generic_getattr(self, tx, name: str) -> VariableTracker:
        """`object.__getattribute__(obj, name)`: a data descriptor of the class, the instance dict,
        then the class."""
        static = class_attribute(self.cls, name)
        if static is not MISSING and is_data_descriptor(static):
            if isinstance(static, types.MemberDescriptorType):  # a __slots__ slot
                if name in self.attrs:
                    return self.attrs[name]
                no_attribute(self.cls, name)
            if name == "__class__":
                return UserDefinedClassVariable(self.cls, self.cls_source)
            if name == "__dict__" and self.cls.__dictoffset__:
                return self.instance_dict
            return lookup_class_attribute(tx, self, self.cls, name, None)
        if name in self.attrs:
            return self.attrs[name]
        if static is not MISSING:
            return lookup_class_attribute(tx, self, self.cls, name, None)
        guard_class_lacks(tx, self.cls, self.cls_source, name)
        no_attribute(self.cls, name)

    def generic_delattr(self, tx, name: str) -> None:
        """`object.__delattr__(obj, name)`: a data descriptor's deleter, else the attribute the instance holds."""
        if store_through_descriptor(tx, self, self.cls, name, None):
            return
        if name not in self.attrs:
            unimplemented(f"deleting '{name}' of a {self.cls.__qualname__} object that does not hold it")
        del self.attrs[name]

    def has_unpack_var_sequence(self, tx) -> bool:
        return True

    def unpack_var_sequence(self, tx) -> List[VariableTracker]:
        return iterate_object(tx, self, self.cls)

    def python_iterator(self, tx) -> Optional[IteratorVariable]:
        """iter(self) through a Python __iter__, or None (see lists.iterate)."""
        return object_iterator(tx, self, self.cls)

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        if _call_python_setattr(tx, self, self.cls, name, value):
            return
        if self.cls.__setattr__ is not object.__setattr__:
            unimplemented(f"{self.cls.__qualname__} defines __setattr__")
        self.generic_setattr(tx, name, value)

    def generic_setattr(self, tx, name: str, value: VariableTracker) -> None:
        """`object.__setattr__(obj, name, value)`: a data descriptor of the class takes it, else the
        instance (its dict, or a __slots__ slot)."""
        if store_through_descriptor(tx, self, self.cls, name, value):
            return
        is_slot = isinstance(class_attribute(self.cls, name), types.MemberDescriptorType)
        if not is_slot and not self.cls.__dictoffset__:
            unimplemented(f"assigning '{name}' of a {self.cls.__qualname__}, which has no such slot (Python raises)")
        self.attrs[name] = value

    def reconstruct_empty(self, codegen) -> None:
        codegen.load_function(rebuild_object)
        codegen.load_const(self.cls)
        codegen.append("BUILD_MAP", 0)
        codegen.call(2)

    def reconstruct_filling(self, codegen, local: str) -> None:
        """Fill the object built empty into `local` (its attributes may hold it)."""
        codegen.load_function(fill_object)
        codegen.append("LOAD_FAST", local)
        codegen.reconstruct(ConstDictVariable(self.attrs))
        if self.storage is not None:
            codegen.reconstruct(ConstDictVariable(self.storage.items))
        codegen.call(3 if self.storage is not None else 2)
        codegen.append("POP_TOP")

    def reconstruct(self, codegen) -> None:
        codegen.load_function(rebuild_object)
        codegen.load_const(self.cls)
        codegen.reconstruct(ConstDictVariable(self.attrs))
        if self.storage is None:
            codegen.call(2)
            return
        codegen.reconstruct(ConstDictVariable(self.storage.items))
        codegen.call(3)


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
        fields = [f for f in dataclasses.fields(self.cls) if f.init] if dataclasses.is_dataclass(self.cls) else []
        for i, field in enumerate(fields):
            if field.name != name:
                continue
            if name in self.kwargs:
                return self.kwargs[name]
            if i < len(self.args):
                return self.args[i]
            if field.default is not dataclasses.MISSING:
                return tx.wrap(field.default)
        return super().var_getattr(tx, name)

    def reconstruct(self, codegen) -> None:
        codegen.load_function(disabled(self.cls))  # its construction was not traced: not converted either
        for arg in self.args:
            codegen.reconstruct(arg)
        for value in self.kwargs.values():
            codegen.reconstruct(value)
        codegen.call(len(self.args) + len(self.kwargs), kw_names=tuple(self.kwargs))


class SuperVariable(VariableTracker):
    """`super()` inside a traced method: attribute lookup starts after `cls` in the object's MRO."""

    def __init__(self, cls: type, obj: VariableTracker) -> None:
        super().__init__()
        self.cls = cls
        self.obj = obj
        # typeobject.c supercheck: a class that is a subclass of `cls`, or an instance of one
        of_class = isinstance(obj, UserDefinedClassVariable) and cls in obj.cls.__mro__
        if not of_class and cls not in obj.python_type().__mro__:  # Python raises TypeError: left to eager
            unimplemented(f"super({cls.__qualname__}, obj) on a {obj.python_type().__qualname__}, which is no subclass")

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
        # super(C, cls) in a classmethod looks up cls's MRO and binds as a class lookup does
        # super(C, cls) of a classmethod starts from cls; a metaclass's method, from type(cls)
        of_class = isinstance(self.obj, UserDefinedClassVariable) and issubclass(self.obj.cls, self.cls)
        start = self.obj.cls if of_class else self.obj.python_type()
        mro = start.__mro__
        for index in range(mro.index(self.cls) + 1, len(mro)):
            klass = mro[index]
            if name in vars(klass):
                static = vars(klass)[name]
                if (static is object.__init__ or static is object.__setattr__) and not of_class:
                    return PartialVariable(tx.wrap(static), [self.obj], {})
                if static is type.__call__ and isinstance(self.obj, UserDefinedClassVariable):
                    return TypeCallVariable(self.obj)
                type_source = _class_source(self.obj) if of_class or not isinstance(self.obj, UserDefinedClassVariable) \
                    else self.obj.source and AttrSource(self.obj.source, "__class__")
                klass_source = type_source and GetItemSource(AttrSource(type_source, "__mro__"), index)
                if isinstance(static, classmethod):  # bound to the class the lookup started from
                    owner = self.obj if of_class else UserDefinedClassVariable(start, type_source)
                    source = _guard_class_lookup(tx, self.obj, klass_source, name, static, True)
                    return UserMethodVariable(static.__func__, owner, source)
                if of_class and isinstance(static, (staticmethod, types.FunctionType)):
                    source = _guard_class_lookup(tx, self.obj, klass_source, name, static, True)
                    return tx.wrap(getattr(static, "__func__", static), source)
                attr_source = klass_source and AttrSource(klass_source, name)
                if of_class and hasattr(type(static), "__get__"):
                    unimplemented(f"super() in a classmethod reading a {type(static).__name__} attribute")
                if of_class:
                    return tx.wrap(static, attr_source)
                return lookup_class_attribute(tx, self.obj, klass, name, attr_source, klass_source, implicit=True)
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
        real = self.obj.real_object()
        if real is None or self.obj.source is None or kwargs or not all(map(_is_key_value, args)):
            unimplemented(f"calling {self.describe()}")
        values = tuple(_real_value(a) for a in args)
        result = getattr(self.owner, self.name)(real, *values)
        if self.name in ("keys", "values", "items"):
            result = list(result)
        source = MethodCallSource(self.obj.source, self.owner, self.name, values)
        return tx.wrap(result, source)
