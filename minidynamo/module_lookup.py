"""Where Python's lookup of `module.name` finds it on an nn.Module: followed by the module tracker,
and by the guards that repeat its reads from the same dict."""
from __future__ import annotations

import dataclasses
import inspect
import types
from typing import Any, Callable, Dict, Optional

import torch

from .source import AttrSource, GetItemSource, Source

MISSING = object()
# Module.__getattr__ searches these instance dicts, in this order, when Python's lookup finds nothing.
MODULE_TABLES = ("_parameters", "_buffers", "_modules")


def class_attribute(cls: type, name: str) -> Any:
    """`name` as found along `cls.__mro__` (unbound, no descriptor called), or MISSING."""
    for base in cls.__mro__:
        if name in base.__dict__:
            return base.__dict__[name]
    return MISSING


def getattr_static(obj: Any, name: str, *default: Any) -> Any:
    """inspect.getattr_static(obj, name[, default]), without its general walk where `obj` is a class
    whose metaclasses are plain (no metaclass in its chain but `type` defines `__dict__`; most
    classes): there it is what the first of the class's bases, then of its metaclass's, holds in its
    __dict__."""
    meta = type(obj)
    if not (meta is type or _plain_metaclass(meta)):
        return inspect.getattr_static(obj, name, *default)
    for base in _static_mro(obj) + _static_mro(meta):
        namespace = _static_dict(base)
        if name in namespace:
            return namespace[name]
    if default:
        return default[0]
    raise AttributeError(name)


_static_mro = type.__dict__["__mro__"].__get__
_static_dict = type.__dict__["__dict__"].__get__


def _plain_metaclass(meta: type) -> bool:
    """A metaclass (the bases' metaclasses are among its own bases) that leaves class dicts as
    they are: inspect reads every base's __dict__ then."""
    return issubclass(meta, type) and all(
        type(m) is type and (m is type or "__dict__" not in _static_dict(m)) for m in _static_mro(meta))


def instance_dict_of(obj: Any) -> Optional[dict]:
    """The __dict__ of `obj`, read without running code of its class (None where it has none)."""
    descriptor = class_attribute(type(obj), "__dict__")
    return descriptor.__get__(obj) if isinstance(descriptor, types.GetSetDescriptorType) else None


def is_data_descriptor(value: Any) -> bool:
    return hasattr(type(value), "__set__") or hasattr(type(value), "__delete__")


def module_attribute_home(module: torch.nn.Module, name: str) -> Optional[str]:
    """Which dict of `module` Python's lookup of `module.name` answers from: "__dict__" (no class
    data descriptor shadows it), else the table (_parameters, _buffers, _modules) Module.__getattr__
    finds it in when no class attribute does; None otherwise (read through getattr)."""
    cls = type(module)
    static = class_attribute(cls, name)
    if name in module.__dict__:
        return None if static is not MISSING and is_data_descriptor(static) else "__dict__"
    if static is not MISSING or class_attribute(cls, "__getattr__") is not torch.nn.Module.__getattr__:
        return None
    return next((table for table in MODULE_TABLES if name in module.__dict__.get(table, ())), None)


def module_item_source(owner: Any, source: Source) -> Optional[Source]:
    """`source` (one attribute or index step on `owner`) as the dict entry Python's lookup reads when
    `owner` is an nn.Module: `m.weight` is `m._parameters['weight']`, `seq[0]` is `seq._modules['0']`;
    None where the step is not such an entry."""
    if not isinstance(owner, torch.nn.Module) or not isinstance(source, (AttrSource, GetItemSource)):
        return None
    if isinstance(source, AttrSource):
        home = module_attribute_home(owner, source.member)
        return None if home is None else GetItemSource(AttrSource(source.base, home), source.member)
    if isinstance(owner, (torch.nn.ModuleList, torch.nn.Sequential)) and type(source.index) is int:
        keys = list(owner._modules)
        if -len(keys) <= source.index < len(keys):
            return GetItemSource(AttrSource(source.base, "_modules"), keys[source.index])
    if isinstance(owner, torch.nn.ModuleDict) and type(source.index) is str:
        return GetItemSource(AttrSource(source.base, "_modules"), source.index)
    return None


def direct_source(source: Source, value_of: Callable[[Source], Any], known: Dict[str, Source]) -> Source:
    """`source` with every module step read from the dict it lives in (see module_item_source): what
    generated code loads, skipping Module.__getattr__ and container __getitem__. `known`: the
    answers so far, by source name (the modules on the way are shared by many parameters)."""
    if not isinstance(source, (AttrSource, GetItemSource)):
        return source
    found = known.get(source.name())
    if found is None:
        rebased = dataclasses.replace(source, base=direct_source(source.base, value_of, known))
        found = known[source.name()] = module_item_source(value_of(source.base), rebased) or rebased
    return found
