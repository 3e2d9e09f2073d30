"""Tuples, lists, named tuples and iterators over them."""
from __future__ import annotations

import functools
import itertools
import operator
from typing import Any, Dict, List, Optional

from ..exc import unimplemented, unimplemented_frame
from .base import BoundMethodCall, VariableTracker
from .constant import ConstantVariable, is_none


class BaseListVariable(VariableTracker):
    python_cls: type = list

    def __init__(self, items: List[VariableTracker], source=None) -> None:
        super().__init__(source)
        self.items = list(items)

    def python_type(self) -> type:
        return self.python_cls

    def describe(self) -> str:
        return f"{self.python_cls.__name__} of {len(self.items)}"

    def as_python_constant(self) -> Any:
        return self.python_cls([item.as_python_constant() for item in self.items])

    def truthy(self, tx) -> bool:
        return bool(self.items)

    def has_unpack_var_sequence(self, tx) -> bool:
        return True

    def unpack_var_sequence(self, tx) -> List[VariableTracker]:
        return list(self.items)

    def getitem(self, tx, index: Any) -> VariableTracker:
        if isinstance(index, slice):
            if type(self) is TupleVariable and index.indices(len(self.items)) == (0, len(self.items), 1):
                return self  # a whole exact tuple sliced is that tuple, as in CPython
            return type(self)(self.items[index])
        try:
            return self.items[index]
        except (IndexError, TypeError):  # raised again by the real lookup, where the user's code can catch it
            unimplemented(f"{self.describe()}[{index!r}] raises")

    def subvalues(self) -> List[VariableTracker]:
        return list(self.items)

    def call_method(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        if name == "__getitem__" and len(args) == 1:
            return self.getitem(tx, args[0].exact_value())
        if name == "__len__":
            return ConstantVariable(len(self.items))
        if name == "index" and len(args) == 1:
            return ConstantVariable(self.as_python_constant().index(args[0].as_python_constant()))
        if name == "count" and len(args) == 1:
            return ConstantVariable(self.as_python_constant().count(args[0].as_python_constant()))
        if name == "__contains__" and len(args) == 1:
            return ConstantVariable(args[0].as_python_constant() in self.as_python_constant())
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, codegen) -> None:
        if self.source is not None:  # the caller's own object
            self.source.reconstruct(codegen)
            return
        for item in self.items:
            codegen.reconstruct(item)
        codegen.append("BUILD_LIST" if self.python_cls is list else "BUILD_TUPLE", len(self.items))

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if not name.startswith("__") and callable(getattr(self.python_cls, name, None)):  # `append = y.append`
            return BoundMethodCall(self, name)
        return super().var_getattr(tx, name)


class TupleVariable(BaseListVariable):
    python_cls = tuple
    has_identity = True  # `t = (x, y); return t, t` gives one tuple twice


class ListVariable(BaseListVariable):
    """A list; changes to the caller's lists are replayed after the graph runs."""

    python_cls = list
    has_identity = True

    def _check_mutable(self, tx) -> None:
        if self.source is not None:
            tx.output.side_effects.mutate_container(self)

    def call_method(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        mutators = {"append", "extend", "insert", "pop", "clear", "reverse", "__setitem__", "__delitem__", "remove", "sort"}
        if name == "remove" and len(args) == 1:
            self._check_mutable(tx)
            for i, item in enumerate(self.items):
                if tx.call_operator(operator.eq, item, args[0]).truthy(tx):
                    del self.items[i]
                    return ConstantVariable(None)
            unimplemented("list.remove of a missing element")
        if name in mutators:
            self._check_mutable(tx)
        if name == "append" and len(args) == 1:
            self.items.append(args[0])
        elif name == "extend" and len(args) == 1:
            self.items.extend(args[0].unpack_var_sequence(tx))
        elif name == "insert" and len(args) == 2:
            self.items.insert(args[0].as_python_constant(), args[1])
        elif name == "pop":
            return self.items.pop(*[a.as_python_constant() for a in args])
        elif name == "clear":
            self.items.clear()
        elif name == "reverse":
            self.items.reverse()
        elif name == "__setitem__" and len(args) == 2:
            index = args[0].as_python_constant()
            if isinstance(index, slice):
                self.items[index] = args[1].unpack_var_sequence(tx)
            else:
                self.items[index] = args[1]
        elif name == "__delitem__" and len(args) == 1:
            del self.items[args[0].as_python_constant()]
        elif name == "copy" and not args:
            return ListVariable(list(self.items))
        elif name == "sort":
            self.items[:] = sort_items(tx, self.items, kwargs.get("key"), kwargs.get("reverse"))
        else:
            return super().call_method(tx, name, args, kwargs)
        return ConstantVariable(None)


_SET_MUTATORS = ("add", "update", "discard", "remove", "clear", "pop", "intersection_update", "difference_update",
                 "symmetric_difference_update")


class SetVariable(BaseListVariable):
    """A set of constants (sets of tensors or objects are not tracked)."""

    python_cls = set
    has_identity = True

    def __init__(self, items: List[VariableTracker], source=None) -> None:
        super().__init__([], source)
        for item in items:
            self.add(item)

    def add(self, item: VariableTracker) -> None:
        value = item.as_python_constant()
        if all(existing.as_python_constant() != value for existing in self.items):
            self.items.append(item)

    def getitem(self, tx, index: Any) -> VariableTracker:
        unimplemented("indexing a set")

    def call_method(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        if name in _SET_MUTATORS:
            return self.mutate(tx, name, args, kwargs)
        if name == "__contains__" and len(args) == 1:
            return ConstantVariable(args[0].as_python_constant() in self.as_python_constant())
        if name == "__len__":
            return ConstantVariable(len(self.items))
        if all(a.is_python_constant() for a in args) and hasattr(set, name) and not kwargs:
            return tx.wrap_constant(getattr(self.as_python_constant(), name)(*[a.as_python_constant() for a in args]))
        unimplemented(f"set.{name}")

    def mutate(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        """An in-place method, run on the constant values; items keep their order, new ones go last."""
        if name == "pop" or kwargs or not all(a.is_python_constant() for a in args):
            unimplemented(f"set.{name} with these arguments")
        values = self.as_python_constant()
        if name == "remove" and args and args[0].as_python_constant() not in values:
            unimplemented("set.remove of a missing element")
        getattr(values, name)(*[a.as_python_constant() for a in args])
        if self.source is not None:
            tx.output.side_effects.mutate_container(self)
        kept = [item for item in self.items if item.as_python_constant() in values]
        self.items = kept
        for value in values:
            self.add(ConstantVariable(value))
        return ConstantVariable(None)

    def reconstruct(self, codegen) -> None:
        if self.source is not None:
            self.source.reconstruct(codegen)
            return
        for item in self.items:
            codegen.reconstruct(item)
        codegen.append("BUILD_SET", len(self.items))


class IteratorVariable(VariableTracker):
    """An iterator advanced by FOR_ITER, next() and unpacking, one item at a time."""

    def describe(self) -> str:
        return "iterator"

    def next_item(self, tx) -> Optional[VariableTracker]:
        """The next item, or None when exhausted."""
        raise NotImplementedError

    def has_unpack_var_sequence(self, tx) -> bool:
        return True

    def unpack_var_sequence(self, tx) -> List[VariableTracker]:
        rest = []
        item = self.next_item(tx)
        while item is not None:
            rest.append(item)
            item = self.next_item(tx)
        return rest


_LIST_ITERATOR = type(iter([]))


class ListIteratorVariable(IteratorVariable):
    """An iterator over a known sequence of values, or over a list's live items (`over`)."""

    def __init__(self, items: List[VariableTracker], index: int = 0, over: Optional["ListVariable"] = None,
                 watched: Optional[VariableTracker] = None, iter_type: Optional[type] = None,
                 returned: Optional[VariableTracker] = None) -> None:
        super().__init__()
        self.items = items
        self.returned = returned  # what the generator these items came from returned
        self.index = index
        self.over = over  # the list whose live items these are
        # a dict or set being iterated: Python raises if its keys change meanwhile
        self.watched = watched
        self.watched_keys = _keys(watched) if watched is not None else None
        self.iter_type = iter_type if iter_type is not None else (_LIST_ITERATOR if over is not None else None)

    def python_type(self) -> type:
        if self.iter_type is None:  # the same tracker stands for iterators of several types
            return super().python_type()
        return self.iter_type

    def subvalues(self) -> List[VariableTracker]:
        return [self.over] if self.over is not None else self.items[self.index :]

    def next_item(self, tx=None) -> Optional[VariableTracker]:
        if self.watched is not None and _keys(self.watched) != self.watched_keys:
            unimplemented_frame(f"{self.watched.describe()} changed during iteration (Python raises)")
        if self.index >= len(self.items):
            return None
        item = self.items[self.index]
        self.index += 1
        return item

    def reconstruct(self, codegen) -> None:
        if self.over is not None:  # an iterator over the list itself, advanced as far as this one
            codegen.load_function(itertools.islice)
            codegen.load_function(iter)
            codegen.reconstruct(self.over)
            codegen.call(1)
            codegen.load_const(self.index)
            codegen.load_const(None)
            codegen.call(3)
            return
        TupleVariable(self.items[self.index :]).reconstruct(codegen)
        codegen.append("GET_ITER")


def _keys(container: VariableTracker) -> List[Any]:
    items = container.items
    return list(items) if isinstance(items, dict) else [item.as_python_constant() for item in items]


class EnumerateVariable(IteratorVariable):
    """enumerate(iterator, count): lazy, so items the loop appends to a list it enumerates are reached."""

    def __init__(self, inner: IteratorVariable, count: int) -> None:
        super().__init__()
        self.inner = inner
        self.count = count

    def subvalues(self) -> List[VariableTracker]:
        return [self.inner]

    def next_item(self, tx) -> Optional[VariableTracker]:
        item = self.inner.next_item(tx)
        if item is None:
            return None
        self.count += 1
        return TupleVariable([ConstantVariable(self.count - 1), item])

    def reconstruct(self, codegen) -> None:
        codegen.load_function(enumerate)
        codegen.reconstruct(self.inner)
        codegen.load_const(self.count)
        codegen.call(2)


class ZipVariable(IteratorVariable):
    """zip(*iterators): lazy, pulling from each iterator in turn as Python does."""

    def __init__(self, inners: List[IteratorVariable], strict: bool) -> None:
        super().__init__()
        self.inners = inners
        self.strict = strict

    def subvalues(self) -> List[VariableTracker]:
        return list(self.inners)

    def next_item(self, tx) -> Optional[VariableTracker]:
        row = []
        for inner in self.inners:
            item = inner.next_item(tx)
            if item is None:
                if self.strict and (row or any(other.next_item(tx) is not None for other in self.inners[1:])):
                    unimplemented("zip(strict=True) over iterables of different lengths (Python raises)")
                return None
            row.append(item)
        return TupleVariable(row)

    def reconstruct(self, codegen) -> None:
        codegen.load_function(functools.partial(zip, strict=True) if self.strict else zip)
        for inner in self.inners:
            codegen.reconstruct(inner)
        codegen.call(len(self.inners))


def iterate(tx, obj: VariableTracker) -> ListIteratorVariable:
    """iter(obj). An iterator over a list reads the list as it is when advanced, so items appended
    while iterating are reached, as in Python."""
    if isinstance(obj, IteratorVariable):
        return obj
    if isinstance(obj, ListVariable):
        return ListIteratorVariable(obj.items, over=obj)
    storage = getattr(obj, "mapping_storage", None)  # a dict subclass's instance iterates its items
    container = getattr(obj, "mapping", None) or (storage and storage(tx)) or obj  # a dict view, its dict
    watched = container if container.has_identity and issubclass(container.python_type(), (dict, set)) else None
    return ListIteratorVariable(obj.unpack_var_sequence(tx), watched=watched)


def sort_items(tx, items: List[VariableTracker], key: Optional[VariableTracker] = None,
               reverse: Optional[VariableTracker] = None) -> List[VariableTracker]:
    """`sorted()` over trackers whose sort keys are constants (a `key` function is traced per item)."""
    if hasattr(key, "sort_key"):  # functools.cmp_to_key(...): compares pairs of items
        index_key = key.sort_key(tx, items)
    elif (key is None or is_none(key)) and not all(item.is_python_constant() for item in items):
        index_key = functools.cmp_to_key(lambda i, j: -1 if _less(tx, items[i], items[j]) else int(
            _less(tx, items[j], items[i])))
    elif key is None or is_none(key):
        index_key = [item.as_python_constant() for item in items].__getitem__
    else:
        index_key = [key.call_function(tx, [item], {}).as_python_constant() for item in items].__getitem__
    order = sorted(range(len(items)), key=index_key, reverse=bool(reverse and reverse.as_python_constant()))
    return [items[i] for i in order]


def _less(tx, a: VariableTracker, b: VariableTracker) -> bool:
    """`a < b` as sorted() asks it of items that are not all constants: tuples compare item by item
    (equal when identical, as CPython's tuple comparison finds first), anything else through `<`."""
    if a.is_python_constant() and b.is_python_constant():
        return a.as_python_constant() < b.as_python_constant()
    if isinstance(a, TupleVariable) and isinstance(b, TupleVariable):
        for x, y in zip(a.items, b.items):
            same = x is y or (x.is_python_constant() and y.is_python_constant()
                              and x.as_python_constant() == y.as_python_constant())
            if not same:
                return _less(tx, x, y)
        return len(a.items) < len(b.items)
    return tx.call_operator(operator.lt, a, b).truthy(tx)
