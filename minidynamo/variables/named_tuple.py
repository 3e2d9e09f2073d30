"""Named tuples and C struct sequences (torch.return_types), tracked field by field."""
from __future__ import annotations

import inspect
import types
from typing import Any, Dict, List, Optional

from ..exc import unimplemented
from ..guards import Guard, GuardKind
from ..module_lookup import class_attribute, is_data_descriptor
from ..source import AttrSource
from .base import VariableTracker
from .dicts import ConstDictVariable
from .functions import PartialVariable, UserFunctionVariable, UserMethodVariable
from .lists import TupleVariable


class NamedTupleVariable(TupleVariable):
    """A namedtuple (or torch.return_types struct) whose fields are tracked one by one."""

    def __init__(self, items: List[VariableTracker], tuple_cls: type, source=None) -> None:
        super().__init__(items, source)
        self.tuple_cls = tuple_cls
        # the attributes of one made in the frame whose class gives its instances a __dict__
        self.instance_dict = ConstDictVariable({}) if source is None and tuple_cls.__dictoffset__ else None

    def subvalues(self) -> List[VariableTracker]:
        return super().subvalues() + ([self.instance_dict] if self.instance_dict is not None else [])

    def python_type(self) -> type:
        return self.tuple_cls

    def describe(self) -> str:
        return f"{self.tuple_cls.__name__} tuple"

    def fields(self) -> List[str]:
        return list(getattr(self.tuple_cls, "_fields", None) or getattr(self.tuple_cls, "n_fields_names", []))

    def as_python_constant(self) -> Any:
        return self.tuple_cls(*[item.as_python_constant() for item in self.items])

    def getitem(self, tx, index: Any) -> VariableTracker:
        if isinstance(index, slice):
            return TupleVariable(self.items[index])
        return self.items[index]

    def call_method(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        fields = list(getattr(self.tuple_cls, "_fields", ()))
        if name == "_asdict" and fields:
            return ConstDictVariable(dict(zip(fields, self.items)))
        if name == "_replace" and fields and not args:
            items = [kwargs.get(f, item) for f, item in zip(fields, self.items)]
            return NamedTupleVariable(items, self.tuple_cls)
        return super().call_method(tx, name, args, kwargs)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        names = list(getattr(self.tuple_cls, "_fields", ()))
        if name in names:
            return self.items[names.index(name)]
        if hasattr(self.tuple_cls, "n_sequence_fields"):
            index = _structseq_index(self.tuple_cls, name)
            if index is not None:
                return self.items[index]
        if self.instance_dict is not None:
            if name == "__dict__":
                return self.instance_dict
            if name in self.instance_dict.items and not is_data_descriptor(class_attribute(self.tuple_cls, name)):
                return self.instance_dict.items[name]
        if names:
            return self._class_attribute(tx, name)
        return super().var_getattr(tx, name)

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        """An attribute of a namedtuple subclass's instance made in the frame: kept in its __dict__."""
        cls = self.tuple_cls
        if self.instance_dict is None or cls.__setattr__ is not object.__setattr__ or \
                is_data_descriptor(class_attribute(cls, name)):
            unimplemented(f"assigning attribute '{name}' of {self.describe()}")
        self.instance_dict.items[name] = value

    def _class_attribute(self, tx, name: str) -> VariableTracker:
        """A method, property or constant (`_fields`) defined on a namedtuple class."""
        static = inspect.getattr_static(self.tuple_cls, name, None)
        if self.source is not None and static is not None:  # the class may be patched later
            tx.output.add_guard(Guard(AttrSource(AttrSource(self.source, "__class__"), name), GuardKind.ID_MATCH,
                                      getattr(self.tuple_cls, name)))
        if isinstance(static, types.FunctionType):
            return UserMethodVariable(static, self)
        if static is object.__reduce_ex__:  # how copy takes it apart (see object_protocol.py)
            return PartialVariable(tx.wrap(static), [self], {})
        if isinstance(static, property) and isinstance(static.fget, types.FunctionType):
            return UserFunctionVariable(static.fget).call_function(tx, [self], {})
        if isinstance(static, classmethod) and isinstance(static.__func__, types.FunctionType):
            return UserMethodVariable(static.__func__, tx.wrap(self.tuple_cls))
        if static is not None and not hasattr(type(static), "__get__") and not isinstance(static, type):
            return tx.wrap(static)
        return super().var_getattr(tx, name)

    def reconstruct(self, codegen) -> None:
        if self.source is not None:  # the caller's own object, its attributes kept
            self.source.reconstruct(codegen)
            return
        attributes = self.instance_dict is not None and self.instance_dict.items
        if attributes:
            codegen.load_function(_with_attributes)
        codegen.load_function(getattr(self.tuple_cls, "_make", self.tuple_cls))
        TupleVariable(self.items).reconstruct(codegen)
        codegen.call(1)
        if attributes:
            codegen.reconstruct(self.instance_dict)
            codegen.call(2)


def _with_attributes(obj: Any, attributes: Dict[str, Any]) -> Any:
    """`obj` (a tuple made by generated code) with the attributes the trace gave it."""
    for name, value in attributes.items():
        object.__setattr__(obj, name, value)
    return obj


def _structseq_index(cls: type, name: str) -> Optional[int]:
    """The position of field `name` in a C struct sequence such as torch.return_types.max."""
    probe = cls(tuple(range(cls.n_sequence_fields)))
    index = getattr(probe, name, None)
    return index if isinstance(index, int) else None
