"""What the "cpp" and "triton" backends share: whole modules, gradients through aot_autograd and
the cases that must run eagerly, each checked on both code generators (triton in interpreter
mode without a GPU)."""
import pytest
import torch
import torch.nn as nn

import minidynamo.config
from minidynamo.backends import lookup_backend
from test_cpp_backend import MODULES, assert_close

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
