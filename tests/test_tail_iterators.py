"""Iterators on the tail (issue 30): generators and iterators that read the container the frame
extends or mutates (CPython's order of reads and writes), builtin iterators escaping the frame (the
exact type eager gives, at the position eager leaves them), and iterators passed in and advanced.
Each case is compared with eager over several calls with changed inputs (break_harness)."""
import collections
import itertools

import pytest
import torch

from break_harness import Cases, check_breaks, rand
from translator_harness import REFERENCE, optimize, fresh_dynamo  # noqa: F401

CASES = Cases()
x2 = lambda: (rand(2),)  # noqa: E731
TORCH_TUPLE_ITER = "torch._dynamo rebuilds a list iterator (or list_reverseiterator) as a tuple_iterator"
TORCH_NO_RAISE = "torch._dynamo does not raise 'mutated during iteration' here"


def lists(*shapes):
    return [lambda s=s: (rand(2), list(s)) for s in shapes]


# ------------------------------------------------- containers extended from what reads them
@CASES.case(*lists([1, 2, 3], [5], [1, 2, 3, 4, 5]), graphs=1)
def extend_with_genexpr_over_itself(x, lst):
    lst.extend(v * 2 for v in lst if len(lst) < 10)
    return x * len(lst), lst


@CASES.case(*lists([1, 2, 3], [4, 1]), graphs=1)
def inplace_add_genexpr_over_itself(x, lst):
    lst += (v + 1 for v in lst if len(lst) < 7)
    return x * len(lst), lst


@CASES.case(*lists([1, 2, 3], [7]), graphs=1)
def extend_with_itself_snapshots(x, lst):
    lst.extend(lst)
    lst += lst
    return x * len(lst), lst


@CASES.case(*lists([1, 2, 3], [2, 4]), graphs=1)
def extend_with_islice_over_itself(x, lst):
    lst.extend(itertools.islice(lst, 5))
    return x * len(lst), lst


@CASES.case(*lists([1, 2, 3], [9, 8, 7, 6]), graphs=1)
def extend_with_map_over_itself(x, lst):
    lst.extend(map(lambda v: v + len(lst), itertools.islice(lst, 4)))
    return x * lst[-1], lst


def _doubled_while_short(lst):
    for v in lst:
        if len(lst) >= 9:
            return
        yield v * 2


@CASES.case(*lists([1, 2, 3], [1]), graphs=1)
def extend_with_generator_function_over_itself(x, lst):
    lst.extend(_doubled_while_short(lst))
    return x * len(lst), lst


@CASES.case(*lists([1, 2, 3], [4, 5]), graphs=1)
def loop_appends_to_what_its_generator_reads(x, lst):
    for v in (w + 1 for w in lst if len(lst) < 8):
        lst.append(v)
    return x * len(lst), lst


@CASES.case(*lists([1, 2, 3], [3, 1]), graphs=1)
def snapshots_of_a_generator_over_itself(x, lst):
    a = list(v for v in lst if len(lst) < 10)
    b = sorted(v for v in lst)
    lst[:] = (v * 3 for v in lst if len(lst) < 10)
    c = tuple(v for v in lst)
    return x * len(lst), lst, a, b, c


@CASES.case(*lists([1, 2, 3], [6]), graphs=1)
def generator_made_before_the_list_changes(x, lst):
    gen = (v * 2 for v in lst)
    lst.append(10)
    first = next(gen)
    lst.append(20)
    return x * first, lst, list(gen)


@CASES.case(*lists([1, 2], [5, 6, 7]))
def generator_prints_between_consumer_prints(x, lst):
    def gen():
        for v in lst:
            print("gen", v)
            yield v

    for v in gen():
        print("loop", v)
    return x + len(lst)


@CASES.case(*lists([1, 2, 3], [4]), reference_skip=TORCH_NO_RAISE)
def deque_extendleft_over_itself(x, lst):
    d = collections.deque(lst)
    d.extendleft(v * 2 for v in d if len(d) < 8)
    return x * len(d), list(d)


@CASES.case(*lists([1, 2, 3], [4]))
def deque_extend_over_itself(x, lst):
    d = collections.deque(lst)
    d.extend(v for v in d)
    return x * len(d), list(d)


@CASES.case(*lists([1, 2, 3], [4]), graphs=1)
def deque_extend_with_itself_copies(x, lst):
    d = collections.deque(lst)
    d.extend(d)
    d.extendleft(d)
    return x * len(d), list(d)


@CASES.case(*lists([1, 2, 3], [4]))
def set_update_over_itself(x, lst):
    s = set(lst)
    s.update(v * 10 for v in s)
    return x * len(s), sorted(s)


@CASES.case(*lists([1, 2, 3], [4]), reference_skip=TORCH_NO_RAISE)
def dict_update_over_itself(x, lst):
    d = dict.fromkeys(lst, 0)
    d.update((k * 10, v) for k, v in d.items())
    return x * len(d), d


# --------------------------------------------------------------- generators run as they are consumed
@CASES.case(*lists([1, 2, 3], [4]), graphs=1)
def generator_never_consumed_runs_nothing(x, lst):
    g = (print("made", v) for v in lst)
    h = (lst.append(v) for v in lst)
    return x + len(lst)


@CASES.case(*lists([1, 2, 3], [5, 6]), graphs=1)
def generator_writes_what_the_consumer_reads(x, lst):
    log = []

    def gen():
        for v in lst:
            log.append(("gen", v, len(log)))
            yield v

    for v in gen():
        log.append(("use", v, len(log)))
    return x + len(log), log


@CASES.case(*lists([1, 2, 3], [5]), graphs=1)
def generator_reads_a_local_rebound_later(x, lst):
    n = 1
    g = (v * n for v in lst)
    n = 10
    return x * n, list(g)


@CASES.case(*lists([1, 2, 3], [5, 6, 7, 8]), graphs=1)
def generator_pulled_by_zip_twice(x, lst):
    g = (v for v in lst)
    return x + 1, list(zip(g, g))


@CASES.case(*lists([1, 2, 3], [2]), graphs=1)
def generators_nested_read_the_growing_list(x, lst):
    inner = (v + 1 for v in lst)
    outer = (w * len(lst) for w in inner)
    res = []
    for w in outer:
        res.append(w)
        if len(lst) < 6:
            lst.append(w)
    return x + 1, res, lst


@CASES.case(*lists([1, 2, 3], [4]), graphs=1, reference_skip="torch._dynamo loses the value of `yield from`")
def yield_from_passes_the_return_value(x, lst):
    def inner():
        for v in lst:
            yield v
        return len(lst)

    def outer():
        n = yield from inner()
        lst.append(n)
        yield n

    return x + 1, list(outer()), lst


@CASES.case(*lists([1, 2, 3], [4]))
def generator_across_a_graph_break(x, lst):
    g = (v * 2 for v in lst)
    a = next(g)
    print("break")
    lst.append(7)
    return x * a, list(g)


@CASES.case(*lists([1, 2, 3], [4]), reference_skip="torch._dynamo does not run a dropped generator's finally")
def generator_left_in_a_try_block(x, lst):
    def gen():
        try:
            for v in lst:
                yield v
        finally:
            print("closed")

    it = gen()
    return x * next(it)


class _Bag:
    def __init__(self, items):
        self.items = items

    def __iter__(self):
        for v in self.items:
            yield v


class _Box:
    def __init__(self, items):
        self.items = items

    def __iter__(self):
        return iter(self.items)


@CASES.case(*lists([1, 2, 3], [4]), graphs=1)
def user_object_iterators_read_as_advanced(x, lst):
    it = iter(_Bag(lst))
    first = next(it)
    lst.append(10)
    box = iter(_Box(lst))
    lst.append(11)
    return x * first, list(it), list(box)


@CASES.case(*lists([1, 2, 3]))
def len_of_an_iterator_raises(x, lst):
    return x + len(iter(lst))


# --------------------------------------------------------------- builtin iterators escaping
def _described(value):
    """What eager code after the call sees of a returned iterator: its type, then its items."""
    if isinstance(value, tuple):
        return tuple(_described(v) for v in value)
    if hasattr(type(value), "__next__") or isinstance(value, (type({}.keys()), type({}.values()),
                                                             type({}.items()))):
        bounded = itertools.islice(value, 6)  # itertools.count() never ends
        return type(value), [_described(v) for v in bounded], [_described(v) for v in bounded]
    return value


ESCAPING = []


def escaping(*factories, graphs=1, reference_skip=None):
    def deco(fn):
        marks = [pytest.mark.skip(reason=f"reference (torch) differs: {reference_skip}")] if (
            reference_skip and REFERENCE) else []
        ESCAPING.append(pytest.param(fn, factories or (x2,), graphs, id=fn.__name__, marks=marks))
        return fn

    return deco


@escaping()
def escape_map(x):
    return x + 1, map(lambda a, b: a + b, [1, 2], [3, 4]), map(str, (1, 2))


@escaping()
def escape_filter(x):
    return x + 1, filter(None, [0, 1, 2]), filter(lambda v: v > 1, (1, 2, 3))


@escaping()
def escape_zip_and_enumerate(x):
    return x + 1, zip([1, 2], "ab"), zip([1], [2], strict=True), enumerate([5, 6], 3)


@escaping(reference_skip=TORCH_TUPLE_ITER)
def escape_reversed(x):
    return x + 1, reversed([1, 2]), reversed((3, 4)), reversed(range(3)), reversed({1: 2, 3: 4}), reversed("ab")


@escaping(reference_skip=TORCH_TUPLE_ITER)
def escape_iter_of_builtins(x):
    return (x + 1, iter([1, 2]), iter((1, 2)), iter("ab"), iter("é"), iter(range(3)),
            iter(range(2 ** 70, 2 ** 70 + 2)), iter(b"ab"), iter(frozenset({1})))


@escaping()
def escape_dict_views_and_iterators(x):
    d = {"a": 1, "b": 2}
    return x + 1, d.keys(), d.values(), d.items(), iter(d), iter(d.keys()), iter(d.values()), iter(d.items())


@escaping()
def escape_itertools(x):
    return (x + 1, itertools.count(3), itertools.repeat(2, 3), itertools.chain([1], (2,)),
            itertools.islice([1, 2, 3], 2), itertools.product([1, 2], "a"), itertools.accumulate([1, 2, 3]),
            itertools.zip_longest([1], [2, 3]))


@escaping(*lists([1, 2, 3], [4]))
def escape_more_itertools(x, lst):
    return (x + 1, itertools.combinations(lst, 2), itertools.permutations(lst, 2), itertools.pairwise(lst),
            itertools.starmap(pow, [(2, 3)]), itertools.cycle(lst), itertools.takewhile(bool, lst),
            itertools.compress(lst, [1, 0, 1]), itertools.product(lst, repeat=2))


@escaping(*lists([1, 2, 3], [4]), graphs=None, reference_skip="torch._dynamo returns a tuple_iterator for islice")
def escape_itertools_over_a_dict_changed_after(x, lst):
    d = dict.fromkeys(lst)
    c = itertools.islice(d, 2)
    d["new"] = 0
    return x + 1, c


@escaping()
def escape_itertools_count_advanced(x):
    c = itertools.count(3)
    next(c)
    r = itertools.repeat("a", 4)
    next(r)
    return x + 1, itertools.islice(c, 2), r


@escaping()
def escape_generators(x):
    def gen(n):
        yield from range(n)

    return x + 1, gen(2), (v * 2 for v in [1, 2])


@escaping(*lists([1, 2, 3], [4]))
def escape_user_object_iterators(x, lst):
    return x + 1, iter(_Bag(lst)), iter(_Box(lst))


@escaping(*lists([1, 2, 3], [4]), graphs=None)
def escape_started_generator(x, lst):
    g = (v * 2 for v in lst)
    next(g)
    return x + 1, g


_MODEL = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1))


@escaping()
def escape_module_tree_generators(x):
    params = _MODEL.parameters()
    next(params)
    return x + 1, params, _MODEL.named_modules(), _MODEL.buffers()


@escaping(*lists([1, 2, 3], [4, 5, 6, 7]))
def escape_partly_consumed(x, lst):
    its = [iter(lst), iter(tuple(lst)), reversed(lst), iter(range(len(lst))), map(abs, lst), filter(None, lst),
           zip(lst, lst), enumerate(lst), iter(dict.fromkeys(lst)), iter("abcd")]
    total = 0
    for it in its:
        total += len(str(next(it)))
    return (x * total, *its)


@escaping(*lists([1, 2, 3], [4]), reference_skip=TORCH_TUPLE_ITER)
def escape_exhausted_list_iterator_stays_exhausted(x, lst):
    it = iter(lst)
    for _ in it:
        pass
    lst.append(9)
    return x + 1, it, lst


@escaping(*lists([1, 2, 3], [4]), reference_skip=TORCH_TUPLE_ITER)
def escape_iterator_over_list_changed_after(x, lst):
    it = iter(lst)
    next(it)
    lst.append(5)
    rev = reversed(lst)
    lst.append(6)
    return x + 1, it, rev


@escaping(*lists([1, 2, 3], [4]), graphs=None)
def escape_dict_iterator_after_the_dict_grew(x, lst):
    d = dict.fromkeys(lst)
    it = iter(d)
    d["new"] = 1
    return x + 1, it


@escaping(graphs=None, reference_skip=TORCH_TUPLE_ITER)
def escape_same_iterator_twice(x):
    it = iter([1, 2, 3])
    return x + 1, it, it


@pytest.mark.parametrize("fn, factories, graphs", ESCAPING)
def test_escaping_iterator(fn, factories, graphs):
    def eager(*args):
        return _described(fn(*args))

    def compile(_, counter):
        compiled_fn = optimize(counter)(fn)
        return lambda *args: _described(compiled_fn(*args))

    check_breaks(eager, *factories, graphs=graphs, repeat=3, compile=compile)


# --------------------------------------------------------------- iterators passed in
def _advance(x, it):
    a = next(it)
    b = next(it, -1)
    return x * a + b


def _loop_part(x, it):
    for v in it:
        if v > 2:
            break
        x = x + v
    return x


def _enumerated(x, it):
    e = enumerate(it)
    i, v = next(e)
    return x + i + v


@pytest.mark.parametrize("inner", [_advance, _loop_part, _enumerated])
@pytest.mark.parametrize("make", [iter, lambda s: iter(tuple(s)), reversed, lambda s: (v for v in s),
                                  lambda s: map(abs, s)], ids=["list", "tuple", "reversed", "genexpr", "map"])
def test_iterator_argument_advanced(inner, make):
    def wrapper(compiled_inner):
        def run(x, lst):
            it = make(lst)
            return compiled_inner(x, it), type(it), list(it)

        return run

    def compile(_, counter):
        return wrapper(optimize(counter)(inner))

    check_breaks(wrapper(inner), *lists([1, 2, 3, 4], [5, 1], [1]), repeat=3, compile=compile)


@pytest.mark.parametrize("case", CASES.params())
def test_case(case):
    case.run()
