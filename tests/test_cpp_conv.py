"""Convolutions and their gradients run by the generated C++ (codegen/cpp_conv.py, cpp_conv_backward.py):
equal to eager, and no torch call left for them."""
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
from minidynamo.codegen.cpp_conv import Conv
from minidynamo.codegen.cpp_conv_backward import ConvBackward
from minidynamo.codegen.cpp_pipeline import compile_cpp_graph
from minidynamo.codegen.ir import ExternNode

aten = torch.ops.aten
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-12)}


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory):
    old = minidynamo.config.cache_dir
    minidynamo.config.cache_dir = str(tmp_path_factory.mktemp("conv-kernels"))
    yield
    minidynamo.config.cache_dir = old


def _compile(fn, *inputs):
    return compile_cpp_graph(make_fx(fn)(*inputs), list(inputs))


def _convs(graph) -> list:
    assert not [s for s in graph.steps if isinstance(s, ExternNode)
                and s.fn is torch.ops.aten.convolution.default], "a convolution ran through torch"
    return [s for s in graph.steps if isinstance(s, Conv)]


CASES = {  # name -> (module, input size)
    "conv1d": (lambda: nn.Conv1d(4, 6, 3), (2, 4, 20)),
    "conv1d_stride_no_bias": (lambda: nn.Conv1d(1, 16, 10, stride=5, bias=False), (2, 1, 200)),
    "conv1d_pad_dilation": (lambda: nn.Conv1d(5, 7, 4, padding=3, dilation=2), (3, 5, 17)),
    "conv1d_groups": (lambda: nn.Conv1d(16, 16, 8, padding=4, groups=4), (2, 16, 19)),
    "conv1d_depthwise": (lambda: nn.Conv1d(6, 12, 3, padding=1, groups=6), (2, 6, 9)),
    "conv2d": (lambda: nn.Conv2d(3, 8, 3, padding=1), (2, 3, 10, 12)),
    "conv2d_no_bias": (lambda: nn.Conv2d(4, 4, 1, bias=False), (1, 4, 5, 5)),
    "conv2d_stride_pad": (lambda: nn.Conv2d(3, 5, (3, 5), stride=(2, 3), padding=(2, 1)), (2, 3, 11, 13)),
    "conv2d_dilation_groups": (lambda: nn.Conv2d(6, 9, 3, padding=2, dilation=2, groups=3), (2, 6, 9, 8)),
    "conv2d_patches": (lambda: nn.Conv2d(3, 16, 4, stride=4), (2, 3, 16, 16)),
    "conv2d_padding_wider_than_kernel": (lambda: nn.Conv2d(2, 3, 2, padding=3), (1, 2, 3, 4)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(CASES))
def test_convolution_equals_eager_with_no_torch_call(name, dtype):
    make, size = CASES[name]
    torch.manual_seed(0)
    conv = make().to(dtype)
    x = torch.randn(size, dtype=dtype)
    graph = _compile(lambda x: conv(x), x)
    with torch.no_grad():
        torch.testing.assert_close(graph(x), conv(x), **TOL[dtype])
    assert len(_convs(graph)) == 1


@pytest.mark.parametrize("name", ["conv1d_groups", "conv2d_dilation_groups", "conv2d"])
def test_channels_last_input_and_permuted_weight(name):
    """A channels-last input is gathered as whole pixels; a weight in neither gather order is
    reordered in the kernel."""
    make, size = CASES[name]
    torch.manual_seed(1)
    conv = make()
    x = torch.randn(size)
    x_last = x.transpose(1, -1).contiguous().transpose(1, -1)  # channels stride 1
    w_odd = conv.weight.detach().transpose(0, -1).contiguous().transpose(0, -1)  # output channels stride 1

    def f(x, w):
        return conv._conv_forward(x, w, conv.bias)

    graph = _compile(f, x_last, w_odd)
    with torch.no_grad():
        torch.testing.assert_close(graph(x_last, w_odd), conv(x), **TOL[torch.float32])
    assert len(_convs(graph)) == 1


def test_epilogue_and_pooling_join_the_convolution_in_one_group():
    """Batch norm, ReLU, max pooling and the next convolution run in the same exported function
    as the convolution: the wrapper makes one call."""
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 4, 3, padding=1), nn.ReLU()).eval()
    x = torch.randn(2, 3, 12, 12)
    graph = _compile(lambda x: net(x), x)
    with torch.no_grad():
        torch.testing.assert_close(graph(x), net(x), **TOL[torch.float32])
    assert len(_convs(graph)) == 2
    assert not [s for s in graph.steps if isinstance(s, ExternNode)]
    assert len(graph.groups) == 1


def test_new_weights_are_read_on_every_call():
    """The weight is read where it lives on each call: an in-place update, a replaced parameter
    and an optimizer step show in the next result."""
    torch.manual_seed(2)
    conv = nn.Conv2d(3, 4, 3, padding=1)
    x = torch.randn(2, 3, 6, 6)
    fn = minidynamo.optimize("cpp")(conv)
    fallbacks = minidynamo.stats()["backend_fallbacks"]
    with torch.no_grad():
        torch.testing.assert_close(fn(x), conv(x))
        conv.weight.mul_(-2)
        torch.testing.assert_close(fn(x), conv(x))
        conv.weight = nn.Parameter(torch.randn(4, 3, 3, 3))
        torch.testing.assert_close(fn(x), conv(x))
    opt = torch.optim.SGD(conv.parameters(), lr=0.5)
    conv(x).sum().backward()
    opt.step()
    with torch.no_grad():
        torch.testing.assert_close(fn(x), conv(x))
    assert minidynamo.stats()["backend_fallbacks"] == fallbacks
    assert any(isinstance(s, Conv) for g in list(perf._graphs) for s in getattr(g, "steps", ()))
    minidynamo.reset()


def test_training_gradients_equal_eager():
    """Under aot_autograd the forward's convolutions run in the generated code; the backward's
    gradients equal eager's."""
    torch.manual_seed(3)
    ref = nn.Sequential(nn.Conv1d(2, 6, 5, stride=2, groups=2), nn.GELU(), nn.Conv1d(6, 4, 3, padding=1))
    model = copy.deepcopy(ref)
    x = torch.randn(3, 2, 21)
    before = set(map(id, perf._graphs))
    fn = lookup_backend("cpp")(torch.fx.symbolic_trace(model), [x])
    ref(x).square().mean().backward()
    fn(x).square().mean().backward()
    new = [g for g in list(perf._graphs) if id(g) not in before]
    assert sum(isinstance(s, Conv) for g in new for s in g.steps) == 2  # the forward's
    for p, q in zip(ref.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, **TOL[torch.float32])


def test_large_convolutions_stay_with_onednn(monkeypatch):
    monkeypatch.setattr(cpp_conv, "GENERATED_MAX_MACS", 1000)
    conv = nn.Conv2d(3, 8, 3)
    x = torch.randn(1, 3, 10, 10)
    graph = _compile(lambda x: conv(x), x)
    with torch.no_grad():
        torch.testing.assert_close(graph(x), conv(x))
    assert not [s for s in graph.steps if isinstance(s, Conv)]
    assert [s.fn for s in graph.steps if isinstance(s, ExternNode)] == [torch.ops.aten.convolution.default]


def test_large_weights_are_read_in_place():
    """A weight too large to copy on the stack is read where it lies: a channels-last input is
    then gathered plane by plane to the contiguous weight's order; a weight in neither order
    stays with oneDNN."""
    torch.manual_seed(4)
    conv = nn.Conv2d(64, 128, 3)
    x = torch.randn(1, 64, 4, 4).contiguous(memory_format=torch.channels_last)
    graph = _compile(lambda x: conv(x), x)
    with torch.no_grad():
        torch.testing.assert_close(graph(x), conv(x), **TOL[torch.float32])
    (step,) = _convs(graph)
    assert not step.pixels
    w_odd = conv.weight.detach().transpose(0, -1).contiguous().transpose(0, -1)
    graph = _compile(lambda x, w: conv._conv_forward(x, w, None), x, w_odd)
    with torch.no_grad():
        torch.testing.assert_close(graph(x, w_odd), conv._conv_forward(x, w_odd, None), **TOL[torch.float32])
    assert not [s for s in graph.steps if isinstance(s, Conv)]


def test_parallel_convolutions_equal_eager():
    """With two threads a graph with enough work splits each large convolution's (image, group,
    tile) loop between them; every tile's result lands where it belongs."""
    torch.manual_seed(5)
    net = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1, groups=2), nn.ReLU(), nn.Conv2d(32, 16, 3, padding=1),
                        nn.Conv2d(16, 16, 3, padding=1))
    x = torch.randn(2, 16, 32, 32)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        graph = _compile(lambda x: net(x), x)
        assert not graph.serial and all(s.macs >= cpp_conv.GEMM_PARALLEL_MIN_MACS for s in _convs(graph))
        with torch.no_grad():
            torch.testing.assert_close(graph(x), net(x), **TOL[torch.float32])
    finally:
        torch.set_num_threads(threads)


# -- the backward: convolution_backward in the generated code (cpp_conv_backward) ----------------

# gradients sum over images and positions: float32 error grows with them
GRAD_TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-10, atol=1e-10)}

# (input size, weight size, stride, padding, dilation, groups, output mask, channels-last)
GRAD_CASES = [
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


def _operands(dtype: torch.dtype) -> list:
    """(dy, x, w) per case; channels-last cases have all three channels-last."""
    torch.manual_seed(0)
    out = []
    for x_size, w_size, stride, padding, dilation, groups, _, last in GRAD_CASES:
        x, w = torch.randn(x_size, dtype=dtype), torch.randn(w_size, dtype=dtype)
        dy = torch.randn_like(torch.convolution(x, w, None, stride, padding, dilation, False, [0] * (x.dim() - 2), groups))
        if last:
            x, w, dy = (t.contiguous(memory_format=torch.channels_last) for t in (x, w, dy))
        out += [dy, x, w]
    return out


def _gradients(*operands):
    grads = []
    for (x_size, _, stride, padding, dilation, groups, mask, _), k in zip(GRAD_CASES, range(0, len(operands), 3)):
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
    graph = _compile(_gradients, *operands)
    assert not [s for s in graph.steps if isinstance(s, ExternNode)], "a gradient ran through torch"
    assert sum(isinstance(s, ConvBackward) for s in graph.steps) == len(GRAD_CASES)
    got, want = graph(*operands), _gradients(*operands)
    assert len(got) == len(want)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, **GRAD_TOL[dtype])


def test_training_backward_runs_in_generated_code():
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
            torch.testing.assert_close(q.grad, p.grad, **GRAD_TOL[torch.float32])
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
    graph = _compile(f, *operands)
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
        graph = _compile(f, dy, x, *ws)
        steps = [s for s in graph.steps if isinstance(s, ConvBackward)]
        assert not graph.serial and len(steps) == 2
        assert all(s.weights.macs >= cpp_conv.GEMM_PARALLEL_MIN_MACS for s in steps)
        for g, e in zip(graph(dy, x, *ws), f(dy, x, *ws)):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-3)
    finally:
        torch.set_num_threads(threads)
