"""Tuples, lists, named tuples and iterators over them."""
from __future__ import annotations

import collections
import functools
import itertools
import operator
import types
from typing import Any, Callable, Dict, List, Optional

from .. import pyversion
from ..exc import TracedException, python_error, unimplemented, unimplemented_frame
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

    def reconstruct_empty(self, codegen) -> None:
        codegen.append("BUILD_LIST", 0)

    def reconstruct_filling(self, codegen, local: str) -> None:
        """Fill the list built empty into `local` (its items may hold it: see PyCodegen.reconstruct)."""
        codegen.append("LOAD_FAST", local)
        for item in self.items:
            codegen.reconstruct(item)
        codegen.append("BUILD_TUPLE", len(self.items))
        codegen.append("LIST_EXTEND", 1)
        codegen.append("POP_TOP")

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
            self.extend(tx, args[0])
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


    def extend(self, tx, iterable: VariableTracker) -> None:
        """list.extend (listobject.c list_extend): a list, a tuple or this list itself is copied
        first; any other iterable is appended to item by item as it is pulled, so what it reads of
        this list has grown by the items before."""
        if iterable is self or type(iterable) in (ListVariable, TupleVariable):
            self.items.extend(iterable.unpack_var_sequence(tx))
            return
        append_each(tx, iterate(tx, iterable), self.items.append)


def append_each(tx, iterator: "IteratorVariable", add: Callable[[VariableTracker], None]) -> None:
    """`add(item)` for each item of `iterator`, each before the next is pulled."""
    for count in itertools.count():
        item = iterator.next_item(tx)
        if item is None:
            return
        if count > MAX_ITEMS:
            unimplemented(f"more than {MAX_ITEMS} items from {iterator.describe()} (an unbounded loop?)")
        add(item)


_SET_MUTATORS = ("add", "update", "discard", "remove", "clear", "pop", "intersection_update", "difference_update",
                 "symmetric_difference_update")


class SetVariable(BaseListVariable):
    """A set of constants (sets of tensors or objects are not tracked), kept as a real set that the
    same insertions and removals as eager's built: its iteration order, which follows the hash table's
    layout and so its history, is eager's."""

    python_cls = set
    has_identity = True

    def __init__(self, items: List[VariableTracker], source=None, real: Optional[set] = None) -> None:
        super().__init__([], source)
        self.real = set() if real is None else real
        for item in items:
            self.real.add(item.as_python_constant())
        self._sync()

    def _sync(self) -> None:
        self.items = [ConstantVariable(v) for v in self.real]

    def as_python_constant(self) -> Any:
        return set(self.real)

    def add(self, item: VariableTracker) -> None:
        self.real.add(item.as_python_constant())
        self._sync()

    def getitem(self, tx, index: Any) -> VariableTracker:
        unimplemented("indexing a set")

    def call_method(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        if name in _SET_MUTATORS:
            return self.mutate(tx, name, args, kwargs)
        if name == "__contains__" and len(args) == 1:
            return ConstantVariable(args[0].as_python_constant() in self.real)
        if name == "__len__":
            return ConstantVariable(len(self.real))
        if all(a.is_python_constant() for a in args) and hasattr(set, name) and not kwargs:
            result = getattr(self.real, name)(*[a.as_python_constant() for a in args])
            return SetVariable([], real=result) if type(result) is set else tx.wrap_constant(result)
        unimplemented(f"set.{name}")

    def mutate(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        """An in-place method, run on the real set as eager runs it on its own."""
        if kwargs or not all(a.is_python_constant() for a in args):
            unimplemented(f"set.{name} with these arguments")
        values = [a.as_python_constant() for a in args]
        if (name == "remove" and values and values[0] not in self.real) or (name == "pop" and not self.real):
            unimplemented(f"set.{name} of a missing element (Python raises)")
        result = getattr(self.real, name)(*values)
        if self.source is not None:
            tx.output.side_effects.mutate_container(self)
        self._sync()
        return ConstantVariable(result)

    def reconstruct(self, codegen) -> None:
        if self.source is not None:
            self.source.reconstruct(codegen)
            return
        for item in self.items:
            codegen.reconstruct(item)
        codegen.append("BUILD_SET", len(self.items))


_LIST_ITERATOR = type(iter([]))
_LIST_REVERSE_ITERATOR = type(reversed([]))
# iterators whose __setstate__ takes an index (see iterator_at)
_INDEXED = {type(iter(v)) for v in ((), [], "", "\xe9", b"", bytearray(), range(0), range(2 ** 70))} | {
    _LIST_REVERSE_ITERATOR}


class UnboundContainerMethod(VariableTracker):
    """A builtin container's method read from its class (`list.append`, `set.add`), called with the
    container first: the container tracker's own method, where the container is of that class (or a
    tracked subclass that does not define the method again)."""

    def __init__(self, cls: type, name: str) -> None:
        super().__init__()
        self.cls = cls
        self.name = name

    def describe(self) -> str:
        return f"{self.cls.__name__}.{self.name}"

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        target = args[0] if args else None
        if self.cls is tuple and target is not None and all(a.is_python_constant() for a in args) and not kwargs \
                and type(target.as_python_constant()) is tuple:  # tuple methods change nothing
            values = [a.as_python_constant() for a in args]
            return tx.wrap_constant(getattr(tuple, self.name)(*values))
        if not isinstance(target, BaseListVariable) or not issubclass(target.python_cls, self.cls) \
                or getattr(target.python_cls, self.name) is not getattr(self.cls, self.name):
            unimplemented(f"calling {self.describe()} on {target.describe() if target else 'nothing'}")
        return target.call_method(tx, self.name, list(args[1:]), kwargs)


class IteratorVariable(VariableTracker):
    """An iterator advanced by FOR_ITER, next() and unpacking, one item at a time."""

    has_identity = True  # `it` returned twice is one object

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
            if len(rest) > MAX_ITEMS:
                unimplemented(f"more than {MAX_ITEMS} items from {self.describe()} (an unbounded loop?)")
            item = self.next_item(tx)
        return rest


# More items than this from one iterator: an unbounded loop (`list(count())`), not traced.
MAX_ITEMS = 100_000


def iterator_at(iterator: Any, position: int) -> Any:
    """`iterator`, fresh from generated code, moved on to where the traced one stood. `position` is
    its __setstate__ state for the builtin iterators that keep an index (over a list, tuple, str,
    bytes or range: the items consumed; over a reversed list: the index of the next item), else the
    number of items to consume; -1 leaves it exhausted."""
    if position < 0:
        for _ in iterator:
            pass
    elif type(iterator) in _INDEXED:
        iterator.__setstate__(position)
    else:
        for _ in range(position):
            next(iterator)
    return iterator


class Rebuild:
    """How generated code makes an iterator afresh: `fn(*args, **kwargs)`, then moved on with
    iterator_at."""

    def __init__(self, fn: Any, args: List[VariableTracker],
                 kwargs: Optional[Dict[str, VariableTracker]] = None) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs or {}

    def emit(self, codegen, position: int) -> None:
        codegen.load_function(iterator_at)
        codegen.load_function(self.fn)
        for arg in [*self.args, *self.kwargs.values()]:
            codegen.reconstruct(arg)
        codegen.call(len(self.args) + len(self.kwargs), kw_names=tuple(self.kwargs))
        codegen.load_const(position)
        codegen.call(2)


class ListIteratorVariable(IteratorVariable):
    """An iterator over known items (a snapshot taken when made: a tuple, a constant, a dict's keys),
    or over a list's live items (`over`). `rebuild` is how generated code makes the real one; without
    it the iterator cannot leave the trace."""

    def __init__(self, items: List[VariableTracker], index: int = 0, over: Optional["ListVariable"] = None,
                 watched: Optional[VariableTracker] = None, iter_type: Optional[type] = None,
                 rebuild: Optional[Rebuild] = None) -> None:
        super().__init__()
        self.items = items
        self.index = index
        self.over = over  # the list whose live items these are
        self.exhausted = False  # a list iterator that ran out stays so, though the list grows
        # a dict, set or deque being iterated: Python raises if it changes meanwhile
        self.watched = watched
        self.watched_keys = _keys(watched) if watched is not None else None
        self.iter_type = iter_type if iter_type is not None else (_LIST_ITERATOR if over is not None else None)
        self.rebuild = rebuild if rebuild is not None or over is None else Rebuild(iter, [over])

    def python_type(self) -> type:
        if self.iter_type is None:
            return super().python_type()
        return self.iter_type

    def describe(self) -> str:
        return self.iter_type.__name__ if self.iter_type is not None else "iterator"

    def subvalues(self) -> List[VariableTracker]:
        return [self.over] if self.over is not None else self.items[self.index :]

    def next_item(self, tx=None) -> Optional[VariableTracker]:
        if self.watched is not None and _keys(self.watched) != self.watched_keys:
            unimplemented_frame(f"{self.watched.describe()} changed during iteration (Python raises)")
        if self.exhausted or self.index >= len(self.items):
            self.exhausted = True
            return None
        item = self.items[self.index]
        self.index += 1
        return item

    def reconstruct(self, codegen) -> None:
        if self.rebuild is None or self.iter_type is None:
            unimplemented(f"rebuilding a {self.describe()} made while tracing")
        if self.watched is not None and _keys(self.watched) != self.watched_keys and not self.exhausted:
            unimplemented(f"rebuilding an iterator over a {self.watched.describe()} changed since (Python raises)")
        if self.over is not None and self.index > len(self.items) and not self.exhausted:
            unimplemented("rebuilding a list iterator past the end of its list")
        self.rebuild.emit(codegen, -1 if self.exhausted else self.index)


class ReversedListIterator(IteratorVariable):
    """reversed(list): reads the live list from the end, by an index fixed when made (listreviter)."""

    def __init__(self, over: "ListVariable") -> None:
        super().__init__()
        self.over = over
        self.index = len(over.items) - 1

    def describe(self) -> str:
        return "list_reverseiterator"

    def python_type(self) -> type:
        return _LIST_REVERSE_ITERATOR

    def subvalues(self) -> List[VariableTracker]:
        return [self.over]

    def next_item(self, tx) -> Optional[VariableTracker]:
        if 0 <= self.index < len(self.over.items):
            self.index -= 1
            return self.over.items[self.index + 1]
        self.index = -1
        return None

    def reconstruct(self, codegen) -> None:
        ends = self.index >= len(self.over.items)  # the list shrank below it: its next() ends it
        Rebuild(reversed, [self.over]).emit(codegen, -1 if ends else self.index)
def _keys(container: VariableTracker) -> List[Any]:
    items = container.items
    if isinstance(items, dict):
        return list(items)
    if container.python_type() is collections.deque:  # any change counts: the trackers stand for its items
        return [id(item) for item in items]
    return [item.as_python_constant() for item in items]


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


class GeneratorVariable(IteratorVariable):
    """A generator object made while tracing: its frame (`tracer`, an inlining translator) runs on
    to its next yield each time an item is asked for, so it reads what the consumer changed in
    between, as in Python. Generated code can make it again only while it has not started."""

    def __init__(self, tracer: Any, fn: VariableTracker, args: List[VariableTracker],
                 kwargs: Dict[str, VariableTracker]) -> None:
        super().__init__()
        self.tracer = tracer
        self.fn = fn
        self.args = list(args)
        self.kwargs = dict(kwargs)
        self.state = "created"  # then "suspended", "running" or "done"
        self.returned: Optional[VariableTracker] = None  # what its frame returned, once done

    def describe(self) -> str:
        return "generator"

    def python_type(self) -> type:
        return types.GeneratorType

    def subvalues(self) -> List[VariableTracker]:
        return [self.fn, *self.args, *self.kwargs.values()]

    def next_item(self, tx, sent: Optional[VariableTracker] = None) -> Optional[VariableTracker]:
        if self.state == "done":
            return None
        if self.state == "running":
            unimplemented("a generator advancing itself (Python raises)")
        self.state = "running"
        try:
            item = self.tracer.resume_generator(sent)
        except TracedException as error:
            self.state = "done"  # an exception leaving a generator's frame finishes it
            if issubclass(error.exc_type, StopIteration):
                unimplemented("a generator raising StopIteration (Python raises RuntimeError)")
            raise
        self.state = "suspended" if item is not None else "done"
        if item is None:
            self.returned = self.tracer.return_value
        return item

    def call_method(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        if name in ("send", "__next__") and len(args) == (name == "send") and not kwargs:
            return self.send(tx, args[0] if args else ConstantVariable(None))
        return super().call_method(tx, name, args, kwargs)

    def send(self, tx, value: VariableTracker) -> VariableTracker:
        """`gen.send(value)`: its frame goes on with `value` as what its yield evaluates to; once the
        frame returns, StopIteration carries what it returned."""
        if self.state == "created" and not is_none(value):
            python_error(TypeError, "can't send non-None value to a just-started generator")
        if self.state == "done":  # what it returned went with the first StopIteration
            python_error(StopIteration)
        item = self.next_item(tx, value)
        if item is not None:
            return item
        returned = self.returned
        if returned is None or is_none(returned):
            python_error(StopIteration)
        if not returned.is_python_constant():
            unimplemented("a generator that returned a value other than a constant (StopIteration carries it)")
        python_error(StopIteration, returned.as_python_constant())

    def closes_observably(self) -> bool:
        """Whether closing it, as Python does when it is dropped, would run code of its frame: it
        stopped at a yield inside a try or with block."""
        instructions = self.tracer.instructions
        return self.state == "suspended" and pyversion.closing_runs_code(instructions.instrs, instructions.handlers,
                                                                         self.tracer.current_index)

    def reconstruct(self, codegen) -> None:
        if self.state != "created":
            unimplemented("rebuilding a generator the traced code has started")
        with codegen.callable():
            codegen.reconstruct(self.fn)
        for value in [*self.args, *self.kwargs.values()]:
            codegen.reconstruct(value)
        codegen.call(len(self.args) + len(self.kwargs), kw_names=tuple(self.kwargs))


class MapVariable(IteratorVariable):
    """map(fn, *iterators): lazy, calling `fn` as each row is pulled (the first iterator to end
    ends it), as Python does."""

    def __init__(self, fn: VariableTracker, inners: List[IteratorVariable]) -> None:
        super().__init__()
        self.fn = fn
        self.inners = inners

    def describe(self) -> str:
        return "map"

    def python_type(self) -> type:
        return map

    def subvalues(self) -> List[VariableTracker]:
        return [self.fn, *self.inners]

    def next_item(self, tx) -> Optional[VariableTracker]:
        row = []
        for inner in self.inners:
            item = inner.next_item(tx)
            if item is None:
                return None
            row.append(item)
        return self.fn.call_function(tx, row, {})

    def reconstruct(self, codegen) -> None:
        codegen.load_function(map)
        codegen.reconstruct(self.fn)
        for inner in self.inners:
            codegen.reconstruct(inner)
        codegen.call(1 + len(self.inners))


class FilterVariable(IteratorVariable):
    """filter(fn, iterator): lazy, testing each item as it is pulled."""

    def __init__(self, fn: VariableTracker, inner: IteratorVariable) -> None:
        super().__init__()
        self.fn = fn
        self.inner = inner

    def describe(self) -> str:
        return "filter"

    def python_type(self) -> type:
        return filter

    def subvalues(self) -> List[VariableTracker]:
        return [self.fn, self.inner]

    def next_item(self, tx) -> Optional[VariableTracker]:
        item = self.inner.next_item(tx)
        while item is not None:
            test = item if is_none(self.fn) else self.fn.call_function(tx, [item], {})
            if test.truthy(tx):
                return item
            item = self.inner.next_item(tx)
        return None

    def reconstruct(self, codegen) -> None:
        codegen.load_function(filter)
        codegen.reconstruct(self.fn)
        codegen.reconstruct(self.inner)
        codegen.call(2)


def iterate(tx, obj: VariableTracker) -> IteratorVariable:
    """iter(obj). An iterator over a list reads the list as it is when advanced, so items appended
    while iterating are reached, as in Python."""
    if isinstance(obj, IteratorVariable):
        return obj
    if isinstance(obj, ListVariable):
        return ListIteratorVariable(obj.items, over=obj)
    own = getattr(obj, "python_iterator", None)  # a user object's __iter__
    iterator = own(tx) if own is not None else None
    if iterator is not None:
        return iterator
    return snapshot_iterator(tx, obj, obj.unpack_var_sequence(tx), iter)


def snapshot_iterator(tx, obj: VariableTracker, items: List[VariableTracker], make: Callable) -> ListIteratorVariable:
    """`make(obj)` (iter or reversed) over `items`, what `obj` holds now, in the order it gives them."""
    storage = getattr(obj, "mapping_storage", None)  # a dict subclass's instance iterates its items
    container = getattr(obj, "mapping", None) or (storage and storage(tx)) or obj  # a dict view, its dict
    watched = container if container.has_identity and issubclass(container.python_type(), _WATCHED) else None
    iter_type = builtin_iterator_type(obj, make)
    return ListIteratorVariable(items, watched=watched, iter_type=iter_type,
                                rebuild=Rebuild(make, [obj]) if iter_type is not None else None)


# containers whose iterators raise when the container changes size (a deque: at any change)
_WATCHED = (dict, set, collections.deque)
_BUILTIN_ITERS = {cls.__iter__: cls for cls in (tuple, list, dict, set, frozenset, collections.deque,
                                                collections.OrderedDict)}


def builtin_iterator_type(obj: VariableTracker, make: Callable) -> Optional[type]:
    """The type of `make(obj)` (iter or reversed) for what `obj` stands for, where that is a builtin
    container's iterator (None otherwise)."""
    mapping, kind = getattr(obj, "mapping", None), getattr(obj, "kind", None)
    if mapping is not None and kind in ("keys", "values", "items"):  # a dict view
        base = _BUILTIN_ITERS.get(getattr(mapping.python_type(), "__iter__", None))
        sample = getattr(base(), kind)() if base is not None else None
    elif isinstance(obj, ConstantVariable):
        sample = obj.as_python_constant()
    else:
        base = _BUILTIN_ITERS.get(getattr(obj.python_type(), "__iter__", None))
        sample = base() if base is not None else None
    return type(make(sample)) if sample is not None else None


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
