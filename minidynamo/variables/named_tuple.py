"""Named tuples and C struct sequences (torch.return_types), tracked field by field."""
from __future__ import annotations

import inspect
import types
from typing import Any, Dict, List, Optional

from ..guards import Guard, GuardKind
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
        if names:
            return self._class_attribute(tx, name)
        return super().var_getattr(tx, name)

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
        if self.source is not None:  # the caller's own object
            self.source.reconstruct(codegen)
            return
        codegen.load_function(getattr(self.tuple_cls, "_make", self.tuple_cls))
        TupleVariable(self.items).reconstruct(codegen)
        codegen.call(1)


def _structseq_index(cls: type, name: str) -> Optional[int]:
    """The position of field `name` in a C struct sequence such as torch.return_types.max."""
    probe = cls(tuple(range(cls.n_sequence_fields)))
    index = getattr(probe, name, None)
    return index if isinstance(index, int) else None
