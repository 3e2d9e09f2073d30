"""itertools, functools and operator's callable makers over trackers. Each itertools iterator is a
Python generator over trackers, advanced one item at a time as the traced code pulls from it (so
`count()` and `cycle()` work under `zip` and `islice`)."""
from __future__ import annotations

import collections
import functools
import itertools
import operator
from typing import Any, Callable, Dict, Iterator, List, Optional

from ..exc import Unsupported, unimplemented
from .base import VariableTracker
from .constant import ConstantVariable, is_none
from .dicts import ConstDictVariable
from .functions import NestedUserFunctionVariable
from .lists import IteratorVariable, ListIteratorVariable, Rebuild, TupleVariable, iterate

# More items than this from one iterator: an unbounded loop (`list(count())`), not traced.
MAX_ITEMS = 100_000


class LazyIterator(IteratorVariable):
    """An itertools iterator made while tracing; `steps` yields its items, reading the translator
    advancing it through `self.tx`."""

    def __init__(self, cls: type, steps: Callable[["LazyIterator"], Iterator[VariableTracker]]) -> None:
        super().__init__()
        self.cls = cls
        self.tx: Any = None
        self.produced = 0
        self.steps = steps(self)
        self.rebuild: Optional[Rebuild] = None  # how generated code makes it, while not started

    def describe(self) -> str:
        return f"itertools.{self.cls.__name__} iterator"

    def python_type(self) -> type:
        return self.cls

    def reconstruct(self, codegen) -> None:
        if self.produced or self.rebuild is None:
            unimplemented(f"rebuilding an {self.describe()} the traced code has started")
        self.rebuild.emit(codegen, 0)

    def next_item(self, tx) -> Optional[VariableTracker]:
        self.tx = tx
        self.produced += 1
        if self.produced > MAX_ITEMS:
            unimplemented(f"more than {MAX_ITEMS} items from {self.describe()} (an unbounded loop?)")
        return next(self.steps, None)


def _pull(it: LazyIterator, iterable: VariableTracker) -> Iterator[VariableTracker]:
    """The items of `iterable`, pulled one at a time as `it` is advanced."""
    inner = iterate(it.tx, iterable)
    while True:
        item = inner.next_item(it.tx)
        if item is None:
            return
        yield item


def _const(value: Optional[VariableTracker], default: Any = None) -> Any:
    return default if value is None or is_none(value) else value.as_python_constant()


def _lazy(cls: type, steps: Callable[[LazyIterator], Iterator[VariableTracker]]) -> LazyIterator:
    return LazyIterator(cls, steps)


def _by_index(pools: List[List[VariableTracker]], index_rows: Iterator[tuple], make: Callable) -> ListIteratorVariable:
    """The rows real itertools makes from index ranges, mapped back to the trackers: row position k
    picks from pool k (modulo the pool count, for `repeat=`). Its pools are read when it is made,
    as Python does, so it is an iterator over known rows, which generated code rebuilds as
    `make(*pools)` moved on past the rows consumed."""
    rows = [TupleVariable([pools[k % len(pools)][i] for k, i in enumerate(row)]) for row in index_rows]
    kind = type(make(*[() for _ in pools]))
    return ListIteratorVariable(rows, iter_type=kind, rebuild=Rebuild(make, [TupleVariable(p) for p in pools]))


def _items(tx, iterable: VariableTracker) -> List[VariableTracker]:
    return iterate(tx, iterable).unpack_var_sequence(tx)


def _chain(tx, *iterables: VariableTracker) -> LazyIterator:
    def steps(it: LazyIterator) -> Iterator[VariableTracker]:
        for iterable in iterables:
            yield from _pull(it, iterable)

    return _lazy(itertools.chain, steps)


def _chain_from_iterable(tx, iterables: VariableTracker) -> LazyIterator:
    def steps(it: LazyIterator) -> Iterator[VariableTracker]:
        for iterable in _pull(it, iterables):
            yield from _pull(it, iterable)

    return _lazy(itertools.chain, steps)


def _product(tx, *iterables: VariableTracker, repeat: Optional[VariableTracker] = None) -> ListIteratorVariable:
    pools = [_items(tx, i) for i in iterables]
    times = _const(repeat, 1)
    return _by_index(pools, itertools.product(*[range(len(p)) for p in pools], repeat=times),
                     functools.partial(itertools.product, repeat=times))


def _single_pool(cls: type) -> Callable:
    """combinations, combinations_with_replacement and permutations: rows of one pool."""

    def make(tx, iterable: VariableTracker, *r: VariableTracker) -> ListIteratorVariable:
        pool = _items(tx, iterable)
        sizes = [_const(v) for v in r]
        return _by_index([pool], cls(range(len(pool)), *sizes), lambda items: cls(items, *sizes))

    return make


def _zip_longest(tx, *iterables: VariableTracker, fillvalue: VariableTracker = ConstantVariable(None)) -> LazyIterator:
    inners = [iterate(tx, i) for i in iterables]

    def steps(it: LazyIterator) -> Iterator[VariableTracker]:  # CPython's zip_longest_next
        done = [False] * len(inners)
        while True:
            row = []
            for k, inner in enumerate(inners):
                item = None if done[k] else inner.next_item(it.tx)
                if item is None:
                    done[k] = True
                    if all(done):
                        return
                    item = fillvalue
                row.append(item)
            yield TupleVariable(row)

    return _lazy(itertools.zip_longest, steps)


def _pairwise(tx, iterable: VariableTracker) -> LazyIterator:
    inner = iterate(tx, iterable)

    def steps(it: LazyIterator) -> Iterator[VariableTracker]:
        previous = inner.next_item(it.tx)
        while previous is not None:
            item = inner.next_item(it.tx)
            if item is None:
                return
            yield TupleVariable([previous, item])
            previous = item

    return _lazy(itertools.pairwise, steps)


def _islice(tx, iterable: VariableTracker, *bounds: VariableTracker) -> LazyIterator:
    bound = slice(*[_const(b) for b in bounds])
    start, stop, step = bound.start or 0, bound.stop, bound.step or 1

    def steps(it: LazyIterator) -> Iterator[VariableTracker]:  # CPython's islice_next, step by step
        items = _pull(it, iterable)
        count, wanted = 0, start
        while True:
            while count < wanted:
                if next(items, None) is None:
                    return
                count += 1
            if stop is not None and count >= stop:
                return
            item = next(items, None)
            if item is None:
                return
            count += 1
            wanted = wanted + step if stop is None else min(wanted + step, stop)
            yield item

    return _lazy(itertools.islice, steps)


class CountVariable(IteratorVariable):
    """itertools.count(start, step): rebuilt where it stands by generated code."""

    def __init__(self, value: VariableTracker, step: VariableTracker) -> None:
        super().__init__()
        self.value = value
        self.step = step

    def describe(self) -> str:
        return "itertools.count iterator"

    def python_type(self) -> type:
        return itertools.count

    def subvalues(self) -> List[VariableTracker]:
        return [self.value, self.step]

    def next_item(self, tx) -> Optional[VariableTracker]:
        item = self.value
        self.value = tx.call_operator(operator.add, self.value, self.step)
        return item

    def unpack_var_sequence(self, tx) -> List[VariableTracker]:
        unimplemented("unpacking itertools.count(), which never ends")

    def reconstruct(self, codegen) -> None:
        codegen.load_function(itertools.count)
        codegen.reconstruct(self.value)
        codegen.reconstruct(self.step)
        codegen.call(2)


class RepeatVariable(IteratorVariable):
    """itertools.repeat(item[, times]): rebuilt with the repeats left by generated code."""

    def __init__(self, item: VariableTracker, remaining: Optional[int]) -> None:
        super().__init__()
        self.item = item
        self.remaining = remaining  # None: forever

    def describe(self) -> str:
        return "itertools.repeat iterator"

    def python_type(self) -> type:
        return itertools.repeat

    def subvalues(self) -> List[VariableTracker]:
        return [self.item]

    def next_item(self, tx) -> Optional[VariableTracker]:
        if self.remaining is not None:
            if self.remaining <= 0:
                return None
            self.remaining -= 1
        return self.item

    def unpack_var_sequence(self, tx) -> List[VariableTracker]:
        if self.remaining is None:
            unimplemented("unpacking itertools.repeat() with no count, which never ends")
        return super().unpack_var_sequence(tx)

    def reconstruct(self, codegen) -> None:
        codegen.load_function(itertools.repeat)
        codegen.reconstruct(self.item)
        if self.remaining is not None:
            codegen.load_const(self.remaining)
        codegen.call(1 if self.remaining is None else 2)


def _count(tx, start: VariableTracker = ConstantVariable(0), step: VariableTracker = ConstantVariable(1)):
    return CountVariable(start, step)


def _repeat(tx, item: VariableTracker, times: Optional[VariableTracker] = None) -> RepeatVariable:
    return RepeatVariable(item, None if times is None else max(0, _const(times)))


def _cycle(tx, iterable: VariableTracker) -> LazyIterator:
    def steps(it: LazyIterator) -> Iterator[VariableTracker]:
        saved = []
        for item in _pull(it, iterable):
            saved.append(item)
            yield item
        while saved:
            yield from saved

    return _lazy(itertools.cycle, steps)


def _accumulate(tx, iterable: VariableTracker, func: Optional[VariableTracker] = None, *,
                initial: Optional[VariableTracker] = None) -> LazyIterator:
    def steps(it: LazyIterator) -> Iterator[VariableTracker]:
        total = None if initial is None or is_none(initial) else initial
        if total is not None:
            yield total
        for item in _pull(it, iterable):
            if total is None:
                total = item
            elif func is None or is_none(func):
                total = it.tx.call_operator(operator.add, total, item)
            else:
                total = func.call_function(it.tx, [total, item], {})
            yield total

    return _lazy(itertools.accumulate, steps)


def _starmap(tx, func: VariableTracker, iterable: VariableTracker) -> LazyIterator:
    def steps(it: LazyIterator) -> Iterator[VariableTracker]:
        for args in _pull(it, iterable):
            yield func.call_function(it.tx, args.unpack_var_sequence(it.tx), {})

    return _lazy(itertools.starmap, steps)


def _filtering(cls: type, keep: Callable[[bool, bool], bool]) -> Callable:
    """takewhile, dropwhile and filterfalse: `keep(test, dropping)` over the predicate's truth."""

    def make(tx, predicate: VariableTracker, iterable: VariableTracker) -> LazyIterator:
        def steps(it: LazyIterator) -> Iterator[VariableTracker]:
            dropping = True
            for item in _pull(it, iterable):
                test = predicate.call_function(it.tx, [item], {}).truthy(it.tx)
                if cls is itertools.takewhile and not test:
                    return
                dropping = dropping and test
                if keep(test, dropping):
                    yield item

        return _lazy(cls, steps)

    return make


def _compress(tx, data: VariableTracker, selectors: VariableTracker) -> LazyIterator:
    def steps(it: LazyIterator) -> Iterator[VariableTracker]:
        for item, selector in zip(_pull(it, data), _pull(it, selectors)):
            if selector.truthy(it.tx):
                yield item

    return _lazy(itertools.compress, steps)


def _groupby(tx, iterable: VariableTracker, key: Optional[VariableTracker] = None) -> LazyIterator:
    def key_of(it: LazyIterator, item: VariableTracker) -> VariableTracker:
        return item if key is None or is_none(key) else key.call_function(it.tx, [item], {})

    def steps(it: LazyIterator) -> Iterator[VariableTracker]:
        items = _pull(it, iterable)
        pending = next(items, None)
        while pending is not None:
            group_key, group = key_of(it, pending), [pending]
            pending = None
            for item in items:
                if not it.tx.call_operator(operator.eq, key_of(it, item), group_key).truthy(it.tx):
                    pending = item
                    break
                group.append(item)
            group_iterator = ListIteratorVariable(group)
            yield TupleVariable([group_key, group_iterator])
            group_iterator.index = len(group)  # advancing groupby empties the group it gave before

    return _lazy(itertools.groupby, steps)


def _tee(tx, iterable: VariableTracker, n: VariableTracker = ConstantVariable(2)) -> VariableTracker:
    items = _items(tx, iterable)
    return TupleVariable([ListIteratorVariable(list(items)) for _ in range(_const(n))])


def _reduce(tx, func: VariableTracker, iterable: VariableTracker, *initial: VariableTracker) -> VariableTracker:
    items = _items(tx, iterable)
    if initial:
        items = [initial[0], *items]
    if not items:
        unimplemented("functools.reduce() of an empty sequence with no initial value (Python raises)")
    total = items[0]
    for item in items[1:]:
        total = func.call_function(tx, [total, item], {})
    return total


class GetterVariable(VariableTracker):
    """operator.itemgetter(...), attrgetter(...) or methodcaller(...) made while tracing."""

    def __init__(self, kind: type, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> None:
        super().__init__()
        self.kind = kind
        self.args = args
        self.kwargs = kwargs

    def describe(self) -> str:
        return f"operator.{self.kind.__name__} object"

    def python_type(self) -> type:
        return self.kind

    def subvalues(self) -> List[VariableTracker]:
        return [*self.args, *self.kwargs.values()]

    def reconstruct(self, codegen) -> None:
        codegen.load_function(self.kind)
        for value in self.subvalues():
            codegen.reconstruct(value)
        codegen.call(len(self.args) + len(self.kwargs), kw_names=tuple(self.kwargs))

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        if len(args) != 1 or kwargs:
            unimplemented(f"calling {self.describe()} with other than one argument (Python raises)")
        (obj,) = args
        if self.kind is operator.methodcaller:
            name = self.args[0].as_python_constant()
            return obj.call_method(tx, name, list(self.args[1:]), dict(self.kwargs))
        results = []
        for key in self.args:
            if self.kind is operator.itemgetter:
                results.append(tx.call_operator(operator.getitem, obj, key))
                continue
            value = obj
            for part in key.as_python_constant().split("."):
                value = value.var_getattr(tx, part)
            results.append(value)
        return results[0] if len(results) == 1 else TupleVariable(results)


def _getter(kind: type) -> Callable:
    def make(tx, /, *args: VariableTracker, **kwargs: VariableTracker) -> VariableTracker:
        if not args or (kind is not operator.methodcaller and kwargs):
            unimplemented(f"operator.{kind.__name__}() with these arguments (Python raises)")
        return GetterVariable(kind, list(args), kwargs)

    return make


class WrapsVariable(VariableTracker):
    """functools.wraps(wrapped): applied to a function made while tracing, it gives that function
    the names of `wrapped` (generated code applies functools.update_wrapper when rebuilding it)."""

    def __init__(self, wrapped: VariableTracker) -> None:
        super().__init__()
        self.wrapped = wrapped

    def subvalues(self) -> List[VariableTracker]:
        return [self.wrapped]

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        if len(args) != 1 or kwargs or not isinstance(args[0], NestedUserFunctionVariable):
            unimplemented("functools.wraps(...) applied to other than a function made in the compiled code")
        args[0].wrapped = self.wrapped
        return args[0]


def _wraps(tx, wrapped: VariableTracker, /, **kwargs: VariableTracker) -> VariableTracker:
    if kwargs:
        unimplemented("functools.wraps() with assigned= or updated=")
    return WrapsVariable(wrapped)


class CmpToKeyVariable(VariableTracker):
    """functools.cmp_to_key(compare): sorted() and min()/max() compare items through it."""

    def __init__(self, compare: VariableTracker) -> None:
        super().__init__()
        self.compare = compare

    def subvalues(self) -> List[VariableTracker]:
        return [self.compare]

    def sort_key(self, tx, items: List[VariableTracker]) -> Callable[[int], Any]:
        """A key for sorting indices into `items`, each comparison traced."""
        return functools.cmp_to_key(
            lambda i, j: self.compare.call_function(tx, [items[i], items[j]], {}).as_python_constant())


def _count_elements(tx, mapping: VariableTracker, iterable: VariableTracker) -> VariableTracker:
    """collections.Counter's C helper: `mapping[item] = mapping.get(item, 0) + 1` for each item."""
    for item in _items(tx, iterable):
        count = mapping.call_method(tx, "get", [item, ConstantVariable(0)], {})
        mapping.call_method(tx, "__setitem__", [item, tx.call_operator(operator.add, count, ConstantVariable(1))], {})
    return ConstantVariable(None)


def _remade(real: Callable, make: Callable) -> Callable:
    """`make`, whose itertools iterator generated code can make again as `real(*args, **kwargs)`
    while it has not started: Python takes iter() of the arguments when it is made, which is the
    same later but for a dict, set or deque (changed since, its iterator would raise)."""

    @functools.wraps(make)
    def handler(tx, *args: VariableTracker, **kwargs: VariableTracker) -> VariableTracker:
        result = make(tx, *args, **kwargs)
        values = [*args, *kwargs.values()]
        if isinstance(result, LazyIterator) and not any(_is_watched(v) for v in values):
            result.rebuild = Rebuild(real, list(args), dict(kwargs))
        return result

    return handler


def _is_watched(value: VariableTracker) -> bool:
    try:
        return issubclass(value.python_type(), (dict, set, collections.deque))
    except Unsupported:
        return True


# function -> handler(tx, *args, **kwargs) returning the result's tracker
STDLIB_FUNCTIONS: Dict[Any, Callable[..., VariableTracker]] = {
    itertools.chain: _chain,
    itertools.chain.from_iterable: _chain_from_iterable,
    itertools.product: _product,
    itertools.combinations: _single_pool(itertools.combinations),
    itertools.combinations_with_replacement: _single_pool(itertools.combinations_with_replacement),
    itertools.permutations: _single_pool(itertools.permutations),
    itertools.pairwise: _pairwise,
    itertools.zip_longest: _zip_longest,
    itertools.islice: _islice,
    itertools.count: _count,
    itertools.repeat: _repeat,
    itertools.cycle: _cycle,
    itertools.accumulate: _accumulate,
    itertools.starmap: _starmap,
    itertools.takewhile: _filtering(itertools.takewhile, lambda test, dropping: True),
    itertools.dropwhile: _filtering(itertools.dropwhile, lambda test, dropping: not dropping),
    itertools.filterfalse: _filtering(itertools.filterfalse, lambda test, dropping: not test),
    itertools.compress: _compress,
    itertools.groupby: _groupby,
    itertools.tee: _tee,
    functools.reduce: _reduce,
    functools.wraps: _wraps,
    functools.cmp_to_key: lambda tx, compare: CmpToKeyVariable(compare),
    operator.itemgetter: _getter(operator.itemgetter),
    operator.attrgetter: _getter(operator.attrgetter),
    operator.methodcaller: _getter(operator.methodcaller),
    collections._count_elements: _count_elements,
}
STDLIB_FUNCTIONS.update({fn: _remade(fn, make) for fn, make in STDLIB_FUNCTIONS.items()
                         if isinstance(fn, type) and fn.__module__ == "itertools"})
