"""Strides of size-0 and size-1 dimensions are each kernel's choice, and torch's meta kernels (hence
fake tensors) may choose differently from the CPU kernels: `y.stride()` of a tensor the graph computes
breaks the graph there (eager answers), and the code generators lay such outputs out as eager does.
Fuzz seed 70605: `(a + 1) * 2` of a (1, 3) slice of a transposed matrix has strides (1, 1) in eager."""
import pytest
import torch

import minidynamo
from test_codegen_backends import backend, cache_dir, graph_compiler  # noqa: F401  (fixtures)


def _sliced():
    return torch.randn(3, 3).t()[:1]


def test_stride_of_a_size_one_dimension_is_eagers(backend):
    def f(a):
        y = [(a + 1) * i for i in range(3)][-1]
        return y, y.stride(), y.stride(1)

    a = _sliced()
    compiled = minidynamo.optimize(backend)(f)
    for _ in range(2):
        out, expected = compiled(a), f(a)
        torch.testing.assert_close(out[0], expected[0])
        assert out[1:] == expected[1:] == ((1, 1), 1)
        assert out[0].stride() == expected[0].stride()


def test_strides_of_inputs_and_larger_dimensions_stay_folded():
    def f(a, b):
        y = b * 2
        return y + a.stride(0) + y.stride(0)  # an input's strides are guarded; (4, 4) has no size-1 dim

    a, b = _sliced(), torch.randn(4, 4)
    out = minidynamo.explain(f)(a, b)
    assert out.graph_count == 1 and out.graph_break_count == 0


def test_generated_outputs_take_eagers_layout(backend):
    a = _sliced()
    gm = torch.fx.symbolic_trace(lambda a: ((a + 1) * 2,))
    expected = gm(a)[0]
    actual = graph_compiler(backend)(gm, [a])(a)[0]
    torch.testing.assert_close(actual, expected)
    assert actual.stride() == expected.stride() == (1, 1)


def test_expanded_output_keeps_eagers_zero_strides(backend):  # noqa: F811
    """An expanded output was returned as a dense copy: a later `.view(-1)` then succeeded where
    eager's raises (fuzz seed 121636). It is one slice in memory viewed with eager's zero strides."""
    def expanded(a):
        y = a.sum(-1, keepdim=True) + a
        return y.expand(2, *y.shape)

    def then_view(a):
        return expanded(a).view(-1)

    a = torch.randn(3, 2, 4, 5)
    got, want = minidynamo.optimize(backend)(expanded)(a), expanded(a)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want)
    minidynamo.reset()
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        minidynamo.optimize(backend)(then_view)(a)
    assert minidynamo.stats()["backend_fallbacks"] == 0
