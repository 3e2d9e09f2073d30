"""What the "cpp" and "triton" backends share: whole modules, gradients through aot_autograd,
input layouts, dtypes, pooling and the cases that must run eagerly, each checked on both code
generators (triton in interpreter mode without a GPU)."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import minidynamo.config
from minidynamo.backends import lookup_backend
from minidynamo.codegen.ir import ExternNode
from test_cpp_backend import MODULES, Batch, assert_close

BACKENDS = ["cpp", "triton"]


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(minidynamo.config, "cache_dir", str(tmp_path))


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == "triton":
        pytest.importorskip("triton", reason="the triton backend needs the optional triton package")
        import minidynamo.backends.triton  # noqa: F401  (sets TRITON_INTERPRET=1 without a GPU)
    return request.param


def graph_compiler(backend):
    """The backend's code generator called directly: graph module and inputs -> compiled graph."""
    if backend == "cpp":
        from minidynamo.codegen.cpp_pipeline import compile_cpp_graph
        return compile_cpp_graph
    from minidynamo.codegen.triton_pipeline import compile_triton_graph
    return compile_triton_graph


@pytest.mark.parametrize("name", list(MODULES))
def test_module_inference(backend, name):
    torch.manual_seed(1)
    make, inputs = MODULES[name]
    m = make().eval()
    with torch.no_grad():
        fn = lookup_backend(backend)(torch.fx.symbolic_trace(m), list(inputs))
        assert hasattr(fn, "compiled"), "fell back to eager"
        assert_close(fn(*inputs), m(*inputs))


def test_autograd_through_aot(backend, monkeypatch):
    codegen = lookup_backend(backend)
    compiled = []
    original = codegen.compile_inference

    def counting(gm, inputs):
        fn = original(gm, inputs)
        compiled.append((fn, gm))
        return fn

    monkeypatch.setattr(codegen, "compile_inference", counting)
    torch.manual_seed(2)
    m = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 4))
    x = torch.randn(6, 16, requires_grad=True)
    fn = codegen(torch.fx.symbolic_trace(m), [x])
    out = fn(x)
    (out * torch.arange(4.0)).sum().backward()
    grads = [x.grad.clone()] + [p.grad.clone() for p in m.parameters()]
    x.grad = None
    m.zero_grad()
    ref = m(x)
    (ref * torch.arange(4.0)).sum().backward()
    assert_close(out.detach(), ref.detach())
    for g, p in zip(grads, [x] + list(m.parameters())):
        assert_close(g, p.grad)
    # Forward and backward were both compiled by our code generator, not run eagerly.
    assert len(compiled) == 2 and all(f != gm.forward for f, gm in compiled)


def test_grad_mode_at_call_time_falls_back_to_eager(backend):
    m = nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with torch.no_grad():
        fn = lookup_backend(backend)(torch.fx.symbolic_trace(m), [x])
    fn(x).sum().backward()  # grad mode on now, parameters require grad
    assert m.weight.grad is not None


def test_non_tensor_inputs_fall_back(backend):
    gm = torch.fx.symbolic_trace(lambda x, n: x * n)
    assert lookup_backend(backend)(gm, [torch.randn(3), 2]) == gm.forward


def test_input_mutation_falls_back_to_eager(backend):
    def f(x):
        x.add_(1)
        return x * 2

    x = torch.zeros(4)
    fn = lookup_backend(backend)(torch.fx.symbolic_trace(f), [x.clone()])
    out = fn(x)
    assert torch.equal(x, torch.ones(4)) and torch.equal(out, torch.full((4,), 2.0))


def test_non_contiguous_inputs(backend):
    base = torch.randn(12, 40)
    transposed = base.t()  # strides (1, 40)
    sliced = base[2:10, 5:37:2]  # storage offset and step
    expanded = torch.randn(1, 16).expand(8, 16)  # stride 0
    ops = {
        "t": lambda a, b, c: a * 2 + 1, "t_sum": lambda a, b, c: a.sum(1), "slice": lambda a, b, c: b.exp(),
        "mix": lambda a, b, c: b * c + b.sum(0), "softmax_t": lambda a, b, c: F.softmax(a, -1),
    }
    batch = Batch(ops, transposed, sliced, expanded, compile=graph_compiler(backend))
    for name in ops:
        batch.check(name)
    # The compiled graph still answers correctly when called with other strides than compiled for.
    fresh = [transposed.contiguous(), sliced.contiguous(), expanded.contiguous()]
    for actual, expected in zip(batch.compiled(*fresh), (ops[n](*fresh) for n in ops)):
        assert_close(actual, expected)


def test_float64_and_int_dtypes(backend):
    x = torch.randn(8, 16, dtype=torch.float64)
    i = torch.randint(-100, 100, (8, 16), dtype=torch.int64)
    ops = {
        "chain64": lambda x, i: (x.exp() * 2 - x.sin()).tanh(), "softmax64": lambda x, i: F.softmax(x, -1),
        "sum64": lambda x, i: x.sum(0), "int_chain": lambda x, i: (i * 3 + 7) // 2 - i % 4,
        "int_sum": lambda x, i: (i * i).sum(), "int_to_double": lambda x, i: i / 3 + x,
    }
    batch = Batch(ops, x, i, compile=graph_compiler(backend))
    for name in ops:
        batch.check(name)


POOLS = {
    "2x2": dict(kernel_size=2),
    "3x3_stride_2": dict(kernel_size=3, stride=2),
    "2x3_stride_1": dict(kernel_size=(2, 3), stride=1),
    "dilated": dict(kernel_size=2, stride=1, dilation=2),
    "ceil_mode_exact": dict(kernel_size=2, ceil_mode=True),
}


@pytest.mark.parametrize("name", list(POOLS))
def test_max_pool2d_values_and_indices_are_lowered(backend, name):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 10)
    x[0, 1, 2, 3] = float("nan")
    x[1, 2, 4:6, 4:6] = 0.5  # ties: the first position in the window wins
    x[1, 0, 0, 0:2] = float("nan")  # two NaNs in one window: the last one's index, as in eager
    kw = POOLS[name]

    def f(x):
        v, i = F.max_pool2d(x.relu() * 2, return_indices=True, **kw)
        return v + 1, i

    g = graph_compiler(backend)(torch.fx.symbolic_trace(f), [x])
    assert not [s for s in g.steps if isinstance(s, ExternNode)], "max_pool2d ran as an extern"
    (v, i), (ev, ei) = g(x), f(x)
    torch.testing.assert_close(v, ev, equal_nan=True)
    assert torch.equal(i, ei)
