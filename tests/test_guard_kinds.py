"""Every guard kind is enforced, rendered and explained; strict constant equality; the global-state
guard every entry carries; guard sets that die with their function; cache_size_limit = 0."""
import builtins
import contextlib
import gc
import math
import os
import subprocess
import sys
import tracemalloc
import warnings
import weakref

import pytest
import torch
from torch.overrides import TorchFunctionMode

import minidynamo
from minidynamo import GuardedCode, _C
from minidynamo.eval_frame import optimize_with_callback
from minidynamo.guard_set import build_check_function
from minidynamo.guards import BuiltinRead, Guard, GuardKind, KindRule, capture_global_state
from minidynamo.source import AttrSource, GlobalsDictSource, LocalSource, MethodCallSource
from minidynamo.testing import CompileCounter
from test_guards import Records

V, W = LocalSource("v"), LocalSource("w")


class Thing:
    k = 1


class Other:
    k = 1


def probe(v, w):
    return 7


def deterministic():
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous)


def _with_attr(name):
    obj = Thing()
    setattr(obj, name, 1)
    return obj


@contextlib.contextmanager
def divmod_rebound():
    builtins.divmod = lambda a, b: (0, 0)
    try:
        yield
    finally:
        builtins.divmod = _divmod


_divmod = divmod


def _adder(k):
    return lambda t: t + k
_obj, _mod, _t = Thing(), torch.nn.Linear(2, 2), torch.randn(3)
nothing = contextlib.nullcontext

# kind -> (guards (made when the test runs), passing (v, w), failing (v, w), state the failing call runs in, rendered text, reason)
_shared = []
CASES = {
    GuardKind.TYPE_MATCH: (lambda: [Guard(V, GuardKind.TYPE_MATCH, Thing)], (Thing(), 0), (Other(), 0), nothing,
                           "type(L['v']) is Thing", "L['v'] type mismatch: expected Thing, got Other"),
    GuardKind.ID_MATCH: (lambda: [Guard(V, GuardKind.ID_MATCH, _obj)], (_obj, 0), (Thing(), 0), nothing,
                         "L['v'] is <Thing object at", "L['v'] is not the object seen when compiling"),
    GuardKind.EQUALS_MATCH: (lambda: [Guard(V, GuardKind.EQUALS_MATCH, (2,))], ((2,), 0), ((2.0,), 0), nothing,
                             "L['v'] == (2,)", "L['v'] value mismatch: expected (2,), got (2.0,)"),
    GuardKind.TENSOR_MATCH: (lambda: [Guard(V, GuardKind.TENSOR_MATCH, torch.randn(8))], (torch.randn(8), 0),
                             (torch.randn(16), 0), nothing, "L['v']: torch.float32, cpu, requires_grad=False, size (8)",
                             "L['v'] size mismatch at dim 0: expected 8, got 16"),
    GuardKind.LIST_LENGTH: (lambda: [Guard(V, GuardKind.LIST_LENGTH, [1, 2])], ([5, 6], 0), ([1, 2, 3], 0), nothing,
                            "len(L['v']) == 2", "len(L['v']) mismatch: expected 2, got 3"),
    GuardKind.DICT_KEYS: (lambda: [Guard(V, GuardKind.DICT_KEYS, {"k": 1})], ({"k": 2}, 0), ({"j": 1}, 0), nothing,
                          "list(L['v'].keys()) == ['k']", "L['v'] keys mismatch: expected ['k'], got ['j']"),
    GuardKind.DICT_CONTAINS: (lambda: [Guard(AttrSource(V, "__dict__"), GuardKind.DICT_CONTAINS, ("b", False))],
                              (Thing(), 0), (_with_attr("b"), 0), nothing,
                              "('b' in L['v'].__dict__) is False", "L['v'].__dict__ now has key 'b'"),
    GuardKind.HASATTR: (lambda: [Guard(V, GuardKind.HASATTR, ("b", True))], (_with_attr("b"), 0), (Thing(), 0), nothing,
                        "hasattr(L['v'], 'b') is True", "L['v'] no longer has attribute 'b'"),
    GuardKind.NN_MODULE: (lambda: [Guard(V, GuardKind.NN_MODULE, _mod)], (_mod, 0), (torch.nn.Linear(2, 2), 0), nothing,
                          "L['v'] is <Linear object at", "L['v'] is not the object seen when compiling"),
    GuardKind.GRAD_MODE: (lambda: [Guard(None, GuardKind.GRAD_MODE, True)], (0, 0), (0, 0), torch.no_grad,
                          "torch.is_grad_enabled() is True", "grad mode mismatch: expected True, got False"),
    GuardKind.GLOBAL_STATE: (lambda: [Guard(None, GuardKind.GLOBAL_STATE, capture_global_state())], (0, 0), (0, 0),
                             contextlib.contextmanager(deterministic), "deterministic_algorithms=False",
                             "global state changed: deterministic_algorithms (expected False, got True)"),
    GuardKind.ALIAS_OF: (lambda: [Guard(W, GuardKind.ALIAS_OF, V)], (_t, _t), (_t, torch.randn(3)), nothing,
                         "L['w'] is L['v']", "L['w'] is no longer the same tensor as L['v']"),
    GuardKind.DISTINCT_FROM: (lambda: [Guard(W, GuardKind.DISTINCT_FROM, V)], ([], []), (_shared, _shared), nothing,
                              "L['w'] is not L['v']", "L['w'] is now the same object as L['v']"),
    GuardKind.SHAPE_ENV: (lambda: [Guard(None, GuardKind.SHAPE_ENV, ["L['v'].size()[0] == L['w'].size()[0]"])],
                          (torch.randn(3), torch.randn(3)), (torch.randn(3), torch.randn(4)), nothing,
                          "L['v'].size()[0] == L['w'].size()[0]", "shape guard failed: L['v'].size()[0] == L['w'].size()[0]"),
    GuardKind.BUILTIN_MATCH: (lambda: [Guard(GlobalsDictSource(), GuardKind.BUILTIN_MATCH, BuiltinRead("divmod", vars(builtins), _divmod))],
                              (0, 0), (0, 0), divmod_rebound, "'divmod' not in G", "builtin 'divmod' was rebound"),
    GuardKind.FUNCTION_MATCH: (lambda: [Guard(V, GuardKind.FUNCTION_MATCH, (_adder(0).__code__, GlobalsDictSource()))],
                               (_adder(1), 0), (lambda t: t, 0), nothing, "L['v'].__code__ is <code _adder.<locals>.<lambda>>",
                               "L['v'] is a function of other code (<lambda>)"),
}


def test_every_kind_has_a_case():
    assert set(CASES) == set(GuardKind), "a new guard kind needs a case here"


@pytest.mark.parametrize("kind", list(GuardKind), ids=lambda k: k.value)
def test_every_kind_is_enforced_rendered_and_explained(kind):
    make_guards, passing, failing, state, rendered, reason = CASES[kind]
    guards = make_guards()
    checks = []

    def callback(frame):
        check = build_check_function(frame.f_code, guards, frame.f_locals, frame.f_globals, {})
        checks.append(check)
        return GuardedCode(frame.f_code, check.fn)

    compiled = optimize_with_callback(callback)(probe)
    assert compiled(*passing) == 7 and compiled(*passing) == 7
    assert len(checks) == 1, "the second call hits the entry"
    with state():
        assert compiled(*failing) == 7
        assert len(checks) == 2, "an entry whose guard fails is not hit"
        assert checks[0].fn(dict(zip("vw", failing)), globals()) is False
        assert checks[0].failure_reason(dict(zip("vw", failing)), globals()) == reason
    assert checks[0].failure_reason(dict(zip("vw", passing)), globals()) is None
    assert rendered in checks[0].source_code
    assert [g.kind for g in checks[0].guards] == [kind]


def test_a_rule_must_say_how_its_kind_is_checked():
    class Incomplete(KindRule):
        def render(self, guard):
            return []

        def reason(self, guard, value, scope):
            return None

    with pytest.raises(TypeError, match="lower"):
        Incomplete()


PYTHON_CASES = {  # kind -> (value, L['v'] passing, L['v'] failing)
    GuardKind.EQUALS_MATCH: (1, {"k": 1}, {"k": 1.0}),
    GuardKind.HASATTR: (("real", True), {"k": 1}, {"k": "s"}),
    GuardKind.DICT_CONTAINS: ((0, False), {"k": {1: 1}}, {"k": {0: 1}}),
}


@pytest.mark.parametrize("kind", list(PYTHON_CASES), ids=lambda k: k.value)
def test_sources_without_a_c_accessor_are_checked_in_python(kind):
    """`dict.get(L['v'], 'k')` has no C accessor: the guard goes to the Python fallback, same rule."""
    value, passing, failing = PYTHON_CASES[kind]
    source = MethodCallSource(V, dict, "get", ("k",))
    check = build_check_function(probe.__code__, [Guard(source, kind, value)], {"v": passing, "w": 0}, globals(), {})
    assert check.fn({"v": passing, "w": 0}, globals()) is True
    assert check.fn({"v": failing, "w": 0}, globals()) is False
    assert check.failure_reason({"v": failing, "w": 0}, globals()).startswith("dict.get(L['v'], 'k')")


# ---- the same kinds produced by real traces ----


class Box:
    def __init__(self, k):
        self.k = k


def double(t):
    return t * 2


def triple(t):
    return t * 3


_lin = torch.nn.Linear(3, 3)


def f_type(x, obj):
    return x + obj.k


def f_id(x, cls):
    return x * cls.k


def f_function(x, fn):
    return fn(x)


def f_equals(x, n):
    return x * n


def f_tensor(x):
    return x * 2


def f_len(x, xs):
    return x * len(xs)


def f_keys(x, d):
    return x * len(d)


def f_module(m, x):
    return m(x)


def f_grad(x):
    return x * 2 if torch.is_grad_enabled() else x


def f_alias(a, b):
    return a + b


class OwnLookupLinear(torch.nn.Linear):
    def __getattr__(self, name):
        return super().__getattr__(name)


_own_lookup = OwnLookupLinear(3, 3)
_x = torch.randn(3)
TRACED = {
    GuardKind.TYPE_MATCH: (f_type, (_x, Box(1)), (_x, Thing()), "L['obj'] type mismatch: expected Box, got Thing"),
    GuardKind.ID_MATCH: (f_id, (_x, Thing), (_x, Other), "L['cls'] is not the object seen when compiling"),
    GuardKind.FUNCTION_MATCH: (f_function, (_x, double), (_x, triple), "L['fn'] is a function of other code (triple)"),
    GuardKind.EQUALS_MATCH: (f_equals, (_x, 2), (_x, 3), "L['n'] value mismatch: expected 2, got 3"),
    GuardKind.TENSOR_MATCH: (f_tensor, (torch.randn(8),), (torch.randn(8, dtype=torch.float64),),
                             "L['x'] dtype mismatch: expected torch.float32, got torch.float64"),
    GuardKind.LIST_LENGTH: (f_len, (_x, [1, 2]), (_x, [1, 2, 3]), "len(L['xs']) mismatch: expected 2, got 3"),
    GuardKind.DICT_KEYS: (f_keys, (_x, {"k": 1}), (_x, {"j": 1}), "L['d'] keys mismatch: expected ['k'], got ['j']"),
    # a module whose class finds attributes its own way keeps its identity guarded (see shares_entries)
    GuardKind.NN_MODULE: (f_module, (_own_lookup, torch.randn(1, 3)), (OwnLookupLinear(3, 3), torch.randn(1, 3)),
                          "L['m'] is not the object seen when compiling"),
    GuardKind.ALIAS_OF: (f_alias, (_x, _x), (_x, torch.randn(3)), "L['b'] is no longer the same tensor as L['a']"),
}


@pytest.mark.parametrize("kind", list(TRACED), ids=lambda k: k.value)
def test_traced_kinds_recompile_when_their_guard_fails(kind):
    fn, first, changed, reason = TRACED[kind]
    compiled = minidynamo.optimize(CompileCounter(), dynamic=False)(fn)
    with Records() as rec:
        torch.testing.assert_close(compiled(*first), fn(*first))
        torch.testing.assert_close(compiled(*first), fn(*first))
        assert minidynamo.stats()["compiled"] == 1
        torch.testing.assert_close(compiled(*changed), fn(*changed))
    assert minidynamo.stats()["compiled"] == 2
    assert kind in {g.kind for g in rec.frames[0].check.guards}
    assert rec.frames[1].recompile_reason == reason


# ---- strict constants ----


def describe(x, c):
    return x + 1, repr(c), type(c).__name__


@pytest.mark.parametrize("first,second", [
    ((2,), (2.0,)), ((True,), (1,)), (frozenset({1}), frozenset({1.0})), (0.0, -0.0), (1, True),
    (((1, 2.0),), ((1, 2),)), (float("nan"), 1.0), (slice(1, 2), slice(1.0, 2)), (1j, complex(0.0, 1.0) * -1),
])
def test_strict_equals_tells_apart_what_eager_tells_apart(first, second):
    compiled = minidynamo.optimize(CompileCounter())(describe)
    x = torch.randn(2)
    for c in (first, second, first):
        got, want = compiled(x, c), describe(x, c)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:]
    assert minidynamo.stats()["compiled"] == 2, "one entry per distinct constant, reused on the third call"


def scaled_by_sign(x, c):
    return x * math.copysign(1.0, c)


def test_nan_with_the_same_bits_hits_and_zero_signs_differ():
    compiled = minidynamo.optimize(CompileCounter())(scaled_by_sign)
    x = torch.randn(3)
    compiled(x, float("nan"))
    compiled(x, float("nan"))  # another nan object, same bits
    assert minidynamo.stats()["compiled"] == 1
    for c in (0.0, -0.0):
        torch.testing.assert_close(compiled(x, c), scaled_by_sign(x, c))
    assert minidynamo.stats()["compiled"] == 3


def test_strict_equal_fast_and_exact():
    eq = _C.strict_equal
    assert eq(1, 1) and eq("a", "a") and eq(None, None) and eq((1, "a", None), (1, "a", None))
    assert not eq(1, True) and not eq(1, 1.0) and not eq(0.0, -0.0) and not eq((2,), (2.0,))
    assert eq(frozenset({1, "a", (2, 3.5)}), frozenset({"a", (2, 3.5), 1}))
    assert not eq(frozenset({1, "a"}), frozenset({1.0, "a"})) and not eq({True}, {1})
    nan = float("nan")
    assert eq(nan, float("nan")) and not eq(nan, -nan) and eq((nan,), (float("nan"),))
    assert eq(torch.float32, torch.float32) and not eq(torch.float32, torch.float64)


SIZES = {1, 2}


def counts_global_set(x):
    return x * len(SIZES)


def test_global_set_mutated_in_place_recompiles():
    compiled = minidynamo.optimize(CompileCounter())(counts_global_set)
    x = torch.randn(2)
    torch.testing.assert_close(compiled(x), x * 2)
    SIZES.add(3)
    try:
        torch.testing.assert_close(compiled(x), x * 3)
    finally:
        SIZES.discard(3)
    assert minidynamo.stats()["compiled"] == 2


def shared_check_target(x, c):
    return x + 1, repr(c)


def test_equal_but_not_strictly_equal_constants_do_not_share_a_check():
    """Entries of one code share checks under equal keys; (2,) and (2.0,) have equal keys."""
    compiled = minidynamo.optimize(CompileCounter())(shared_check_target)
    x = torch.randn(2)
    assert compiled(x, (2,))[1] == "(2,)"
    assert compiled(x, (2.0,))[1] == "(2.0,)"
    assert compiled(x, (2,))[1] == "(2,)" and compiled(x, (2.0,))[1] == "(2.0,)"
    assert minidynamo.stats()["compiled"] == 2


# ---- global state ----


def plain(x):
    return x * 2


class Noop(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


STATES = {
    "grad": (torch.no_grad, "grad mode mismatch: expected True, got False"),
    "deterministic": (contextlib.contextmanager(deterministic),
                      "global state changed: deterministic_algorithms (expected False, got True)"),
    "autocast": (lambda: torch.autocast("cpu", dtype=torch.bfloat16), "global state changed: autocast_state"),
    "default dtype": (lambda: _default_dtype(torch.float64), "global state changed: default_dtype (expected 6, got 7)"),
    "torch function mode": (Noop, "global state changed: torch function modes (expected 0, got 1)"),
}


@contextlib.contextmanager
def _default_dtype(dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


@pytest.mark.parametrize("name", list(STATES))
def test_global_state_change_recompiles_with_a_readable_reason(name):
    state, reason = STATES[name]
    compiled = minidynamo.optimize(CompileCounter())(plain)
    x = torch.randn(4)
    with Records() as rec:
        compiled(x)
        compiled(x)
        with state():
            got = compiled(x)
            want = plain(x)
        assert got.dtype == want.dtype and got.requires_grad == want.requires_grad
        torch.testing.assert_close(got, want)
        compiled(x)
    assert minidynamo.stats()["compiled"] == 2, "the entry compiled under the first state is hit again after"
    assert rec.frames[1].recompile_reason == reason


def test_inference_mode_is_part_of_the_state():
    compiled = minidynamo.optimize(CompileCounter())(plain)
    x = torch.randn(4)
    with Records() as rec, torch.no_grad():
        compiled(x)
        with torch.inference_mode():
            assert compiled(x).is_inference()
    assert rec.frames[1].recompile_reason == "global state changed: inference mode (expected False, got True)"


def reads_profiler(x):
    return x + 1 if torch.autograd._profiler_enabled() else x - 1


def test_profiler_is_guarded_only_where_the_trace_reads_it():
    """Profiling changes no value a frame computes, so it recompiles only frames that ask whether
    it is on (as torch.compile, which breaks the graph there instead); a warm cpp forward and
    backward under torch.profiler hits the cache."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    train = minidynamo.compile(model, backend="cpp")
    reader = minidynamo.optimize(CompileCounter())(reads_profiler)
    x = torch.randn(4, 8)
    for _ in range(2):
        train(x).sum().backward()
        reader(x)
    compiled = minidynamo.stats()["compiled"]
    with Records() as rec, torch.profiler.profile():
        train(x).sum().backward()
        assert torch.equal(reader(x), x + 1)
    assert torch.equal(reader(x), x - 1)
    assert minidynamo.stats()["compiled"] == compiled + 1
    assert [f.code.co_name for f in rec.frames] == ["reads_profiler"]
    assert "_profiler_enabled" in rec.frames[0].recompile_reason


def no_ops(x):
    return x


def enters_no_grad(x):
    with torch.no_grad():
        y = x * 2
    return y


@pytest.mark.parametrize("fn", [no_ops, plain, enters_no_grad])
def test_every_entry_carries_the_state_it_was_entered_with(fn):
    compiled = minidynamo.optimize(CompileCounter())(fn)
    x = torch.randn(3, requires_grad=True)
    with Records() as rec:
        compiled(x)
        compiled(x)
    kinds = [g.kind for g in rec.frames[0].check.guards]
    assert kinds.count(GuardKind.GLOBAL_STATE) == 1
    assert minidynamo.stats()["compiled"] == 1, "captured at the start: the trace's own no_grad does not leak in"
    with torch.no_grad():
        compiled(x)
    assert minidynamo.stats()["compiled"] == 2


def test_global_state_check_cost_is_small():
    import timeit

    guards = [Guard(None, GuardKind.GLOBAL_STATE, capture_global_state())]
    check = build_check_function(probe.__code__, guards, {"v": 0, "w": 0}, globals(), {})
    empty = build_check_function(probe.__code__, [], {"v": 0, "w": 0}, globals(), {})
    L = {"v": 0, "w": 0}
    per_call = min(timeit.repeat(lambda: check.fn(L), number=20000, repeat=5)) / 20000
    baseline = min(timeit.repeat(lambda: empty.fn(L), number=20000, repeat=5)) / 20000
    assert per_call - baseline < 5e-6, f"{(per_call - baseline) * 1e9:.0f} ns per global state check"


# ---- memory: guard sets take part in garbage collection ----


def _exec_function(i, body="n + box.k"):
    """A function whose globals hold it, and a class defined next to it (a type guard's target)."""
    namespace = {"torch": torch}
    exec(f"class Box:\n    k = {i}\ndef f{i}(n, box):\n    return {body}\n", namespace)
    return namespace[f"f{i}"], namespace["Box"]


def _guarded_entry(frame):
    guards = [Guard(LocalSource("n"), GuardKind.EQUALS_MATCH, frame.f_locals["n"]),
              Guard(LocalSource("box"), GuardKind.TYPE_MATCH, type(frame.f_locals["box"])),
              Guard(AttrSource(LocalSource("box"), "k"), GuardKind.EQUALS_MATCH, frame.f_locals["box"].k),
              Guard(None, GuardKind.GLOBAL_STATE, capture_global_state())]
    check = build_check_function(frame.f_code, guards, frame.f_locals, frame.f_globals, {})
    return GuardedCode(frame.f_code, check.fn)


def _compile_and_drop(count, start, refs=None):
    for i in range(start, start + count):
        fn, box = _exec_function(i)
        compiled = optimize_with_callback(_guarded_entry)(fn)
        assert compiled(1, box()) == compiled(1, box()) == 1 + i
        if refs is not None and i % 100 == 0:  # a sample: the weakrefs themselves would be the growth
            refs.append(weakref.ref(fn))
        del fn, box, compiled


def _call_and_drop(count, start):
    for i in range(start, start + count):
        fn, box = _exec_function(i)
        assert fn(1, box()) == fn(1, box()) == 1 + i
        del fn, box


def _traced_growth(run, count, start):
    """(blocks, bytes) still allocated after run(count, start) and two collections, in blocks
    under 1 MiB: a table that grows with every new name, compiled or not (the interpreter's
    interned strings: 8 MiB at 28,000 names on 3.14), lands in whichever run crosses its size."""
    tracemalloc.start()
    before = _small_blocks(tracemalloc.take_snapshot())
    run(count, start)
    gc.collect()
    gc.collect()
    after = _small_blocks(tracemalloc.take_snapshot())
    tracemalloc.stop()
    return after[0] - before[0], after[1] - before[1]


def _small_blocks(snapshot):
    sizes = [trace.size for trace in snapshot.traces if trace.size < 1 << 20]
    return len(sizes), sum(sizes)


def test_20k_functions_holding_their_globals_are_freed():
    """Measured in a fresh interpreter: allocator state left by other tests (free lists, pools
    half used) makes a traced-memory comparison inside the suite noisy."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = "import sys; sys.path.insert(0, 'tests'); import test_guard_kinds as t; t.check_20k_functions_freed()"
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


def check_20k_functions_freed() -> None:
    baseline = _C.stats()["live_entries"]
    _compile_and_drop(4000, 0)  # sizes the interpreter's tables (interned names, weak dicts)
    gc.collect()
    gc.collect()
    before_objects = len(gc.get_objects())
    refs = []
    _compile_and_drop(20_000, 4000, refs)
    gc.collect()
    gc.collect()  # the entries die in the first collection; their guard sets (a cycle) in the next
    assert sum(r() is not None for r in refs) == 0, "the functions, their globals and their entries are freed"
    assert _C.stats()["live_entries"] == baseline
    assert len(gc.get_objects()) - before_objects < 1000
    # memory outside objects too (entries, C tables): flat over 2,000 more, beyond what the same
    # functions cost uncompiled (CPython 3.12+ keeps each new function name interned for good)
    eager_blocks, eager_size = _traced_growth(_call_and_drop, 2000, 26_000)
    blocks, size = _traced_growth(_compile_and_drop, 2000, 24_000)
    blocks, size = blocks - eager_blocks, size - eager_size
    # the interpreter keeps some small blocks it frees for reuse: fewer blocks than functions is flat
    assert blocks < 2000 and size < 1024 * 1024, f"{blocks} blocks, {size} bytes more after 2,000 functions"


def test_compiled_functions_holding_their_globals_are_freed_and_by_reset():
    """Real traces (a graph, a type guard on a class beside the function): freed when dropped;
    while the function is alive, reset() drops its entries and leaves nothing holding it."""
    x = torch.randn(2)
    refs = []
    for i in range(100):
        fn, box = _exec_function(i, "n * box.k")
        compiled = minidynamo.optimize("eager")(fn)
        torch.testing.assert_close(compiled(x, box()), x * i)
        refs.append(weakref.ref(fn))
        del fn, box, compiled
    gc.collect()
    gc.collect()  # the entries die in the first collection; their guard sets (a cycle) in the next
    assert sum(r() is not None for r in refs) == 0
    assert _C.stats()["live_entries"] == 0

    fn, box = _exec_function(0, "n * box.k")
    minidynamo.optimize("eager")(fn)(x, box())
    assert len(_C.get_cache_entries(fn.__code__)) == 1
    minidynamo.reset()
    ref = weakref.ref(fn)
    del fn, box
    gc.collect()
    gc.collect()
    assert ref() is None


# ---- cache_size_limit = 0 ----


def test_cache_size_limit_zero_never_compiles():
    old = minidynamo.config.cache_size_limit
    minidynamo.config.cache_size_limit = 0
    counter = CompileCounter()
    compiled = minidynamo.optimize(counter)(plain)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for n in (2, 3, 2):
                x = torch.randn(n)
                torch.testing.assert_close(compiled(x), plain(x))
    finally:
        minidynamo.config.cache_size_limit = old
    assert counter.frame_count == 0 and minidynamo.stats()["compiled"] == 0
    assert _C.get_cache_entries(plain.__code__) == []
    compiled(torch.randn(2))
    assert counter.frame_count == 1, "a positive limit compiles again"
