"""Memory stays flat under many calls; dropped code objects take their cache entries with them."""
import gc
import resource
import tracemalloc
import types
import weakref

import pytest

from minidynamo import GuardedCode, _C
from minidynamo.eval_frame import optimize_with_callback


def identity_callback(frame):
    return GuardedCode(frame.f_code, _always)


def _always(L):
    return True


def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024


def test_100k_cached_calls_keep_memory_flat():
    def work(a, b=2, *args, **kwargs):
        return a + b

    compiled = optimize_with_callback(identity_callback)(work)
    for i in range(1000):
        compiled(i, b=1)
    gc.collect()
    tracemalloc.start()
    before_rss = rss_kib()
    snapshot = tracemalloc.take_snapshot()
    for i in range(100_000):
        compiled(i, 3, 4, k=5)
    gc.collect()
    growth = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(snapshot, "filename"))
    tracemalloc.stop()
    assert growth < 64 * 1024, f"tracemalloc grew by {growth} bytes"
    assert rss_kib() - before_rss < 4096
    assert _C.stats()["hits"] >= 100_000


def test_10k_dropped_code_objects_are_collected_with_their_entries():
    def template(x):
        return x * 2

    gc.collect()  # code objects earlier tests dropped in cycles would be counted in the baseline only
    baseline = _C.stats()
    refs = []
    for i in range(10_000):
        fn = types.FunctionType(template.__code__.replace(co_name=f"f{i}"), globals())
        assert optimize_with_callback(identity_callback)(fn)(i) == 2 * i
        refs.append(weakref.ref(fn.__code__))
        del fn
    gc.collect()
    assert all(r() is None for r in refs), "code objects are collected"
    after = _C.stats()
    assert after["live_entries"] == baseline["live_entries"]
    assert after["live_code_extras"] == baseline["live_code_extras"]


def test_code_whose_globals_refer_back_is_collected():
    """A cached function holds the module globals, which hold the function: a cycle through
    co_extra that the gc hook breaks before full collections."""
    gc.collect()
    baseline = _C.stats()["live_entries"]
    refs = []
    for i in range(500):
        namespace = {}
        exec(f"def g{i}(x):\n    return x + {i}\n", namespace)
        fn = namespace[f"g{i}"]
        compiled = optimize_with_callback(identity_callback)(fn)
        assert compiled(1) == 1 + i and compiled(2) == 2 + i
        refs.append(weakref.ref(fn.__code__))
        del fn, compiled, namespace
    gc.collect()
    gc.collect()
    assert all(r() is None for r in refs)
    assert _C.stats()["live_entries"] == baseline


def _compile_fresh_linears(backend: str, count: int, refs: dict) -> None:
    import torch

    import minidynamo
    from minidynamo.backends import lookup_backend

    def recording(gm, example_inputs):
        compiled = lookup_backend(backend)(gm, example_inputs)
        refs["graph modules"].append(weakref.ref(gm))
        refs["compiled graphs"].append(weakref.ref(compiled))
        return compiled

    x = torch.randn(2, 8)
    for _ in range(count):
        module = torch.nn.Linear(8, 8)
        compiled = minidynamo.compile(module, backend=recording)
        compiled(x)
        compiled(x)
        refs["modules"].append(weakref.ref(module))
        refs["compiled modules"].append(weakref.ref(compiled))


@pytest.mark.parametrize("backend", ["eager", "cpp"])
def test_fresh_modules_share_one_entry_that_keeps_none_of_them(backend):
    """Fresh modules of one class share one entry (guarded by their class, not their identity),
    which holds none of them: each module and its wrapper is freed once the caller lets go."""
    import torch

    import minidynamo

    minidynamo.reset()
    try:
        refs = {k: [] for k in ("graph modules", "compiled graphs", "modules", "compiled modules")}
        _compile_fresh_linears(backend, 30, refs)
        gc.collect()
        alive = {kind: sum(r() is not None for r in rs) for kind, rs in refs.items()}
        assert alive == {"graph modules": 1, "compiled graphs": 1, "modules": 0, "compiled modules": 0}, alive
        assert len(_C.get_cache_entries(torch.nn.Linear.forward.__code__)) == 1
    finally:
        minidynamo.reset()


@pytest.mark.parametrize("backend", ["eager", "cpp"])
def test_dead_modules_take_their_graphs_compiled_code_and_entries_with_them(backend, monkeypatch):
    """Where each module's identity is guarded, each fresh module compiles its own entry; once the
    module is gone, its entry, GraphModule and compiled graph are freed."""
    import torch

    import minidynamo

    monkeypatch.setattr(minidynamo.config, "share_module_entries", False)
    minidynamo.reset()
    try:
        for count in (30, 60):
            minidynamo.reset()  # 90 fresh modules in all would pass config.dropped_entry_limit
            refs = {k: [] for k in ("graph modules", "compiled graphs", "modules", "compiled modules")}
            _compile_fresh_linears(backend, count, refs)
            gc.collect()
            alive = {kind: sum(r() is not None for r in rs) for kind, rs in refs.items()}
            assert alive == dict.fromkeys(refs, 0), alive
            assert len(refs["graph modules"]) == count
            assert _C.get_cache_entries(torch.nn.Linear.forward.__code__) == []
    finally:
        minidynamo.reset()
