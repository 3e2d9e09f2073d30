"""Sets iterate in the order of their hash tables, which follows their history: equal sets can iterate
differently ({1, 9} and {9, 1} collide in an 8-slot table), and a set built from values iterates in
hash order, not insertion order. A compiled call must iterate every set as eager does: sets made in the
frame, caller's sets and frozensets (arguments, globals, closure cells), on first and later calls."""
import pytest
import torch

from break_harness import compare, compare_runs, rand, run_once
from translator_harness import REFERENCE, CompileCounter, optimize

# torch._dynamo 2.13 iterates these sets in another order than eager (checked in reference mode).
pytestmark = pytest.mark.xfail(REFERENCE, reason="torch._dynamo iterates sets in insertion order", strict=True)

COLLIDING = [(1, 9), (9, 1), (9, 17, 1), (1, 17, 9), ("b", "a", "zz", "q")]


def _check(fn, argument_sets, calls=2):
    compiled = optimize(CompileCounter())(fn)
    for args in argument_sets:
        for call in range(calls):
            x = rand(2)
            compare_runs(run_once(compiled, (x.clone(), *args)), run_once(fn, (x.clone(), *args)),
                         f"args {args!r}, call {call}: ")


def _from_order(order, kind=set):
    made = kind() if kind is set else set()
    for value in order:
        made.add(value)
    return made if kind is set else frozenset(made)


@pytest.mark.parametrize("kind", [set, frozenset])
def test_caller_set_iterated_in_its_own_order(kind):
    def f(x, s):
        return x + 1, list(s), [v for v in s], tuple(sorted(s, key=str))

    _check(f, [(_from_order(order, kind),) for order in COLLIDING])


def test_global_set_rebound_to_an_equal_set_in_another_order():
    namespace = {}
    exec("def f(x):\n    return x + len(S), list(S)\n", namespace)
    f = namespace["f"]
    compiled = optimize(CompileCounter())(f)
    for order in [(1, 9), (9, 1), (1, 9)]:
        namespace["S"] = _from_order(order)
        x = rand(2)
        compare_runs(run_once(compiled, (x.clone(),)), run_once(f, (x.clone(),)), f"S from {order}: ")


def test_cell_holding_a_set_rebound():
    def make():
        s = {1, 9}

        def f(x):
            return x * len(s), list(s)

        def rebind(order):
            nonlocal s
            s = _from_order(order)
        return f, rebind

    (eager, eager_rebind), (compiled, compiled_rebind) = make(), make()
    compiled = optimize(CompileCounter())(compiled)
    for order in [(1, 9), (9, 1), (17, 9, 1)]:
        eager_rebind(order)
        compiled_rebind(order)
        x = rand(2)
        compare_runs(run_once(compiled, (x.clone(),)), run_once(eager, (x.clone(),)), f"cell from {order}: ")


def test_sets_made_in_the_frame_iterate_in_hash_order():
    def f(x, n):
        built = set([n, 1, 100, 33])
        literal = {n, 9, 1}
        comprehension = {v * 8 + 1 for v in range(4)}
        grown = set()
        for v in (n, 17, 9, 1):
            grown.add(v)
        grown.discard(17)
        grown.add(25)
        return x + 1, list(built), list(literal), list(comprehension), list(grown), list(built | literal), \
            list(built - {1}), grown.pop(), list(grown)

    _check(f, [(7,), (9,), (1,), (33,)])


def test_set_mutated_in_the_frame_and_seen_by_the_caller():
    def f(x, s):
        s.discard(1)
        s.add(17)
        s |= {25, 9}
        return x + 1, list(s)

    compiled = optimize(CompileCounter())(f)
    for order in [(1, 9), (9, 1), (1, 2, 3)]:
        eager_set, compiled_set = _from_order(order), _from_order(order)
        x = rand(2)
        compare_runs(run_once(compiled, (x.clone(), compiled_set)), run_once(f, (x.clone(), eager_set)),
                     f"s from {order}: ")
        compare(set(compiled_set), set(eager_set), "the caller's set")
