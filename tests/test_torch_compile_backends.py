"""Our code generators inside torch.compile: found by name through the `torch_dynamo_backends`
entry points, and compiling torch's own graphs, static and with torch's symbolic sizes (SymInt
inputs, fake tensors sized by its shape env's symbols) into kernels that take the sizes as
arguments, equal to eager and without falling back to eager torch."""
import importlib.metadata
import json
import pathlib
import tomllib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import minidynamo
from minidynamo.backends import lookup_backend
from minidynamo.codegen import cpp_pipeline
from minidynamo.counters import fallbacks
from test_cpp_backend import assert_close

ROOT = pathlib.Path(__file__).resolve().parents[1]
BACKENDS = {"minidynamo_cpp": "cpp", "minidynamo_triton": "triton"}
SIZES = (4, 5, 9, 12)  # never 0 or 1 (static in torch), nor equal to a static dim (torch would give both one symbol)


def _declared_entry_points():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    return [importlib.metadata.EntryPoint(name, value, "torch_dynamo_backends")
            for name, value in declared["torch_dynamo_backends"].items()]


def _installed_from_this_checkout() -> bool:
    try:
        url = json.loads(importlib.metadata.distribution("minidynamo").read_text("direct_url.json") or "{}")
    except importlib.metadata.PackageNotFoundError:
        return False
    return url.get("url") == ROOT.as_uri()


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    fallbacks.clear()
    yield
    torch._dynamo.reset()


@pytest.fixture
def by_name(monkeypatch):
    """torch's backend registry holding the entry points pyproject.toml declares, as torch's
    discovery makes it from an installed package's metadata."""
    from torch._dynamo.backends import registry

    registry.list_backends()  # torch's own discovery first, which would otherwise run later
    for ep in _declared_entry_points():
        monkeypatch.setitem(registry._BACKENDS, ep.name, ep)
        monkeypatch.delitem(registry._COMPILER_FNS, ep.name, raising=False)


@pytest.fixture
def graphs(monkeypatch):
    """What the C++ pipeline compiled, in order (CppGraph: `size_vars` None for static sizes)."""
    made = []
    compile_graph = cpp_pipeline.compile_cpp_graph

    def recording(*args, **kwargs):
        made.append(compile_graph(*args, **kwargs))
        return made[-1]
    monkeypatch.setattr(cpp_pipeline, "compile_cpp_graph", recording)
    return made


def _no_fallbacks():
    assert minidynamo.stats()["backend_fallbacks"] == 0, [str(f) for f in fallbacks]


def _assert_all_close(got, want):
    got, want = (x if isinstance(x, tuple) else (x,) for x in (got, want))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        assert_close(a, b)


# -- found by name ----------------------------------------------------------------------------

def test_declared_entry_points_load_our_backends():
    for ep in _declared_entry_points():
        if ep.name == "minidynamo_triton":
            pytest.importorskip("triton")
        assert ep.load() is lookup_backend(BACKENDS[ep.name])


def test_torch_compile_finds_the_backend_by_name(by_name, graphs):
    assert {"minidynamo_cpp", "minidynamo_triton"} <= set(torch._dynamo.list_backends())
    fn = lambda x: torch.relu(x) * 2 + x.sum(0)  # noqa: E731
    compiled = torch.compile(fn, backend="minidynamo_cpp")
    x = torch.randn(4, 5)
    assert_close(compiled(x), fn(x))
    assert len(graphs) == 1
    _no_fallbacks()


@pytest.mark.skipif(not _installed_from_this_checkout(), reason="minidynamo is not installed from this checkout")
def test_installed_metadata_names_the_backends():
    """`pip install -e .` (make setup) writes the entry points torch discovers."""
    assert {"minidynamo_cpp", "minidynamo_triton"} <= set(torch._dynamo.list_backends())
    fn = lambda x: torch.tanh(x) - x  # noqa: E731
    x = torch.randn(3, 8)
    assert_close(torch.compile(fn, backend="minidynamo_cpp")(x), fn(x))
    _no_fallbacks()


# -- torch's symbolic sizes -------------------------------------------------------------------

torch.manual_seed(0)
_LINEAR = nn.Linear(16, 24)
_CONV = nn.Conv2d(3, 4, 3, stride=2)

CASES = {
    "pointwise": (lambda x: torch.sigmoid(x) * x + 1, lambda n: (torch.randn(n, 3, n + 1),)),
    "reductions": (lambda x: (x.sum(0), x.amax(-1), x.mean(), x.var(1), x.argmax(1)),
                   lambda n: (torch.randn(n, n + 2),)),
    "softmax_layer_norm": (lambda x: (torch.softmax(x, -1), F.layer_norm(x, x.shape[-1:])),
                           lambda n: (torch.randn(3, n),)),
    "matmul": (lambda x, y: (F.gelu(_LINEAR(x)), x @ y), lambda n: (torch.randn(n, 16), torch.randn(16, n + 1))),
    "views": (lambda x: (x.t() + 1, x.reshape(-1) * 2, x[:, 1:] - 1, x.view(x.shape[0], -1, 2).sum(1)),
              lambda n: (torch.randn(n, 2 * n),)),
    # sizes torch derives by floor division: computed by the graph, passed to the kernels
    "conv_output_sizes": (lambda x: (F.relu(_CONV(x)) * 2, _CONV(x).mean((2, 3)), F.avg_pool2d(x, 2) + 1),
                          lambda n: (torch.randn(2, 3, n + 4, n + 5),)),  # outputs not of size 1
    "size_as_scalar": (lambda x: (x * x.shape[0] + x.shape[1], torch.arange(x.shape[0]) * 2.0 + x.sum(1)),
                       lambda n: (torch.randn(n, n + 3),)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_dynamic_true_compiles_one_symbolic_graph(case, graphs):
    fn, make = CASES[case]
    compiled = torch.compile(fn, backend=lookup_backend("cpp"), dynamic=True)
    with torch.no_grad():
        for n in SIZES:
            inputs = make(n)
            _assert_all_close(compiled(*inputs), fn(*inputs))
    assert len(graphs) == 1 and graphs[0].size_vars is not None
    _no_fallbacks()


def test_automatic_dynamic_recompiles_once_with_symbols(graphs):
    """torch.compile's default: static sizes first, then a graph with the changed dim symbolic
    that serves the other sizes."""
    fn, make = CASES["softmax_layer_norm"]
    compiled = torch.compile(fn, backend=lookup_backend("cpp"))
    with torch.no_grad():
        for n in SIZES:
            inputs = make(n)
            _assert_all_close(compiled(*inputs), fn(*inputs))
    assert [g.size_vars is not None for g in graphs] == [False, True]
    _no_fallbacks()


def test_symbolic_sizes_with_gradients(graphs):
    """aot_autograd's forward and backward graphs in torch's shape env: each compiled once."""
    torch.manual_seed(0)
    model, reference = (nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.LayerNorm(16), nn.Softmax(-1))
                        for _ in range(2))
    reference.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend=lookup_backend("cpp"), dynamic=True)
    for n in SIZES:
        x = torch.randn(2, n, 16)
        compiled(x).sum(1).square().sum().backward()
        reference(x).sum(1).square().sum().backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            assert_close(p.grad, q.grad)
    assert len(graphs) == 2 and all(g.size_vars is not None for g in graphs)
    _no_fallbacks()


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 0.5

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], eps=1e-3) * self.scale


def test_dynamic_floats_are_specialized_not_run_eagerly(graphs):
    """dynamic=True makes a module's float a graph input (a 0-d tensor): the kernels take none,
    so torch traces again with it constant and guards on it; a new value recompiles."""
    module = _Scaled()
    compiled = torch.compile(module, backend=lookup_backend("cpp"), dynamic=True)
    with torch.no_grad():
        for scale in (0.5, 2.0):
            module.scale = scale
            for n in SIZES:
                x = torch.randn(n, 6)
                assert_close(compiled(x), module(x))
    assert len(graphs) == 2 and all(g.size_vars is not None for g in graphs)
    _no_fallbacks()


# -- the model zoo through torch.compile(backend="minidynamo_cpp") ------------------------------

# static: a decoder, encoders, a vision transformer and a CNN; dynamic=True: one of each family
# (the CNN's sizes are derived by floor division); train: a decoder and an encoder
EVAL_CASES = [(name, False) for name in ("llama", "gpt2", "bert", "vit", "resnet")] + [
    (name, True) for name in ("llama", "bert", "resnet")]
TRAIN_MODELS = ["llama", "bert"]


def _resized(t):
    """Another size for a dynamic=True call: one more in the batch, and two tokens fewer."""
    if not isinstance(t, torch.Tensor):
        return t
    t = torch.cat([t, t[:1]])
    return t[:, :-2] if t.dim() == 2 and not t.is_floating_point() else t


def _outputs(out):
    return [t for t in out.to_tuple() if isinstance(t, torch.Tensor)]


def _zoo_calls(name, train, dynamic):
    from benchmarks import zoo

    model, args, kwargs = zoo.build(name, train, random=False)
    twin, _, _ = zoo.build(name, train, random=False)
    calls = [(args, kwargs)]
    if dynamic:
        calls.append((tuple(map(_resized, args)), {k: _resized(v) for k, v in kwargs.items()}))
    return model, twin, calls


@pytest.mark.parametrize("name,dynamic", EVAL_CASES, ids=[f"{n}-{'dynamic' if d else 'static'}" for n, d in EVAL_CASES])
def test_zoo_eval_matches_eager(name, dynamic, by_name, graphs):
    pytest.importorskip("transformers")
    model, twin, calls = _zoo_calls(name, False, dynamic)
    compiled = torch.compile(model, backend="minidynamo_cpp", dynamic=dynamic)
    with torch.no_grad():
        for args, kwargs in calls:
            for a, e in zip(_outputs(compiled(*args, **kwargs)), _outputs(twin(*args, **kwargs)), strict=True):
                assert_close(a, e)
    assert graphs and all((g.size_vars is not None) == dynamic for g in graphs)
    _no_fallbacks()


@pytest.mark.parametrize("name", TRAIN_MODELS)
def test_zoo_train_step_matches_eager(name, by_name, graphs):
    pytest.importorskip("transformers")
    from benchmarks import zoo

    model, twin, calls = _zoo_calls(name, True, False)
    compiled = torch.compile(model, backend="minidynamo_cpp")
    (args, kwargs), = calls
    zoo.loss_of(compiled(*args, **kwargs)).backward()
    zoo.loss_of(twin(*args, **kwargs)).backward()
    grads = {k: p.grad for k, p in twin.named_parameters() if p.grad is not None}
    assert grads
    for key, p in model.named_parameters():
        if key in grads:
            torch.testing.assert_close(p.grad, grads[key], rtol=1e-4, atol=1e-5, msg=key)
    assert len(graphs) >= 2  # aot_autograd's forward and backward
    _no_fallbacks()
