import pytest

import minidynamo
from minidynamo import _C


@pytest.fixture(autouse=True)
def _fresh_caches():
    minidynamo.reset()
    yield
    assert _C.get_eval_frame() is None, "a test left an eval-frame callback set"
    minidynamo.reset()


@pytest.fixture
def retraces(monkeypatch):
    """Counts of the functionalising traces and of the FX-level rewrites that were taken."""
    from minidynamo.codegen import trace

    seen = {"functionalize": 0, "fx": 0}
    functional, rewrite = trace._functional_trace, trace._fx_functional_trace

    def functionalising(*args, **kwargs):
        seen["functionalize"] += 1
        return functional(*args, **kwargs)

    def rewritten(*args):
        result = rewrite(*args)
        seen["fx"] += result is not None
        return result
    monkeypatch.setattr(trace, "_functional_trace", functionalising)
    monkeypatch.setattr(trace, "_fx_functional_trace", rewritten)
    return seen
