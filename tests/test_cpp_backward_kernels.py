"""cpp training graphs without torch calls for cat, embedding and embedding's backward
(index_put with accumulate): each runs as a loop inside a kernel group (codegen/cpp_copy, cpp_indexed),
equal to eager, with indices checked as eager checks them; whole forward+backward graphs of
several architectures compile to one kernel group each, with gradients equal to eager's over
calls and after a parameter changes."""
import copy

import pytest
import torch
import torch.nn as nn
from torch.fx.experimental.proxy_tensor import make_fx

import minidynamo
from benchmarks.models import _TinyTransformer
from minidynamo import perf
from minidynamo.codegen.cpp_copy import Copy, Gather
from minidynamo.codegen.cpp_indexed import GatherAlongDim, IndexPutAccumulate, MaxPoolBackward
from minidynamo.codegen.cpp_pipeline import compile_cpp_graph
from minidynamo.codegen.ir import ExternNode

aten = torch.ops.aten
INDEXED_OPS = (aten.cat.default, aten.embedding.default, aten.index_put.default)


def _compiled(fn, *inputs):
    graph = compile_cpp_graph(make_fx(fn)(*inputs), list(inputs))
    externs = [str(s.fn) for s in graph.steps if isinstance(s, ExternNode)]
    assert externs == [], f"ran as torch calls: {externs}"
    return graph


def _steps(graph, kind):
    found = [s for s in graph.steps if isinstance(s, kind)]
    in_groups = {k for g in graph.groups for k in g.kernels}
    assert found and all(s.name in in_groups for s in found)
    return found


def test_cat_of_views_and_dtypes_copies_inside_the_kernel_group():
    a, b = torch.randn(5, 3, 4), torch.randn(4, 3, 5)
    ints = torch.arange(12).view(3, 4)
    cases = {
        "last dim, a transposed view": lambda a, b, i: torch.cat([a.tanh(), b.transpose(0, 2) * 2], 1),
        "dim 0, offset slices": lambda a, b, i: torch.cat([a[1:3], a[:1] + 1, a[4:]], 0),
        "an empty operand": lambda a, b, i: torch.cat([torch.zeros(0, 3, 4), a.exp(), a], 0) - 1,
        "integers": lambda a, b, i: torch.cat([i, i * 3], -1) + 1,
    }
    for name, f in cases.items():
        g = _compiled(f, a, b, ints)
        _steps(g, Copy)
        torch.testing.assert_close(g(a, b, ints), f(a, b, ints), msg=name)


def test_embedding_lookups_of_index_shapes_and_weight_layouts():
    w = torch.randn(11, 6)
    ids = torch.tensor([[3, 0, 10], [10, 7, 3]])
    cases = {
        "2-d ids": (lambda w, i: torch.nn.functional.embedding(i, w) * 2, ids),
        "int32 ids, transposed weight": (lambda w, i: torch.nn.functional.embedding(i, w.t().contiguous().t()),
                                         ids.int()),
        "one id": (lambda w, i: torch.nn.functional.embedding(i, w).sum(), torch.tensor(4)),
    }
    for name, (f, i) in cases.items():
        g = _compiled(f, w, i)
        _steps(g, Gather)
        torch.testing.assert_close(g(w, i), f(w, i), msg=name)


def test_gather_along_any_dim_of_a_view():
    src, idx = torch.randn(6, 5, 4), torch.tensor([[[0, 3], [2, 2]], [[1, 0], [3, 1]]])
    for dim in (0, 1, 2):
        def f(src, idx):
            return torch.gather(src.transpose(0, 2) * 2, dim, idx) + 1
        g = _compiled(f, src, idx)
        _steps(g, GatherAlongDim)
        torch.testing.assert_close(g(src, idx), f(src, idx), msg=f"dim {dim}")
    compiled = minidynamo.optimize("cpp")(lambda s, i: torch.gather(s, 1, i) * 2)
    torch.testing.assert_close(compiled(src, idx), torch.gather(src, 1, idx) * 2)
    with pytest.raises(RuntimeError, match="out of bounds"):
        compiled(src, idx + 5)
    assert minidynamo.stats()["backend_fallbacks"] == 0


def test_index_put_accumulates_repeated_and_negative_indices():
    def f(base, idx, values):
        return torch.ops.aten.index_put(base * 1, [idx], values.exp(), True)

    base, idx = torch.randn(9, 2, 3), torch.tensor([[1, -1, 1], [8, 0, -9]])
    values = torch.randn(2, 3, 2, 3)
    g = _compiled(f, base, idx, values)
    _steps(g, IndexPutAccumulate)
    torch.testing.assert_close(g(base, idx, values), f(base, idx, values))


@pytest.mark.parametrize("bad", [11, -1])
def test_embedding_index_out_of_range_raises_eagers_error(bad):
    def f(w, i):
        return torch.nn.functional.embedding(i, w) + 1

    w, ok = torch.randn(11, 4), torch.tensor([1, 2, 3])
    compiled = minidynamo.optimize("cpp")(f)
    torch.testing.assert_close(compiled(w, ok), f(w, ok))
    with pytest.raises(IndexError):
        compiled(w, torch.tensor([1, bad, 3]))
    torch.testing.assert_close(compiled(w, ok), f(w, ok))
    assert minidynamo.stats()["backend_fallbacks"] == 0


def test_index_put_index_out_of_range_raises_eagers_error():
    def f(base, idx, values):
        return torch.ops.aten.index_put(base + 1, [idx], values, True)

    base, values = torch.randn(5, 2), torch.randn(3, 2)
    compiled = minidynamo.optimize("cpp")(f)
    good = torch.tensor([0, -5, 4])
    torch.testing.assert_close(compiled(base, good, values), f(base, good, values))
    for bad in (5, -6):
        with pytest.raises(IndexError):
            compiled(base, torch.tensor([0, bad, 1]), values)
    assert minidynamo.stats()["backend_fallbacks"] == 0


@pytest.mark.parametrize("channels_last", [False, True])
def test_max_pool_backward_adds_each_gradient_where_its_maximum_was(channels_last):
    """Overlapping windows (stride 1 < kernel 3) send several gradients to one position."""
    def f(x):
        y, _ = torch.nn.functional.max_pool2d_with_indices(x.tanh(), 3, 1)
        return (y * y).sum()

    x = torch.randn(2, 3, 9, 8)
    x = x.contiguous(memory_format=torch.channels_last) if channels_last else x
    x.requires_grad_()
    compiled = minidynamo.optimize("cpp")(f)
    for _ in range(2):
        (got,) = torch.autograd.grad(compiled(x), x)
        (want,) = torch.autograd.grad(f(x), x)
        torch.testing.assert_close(got, want)
    assert minidynamo.stats()["backend_fallbacks"] == 0
    backward = max(list(perf._graphs), key=lambda g: g.times.number)
    _steps(backward, MaxPoolBackward)
    assert not [s for s in backward.steps if isinstance(s, ExternNode)]


class _Recommender(nn.Module):
    """Embeddings of several id fields concatenated with dense features, then an MLP."""

    def __init__(self):
        super().__init__()
        self.users, self.items = nn.Embedding(50, 8), nn.Embedding(70, 8)
        self.mlp = nn.Sequential(nn.Linear(8 * 3 + 5, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, users, items, dense):
        x = torch.cat([self.users(users), self.items(items), self.items(items % 13), dense], -1)
        return self.mlp(x)


def _gpt():
    return _TinyTransformer(causal=True), [torch.randint(0, 1000, (1, 32))]


def _bert():
    return _TinyTransformer(causal=False), [torch.randint(0, 1000, (1, 32))]


def _recommender():
    return _Recommender(), [torch.randint(0, 50, (16,)), torch.randint(0, 70, (16,)), torch.randn(16, 5)]


def _grads(model, inputs):
    loss = model(*inputs).float().pow(2).mean()
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads


@pytest.mark.parametrize("make", [_gpt, _bert, _recommender], ids=["gpt", "bert", "recommender"])
def test_training_graphs_run_cat_embedding_and_its_backward_in_kernel_groups(make):
    torch.manual_seed(0)
    model, inputs = make()
    eager = copy.deepcopy(model)
    before = max((g.times.number for g in list(perf._graphs)), default=0)
    compiled = minidynamo.optimize("cpp")(model)
    for call in range(3):
        if call == 2:  # a parameter changed in place between calls
            with torch.no_grad():
                for m in (model, eager):
                    next(m.parameters()).mul_(1.5)
        loss, grads = _grads(compiled, inputs)
        want_loss, want = _grads(eager, inputs)
        torch.testing.assert_close(loss, want_loss, rtol=1e-4, atol=1e-5)
        for got, expected in zip(grads, want):
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert minidynamo.stats()["backend_fallbacks"] == 0
    graphs = [g for g in list(perf._graphs) if g.times.number > before]
    assert len(graphs) == 2  # the forward and the backward graph
    steps = [s for g in graphs for s in g.steps]
    assert not [s.fn for s in steps if isinstance(s, ExternNode) and s.fn in INDEXED_OPS]
    kinds = {type(s) for s in steps}
    assert {Gather, IndexPutAccumulate, Copy} <= kinds
    for g in graphs:
        assert len(g.groups) == 1, [grp.kernels for grp in g.groups]
