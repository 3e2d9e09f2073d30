"""Guards that were missing or too strict: objects new on each call guarded by what the trace reads of
them (not by identity), builtins rebound or shadowed after compiling, and the cache-size-limit
warning issued once, filterable, and never raised into the call."""
import builtins
import contextlib
import functools
import sys
import types
import warnings

import pytest
import torch

from translator_harness import REFERENCE, CompileCounter, optimize, reset

if not REFERENCE:
    import minidynamo


@pytest.fixture(autouse=True)
def fresh():
    reset()
    yield
    reset()


def _break():
    print("graph break")  # noqa: T201


def _compiled_count() -> int:
    if REFERENCE:
        return torch._dynamo.utils.counters["stats"]["unique_graphs"]
    return minidynamo.stats()["compiled"]


def _compiles_per_call(fn, *args, calls=6):
    """Frames compiled by each of `calls` identical calls; each result compared with eager."""
    compiled = optimize(CompileCounter())(fn)
    counts = []
    for _ in range(calls):
        before = _compiled_count()
        torch.testing.assert_close(compiled(*args), fn(*args))
        counts.append(_compiled_count() - before)
    return counts


# ---- builtins rebound or shadowed after compiling ----


def _max_of(x):
    return x * max(2, 3)


def _print_of(x):
    print("value")  # noqa: T201
    return x + 1


def _len_of(x, items):
    return x * len(items)


@contextlib.contextmanager
def _rebound(name, value):
    old = getattr(builtins, name)
    setattr(builtins, name, value)
    try:
        yield
    finally:
        setattr(builtins, name, old)


def test_rebinding_builtins_max_after_compiling_runs_the_new_one():
    x = torch.ones(2)
    compiled = optimize(CompileCounter())(_max_of)
    torch.testing.assert_close(compiled(x), x * 3)
    with _rebound("max", lambda *args: 10):
        torch.testing.assert_close(compiled(x), _max_of(x))
        torch.testing.assert_close(compiled(x), x * 10)
    torch.testing.assert_close(compiled(x), x * 3)


def test_rebinding_builtins_print_after_compiling_calls_the_new_one(capsys):
    x = torch.ones(2)
    compiled = optimize(CompileCounter())(_print_of)
    compiled(x)
    seen = []
    with _rebound("print", lambda *args, **kwargs: seen.append(args)):
        torch.testing.assert_close(compiled(x), x + 1)
    assert seen == [("value",)]
    compiled(x)
    assert capsys.readouterr().out.count("value") == 2


def test_global_shadowing_a_builtin_added_after_compiling():
    x, items = torch.ones(2), [1, 2]
    compiled = optimize(CompileCounter())(_len_of)
    torch.testing.assert_close(compiled(x, items), x * 2)
    globals()["len"] = lambda obj: 7
    try:
        torch.testing.assert_close(compiled(x, items), _len_of(x, items))
        torch.testing.assert_close(compiled(x, items), x * 7)
    finally:
        del globals()["len"]
    torch.testing.assert_close(compiled(x, items), x * 2)


def test_unrelated_global_writes_keep_the_entry():
    """The builtins check notices any write to the globals dict and looks the names up again: a write
    that shadows nothing still hits the entry."""
    x = torch.ones(2)
    counter = CompileCounter()
    compiled = optimize(counter)(_max_of)
    for i in range(5):
        globals()["_unrelated_counter"] = i
        torch.testing.assert_close(compiled(x), x * 3)
    assert counter.frame_count == 1


_OTHER_MODULE_SOURCE = '''
def scaled(x):
    return x * max(2, 3)
'''


def _module_with_builtins(name, own_builtins):
    module = types.ModuleType(name)
    module.__dict__["__builtins__"] = own_builtins
    exec(compile(_OTHER_MODULE_SOURCE, f"<{name}>", "exec"), module.__dict__)
    return module


def test_builtins_of_another_module_are_the_ones_read():
    """A function inlined from a module with its own `__builtins__` reads those (as CPython does),
    and a later change to them is seen."""
    own = dict(vars(builtins), max=lambda *args: 5)
    module = _module_with_builtins("own_builtins_module", own)

    def fn(x):
        return module.scaled(x) + 1

    x = torch.ones(2)
    compiled = optimize(CompileCounter())(fn)
    torch.testing.assert_close(compiled(x), fn(x))
    torch.testing.assert_close(compiled(x), x * 5 + 1)
    own["max"] = lambda *args: 9
    torch.testing.assert_close(compiled(x), fn(x))
    torch.testing.assert_close(compiled(x), x * 9 + 1)


# ---- the cache-size-limit warning ----


def _sized(x):
    return x + 1


@pytest.mark.skipif(REFERENCE, reason="minidynamo's warning category and cache limit")
def test_cache_limit_warning_under_warnings_as_errors_does_not_reach_the_call():
    old = minidynamo.config.cache_size_limit
    minidynamo.config.cache_size_limit = 2
    try:
        compiled = minidynamo.optimize("eager", dynamic=False)(_sized)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for n in range(1, 7):
                x = torch.randn(n)
                torch.testing.assert_close(compiled(x), x + 1)
    finally:
        minidynamo.config.cache_size_limit = old


@pytest.mark.skipif(REFERENCE, reason="minidynamo's warning category and cache limit")
def test_cache_limit_warning_is_issued_once_with_its_own_category():
    old = minidynamo.config.cache_size_limit
    minidynamo.config.cache_size_limit = 2
    try:
        compiled = minidynamo.optimize("eager", dynamic=False)(_sized)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for n in range(1, 8):
                compiled(torch.randn(n))
        limit = [w for w in caught if issubclass(w.category, minidynamo.CacheSizeLimitWarning)]
        assert len(limit) == 1 and "'_sized'" in str(limit[0].message)
        assert issubclass(minidynamo.CacheSizeLimitWarning, Warning)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.filterwarnings("ignore", category=minidynamo.CacheSizeLimitWarning)
            minidynamo.reset()
            for n in range(1, 8):
                compiled(torch.randn(n))
        assert not caught
    finally:
        minidynamo.config.cache_size_limit = old
