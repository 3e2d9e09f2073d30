"""Compiling the same function several times with the same backend and settings traces it once
(issue 30): the cache entries are shared between those compiled callables, as torch.compile shares
them; other backends or settings (fullgraph, dynamic, options) keep their own."""
import pytest
import torch
from torch import nn

from translator_harness import REFERENCE, CompileCounter, optimize, fresh_dynamo  # noqa: F401


def smooth(x):
    return torch.sin(x) * 2 + 1


def branchy(x):
    y = x + 1
    print("break")
    return y * 2


def test_the_same_backend_object_traces_once():
    cnt = CompileCounter()
    fns = [optimize(cnt)(smooth) for _ in range(3)]
    x = torch.randn(4)
    for fn in fns + fns:
        torch.testing.assert_close(fn(x), smooth(x))
    assert cnt.frame_count == 1
    for fn in fns:  # a new shape recompiles once for all of them
        fn(torch.randn(5))
    assert cnt.frame_count == 2


@pytest.mark.skipif(REFERENCE, reason="checks minidynamo.compile and its stats")
def test_compile_by_backend_name_traces_once_for_functions_and_modules():
    import minidynamo

    x = torch.randn(4)
    for fn in [minidynamo.compile(smooth) for _ in range(3)] + [minidynamo.optimize("eager")(smooth)]:
        torch.testing.assert_close(fn(x), smooth(x))
    assert minidynamo.stats()["compiled"] == 1
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    for wrapper in [minidynamo.compile(model) for _ in range(3)]:
        torch.testing.assert_close(wrapper(x), model(x))
    assert minidynamo.stats()["compiled"] == 2


@pytest.mark.skipif(REFERENCE, reason="checks minidynamo.compile and its stats")
def test_other_settings_keep_their_own_entries():
    import minidynamo

    calls = []

    def backend(gm, example_inputs, options=None):
        calls.append(options)
        return gm.forward

    x = torch.randn(4)
    for options in ({"a": 1}, {"a": 1}, {"a": 2}, {"a": True}):
        minidynamo.compile(smooth, backend=backend, options=options)(x)
    assert calls == [{"a": 1}, {"a": 2}, {"a": True}]
    minidynamo.compile(smooth, dynamic=True)(x)
    minidynamo.compile(smooth, dynamic=False)(x)
    minidynamo.compile(smooth, backend="aot_eager")(x)
    assert minidynamo.stats()["compiled"] == 6


@pytest.mark.skipif(REFERENCE, reason="reference (torch) differs: torch._dynamo runs the entry compiled without "
                                       "nopython, graph break and all, for the nopython callable")
def test_fullgraph_does_not_reuse_entries_that_break_the_graph():
    cnt = CompileCounter()
    x = torch.randn(4)
    torch.testing.assert_close(optimize(cnt)(branchy)(x), branchy(x))
    with pytest.raises(Exception):
        optimize(cnt, nopython=True)(branchy)(x)


@pytest.mark.skipif(REFERENCE, reason="checks minidynamo.reset")
def test_reset_forgets_what_shared_callbacks_saw():
    """After reset() a function compiles as on its first call: sizes seen before reset do not make
    the next compile dynamic."""
    import minidynamo

    cnt = CompileCounter()
    fn = minidynamo.optimize(cnt)(smooth)
    fn(torch.randn(4))
    fn(torch.randn(5))  # a recompile on a size change: the size becomes dynamic
    minidynamo.reset()
    again = minidynamo.optimize(cnt)(smooth)
    again(torch.randn(6))
    again(torch.randn(7))
    assert cnt.frame_count == 4, "after reset, the first size is static again and the second recompiles"
