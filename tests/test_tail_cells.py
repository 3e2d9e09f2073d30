"""Closure cells across inlined frames (issue 30): one cell written through one function and read through
another (existing closures, methods, cell objects, closures made by inlined calls), closures that escape the
frame and are called after it returns, cells around graph breaks, deleted cells, argument cells, class
cells, comprehensions and generators, cells changed from outside between calls. Each shape is compared
with eager over several calls."""
import functools

import pytest
import torch

from break_harness import Cases, compare, compare_runs, rand, run_once
from translator_harness import REFERENCE, CompileCounter, explain, optimize

CASES = Cases()
x3 = lambda: (rand(3),)  # noqa: E731


def check_twins(make, calls=4, mutations=None, breaks=None):
    """`make()` returns (fn, observe) over state of their own: one twin runs eagerly, the other compiled.
    After each call the results and `observe()` agree; `mutations[i](observe)` changes both twins' state
    before call i (through their observe function's attributes). `breaks`: explain's count on a third twin."""
    (eager, eager_seen), (compiled, compiled_seen) = make(), make()
    compiled = optimize(CompileCounter())(compiled)
    for call in range(calls):
        if mutations and call in mutations:
            mutations[call](eager_seen)
            mutations[call](compiled_seen)
        x = rand(3)
        compare_runs(run_once(compiled, (x.clone(),)), run_once(eager, (x.clone(),)), f"call {call}: ")
        compare(compiled_seen(), eager_seen(), f"call {call}, state afterwards")
    if breaks is not None and not REFERENCE:
        fn, _ = make()
        out = explain(fn, rand(3))
        assert out.graph_break_count == breaks, [r.reason for r in out.break_reasons]


# ------------------------------------------------ one real cell, two existing functions closing over it
def _writer_and_reader():
    v = 1

    def bump():
        nonlocal v
        v += 1

    def read():
        return v

    return bump, read


def test_existing_closures_share_a_cell():
    def make():
        bump, read = _writer_and_reader()

        def f(x):
            bump()
            a = read()
            bump()
            return x * a, read()

        return f, read

    check_twins(make, breaks=0)


def test_enclosing_function_cell_written_and_read_by_two_closures():
    def make():
        v = 1.0

        def scale(n):
            nonlocal v
            v = v * n

        def get(t):
            return t + v

        def f(x):
            a = get(x)
            scale(2)
            return a, get(x), v

        return f, lambda: v

    check_twins(make, breaks=0)


def test_methods_of_two_objects_share_a_cell():
    def make():
        count = 1

        class Counter:
            def bump(self):
                nonlocal count
                count += 1

            def value(self):
                return count

        a, b = Counter(), Counter()

        def f(x):
            a.bump()
            y = x * b.value()
            a.bump()
            return y, b.value()

        return f, lambda: count

    check_twins(make, breaks=0)


def test_callee_of_callee_writes_a_cell_a_method_reads():
    def make():
        v = 0

        def inc():
            nonlocal v
            v += 1

        def inc_twice():
            inc()
            inc()

        class Reader:
            def get(self):
                return v

        reader = Reader()

        def f(x):
            inc_twice()
            return x + reader.get(), reader.get()

        return f, lambda: v

    check_twins(make)


def test_cell_object_written_then_closure_reads():
    def make():
        v = 1

        def read():
            return v

        cell = read.__closure__[0]

        def f(x):
            a = read()
            cell.cell_contents = a + 1
            return x * read(), cell.cell_contents, read()

        return f, read

    check_twins(make)


def test_cell_contents_of_closure_read_after_nonlocal_write():
    def make():
        bump, read = _writer_and_reader()

        def f(x):
            bump()
            return x * read.__closure__[0].cell_contents, bump.__closure__[0].cell_contents

        return f, read

    check_twins(make)


def test_cell_changed_from_outside_between_calls():
    def make():
        v = 2.0

        def set_v(n):
            nonlocal v
            v = n

        def f(x):
            return x * v, v

        observe = lambda: v  # noqa: E731
        observe.set_v = set_v
        return f, observe

    check_twins(make, calls=6, mutations={1: lambda o: o.set_v(3.0), 3: lambda o: o.set_v(4),
                                          4: lambda o: o.set_v(torch.ones(3)), 5: lambda o: o.set_v(-0.0)})


def test_list_in_a_foreign_cell_appended():
    def make():
        items = [1]

        def add(n):
            items.append(n)

        def f(x):
            add(len(items))
            return x * len(items), list(items)

        return f, lambda: list(items)

    check_twins(make)


# ------------------------------------------------ closures escaping the frame, called after it returns
def test_escaped_closures_share_the_frame_cell():
    def make():
        kept = {}

        def f(x):
            v = x.sum()

            def put(n):
                nonlocal v
                v = n

            def get():
                return v

            put(x * 2)
            kept["put"], kept["get"] = put, get
            return get()

        def observe():
            before = kept["get"]()
            kept["put"](7)
            return before, kept["get"]()

        return f, observe

    check_twins(make)


def test_closure_stored_twice_is_one_function():
    def make():
        kept = {}

        def f(x):
            v = 1

            def get():
                return v

            kept["a"] = get
            kept["b"] = get
            kept["both"] = [get, get]
            v = 2
            return x * v

        return f, lambda: (kept["a"] is kept["b"], kept["both"][0] is kept["a"], kept["a"]())

    check_twins(make, breaks=0)


def _make_counter():
    c = 0

    def inc():
        nonlocal c
        c += 1
        return c

    return inc


def _make_pair(start):
    v = start

    def put(n):
        nonlocal v
        v = n

    def get():
        return v

    return put, get


def test_closure_made_by_an_inlined_call_escapes():
    def make():
        kept = {}

        def f(x):
            inc = _make_counter()
            inc()
            n = inc()
            kept["inc"] = inc
            return x * n

        return f, lambda: (kept["inc"](), kept["inc"]())

    check_twins(make, breaks=0)


def test_closures_made_by_an_inlined_call_share_their_new_cell():
    def make():
        kept = {}

        def f(x):
            put, get = _make_pair(x)
            put(x + 1)
            kept["put"], kept["get"] = put, get
            return get() * 2

        def observe():
            before = kept["get"]()
            kept["put"](5)
            return before, kept["get"]()

        return f, observe

    check_twins(make, breaks=0)


def test_closures_made_by_an_inlined_call_cross_a_break():
    def make():
        kept = {}

        def f(x):
            put, get = _make_pair(x)
            put(x + 1)
            print("break")
            a = get()
            put(a * 2)
            kept["get"] = get
            return a, get()

        return f, lambda: kept["get"]()

    check_twins(make)


def _counting(fn):
    calls = 0

    @functools.wraps(fn)
    def wrapper(*args):
        nonlocal calls
        calls += 1
        return fn(*args) * calls

    return wrapper


def test_wrapper_made_by_a_decorator_escapes():
    def make():
        kept = {}

        def f(x):
            wrapped = _counting(lambda t: t + 1)
            a = wrapped(x)
            kept["wrapped"] = wrapped
            return a, wrapped(x)

        return f, lambda: (kept["wrapped"](1), kept["wrapped"].__name__)

    check_twins(make, breaks=0)


def test_closure_over_a_foreign_cell_escapes():
    def make():
        v = 1

        def bump():
            nonlocal v
            v += 1

        def make_reader():
            def read():
                return v

            return read

        kept = {}

        def f(x):
            bump()
            kept["read"] = make_reader()
            return x * kept["read"]()

        def observe():
            before = kept["read"]()
            bump()
            return before, kept["read"]()

        return f, observe

    check_twins(make)


def _make_recursive(step):
    def rec(n, t):
        return t if n == 0 else rec(n - 1, t + step)

    return rec


def test_recursive_closures_escape():
    """A function closing over its own cell: the cell is filled before anything is built over it."""
    def make():
        kept = {}

        def f(x):
            def down(n, t):
                return t if n == 0 else down(n - 1, t * 2)

            kept["down"] = down
            kept["up"] = _make_recursive(1)
            return down(2, x) + kept["up"](2, x)

        return f, lambda: (kept["down"](3, 1), kept["up"](3, 1))

    check_twins(make, breaks=0)


def test_argument_cell_read_before_rebinding_escapes():
    def make():
        kept = {}

        def f(x, k=2):
            old = k

            def both():
                return old, k

            k = k + 5
            kept["both"] = both
            return x * k

        return f, lambda: kept["both"]()

    check_twins(make, breaks=0)


def test_closure_escaping_before_a_break_sees_writes_after_it():
    def make():
        kept = {}

        def f(x):
            v = 1

            def get():
                return v

            kept["get"] = get
            v = 2
            print("break")
            v = v + 3
            return x * get()

        return f, lambda: kept["get"]()

    check_twins(make)


def test_closure_made_in_one_compiled_frame_called_in_another():
    def run(compiled):
        kept = {}

        def maker(x):
            v = 1

            def inc():
                nonlocal v
                v += 1

            def get(t):
                return t * v

            kept["inc"], kept["get"] = inc, get
            return x + 1

        def user(x):
            kept["inc"]()
            a = kept["get"](x)
            kept["inc"]()
            return a, kept["get"](x)

        if compiled:
            maker, user = optimize(CompileCounter())(maker), optimize(CompileCounter())(user)
        x = torch.ones(2)
        results = []
        for _ in range(3):
            maker(x)
            results += [user(x), user(x), kept["get"](x)]
        return results

    compare(run(True), run(False))


# ------------------------------------------------ cells of the frame itself
@CASES.case(x3, graphs=None)
def cell_written_by_closure_read_by_local_class_method(x):
    v = 0

    class Reader:
        def get(self):
            return v

    def inc():
        nonlocal v
        v += 1

    reader = Reader()
    inc()
    a = reader.get()
    inc()
    return x + a, reader.get()


@CASES.case(x3, graphs=1, breaks=0)
def cell_written_in_callee_of_callee(x):
    v = 1

    def w():
        nonlocal v
        v += 1

    def ww():
        w()
        w()

    def r():
        return v

    ww()
    return x * r(), v


@CASES.case(x3, graphs=1, breaks=0)
def cell_three_functions_deep(x):
    v = 1

    def a():
        def b():
            def c():
                nonlocal v
                v += 1
                return v
            return c()
        return b()

    r = a()
    return x * r, v, a()


@CASES.case(x3, graphs=None, breaks=1)
def cell_written_before_a_break_read_after(x):
    v = 1

    def w():
        nonlocal v
        v = v + 10

    def r(t):
        return t + v

    w()
    print("break")
    a = r(x)
    w()
    return a, r(x)


@CASES.case(x3, graphs=2, breaks=1)
def cell_accumulated_in_a_loop_then_a_break(x):
    total = 0

    def acc(t):
        nonlocal total
        total = total + t

    for i in range(3):
        acc(x * i)
    print("break")
    acc(x)
    return total


@CASES.case(lambda: (rand(3), 2), lambda: (rand(3), 3), lambda: (rand(3), 2.5), graphs=1)
def argument_cell(x, k):
    def r(t):
        return t * k

    def w():
        nonlocal k
        k = k + 1

    w()
    return r(x), k


@CASES.case(x3, graphs=1, breaks=0)
def argument_cell_of_an_inlined_function(x):
    def mk(k):
        def g(t):
            return t * k
        k = k + 1
        return g(x)

    return mk(2), mk(3)


@CASES.case(x3, graphs=None)
def deleted_cell_read_by_a_closure(x):
    v = x + 1

    def r():
        return v

    a = r()
    del v
    try:
        r()
    except NameError as e:
        return a, str(e)
    return a, None


@CASES.case(x3, graphs=None)
def cell_deleted_by_an_inlined_function(x):
    v = x

    def d():
        nonlocal v
        del v

    def r():
        return v

    d()
    try:
        return r()
    except NameError as e:
        return str(e)


@CASES.case(x3, graphs=None)
def cell_deleted_then_bound_again(x):
    v = 1

    def r():
        return v

    del v
    v = 3
    return x * r()


@CASES.case(x3, graphs=None)
def cell_read_before_it_is_bound(x):
    def r():
        return late

    try:
        r()
    except NameError as e:
        msg = str(e)
    late = x + 1
    return r(), msg


@CASES.case(x3, graphs=1, breaks=0)
def lambda_default_against_cell(x):
    k = 2
    g = lambda t, k=k: t * k  # noqa: E731
    k = 3
    h = lambda t: t * k  # noqa: E731
    return g(x), h(x)


@CASES.case(x3, graphs=1, breaks=0)
def recursive_inner_function(x):
    def fact(k):
        return 1 if k <= 1 else k * fact(k - 1)

    return x * fact(4)


@CASES.case(x3, graphs=1, breaks=0)
def list_in_a_cell_appended_by_a_closure(x):
    items = []

    def add(t):
        items.append(t)

    add(x)
    add(x + 1)
    return len(items), items


@CASES.case(x3, graphs=1, breaks=0)
def cell_list_mutated_then_rebound(x):
    v = [x]

    def r():
        return v[0]

    v[0] = x * 2
    v = [x * 3]
    return r()


@CASES.case(x3, graphs=1, breaks=0)
def comprehension_of_lambdas_over_a_cell(x):
    v = 1

    def w():
        nonlocal v
        v = v + 1

    fs = [lambda: v for _ in range(2)]
    w()
    return [g() for g in fs], x * v


@CASES.case(x3, graphs=None)
def class_body_reads_a_cell(x):
    v = 5

    class K:
        a = v

        def m(self):
            return v

    return x * K.a, K().m()


class _Base:
    def value(self, t):
        return t + 1


class _Derived(_Base):
    def value(self, t):
        return super().value(t) * 2


_DERIVED = _Derived()


@CASES.case(x3, graphs=1, breaks=0)
def class_cell_of_zero_argument_super(x):
    return _DERIVED.value(x)


@CASES.case(x3, graphs=None)
def class_cell_of_a_class_made_here(x):
    class Sub(_Base):
        def value(self, t):
            return super().value(t) + 1

    return Sub().value(x)


@pytest.mark.parametrize("case", CASES.params())
def test_cells(case):
    case.run()


# ------------------------------------------------ generators over a cell
def _generator_reads_a_cell_between_items(x):
    v = 1

    def double():
        nonlocal v
        v = v * 2

    out = []
    for value in (v + 0 for _ in range(3)):
        out.append(value)
        double()
    return x, out


def _generator_made_before_a_cell_write(x):
    v = 2

    def bump():
        nonlocal v
        v += 1

    gen = (x * v for _ in range(2))
    bump()
    return list(gen)


@pytest.mark.parametrize("fn", [_generator_reads_a_cell_between_items, _generator_made_before_a_cell_write])
def test_generator_over_a_cell(fn):
    x = rand(3)
    compare_runs(run_once(optimize(CompileCounter())(fn), (x.clone(),)), run_once(fn, (x.clone(),)))
