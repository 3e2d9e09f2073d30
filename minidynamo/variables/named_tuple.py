"""Named tuples and C struct sequences (torch.return_types), tracked field by field."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from .base import VariableTracker
from .dicts import ConstDictVariable
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
        return super().var_getattr(tx, name)

    def reconstruct(self, codegen) -> None:
        codegen.load_function(getattr(self.tuple_cls, "_make", self.tuple_cls))
        TupleVariable(self.items).reconstruct(codegen)
        codegen.call(1)


def _structseq_index(cls: type, name: str) -> Optional[int]:
    """The position of field `name` in a C struct sequence such as torch.return_types.max."""
    probe = cls(tuple(range(cls.n_sequence_fields)))
    index = getattr(probe, name, None)
    return index if isinstance(index, int) else None
