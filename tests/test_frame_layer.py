"""The C frame layer on every supported CPython, through _C's own API only.

Callbacks here return code transformed by hand (the original's code with one constant replaced), so
these tests need neither the translator nor minidynamo's Python bytecode layer: on a CPython whose
Python layer has not landed yet, _C is loaded from the built extension alone. Run there as
`scripts/pyroot.sh 3.13 python -m pytest -q --noconftest tests/test_frame_layer.py` (the shared
conftest imports the whole package).
"""
import builtins
import gc
import importlib.util
import os
import sys
import sysconfig
import threading
import time
import tracemalloc
import traceback
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_c():
    try:
        from minidynamo import _C
    except ImportError:  # the Python layer does not support this CPython (yet): the extension alone
        path = os.path.join(ROOT, "minidynamo", "_C" + sysconfig.get_config_var("EXT_SUFFIX"))
        if not os.path.exists(path):
            pytest.skip(f"{path} is not built", allow_module_level=True)
        spec = importlib.util.spec_from_file_location("minidynamo._C", path)
        _C = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_C)
    return _C


_C = _load_c()


@pytest.fixture(autouse=True)
def _fresh():
    _C.reset()
    _C.reset_stats()
    yield
    assert _C.get_eval_frame() is None, "a test left an eval-frame callback set"
    assert not _C.hook_installed()
    _C.reset()


class Guarded:
    """What a callback returns: the code to cache and run, and its check (a callable on the locals
    dict, or a GuardSet)."""

    def __init__(self, code, check_fn):
        self.code = code
        self.check_fn = check_fn


def always(L):
    return True


def converted(code):
    """The code with its "orig" constant replaced by "conv": same parameters, visibly another code."""
    return code.replace(co_consts=tuple("conv" if c == "orig" else c for c in code.co_consts))


class Converter:
    """A frame callback converting the frames of `targets` (functions or code objects) and leaving every
    other code alone; records the FrameInfo of each conversion and the thread that made it."""

    def __init__(self, *targets, transform=converted, check=always):
        self.codes = {getattr(t, "__code__", t) for t in targets}
        self.transform = transform
        self.check = check
        self.frames = []
        self.threads = set()

    def __call__(self, frame):
        if frame.f_code not in self.codes:
            return None
        self.frames.append(frame)
        self.threads.add(threading.get_ident())
        return Guarded(self.transform(frame.f_code), self.check)

    @property
    def names(self):
        return [f.f_code.co_name for f in self.frames]


def hooked(fn, callback):
    """fn, called with this thread's callback set to `callback` for the duration of each call."""
    return _C.CallbackWrapper(fn, callback)


def entry_code(fn):
    [(check, code, owner)] = _C.get_cache_entries(fn.__code__)
    return code


def local_slots(code):
    """Index of each local, cell and free variable in the frame's slots (localsplus)."""
    names = list(code.co_varnames)
    names += [c for c in code.co_cellvars if c not in code.co_varnames]
    names += list(code.co_freevars)
    return {name: i for i, name in enumerate(names)}


# ---- argument shapes, closures and cells ----


def positional(a, b):
    return ("orig", a, b)


def defaults(a, b=2, c=3):
    return ("orig", a, b, c)


def kwonly(a, *, k, m=5):
    return ("orig", a, k, m)


def star(a, *args, **kwargs):
    return ("orig", a, args, sorted(kwargs.items()))


def posonly(a, b, /, c):
    return ("orig", a, b, c)


def everything(a, b=1, /, c=2, *args, d, e=4, **kw):
    return ("orig", a, b, c, args, d, e, sorted(kw.items()))


def many(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9=9):
    return ("orig", a0, a1, a2, a3, a4, a5, a6, a7, a8, a9)


def arg_is_cell(x):
    def get():
        return x

    x = x + 1
    return ("orig", get())


def make_counter():
    count = 0

    def bump(step=1):
        nonlocal count
        count += step
        return ("orig", count)

    return bump


SIGNATURES = [
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
    (many, tuple(range(9)), {}),
    (many, (), {f"a{i}": -i for i in range(10)}),
    (arg_is_cell, (10,), {}),
]


@pytest.mark.parametrize("fn,args,kwargs", SIGNATURES, ids=lambda v: getattr(v, "__name__", ""))
def test_every_argument_shape_reaches_the_transformed_code(fn, args, kwargs):
    conv = Converter(fn)
    compiled = hooked(fn, conv)
    expected = ("conv",) + fn(*args, **kwargs)[1:]
    assert compiled(*args, **kwargs) == expected, "compiled on the first call, then run"
    assert compiled(*args, **kwargs) == expected, "a cache hit"
    assert conv.names == [fn.__name__], "compiled once"
    assert _C.stats()["hits"] == 1


def test_frame_info_describes_the_frame_about_to_run():
    conv = Converter(defaults)
    hooked(defaults, conv)(1, c=9)
    [info] = conv.frames
    assert isinstance(info, _C.FrameInfo)
    assert info.f_code is defaults.__code__ and info.f_func is defaults
    assert info.f_locals == {"a": 1, "b": 2, "c": 9}, "defaults applied, nothing else bound yet"
    assert info.f_globals is globals() and info.f_builtins is vars(builtins)


def test_cells_and_free_variables_as_seen_on_entry():
    conv = Converter(arg_is_cell)
    assert hooked(arg_is_cell, conv)(10) == ("conv", 11)
    assert conv.frames[0].f_locals == {"x": 10}, "an argument that is also a cell holds its plain value"
    bump = make_counter()
    conv = Converter(bump)
    compiled = hooked(bump, conv)
    assert [compiled(), compiled(2), bump()[1], compiled()[1]] == [("conv", 1), ("conv", 3), 4, 5]
    assert conv.frames[0].f_locals == {"step": 1, "count": 0}, "a free variable is read from the closure"


def test_one_entry_serves_every_closure_of_the_code_with_its_own_cells():
    a, b = make_counter(), make_counter()
    conv = Converter(a)
    ca, cb = hooked(a, conv), hooked(b, conv)
    assert [ca()[1], ca()[1], cb()[1], ca()[1], cb(10)[1]] == [1, 2, 1, 3, 11]
    assert len(conv.frames) == 1


def test_local_slots_match_the_interpreter():
    def f(a, b=1, *c, d, **e):
        x = 1

        def g():
            return a, x

        return g

    for code in (f.__code__, f(1, d=2).__code__):
        if hasattr(code, "_varname_from_oparg"):
            slots = local_slots(code)
            assert [code._varname_from_oparg(i) for i in range(len(slots))] == sorted(slots, key=slots.get)


def test_guard_sets_read_argument_cell_and_free_slots():
    def make(y):
        def target(x, z):
            def inner():
                return z

            return ("orig", x, y, inner())

        return target

    target = make(5)
    slots = local_slots(target.__code__)
    accessors = [(_C.ACC_LOCAL, -1, name, slots[name]) for name in ("x", "y", "z")]

    def guard(frame):
        if frame.f_code is not target.__code__:
            return None
        values = [frame.f_locals[name] for name in ("x", "y", "z")]
        items = [(_C.GuardCheck(_C.CHK_EQUALS, v), i, -1) for i, v in enumerate(values)]
        return Guarded(converted(frame.f_code), _C.GuardSet(accessors, items))

    compiled = hooked(target, guard)
    assert compiled(1, 2) == ("conv", 1, 5, 2)
    assert compiled(1, 2) == ("conv", 1, 5, 2) and _C.stats()["hits"] == 1
    assert compiled(1, 3) == ("conv", 1, 5, 3), "the cell argument's guard failed: a new entry"
    assert hooked(make(6), guard)(1, 2) == ("conv", 1, 6, 2), "the free variable's guard failed"
    assert len(_C.get_cache_entries(target.__code__)) == 3
    assert _C.stats()["hits"] == 1


def test_builtins_guard_sees_writes_to_globals_and_builtins():
    scope = {"__builtins__": builtins}
    exec("def counts(xs):\n    return ('orig', len(xs))\n", scope)
    counts = scope["counts"]

    def guard(frame):
        if frame.f_code is not counts.__code__:
            return None
        check = _C.GuardCheck(_C.CHK_BUILTINS, ("len",), expected2=(len,))
        accessors = [(_C.ACC_GLOBALS, -1, None, 0), (_C.ACC_CONST, -1, vars(builtins), 0)]
        return Guarded(converted(frame.f_code), _C.GuardSet(accessors, [(check, 0, 1)]))

    compiled = hooked(counts, guard)

    def entries():
        return len(_C.get_cache_entries(counts.__code__))

    for _ in range(3):
        assert compiled([1, 2]) == ("conv", 2)
    assert entries() == 1
    scope["len"] = lambda xs: -1
    assert compiled([1, 2]) == ("conv", -1) and entries() == 2, "a global shadows the builtin: recompiled"
    del scope["len"]
    assert compiled([1, 2]) == ("conv", 2) and entries() == 2, "the first entry again"
    saved = builtins.len
    builtins.len = lambda xs: -2
    try:
        assert compiled([1, 2]) == ("conv", -2)
    finally:
        builtins.len = saved
    assert entries() == 3, "the builtin itself replaced: recompiled"


# ---- recursion, exceptions, frames ----


def _deep_pair():
    """deep(n) recursing n levels, and a transformed code for it. The original's frame is much larger
    than the transformed one (300 locals it never binds), so it is mostly the original's frame, which
    the hook clears and pops itself, that starts a new data-stack chunk."""
    unused = " = ".join(f"v{i}" for i in range(300))
    scope = {}
    exec(f"def deep(n):\n    if n < 0:\n        {unused} = 0\n    return 'orig' if n == 0 else deep(n - 1)\n", scope)
    exec("def small(n):\n    return 'orig' if n == 0 else deep(n - 1)\n", scope)
    return scope["deep"], converted(scope["small"].__code__)


def _in_big_thread(fn):
    """fn() on a thread with a 64 MiB C stack; returns its result or raises its error."""
    out = {}

    def run():
        try:
            out["result"] = fn()
        except BaseException as e:  # pragma: no cover - re-raised below
            out["error"] = e

    old = threading.stack_size(64 << 20)
    try:
        t = threading.Thread(target=run)
        t.start()
        t.join()
    finally:
        threading.stack_size(old)
    if "error" in out:
        raise out["error"]
    return out["result"]


def test_deep_recursion_on_the_hit_path_crosses_data_stack_chunks():
    deep, small = _deep_pair()
    conv = Converter(deep, transform=lambda code: small)
    # 2000 levels cross many 16 KiB data-stack chunks, and stay under the point where 3.13's hook
    # runs frames unhooked (half its evaluator-call limit, each hooked call counting up to two)
    depth = 2000
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + 500)
    try:
        compiled = hooked(deep, conv)
        assert _in_big_thread(lambda: compiled(3)) == "conv"
        for _ in range(3):
            before = _C.stats()["hits"]
            assert _in_big_thread(lambda: compiled(depth)) == "conv"
            assert _C.stats()["hits"] - before == depth + 1, "every level is a cache hit"
    finally:
        sys.setrecursionlimit(old_limit)
    assert len(conv.frames) == 1


def fails(x):
    return {"orig": 1}[x]


def test_exceptions_from_the_transformed_code_carry_its_traceback():
    compiled = hooked(fails, Converter(fails))
    assert compiled("conv") == 1
    for _ in range(3):
        with pytest.raises(KeyError) as info:
            compiled("orig")
        assert info.value.args == ("orig",)
        frames = [tb for tb in traceback.walk_tb(info.value.__traceback__)]
        assert frames[-1][0].f_code is entry_code(fails), "the innermost frame runs the cached code"
        assert frames[-1][1] == fails.__code__.co_firstlineno + 1
        assert [f.f_code.co_name for f, _ in frames].count("fails") == 1, "the original frame never ran"


def where(a):
    return ("orig", sys._getframe())


def test_getframe_inside_transformed_code_sees_it_and_its_caller():
    compiled = hooked(where, Converter(where))
    for _ in range(2):
        tag, frame = compiled(42)
        assert tag == "conv"
        assert frame.f_code is entry_code(where)
        assert frame.f_back.f_code is test_getframe_inside_transformed_code_sees_it_and_its_caller.__code__
        assert dict(frame.f_locals) == {"a": 42}, "the frame outlives its call with its locals"
        assert frame.f_lineno == where.__code__.co_firstlineno + 1
        del frame
    gc.collect()


def test_tracing_sees_the_transformed_code_run():
    events = []

    def tracer(frame, event, arg):
        if frame.f_code.co_name == "positional":
            events.append((event, frame.f_code is entry_code(positional)))
        return tracer

    compiled = hooked(positional, Converter(positional))
    compiled(1, 2)
    sys.settrace(tracer)
    try:
        assert compiled(1, 2) == ("conv", 1, 2)
    finally:
        sys.settrace(None)
    assert events[0] == ("call", True) and events[-1] == ("return", True)


# ---- generators, threads, uninstalling ----


def gen(n):
    for i in range(n):
        yield i


def use_gen(n):
    g = gen(n)
    return ("orig", next(g), g)


def test_generators_run_unconverted():
    conv = Converter(gen, use_gen)
    compiled = hooked(use_gen, conv)
    tag, first, g = compiled(3)
    assert (tag, first) == ("conv", 0)
    assert hooked(list, conv)(g) == [1, 2], "resumed under the callback"
    g = hooked(gen, conv)(3)
    assert hooked(next, conv)(g) == 0
    with pytest.raises(ValueError):
        hooked(g.throw, conv)(ValueError("in"))
    assert conv.names == ["use_gen"]


def test_threads_have_their_own_callbacks():
    def shared(x):
        return ("orig", x)

    barrier = threading.Barrier(4)
    results, converters, errors = {}, {}, []

    def worker(k):
        try:
            conv = converters[k] = Converter(shared, transform=lambda code: code.replace(
                co_consts=tuple(f"t{k}" if c == "orig" else c for c in code.co_consts)))
            compiled = hooked(shared, conv)
            barrier.wait()
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
        assert results[k] == [(f"t{k}", i) for i in range(200)]
        assert len(converters[k].frames) == 1 and len(converters[k].threads) == 1
    assert len(_C.get_cache_entries(shared.__code__)) == 4


def plain(a, b):
    return a


def _best_ns(fn, number=20_000, repeat=7):
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter_ns()
        for _ in range(number):
            fn(1, 2)
        best = min(best, (time.perf_counter_ns() - start) / number)
    return best


def test_uninstalling_the_callback_restores_plain_call_speed():
    before = _best_ns(plain)
    previous = _C.set_eval_frame(Converter())
    try:
        assert _C.hook_installed()
        hooked_ns = _best_ns(plain)
    finally:
        _C.set_eval_frame(previous)
    assert not _C.hook_installed()
    after = _best_ns(plain)
    assert after < 1.5 * before + 20, (before, hooked_ns, after)


# ---- references: hits and every path where the hook ends the frame itself ----


def _census():
    gc.collect()
    return len(gc.get_objects())


def test_no_leak_over_10000_hits():
    def work(a, b=2, *args, **kwargs):
        return ("orig", a, b)

    arg, kwvalue = object(), object()
    compiled = hooked(work, Converter(work))
    for _ in range(10):
        compiled(arg, kwvalue, 3, k=kwvalue)
    refs = sys.getrefcount(arg), sys.getrefcount(kwvalue)
    objects = _census()
    tracemalloc.start()
    snapshot = tracemalloc.take_snapshot()
    for _ in range(10_000):
        compiled(arg, kwvalue, 3, k=kwvalue)
    gc.collect()
    growth = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(snapshot, "filename"))
    tracemalloc.stop()
    assert (sys.getrefcount(arg), sys.getrefcount(kwvalue)) == refs
    assert _census() - objects < 50
    assert growth < 64 * 1024, f"tracemalloc grew by {growth} bytes"
    assert _C.stats()["hits"] >= 10_000


def raiser():
    raise ValueError("from a compiled graph")


RERUN_RAISER = _C.CallbackWrapper(raiser, None, rerun=True)


def rerun_target(x):
    return ("orig", x)


def rerun_twin(x):
    return ("conv", x, RERUN_RAISER())


def _boom(error, message):
    def raise_(*args):
        raise error(message)

    return raise_


VALUE = object()  # stands for the argument whose references are counted
PATHS = {
    # the hook runs the frame itself, or fails before running it: it clears and pops the frame
    "transformed code raises": (Converter(fails), fails, (VALUE,), KeyError),
    "callback raises": (_boom(KeyError, "callback"), positional, (VALUE, 2), KeyError),
    "check raises": (Converter(positional, check=_boom(ZeroDivisionError, "check")), positional, (VALUE, 2),
                     ZeroDivisionError),
    # the hook hands the frame to the evaluator after all
    "rerun eagerly": (Converter(rerun_target, transform=lambda code: rerun_twin.__code__), rerun_target,
                      (VALUE,), None),
    "run-only miss": (False, positional, (VALUE, 2), None),
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_references_balance_on_every_path(path):
    callback, fn, args, error = PATHS[path]
    compiled = hooked(fn, callback)

    def call():
        try:
            return compiled(*args)
        except Exception as e:
            assert error is not None and isinstance(e, error), e
            return e.__class__

    call()  # compiles where the callback converts: the later calls take the path named
    for _ in range(3):
        result = call()  # held while counting, as the last result is after the loop
    objects = _census()
    refs = sys.getrefcount(VALUE)
    for _ in range(1000):
        result = call()
    objects_after = _census()
    assert sys.getrefcount(VALUE) == refs
    assert objects_after - objects < 50
    expected = {"rerun eagerly": ("orig", VALUE), "run-only miss": ("orig", VALUE, 2)}.get(path, error)
    assert result == expected
    if path == "rerun eagerly":
        assert _C.stats()["reruns"] >= 1000
