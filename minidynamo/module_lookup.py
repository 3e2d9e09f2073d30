"""Where Python's lookup of `module.name` finds it on an nn.Module: followed by the module tracker,
and by the guards that repeat its reads from the same dict."""
from __future__ import annotations

from typing import Any, Optional

import torch

MISSING = object()
# Module.__getattr__ searches these instance dicts, in this order, when Python's lookup finds nothing.
MODULE_TABLES = ("_parameters", "_buffers", "_modules")


def class_attribute(cls: type, name: str) -> Any:
    """`name` as found along `cls.__mro__` (unbound, no descriptor called), or MISSING."""
    for base in cls.__mro__:
        if name in base.__dict__:
            return base.__dict__[name]
    return MISSING


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
