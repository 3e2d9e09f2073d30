"""Memory stays flat under many calls; dropped code objects take their cache entries with them."""
import gc
import resource
import tracemalloc
import types
import weakref

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
