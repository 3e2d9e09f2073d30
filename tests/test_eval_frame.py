"""The C core driven by hand-written frame callbacks: cache, skip, run-only, signatures, threads."""
import asyncio
import sys
import threading
import warnings

import bytecode
import pytest

import minidynamo
from minidynamo import GuardedCode, _C
from minidynamo.eval_frame import optimize_with_callback


class Recorder:
    """A frame callback returning `code_for(frame)` guarded by `check(locals)`."""

    def __init__(self, code_for=None, check=None, only=None):
        self.code_for = code_for or (lambda frame: frame.f_code)
        self.check = check or (lambda L: True)
        self.only = only
        self.frames = []

    def __call__(self, frame):
        if self.only is not None and frame.f_code.co_name not in self.only:
            return None
        self.frames.append(frame)
        return GuardedCode(self.code_for(frame), self.check)

    @property
    def names(self):
        return [f.f_code.co_name for f in self.frames]


def with_const(fn, old, new):
    """fn's code with one constant replaced: a transformed code with the same layout."""
    code = bytecode.Bytecode.from_code(fn.__code__)
    for i, ins in enumerate(code):
        # 3.14 loads 0..255 with LOAD_SMALL_INT, which has no entry in co_consts
        if isinstance(ins, bytecode.Instr) and ins.name in ("LOAD_CONST", "LOAD_SMALL_INT") and ins.arg == old:
            code[i] = bytecode.Instr("LOAD_CONST", new, lineno=ins.lineno)
    return code.to_code()


def add_one(x):
    return x + 1


def test_transformed_code_runs_instead_of_original():
    rec = Recorder(lambda frame: with_const(add_one, 1, 100))
    fn = optimize_with_callback(rec)(add_one)
    assert fn(1) == 101
    assert fn(2) == 102
    assert add_one(1) == 2, "the original stays untouched outside the context"
    assert rec.names == ["add_one"]
    assert len(_C.get_cache_entries(add_one.__code__)) == 1


def test_hits_and_misses_counted():
    rec = Recorder()
    fn = optimize_with_callback(rec)(add_one)
    _C.reset_stats()
    for i in range(5):
        assert fn(i) == i + 1
    stats = _C.stats()
    assert (stats["compiles"], stats["misses"], stats["hits"]) == (1, 1, 4)


def test_failed_check_recompiles_and_hit_moves_to_front():
    def by_type(frame):
        kind = type(frame.f_locals["x"])
        return GuardedCode(frame.f_code, lambda L: type(L["x"]) is kind)

    fn = optimize_with_callback(by_type)(add_one)
    fn(1)
    fn(1.5)
    entries = _C.get_cache_entries(add_one.__code__)
    assert len(entries) == 2
    int_check = entries[1][0]
    assert int_check({"x": 3}) and not int_check({"x": 3.0})
    assert fn(2) == 3
    assert _C.get_cache_entries(add_one.__code__)[0][0] is int_check, "hit moved to front"
    assert _C.stats()["compiles"] == 2


def test_cache_size_limit_warns_once_and_runs_unconverted():
    seen = []

    def exact(frame):
        value = frame.f_locals["x"]
        seen.append(value)
        return GuardedCode(with_const(add_one, 1, 1000), lambda L: L["x"] == value)

    old = minidynamo.config.cache_size_limit
    minidynamo.config.cache_size_limit = 3
    try:
        fn = optimize_with_callback(exact)(add_one)
        assert [fn(i) for i in range(3)] == [1000, 1001, 1002]
        with pytest.warns(RuntimeWarning, match=r"'add_one' .* cache size limit \(3 entries\)"):
            assert fn(3) == 4
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert fn(4) == 5, "one warning only"
        assert fn(1) == 1001, "existing entries still hit"
        assert seen == [0, 1, 2]
        assert _C.stats()["limit_hits"] == 2
    finally:
        minidynamo.config.cache_size_limit = old


def test_callback_returning_none_skips_code_until_reset():
    calls = []

    def never(frame):
        calls.append(frame.f_code.co_name)
        return None

    fn = optimize_with_callback(never)(add_one)
    assert fn(1) == 2 and fn(2) == 3
    assert calls == ["add_one"] and _C.is_skipped(add_one.__code__)
    minidynamo.reset()
    assert not _C.is_skipped(add_one.__code__)
    fn(3)
    assert calls == ["add_one", "add_one"]


def test_skip_code_is_permanent():
    def skipped(x):
        return x

    _C.skip_code(skipped.__code__)
    rec = Recorder()
    optimize_with_callback(rec)(skipped)(1)
    minidynamo.reset()
    optimize_with_callback(rec)(skipped)(1)
    assert rec.frames == []


def test_run_only_uses_cache_but_never_compiles():
    rec = Recorder(lambda frame: with_const(add_one, 1, 50))

    def two(x):
        return x * 2

    with minidynamo.run():
        assert add_one(1) == 2
    optimize_with_callback(rec)(add_one)(1)
    assert rec.names == ["add_one"]
    fast = minidynamo.run(add_one)
    assert fast(1) == 51, "cached code runs"
    assert minidynamo.run(two)(3) == 6
    assert rec.names == ["add_one"], "nothing new compiled"
    assert _C.get_cache_entries(two.__code__) == []


def test_nested_contexts_restore_previous_callback():
    outer, inner = Recorder(), Recorder()

    def g(x):
        return x

    def h(x):
        return x

    with optimize_with_callback(outer):
        assert _C.get_eval_frame() is outer
        with optimize_with_callback(inner):
            g(1)
        assert _C.get_eval_frame() is outer
        h(1)
    assert _C.get_eval_frame() is None
    assert inner.names == ["g"] and outer.names == ["h"]


def test_disable_turns_conversion_off_inside():
    rec = Recorder(only=("top", "leaf"))

    def leaf(x):
        return x + 1

    quiet = minidynamo.disable(leaf)

    def top(x):
        return quiet(x) + leaf(x)

    with optimize_with_callback(rec):
        assert quiet(1) == 2
        assert rec.names == []
        assert top(1) == 4
    assert rec.names == ["top", "leaf"], "only the direct call of leaf is converted"
    assert minidynamo.eval_frame.is_disabled(quiet)
    assert quiet.__name__ == "leaf" and quiet.__wrapped__ is leaf


def test_callback_not_reentered_and_inner_frames_convert():
    def helper(x):
        return x * 3

    def callback(frame):
        helper(0)  # runs unconverted: the callback is never re-entered
        names.append(frame.f_code.co_name)
        return GuardedCode(frame.f_code, lambda L: helper(1) == 3)

    names = []

    def top(x):
        return helper(x) + 1

    fn = optimize_with_callback(callback)(top)
    assert fn(2) == 7 and fn(2) == 7
    assert names == ["top", "helper"]


def test_hook_installed_only_while_a_callback_is_set():
    assert not _C.hook_installed()
    with optimize_with_callback(Recorder()):
        assert _C.hook_installed()
        with minidynamo.disable():
            assert not _C.hook_installed()
        assert _C.hook_installed()
    assert not _C.hook_installed()
    with minidynamo.run():
        assert _C.hook_installed()
    assert not _C.hook_installed()


def test_bad_transformed_code_is_rejected():
    def other(y):
        return y

    with pytest.raises(ValueError, match="same order"):
        optimize_with_callback(Recorder(lambda frame: other.__code__))(add_one)(1)
    with pytest.raises(TypeError, match="code object"):
        optimize_with_callback(Recorder(lambda frame: "nope"))(add_one)(1)
    with pytest.raises(TypeError):
        _C.set_eval_frame(42)


def test_exceptions_from_check_fn_and_callback_propagate():
    def boom(frame):
        raise KeyError("from callback")

    with pytest.raises(KeyError, match="from callback"):
        optimize_with_callback(boom)(add_one)(1)

    def bad_guard(L):
        raise ZeroDivisionError("guard")

    fn = optimize_with_callback(Recorder(check=bad_guard))(add_one)
    fn(1)  # first call compiles without checking
    with pytest.raises(ZeroDivisionError, match="guard"):
        fn(1)


# ---- every argument shape, closures and cells ----


def positional(a, b):
    return (a, b)


def defaults(a, b=2, c=3):
    return (a, b, c)


def kwonly(a, *, k, m=5):
    return (a, k, m)


def star(a, *args, **kwargs):
    return (a, args, sorted(kwargs.items()))


def posonly(a, b, /, c):
    return (a, b, c)


def everything(a, b=1, /, c=2, *args, d, e=4, **kw):
    return (a, b, c, args, d, e, sorted(kw.items()))


def arg_is_cell(x):
    def get():
        return x

    x = x + 1
    return get()


def make_counter():
    count = 0

    def bump(step=1):
        nonlocal count
        count += step
        return count

    return bump


class Base:
    def who(self):
        return "base"


class Child(Base):
    def who(self):
        return "child<" + super().who() + ">"


SIGNATURE_CASES = [
    (positional, (1, 2), {}),
    (positional, (1,), {"b": 7}),
    (defaults, (1,), {}),
    (defaults, (1,), {"c": 9}),
    (kwonly, (1,), {"k": 2}),
    (kwonly, (1,), {"k": 2, "m": 3}),
    (star, (1, 2, 3), {"z": 1, "y": 2}),
    (star, (1,), {}),
    (posonly, (1, 2, 3), {}),
    (posonly, (1, 2), {"c": 3}),
    (everything, (0,), {"d": 5}),
    (everything, (0, 1, 2, 3, 4), {"d": 5, "e": 6, "f": 7}),
    (arg_is_cell, (10,), {}),
]


@pytest.mark.parametrize("fn,args,kwargs", SIGNATURE_CASES, ids=lambda v: getattr(v, "__name__", ""))
def test_signatures(fn, args, kwargs):
    rec = Recorder()
    compiled = optimize_with_callback(rec)(fn)
    expected = fn(*args, **kwargs)
    assert compiled(*args, **kwargs) == expected
    converted = list(rec.names)
    assert converted[0] == fn.__name__
    assert compiled(*args, **kwargs) == expected, "cached call"
    assert rec.names == converted, "nothing recompiled"


def test_closure_state_is_shared_with_the_original():
    bump = make_counter()
    rec = Recorder()
    compiled = optimize_with_callback(rec)(bump)
    assert [compiled(), compiled(2), bump(), compiled()] == [1, 3, 4, 5]
    assert rec.frames[0].f_locals == {"step": 1, "count": 0}


def test_same_code_different_closures_use_their_own_cells():
    a, b = make_counter(), make_counter()
    rec = Recorder()
    ca, cb = optimize_with_callback(rec)(a), optimize_with_callback(rec)(b)
    assert [ca(), ca(), cb(), ca(), cb(10)] == [1, 2, 1, 3, 11]
    assert len(rec.frames) == 1, "one entry serves every closure of the code"


def test_methods_and_super():
    rec = Recorder()
    with optimize_with_callback(rec):
        assert Child().who() == "child<base>"
        assert Child().who() == "child<base>"
    assert sorted(rec.names) == ["who", "who"]


def test_decorated_method_binds_self():
    rec = Recorder()

    class K:
        def __init__(self, v):
            self.v = v

        @optimize_with_callback(rec)
        def get(self, add):
            return self.v + add

    assert K(1).get(2) == 3 and K(5).get(add=1) == 6


def test_recursion():
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)

    rec = Recorder()
    assert optimize_with_callback(rec)(fact)(20) == fact(20)
    assert rec.names == ["fact"]


def test_exceptions_propagate_unchanged_with_traceback():
    def fails(x):
        return {"a": 1}[x]

    rec = Recorder()
    compiled = optimize_with_callback(rec)(fails)
    for _ in range(2):
        with pytest.raises(KeyError) as info:
            compiled("zz")
        assert info.value.args == ("zz",)
        assert "fails" in [entry.name for entry in info.traceback]


def test_generators_and_coroutines_run_unconverted():
    def gen(n):
        yield from range(n)

    async def coro(x):
        await asyncio.sleep(0)
        return x * 2

    def use_gen(n):
        return sum(gen(n))

    rec = Recorder()
    with optimize_with_callback(rec):
        assert use_gen(4) == 6
        assert list(gen(3)) == [0, 1, 2]
        g = gen(2)
        next(g)
        with pytest.raises(ValueError):
            g.throw(ValueError("x"))
        assert asyncio.run(coro(4)) == 8
    assert "gen" not in rec.names and "coro" not in rec.names
    assert "use_gen" in rec.names


def test_settrace_still_sees_converted_frames():
    events = []

    def tracer(frame, event, arg):
        if event == "call":
            events.append(frame.f_code.co_name)
        return None

    compiled = optimize_with_callback(Recorder())(add_one)
    sys.settrace(tracer)
    try:
        compiled(1)
    finally:
        sys.settrace(None)
    assert "add_one" in events


# ---- threads ----


def test_threads_have_independent_callbacks():
    def shared(x):
        return x + 1

    barrier = threading.Barrier(4)
    results, errors = {}, []

    def worker(k):
        try:
            code = with_const(shared, 1, 1000 * (k + 1))
            me = threading.get_ident()
            rec = Recorder(lambda frame: code, check=lambda L: threading.get_ident() == me)
            barrier.wait()
            compiled = optimize_with_callback(rec)(shared)
            results[k] = [compiled(i) for i in range(200)]
            assert _C.get_eval_frame() is None
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for k in range(4):
        assert results[k] == [i + 1000 * (k + 1) for i in range(200)]
    assert len(_C.get_cache_entries(shared.__code__)) == 4
    assert not _C.hook_installed()


def test_thread_without_callback_is_not_converted():
    def plain(x):
        return x + 1

    rec = Recorder(lambda frame: with_const(plain, 1, 99), only=("plain",))
    out = []
    started, release = threading.Event(), threading.Event()

    def other():
        started.set()
        release.wait()
        out.append(plain(1))

    t = threading.Thread(target=other)
    t.start()
    started.wait()
    with optimize_with_callback(rec):
        assert plain(1) == 100
        release.set()
        t.join()
    assert out == [2]


def test_entries_belong_to_the_callback_that_compiled_them():
    first = Recorder(lambda frame: with_const(add_one, 1, 10))
    second = Recorder(lambda frame: with_const(add_one, 1, 20))
    assert optimize_with_callback(first)(add_one)(1) == 11
    assert optimize_with_callback(second)(add_one)(1) == 21, "another callback compiles its own entry"
    assert optimize_with_callback(first)(add_one)(2) == 12
    assert len(first.frames) == len(second.frames) == 1
    assert minidynamo.run(add_one)(3) in (13, 23), "run-only takes any entry"
