"""collections.deque objects created while tracing, tracked item by item."""
from __future__ import annotations

import collections
from typing import Any, Dict, List, Optional

from ..exc import unimplemented
from .base import VariableTracker
from .constant import ConstantVariable, is_none
from .lists import BaseListVariable, append_each, iterate


class DequeVariable(BaseListVariable):
    """A deque built in the frame; `maxlen` drops items from the far end as the real one does."""

    python_cls = collections.deque
    has_identity = True

    def __init__(self, items: List[VariableTracker], maxlen: Optional[int] = None) -> None:
        super().__init__(items[len(items) - maxlen:] if maxlen is not None and len(items) > maxlen else items)
        self.maxlen = maxlen

    @staticmethod
    def create(tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> "DequeVariable":
        iterable = args[0] if args else kwargs.get("iterable")
        maxlen = args[1] if len(args) > 1 else kwargs.get("maxlen", ConstantVariable(None))
        items = iterable.unpack_var_sequence(tx) if iterable is not None and not is_none(iterable) else []
        return DequeVariable(items, maxlen.as_python_constant())

    def describe(self) -> str:
        return f"deque of {len(self.items)}"

    def as_python_constant(self) -> Any:
        return collections.deque([item.as_python_constant() for item in self.items], self.maxlen)

    def getitem(self, tx, index: Any) -> VariableTracker:
        if isinstance(index, slice):
            unimplemented("slicing a deque (Python raises)")
        return super().getitem(tx, index)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name == "maxlen":
            return ConstantVariable(self.maxlen)
        return super().var_getattr(tx, name)

    def _add(self, items: List[VariableTracker], left: bool) -> None:
        for item in items:
            if left:
                self.items.insert(0, item)
            else:
                self.items.append(item)
            if self.maxlen is not None and len(self.items) > self.maxlen:
                self.items.pop(-1 if left else 0)

    def extend(self, tx, iterable: VariableTracker, left: bool) -> None:
        """deque.extend / extendleft: the deque itself is copied first; any other iterable is added
        item by item as it is pulled (an iterator over this deque then raises, as in Python)."""
        if iterable is self:
            self._add(list(self.items), left)
            return
        append_each(tx, iterate(tx, iterable), lambda item: self._add([item], left))

    def _pop(self, left: bool) -> VariableTracker:
        if not self.items:
            unimplemented("popping from an empty deque (Python raises)")
        return self.items.pop(0 if left else -1)

    def call_method(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        if kwargs:
            unimplemented(f"deque.{name} with keyword arguments")
        if name in ("append", "appendleft") and len(args) == 1:
            self._add(args, left=name == "appendleft")
        elif name in ("extend", "extendleft") and len(args) == 1:
            self.extend(tx, args[0], left=name == "extendleft")
        elif name in ("pop", "popleft") and not args:
            return self._pop(left=name == "popleft")
        elif name == "rotate" and len(args) <= 1:
            steps = args[0].as_python_constant() if args else 1
            if self.items:
                steps %= len(self.items)
                self.items[:] = self.items[len(self.items) - steps:] + self.items[:len(self.items) - steps]
        elif name == "clear" and not args:
            self.items.clear()
        elif name == "reverse" and not args:
            self.items.reverse()
        elif name == "__setitem__" and len(args) == 2 and isinstance(args[0].as_python_constant(), int):
            self.items[args[0].as_python_constant()] = args[1]
        elif name == "copy" and not args:
            return DequeVariable(list(self.items), self.maxlen)
        else:
            return super().call_method(tx, name, args, kwargs)
        return ConstantVariable(None)

    def reconstruct(self, codegen) -> None:
        codegen.load_function(collections.deque)
        for item in self.items:
            codegen.reconstruct(item)
        codegen.append("BUILD_LIST", len(self.items))
        codegen.load_const(self.maxlen)
        codegen.call(2)
