"""object's own methods traced on user objects (__new__, __getattribute__, __delattr__, __reduce_ex__ for copy); fake ids."""
from __future__ import annotations

import copyreg
import itertools
import types
from typing import Callable, Dict

from ..exc import unimplemented
from ..guards import Guard, GuardKind
from ..module_lookup import getattr_static
from ..source import AttrSource
from .base import VariableTracker
from .constant import ConstantVariable
from .dicts import ConstDictVariable
from .lists import TupleVariable
from .named_tuple import NamedTupleVariable
from .user_defined import (HEAP_TYPE, NewObjectVariable, UserDefinedClassVariable, UserDefinedObjectVariable,
                           slot_is_filled)

_fake_ids = itertools.count(-1, -1)  # real ids are addresses, never negative


class FakeIdVariable(ConstantVariable):
    """id() of a value that exists only in the trace: a number no real object has, consistent for
    the tracker within the trace (copy's memo keys). The real object gets its own id when the frame
    runs, so this one may not leave the trace."""

    def reconstruct(self, codegen) -> None:
        unimplemented("id() of a value made while tracing, used after the trace")


def fake_id(tx, value: VariableTracker) -> FakeIdVariable:
    """The id the trace gives a tracker with no real object behind it (one tracker per container
    of the caller's: see VariableBuilder)."""
    known = tx.output.fake_ids.get(id(value))
    if known is not None:
        return known[1]
    if value.source is not None and value.has_identity:  # a caller's container: distinct ones must stay so
        for other, _ in tx.output.fake_ids.values():
            if other.source is not None and other.has_identity and other.python_type() is value.python_type():
                tx.output.add_guard(Guard(value.source, GuardKind.DISTINCT_FROM, other.source))
    # the tracker is held with its id, so that no other tracker takes its place
    tx.output.fake_ids[id(value)] = (value, FakeIdVariable(next(_fake_ids)))
    return tx.output.fake_ids[id(value)][1]


def _user_object(value: VariableTracker) -> bool:
    return isinstance(value, (UserDefinedObjectVariable, NewObjectVariable))


def _object_new(tx, cls: VariableTracker, *args: VariableTracker) -> VariableTracker:
    """object.__new__(cls): an instance of a plain user class, its __init__ not run."""
    if not isinstance(cls, UserDefinedClassVariable) or args:
        unimplemented("object.__new__ of something other than a plain user class")
    klass = cls.cls
    if _layout_base(klass) is not object or getattr(klass, "__abstractmethods__", None):
        unimplemented(f"object.__new__({klass.__qualname__}), which Python rejects or builds otherwise")
    return NewObjectVariable(klass, cls.source)


def _layout_base(cls: type) -> type:
    """The first builtin class along `cls.__mro__`: `object` where object.__new__ can make a `cls`
    (a class with a builtin base, dict or int, needs that base's __new__)."""
    return next(base for base in cls.__mro__ if not base.__flags__ & HEAP_TYPE)


def _object_getattribute(tx, obj: VariableTracker, name: VariableTracker) -> VariableTracker:
    if not _user_object(obj):
        unimplemented(f"object.__getattribute__ on {obj.describe()}")
    return obj.generic_getattr(tx, name.as_python_constant())


def _object_delattr(tx, obj: VariableTracker, name: VariableTracker) -> VariableTracker:
    if not _user_object(obj):
        unimplemented(f"object.__delattr__ on {obj.describe()}")
    obj.generic_delattr(tx, name.as_python_constant())
    return ConstantVariable(None)


def _object_reduce_ex(tx, obj: VariableTracker, protocol: VariableTracker) -> VariableTracker:
    """object.__reduce_ex__(obj, protocol) for protocols 2 and up, as CPython builds it for an object
    whose class keeps object's reduction: (copyreg.__newobj__, (cls,), state, None, None)."""
    cls = obj.python_type()
    if not isinstance(obj, (UserDefinedObjectVariable, NewObjectVariable, NamedTupleVariable)) or \
            protocol.as_python_constant() < 2:
        unimplemented(f"object.__reduce_ex__ of {obj.describe()}")
    if getattr_static(cls, "__reduce__") is not object.__reduce__:  # object's then calls the class's
        return obj.call_method(tx, "__reduce__", [], {})
    new_args = getattr_static(cls, "__getnewargs__", None)
    if getattr_static(cls, "__getnewargs_ex__", None) is not None or issubclass(cls, (list, dict)) or (
            new_args is None and cls.__itemsize__) or not isinstance(new_args, (types.FunctionType, type(None))):
        unimplemented(f"object.__reduce_ex__ of a {cls.__qualname__} (new-arguments or items to reduce)")
    if isinstance(obj, NamedTupleVariable):
        cls_vt = UserDefinedClassVariable(cls, obj.source and AttrSource(obj.source, "__class__"))
    else:
        cls_vt = obj.generic_getattr(tx, "__class__")
    args = obj.call_method(tx, "__getnewargs__", [], {}).unpack_var_sequence(tx) if new_args else []
    return TupleVariable([tx.wrap(copyreg.__newobj__), TupleVariable([cls_vt, *args]), _object_state(tx, obj, cls),
                          ConstantVariable(None), ConstantVariable(None)])


def _object_state(tx, obj: VariableTracker, cls: type) -> VariableTracker:
    """What obj.__getstate__() gives: the class's own traced, else object's (the instance dict, or
    None when empty; with a dict of the filled __slots__ beside it)."""
    if getattr_static(cls, "__getstate__") is not object.__getstate__:
        return obj.call_method(tx, "__getstate__", [], {})
    state: VariableTracker = ConstantVariable(None)
    if cls.__dictoffset__:
        instance_dict = obj.generic_getattr(tx, "__dict__")
        if not isinstance(instance_dict, ConstDictVariable):
            unimplemented(f"the instance dict of {obj.describe()}")
        assigned = tx.output.side_effects.pending_attrs(obj.real_object()) if obj.source is not None else {}
        if assigned:  # the object's dict as it is at this point of the frame
            instance_dict = ConstDictVariable({**instance_dict.items, **assigned})
        if instance_dict.items:
            state = instance_dict
    slots = {}
    for name in copyreg._slotnames(cls):
        if _holds_slot(tx, obj, name):
            slots[name] = obj.generic_getattr(tx, name)
    return TupleVariable([state, ConstDictVariable(slots)]) if slots else state


def _holds_slot(tx, obj: VariableTracker, name: str) -> bool:
    """Whether a __slots__ slot of `obj` is filled (read with its guard for an existing object)."""
    if isinstance(obj, NewObjectVariable):
        return name in obj.attrs
    if not isinstance(obj, UserDefinedObjectVariable):
        unimplemented(f"the __slots__ of {obj.describe()}")
    return slot_is_filled(tx, obj, name)


# object's methods (and object.__new__) -> their traced form, called with the object first
OBJECT_PROTOCOL: Dict[Callable, Callable] = {
    object.__new__: _object_new,
    object.__getattribute__: _object_getattribute,
    object.__delattr__: _object_delattr,
    object.__reduce_ex__: _object_reduce_ex,
}
