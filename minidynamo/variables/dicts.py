"""Dicts with constant keys, and their live views."""
from __future__ import annotations

import collections
import operator
import types
from typing import Any, Callable, Dict, List, Optional

from ..exc import Unsupported, python_error, unimplemented
from .base import VariableTracker
from .constant import ConstantVariable, is_constant_value, is_none
from .lists import TupleVariable, iterate, snapshot_iterator


class ConstDictVariable(VariableTracker):
    def __init__(self, items: Dict[Any, VariableTracker], user_cls: type = dict, source=None,
                 default_factory: Optional[VariableTracker] = None) -> None:
        super().__init__(source)
        self.items = dict(items)
        self.user_cls = user_cls
        self.default_factory = default_factory  # a defaultdict's
        # the items of a dict subclass's instance whose class defines __missing__: (tx, args) -> its result
        self.missing: Optional[Callable[..., VariableTracker]] = None

    has_identity = True

    def python_type(self) -> type:
        return self.user_cls

    def subvalues(self) -> List[VariableTracker]:
        return list(self.items.values()) + ([self.default_factory] if self.default_factory is not None else [])

    def describe(self) -> str:
        return f"{self.user_cls.__name__} of {len(self.items)}"

    def as_python_constant(self) -> Any:
        if issubclass(self.user_cls, collections.defaultdict):
            unimplemented("a defaultdict is not a Python constant")
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
        reader = _READS.get(name)
        if reader is not None:
            return reader(self, tx, *args, **kwargs)
        writer = _WRITES.get(name)
        if writer is not None:
            if self.source is not None and self.user_cls is not dict and mapping_type(self.user_cls) is None:
                unimplemented(f"changing a {self.user_cls.__name__} argument")
            self._check_mutable(tx)
            return writer(self, tx, *args, **kwargs)
        return super().call_method(tx, name, args, kwargs)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name == "default_factory" and issubclass(self.user_cls, collections.defaultdict):
            return self.default_factory
        if name in _READS or name in _WRITES:
            return DictMethodVariable(self, name)
        return super().var_getattr(tx, name)

    def getitem(self, tx, key: VariableTracker) -> VariableTracker:
        k = key.exact_value()
        if k in self.items:
            return self.items[k]
        if self.missing is not None:
            return self.missing(tx, args=[key])
        if self.default_factory is None or is_none(self.default_factory):
            missing_key(k)
        self._check_mutable(tx)
        value = self.items[k] = self.default_factory.call_function(tx, [], {})
        return value

    def update_from(self, tx, other: VariableTracker) -> None:
        """`d.update(other)`: another dict's items, or an iterable of key/value pairs."""
        if isinstance(other, ConstDictVariable):
            self.items.update(other.items)
            return
        storage = getattr(other, "mapping_storage", None)
        storage = storage(tx) if storage is not None else None
        cls = _known_type(other)
        if storage is not None and cls.__iter__ is dict.__iter__:  # Python copies a dict's own items then
            self.items.update(storage.items)
            return
        if storage is not None or _has_keys_method(cls):  # a mapping: its keys() and __getitem__ decide
            for key in other.call_method(tx, "keys", [], {}).unpack_var_sequence(tx):
                self.items[key.as_python_constant()] = other.call_method(tx, "__getitem__", [key], {})
            return
        pairs = iterate(tx, other)  # each pair is stored before the next is pulled (PyDict_MergeFromSeq2)
        pair = pairs.next_item(tx)
        while pair is not None:
            key, value = pair.unpack_var_sequence(tx)
            self.items[key.as_python_constant()] = value
            pair = pairs.next_item(tx)

    def reconstruct(self, codegen) -> None:
        if self.source is not None:  # the caller's own dict object
            self.source.reconstruct(codegen)
            return
        kind = mapping_type(self.user_cls)
        if kind is None:
            unimplemented(f"returning a {self.user_cls.__name__} built while tracing")
        if kind is not dict:
            codegen.load_function(kind)
            if kind is collections.defaultdict:
                codegen.reconstruct(self.default_factory)
        for key, value in self.items.items():
            codegen.load_const(key)
            codegen.reconstruct(value)
        codegen.append("BUILD_MAP", len(self.items))
        if kind is not dict:
            codegen.call(2 if kind is collections.defaultdict else 1)


def _known_type(value: VariableTracker) -> Optional[type]:
    try:
        return value.python_type()
    except Unsupported:
        return None


def _has_keys_method(cls: Optional[type]) -> bool:
    return isinstance(cls, type) and not issubclass(cls, (list, tuple, set, frozenset, str)) and hasattr(cls, "keys")


def mapping_type(cls: type) -> Optional[type]:
    """`cls` when a dict tracker of that type can be rebuilt by generated code, else None."""
    return cls if cls in (dict, collections.OrderedDict, collections.defaultdict) else None


def _get(d: ConstDictVariable, tx, key: VariableTracker, default: Optional[VariableTracker] = None):
    return d.items.get(key.as_python_constant(), default or ConstantVariable(None))


def _iter(d: ConstDictVariable, tx):
    return snapshot_iterator(tx, d, [ConstantVariable(k) for k in d.items], iter)


def _reversed(d: ConstDictVariable, tx):
    return snapshot_iterator(tx, d, [ConstantVariable(k) for k in reversed(d.items)], reversed)


def _setitem(d: ConstDictVariable, tx, key: VariableTracker, value: VariableTracker):
    d.items[key.as_python_constant()] = value
    return ConstantVariable(None)


def _update(d: ConstDictVariable, tx, /, *others: VariableTracker, **kwargs: VariableTracker):
    if len(others) > 1:
        unimplemented("dict.update with more than one positional argument (Python raises)")
    for other in others:
        d.update_from(tx, other)
    d.items.update(kwargs)
    return ConstantVariable(None)


def missing_key(key: Any) -> None:
    """Python's KeyError for `key`, raised in the traced code (a key the trace cannot rebuild: a graph break)."""
    if not is_constant_value(key):
        unimplemented(f"missing dict key {key!r}")
    python_error(KeyError, key)


def _pop(d: ConstDictVariable, tx, key: VariableTracker, *default: VariableTracker):
    k = key.as_python_constant()
    if k in d.items:
        return d.items.pop(k)
    if default:
        return default[0]
    missing_key(k)


def _popitem(d: ConstDictVariable, tx, last: VariableTracker = ConstantVariable(True)):
    if not d.items:
        unimplemented("popitem() on an empty dict (Python raises)")
    keys = list(d.items)
    key = keys[-1] if last.as_python_constant() or d.user_cls is dict else keys[0]
    return TupleVariable([ConstantVariable(key), d.items.pop(key)])


def _delitem(d: ConstDictVariable, tx, key: VariableTracker):
    k = key.as_python_constant()
    if k not in d.items:
        missing_key(k)
    del d.items[k]
    return ConstantVariable(None)


def _setdefault(d: ConstDictVariable, tx, key: VariableTracker, default: Optional[VariableTracker] = None):
    return d.items.setdefault(key.as_python_constant(), default or ConstantVariable(None))


def _clear(d: ConstDictVariable, tx):
    d.items.clear()
    return ConstantVariable(None)


def _move_to_end(d: ConstDictVariable, tx, key: VariableTracker, last: VariableTracker = ConstantVariable(True)):
    if not issubclass(d.user_cls, collections.OrderedDict):
        unimplemented("move_to_end on a dict")
    k = key.as_python_constant()
    value = d.items.pop(k)
    if last.as_python_constant():
        d.items[k] = value
    else:
        d.items = {k: value, **d.items}
    return ConstantVariable(None)


_READS = {
    "__getitem__": lambda d, tx, key: d.getitem(tx, key),
    "get": _get,
    "__contains__": lambda d, tx, key: ConstantVariable(key.as_python_constant() in d.items),
    "__len__": lambda d, tx: ConstantVariable(len(d.items)),
    "keys": lambda d, tx: DictViewVariable(d, "keys"),
    "values": lambda d, tx: DictViewVariable(d, "values"),
    "items": lambda d, tx: DictViewVariable(d, "items"),
    "copy": lambda d, tx: ConstDictVariable(d.items, mapping_type(d.user_cls) or dict, default_factory=d.default_factory),
    "__iter__": _iter,
    "__reversed__": _reversed,
}
_WRITES = {
    "__setitem__": _setitem,
    "update": _update,
    "__init__": _update,
    "pop": _pop,
    "popitem": _popitem,
    "__delitem__": _delitem,
    "setdefault": _setdefault,
    "clear": _clear,
    "move_to_end": _move_to_end,
}


class DictMethodVariable(VariableTracker):
    """A dict method read as a value (`d.get`, or a builtin dict method of a dict subclass's instance,
    run on its items)."""

    def __init__(self, mapping: ConstDictVariable, name: str) -> None:
        super().__init__()
        self.mapping = mapping
        self.name = name

    def describe(self) -> str:
        return f"dict method {self.name}"

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        return self.mapping.call_method(tx, self.name, args, kwargs)


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
        if name == "__iter__" and not args:
            return iterate(tx, self)
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, codegen) -> None:
        codegen.load_function(getattr(self.mapping.user_cls, self.kind))
        codegen.reconstruct(self.mapping)
        codegen.call(1)


class MappingProxyVariable(VariableTracker):
    """`types.MappingProxyType(d)` made while tracing (an Enum's `__members__` is one): a read-only
    view of the dict tracker `d`, so it sees the dict's later changes, as the real proxy does."""

    READS = frozenset({"get", "__getitem__", "__contains__", "__len__", "__iter__", "keys", "values", "items", "copy"})

    def __init__(self, mapping: ConstDictVariable) -> None:
        super().__init__()
        self.mapping = mapping

    def python_type(self) -> type:
        return types.MappingProxyType

    def describe(self) -> str:
        return "mappingproxy"

    def subvalues(self) -> List[VariableTracker]:
        return [self.mapping]

    def as_python_constant(self) -> Any:
        return types.MappingProxyType(self.mapping.as_python_constant())

    def truthy(self, tx) -> bool:
        return bool(self.mapping.items)

    def has_unpack_var_sequence(self, tx) -> bool:
        return True

    def unpack_var_sequence(self, tx) -> List[VariableTracker]:
        return self.mapping.unpack_var_sequence(tx)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name in self.READS:
            return DictMethodVariable(self, name)
        return super().var_getattr(tx, name)

    def call_method(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        if name == "__iter__" and not args:
            return iterate(tx, self)
        if name in self.READS:
            return self.mapping.call_method(tx, name, args, kwargs)
        if name in ("__setitem__", "__delitem__"):
            python_error(TypeError, f"'mappingproxy' object does not support item "
                                    f"{'assignment' if name == '__setitem__' else 'deletion'}")
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, codegen) -> None:
        codegen.load_function(types.MappingProxyType)
        codegen.reconstruct(self.mapping)
        codegen.call(1)


def construct_mapping(tx, cls: type, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> ConstDictVariable:
    """`dict(...)`, `OrderedDict(...)` or `defaultdict(factory, ...)` called while tracing."""
    factory = None
    if cls is collections.defaultdict:
        factory, args = (args[0] if args else ConstantVariable(None)), list(args[1:])
    mapping = ConstDictVariable({}, cls, default_factory=factory)
    _update(mapping, tx, *args, **kwargs)
    return mapping


class DictClassMethod(VariableTracker):
    """`dict.name` (or OrderedDict's, defaultdict's) read from the class: `fromkeys`, or a method
    called unbound, `dict.__getitem__(d, key)`, on a dict tracker or a dict subclass's instance."""

    def __init__(self, cls: type, name: str) -> None:
        super().__init__()
        self.cls = cls
        self.name = name

    def describe(self) -> str:
        return f"{self.cls.__name__}.{self.name}"

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        if self.name == "fromkeys" and self.cls is not collections.defaultdict and not kwargs and 1 <= len(args) <= 2:
            value = args[1] if len(args) > 1 else ConstantVariable(None)
            keys = args[0].unpack_var_sequence(tx)
            return ConstDictVariable({k.as_python_constant(): value for k in keys}, self.cls)
        target = args[0] if args else None
        storage = getattr(target, "mapping_storage", None)
        storage = target if isinstance(target, ConstDictVariable) else (storage(tx) if storage is not None else None)
        if storage is None or not issubclass(_known_type(target) or object, self.cls):
            unimplemented(f"calling {self.describe()} on {target.describe() if target else 'nothing'}")
        return storage.call_method(tx, self.name, list(args[1:]), kwargs)
