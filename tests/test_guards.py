"""Guards checked in C: each kind passes on an equal input and fails on each changed property with
an exact reason; entries die with the objects they identify; recompiles say why; fuzzing."""
import gc
import logging
import random

import pytest
import torch

import minidynamo
from minidynamo import _C
from minidynamo.convert_frame import compile_listeners
from minidynamo.testing import CompileCounter


class Records:
    def __init__(self):
        self.frames = []

    def __enter__(self):
        compile_listeners.append(self.frames.append)
        return self

    def __exit__(self, *exc):
        compile_listeners.remove(self.frames.append)

    def check(self, name):
        return next(r.check for r in reversed(self.frames) if r.code.co_name == name and r.check is not None)


def compiled_check(fn, *args):
    with Records() as rec:
        minidynamo.optimize(CompileCounter())(fn)(*args)
    return rec.check(fn.__name__)


def reason(check, L):
    assert check.fn(L, globals()) is False, "the C guard set must reject"
    return check.failure_reason(L, globals())


def tensor_fn(x):
    return x * 2


def test_tensor_guard_each_property():
    x = torch.randn(8, 4)
    check = compiled_check(tensor_fn, x)
    assert check.fn({"x": torch.randn(8, 4)}) is True
    cases = {
        "size mismatch at dim 0: expected 8, got 16": torch.randn(16, 4),
        "size mismatch at dim 1: expected 4, got 5": torch.randn(8, 5),
        "dtype mismatch: expected torch.float32, got torch.float64": torch.randn(8, 4, dtype=torch.float64),
        "requires_grad mismatch: expected False, got True": torch.randn(8, 4, requires_grad=True),
        "rank mismatch: expected 2, got 3": torch.randn(8, 4, 1),
        "stride mismatch at dim 0: expected 4, got 1": torch.randn(4, 8).t(),
        "is not a tensor (got int)": 3,
    }
    for text, value in cases.items():
        assert reason(check, {"x": value}) == f"L['x'] {text}"


SCALE = 3


def uses_constants(x, n: int, mode: str, flag: bool, xs: list, d: dict):
    y = x * n * SCALE * len(xs) * len(d)
    return y if flag and mode == "a" else -y


def test_constant_type_length_and_key_guards():
    x = torch.randn(2)
    args = dict(x=x, n=2, mode="a", flag=True, xs=[1, 2], d={"k": 1})
    check = compiled_check(uses_constants, *args.values())
    assert check.fn(dict(args), globals()) is True
    changed = {
        "n": (5, "L['n'] value mismatch: expected 2, got 5"),
        "mode": ("b", "L['mode'] value mismatch: expected 'a', got 'b'"),
        "flag": (False, "L['flag'] value mismatch: expected True, got False"),
        "xs": ([1, 2, 3], "len(L['xs']) mismatch: expected 2, got 3"),
        "d": ({"j": 1}, "L['d'] keys mismatch: expected ['k'], got ['j']"),
    }
    for name, (value, text) in changed.items():
        assert reason(check, {**args, name: value}) == text
    assert reason(check, {**args, "n": 2.0}) == "L['n'] type mismatch: expected int, got float"
    global SCALE
    SCALE = 4
    try:
        assert reason(check, dict(args)) == "G['SCALE'] value mismatch: expected 3, got 4"
    finally:
        SCALE = 3


class Thing:
    def __init__(self, k):
        self.k = k


def reads_object(x, obj):
    return x + obj.k


def test_type_and_attribute_guards():
    x = torch.randn(2)
    check = compiled_check(reads_object, x, Thing(1))
    assert check.fn({"x": x, "obj": Thing(1)}) is True
    assert reason(check, {"x": x, "obj": Thing(2)}) == "L['obj'].k value mismatch: expected 1, got 2"

    class Other:
        k = 1

    assert reason(check, {"x": x, "obj": Other()}).startswith("L['obj'] type mismatch: expected Thing, got ")


def _call_module(m, x):
    return m(x)


def test_module_type_and_grad_mode_guards():
    """A module is guarded by its class and what is read of it: another instance alike passes."""
    lin = torch.nn.Linear(3, 3)
    x = torch.randn(1, 3)
    check = compiled_check(_call_module, lin, x)
    assert check.fn({"m": lin, "x": x}) is True
    assert check.fn({"m": torch.nn.Linear(3, 3), "x": x}) is True
    assert reason(check, {"m": torch.nn.Identity(), "x": x}) == "L['m'] type mismatch: expected Linear, got Identity"
    assert " size mismatch at dim 0: expected 3, got 2" in reason(check, {"m": torch.nn.Linear(3, 2), "x": x})
    with torch.no_grad():
        assert reason(check, {"m": lin, "x": x}) == "grad mode mismatch: expected True, got False"


def test_module_identity_guard_without_shared_entries(monkeypatch):
    monkeypatch.setattr(minidynamo.config, "share_module_entries", False)
    lin = torch.nn.Linear(3, 3)
    x = torch.randn(1, 3)
    check = compiled_check(_call_module, lin, x)
    assert check.fn({"m": lin, "x": x}) is True
    assert reason(check, {"m": torch.nn.Linear(3, 3), "x": x}) == "L['m'] is not the object seen when compiling"


def test_aliasing_guards():
    def f(a, b):
        return a + b

    x, y = torch.randn(3), torch.randn(3)
    distinct = compiled_check(f, x, y)
    assert reason(distinct, {"a": x, "b": x}) == "L['a'] and L['b'] are now the same tensor"
    same = compiled_check(f, x, x)
    assert same.fn({"a": y, "b": y}) is True
    assert reason(same, {"a": x, "b": y}) == "L['b'] is no longer the same tensor as L['a']"


def test_shared_checks_pass_once_per_lookup():
    def f(x, n):
        return x * n

    cnt = CompileCounter()
    compiled = minidynamo.optimize(cnt, dynamic=False)(f)  # one entry per n, all sharing x's checks
    x = torch.randn(4)
    for n in range(5):
        compiled(x, n)
    entries = _C.get_cache_entries(f.__code__)
    assert len(entries) == 5 and cnt.frame_count == 5
    stats_before = _C.stats()["hits"]
    for n in range(5):
        torch.testing.assert_close(compiled(x, n), f(x, n))
    assert _C.stats()["hits"] == stats_before + 5


def test_entry_dropped_when_identified_object_dies(monkeypatch):
    monkeypatch.setattr(minidynamo.config, "share_module_entries", False)  # the module's identity is guarded

    def f(x, m):
        return m(x)

    compiled = minidynamo.optimize(CompileCounter())(f)
    module = torch.nn.Linear(2, 2)
    compiled(torch.randn(2), module)
    assert len(_C.get_cache_entries(f.__code__)) == 1
    del module
    gc.collect()
    assert _C.get_cache_entries(f.__code__) == [], "the entry guarding on a dead module is dropped"


def test_recompile_reason_is_logged(caplog):
    compiled = minidynamo.optimize(CompileCounter())(tensor_fn)
    compiled(torch.randn(8))
    with caplog.at_level(logging.INFO, logger="minidynamo.recompiles"):
        compiled(torch.randn(16))
    assert "L['x'] size mismatch at dim 0: expected 8, got 16" in caplog.text
    assert minidynamo.stats()["recompiles"] == 1


def test_cache_limit_warning_names_function_and_guard():
    old = minidynamo.config.cache_size_limit
    minidynamo.config.cache_size_limit = 2
    try:
        compiled = minidynamo.optimize(CompileCounter(), dynamic=False)(tensor_fn)
        compiled(torch.randn(1))
        compiled(torch.randn(2))
        x3 = torch.randn(3)
        with pytest.warns(RuntimeWarning) as caught:
            torch.testing.assert_close(compiled(x3), tensor_fn(x3))
        message = str(caught[0].message)
        assert "'tensor_fn'" in message and "cache size limit (2 entries)" in message
        assert "L['x'] size mismatch at dim 0: expected 2, got 3" in message
    finally:
        minidynamo.config.cache_size_limit = old


def test_stats_counters():
    def f(x):
        y = x + 1
        print("break", end="")
        return y * 2

    compiled = minidynamo.optimize(CompileCounter())(f)
    compiled(torch.randn(2))
    compiled(torch.randn(2))
    s = minidynamo.stats()
    assert s["compiled"] == 2 and s["graph_breaks"] == 1
    assert s["cache_hits"] >= 2 and s["cache_misses"] >= 2 and s["frames_seen"] >= 4


def fuzz_target(x, y, k, scale, use_y):
    out = x * scale + k
    if use_y:
        out = out + y.sum()
    return out.float() if k % 2 else out


def test_fuzz_guards_never_run_stale_entries():
    rng = random.Random(0)
    torch.manual_seed(0)
    compiled = minidynamo.optimize(CompileCounter())(fuzz_target)
    old = minidynamo.config.cache_size_limit
    minidynamo.config.cache_size_limit = 64
    try:
        for _ in range(300):
            shape = rng.choice([(2,), (3,), (2, 3), (4, 1)])
            dtype = rng.choice([torch.float32, torch.float64, torch.int64])
            x = (torch.randn(shape) * 10).to(dtype)
            if dtype.is_floating_point and rng.random() < 0.3:
                x.requires_grad_(True)
            y = torch.randn(rng.choice([(2,), (5,)]))
            k, scale, use_y = rng.randint(0, 3), rng.choice([1, 2.5, -1]), rng.random() < 0.5
            got = compiled(x, y, k, scale, use_y)
            want = fuzz_target(x, y, k, scale, use_y)
            assert got.dtype == want.dtype and got.requires_grad == want.requires_grad
            torch.testing.assert_close(got, want)
    finally:
        minidynamo.config.cache_size_limit = old


def test_checks_shared_by_entries_run_once_per_lookup():
    """Two entries share one GuardCheck: a lookup that rejects the first entry and accepts the
    second evaluates the shared check once."""
    from minidynamo import GuardedCode
    from minidynamo.eval_frame import optimize_with_callback

    calls = []

    def counted():
        calls.append(1)
        return True

    def target(n):
        return n + 1

    slot = {"n": 0}
    shared = _C.GuardCheck(_C.CHK_CALL, counted, expected2=True)
    accessors = [(_C.ACC_LOCAL, -1, "n", slot["n"])]
    sets = [
        _C.GuardSet(accessors, [(shared, -1, -1), (_C.GuardCheck(_C.CHK_EQUALS, value), 0, -1)])
        for value in (1, 2)
    ]
    made = iter(sets)

    def callback(frame):
        return GuardedCode(frame.f_code, next(made))

    compiled = optimize_with_callback(callback)(target)
    compiled(1)
    compiled(2)
    assert len(_C.get_cache_entries(target.__code__)) == 2
    calls.clear()
    assert compiled(1) == 2  # entry for 2 (front) rejects, entry for 1 accepts
    assert len(calls) == 1, "the shared check ran once for two entries"
    assert sets[0]({"n": 1}) is True and sets[0]({"n": 2}) is False, "a GuardSet also checks a locals dict"


def test_explain_shows_recompile_reasons():
    def helper(t):
        print(end="")  # a break: the helper runs as a frame of its own, compiled per input
        return t * 2

    def calls_twice(a, b):
        return helper(a) + helper(b).sum()

    out = minidynamo.explain(calls_twice)(torch.randn(4), torch.randn(6, 2))
    assert any("helper: L['t']" in r and "rank mismatch: expected 1, got 2" in r for r in out.recompile_reasons)
    assert "--- recompiles ---" in str(out)
