"""Convolution gradients run by the generated C++ (codegen/cpp_conv_backward.py): equal to eager's
over the convolution family, and no convolution_backward torch call left for them."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
from torch.fx.experimental.proxy_tensor import make_fx

import minidynamo
from minidynamo import perf
from minidynamo.backends import lookup_backend
from minidynamo.codegen import cpp_conv
from minidynamo.codegen.cpp_conv_backward import ConvBackward
from minidynamo.codegen.cpp_pipeline import compile_cpp_graph
from minidynamo.codegen.ir import ExternNode

aten = torch.ops.aten
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-10, atol=1e-10)}

# (input size, weight size, stride, padding, dilation, groups, output mask, channels-last)
CASES = [
    ((2, 4, 20), (6, 4, 3), [1], [0], [1], 1, [True, True, True], False),
    ((2, 1, 200), (16, 1, 10), [5], [0], [1], 1, [True, True, False], False),
    ((3, 5, 17), (7, 5, 4), [1], [3], [2], 1, [True, True, True], False),
    ((2, 16, 19), (16, 4, 8), [1], [4], [1], 4, [False, True, True], False),
    ((2, 6, 9), (12, 1, 3), [1], [1], [1], 6, [True, True, True], False),  # depthwise
    ((2, 3, 10, 12), (8, 3, 3, 3), [1, 1], [1, 1], [1, 1], 1, [True, True, True], False),
    ((2, 3, 11, 13), (5, 3, 3, 5), [2, 3], [2, 1], [1, 1], 1, [True, False, True], False),
    ((2, 6, 9, 8), (9, 2, 3, 3), [1, 1], [2, 2], [2, 2], 3, [True, True, True], False),
    ((2, 3, 16, 16), (16, 3, 4, 4), [4, 4], [0, 0], [1, 1], 1, [False, True, False], False),
    ((1, 2, 3, 4), (3, 2, 2, 2), [1, 1], [3, 3], [1, 1], 1, [True, True, True], False),
    ((2, 3, 10, 12), (8, 3, 3, 3), [1, 1], [1, 1], [1, 1], 1, [True, True, True], True),
    ((2, 6, 9, 8), (9, 2, 3, 3), [2, 1], [1, 2], [1, 2], 3, [True, True, True], True),
]


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory):
    old = minidynamo.config.cache_dir
    minidynamo.config.cache_dir = str(tmp_path_factory.mktemp("conv-backward-kernels"))
    yield
    minidynamo.config.cache_dir = old


def _operands(dtype: torch.dtype) -> list:
    """(dy, x, w) per case; channels-last cases have all three channels-last."""
    torch.manual_seed(0)
    out = []
    for x_size, w_size, stride, padding, dilation, groups, _, last in CASES:
        x, w = torch.randn(x_size, dtype=dtype), torch.randn(w_size, dtype=dtype)
        dy = torch.randn_like(torch.convolution(x, w, None, stride, padding, dilation, False, [0] * (x.dim() - 2), groups))
        if last:
            x, w, dy = (t.contiguous(memory_format=torch.channels_last) for t in (x, w, dy))
        out += [dy, x, w]
    return out


def _gradients(*operands):
    grads = []
    for (x_size, _, stride, padding, dilation, groups, mask, _), k in zip(CASES, range(0, len(operands), 3)):
        dy, x, w = operands[k:k + 3]
        out = aten.convolution_backward(dy, x, w, [w.shape[0]], stride, padding, dilation, False,
                                        [0] * (len(x_size) - 2), groups, mask)
        grads += [g for g, wanted in zip(out, mask) if wanted]  # eager may compute one not asked for
    return grads


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gradients_equal_eager_with_no_torch_call(dtype):
    """Every case in one graph (one g++ build per dtype): grad input, weight and bias as masked,
    1-d and 2-d, stride, padding, dilation, groups, depthwise, channels-last."""
    operands = _operands(dtype)
    graph = compile_cpp_graph(make_fx(_gradients)(*operands), operands)
    assert not [s for s in graph.steps if isinstance(s, ExternNode)], "a gradient ran through torch"
    assert sum(isinstance(s, ConvBackward) for s in graph.steps) == len(CASES)
    got, want = graph(*operands), _gradients(*operands)
    assert len(got) == len(want)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, **TOL[dtype])


def test_training_step_backward_runs_generated():
    """A conv / batch norm / ReLU / max pool network under aot_autograd: the backward graph has
    no convolution_backward call left, gradients equal eager's over two steps with the weights
    changed in between, and nothing falls back."""
    torch.manual_seed(3)
    ref = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 6, 3, padding=1, groups=2), nn.ReLU(), nn.Flatten(),
                        nn.Linear(6 * 5 * 5, 3))
    model = copy.deepcopy(ref)
    x = torch.randn(2, 3, 10, 10)
    before = set(map(id, perf._graphs))
    fallbacks = minidynamo.stats()["backend_fallbacks"]
    fn = lookup_backend("cpp")(torch.fx.symbolic_trace(model), [x])
    for _ in range(2):
        ref(x).square().mean().backward()
        fn(x).square().mean().backward()
        for p, q in zip(ref.parameters(), model.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, **TOL[torch.float32])
        with torch.no_grad():
            for m in (ref, model):
                for p in m.parameters():
                    p.sub_(0.1 * p.grad)
                    p.grad = None
    new = [g for g in list(perf._graphs) if id(g) not in before]
    assert sum(isinstance(s, ConvBackward) for g in new for s in g.steps) == 2
    assert not [s for g in new for s in g.steps if isinstance(s, ExternNode)
                and s.fn is aten.convolution_backward.default]
    assert minidynamo.stats()["backend_fallbacks"] == fallbacks


def test_large_convolution_gradients_stay_with_onednn(monkeypatch):
    monkeypatch.setattr(cpp_conv, "GENERATED_MAX_MACS", 1000)
    operands = [torch.randn(1, 8, 8, 8), torch.randn(1, 3, 10, 10), torch.randn(8, 3, 3, 3)]

    def f(dy, x, w):
        return aten.convolution_backward(dy, x, w, [8], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, True])
    graph = compile_cpp_graph(make_fx(f)(*operands), operands)
    assert not [s for s in graph.steps if isinstance(s, ConvBackward)]
    for g, e in zip(graph(*operands), f(*operands)):
        torch.testing.assert_close(g, e)


def test_parallel_gradients_equal_eager():
    """With two threads a graph with enough work splits the input gradient's (image, group) loop
    and the weight gradient's groups (or its products) between them."""
    torch.manual_seed(5)
    x, dy = torch.randn(2, 16, 32, 32), torch.randn(2, 32, 32, 32)
    ws = [torch.randn(32, 16, 3, 3), torch.randn(32, 8, 3, 3)]

    def f(dy, x, w1, w2):
        return [g for groups, w in ((1, w1), (2, w2)) for g in aten.convolution_backward(
            dy, x, w, [32], [1, 1], [1, 1], [1, 1], False, [0, 0], groups, [True, True, True])]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        graph = compile_cpp_graph(make_fx(f)(dy, x, *ws), [dy, x, *ws])
        steps = [s for s in graph.steps if isinstance(s, ConvBackward)]
        assert not graph.serial and len(steps) == 2
        assert all(s.weights.macs >= cpp_conv.GEMM_PARALLEL_MIN_MACS for s in steps)
        for g, e in zip(graph(dy, x, *ws), f(dy, x, *ws)):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-3)
    finally:
        torch.set_num_threads(threads)
