"""Concatenations under the cpp backend are copied by the generated C++ (Copy steps in a kernel
group), with static and symbolic sizes, from views at offsets and strides, equal to eager and with
no torch cat call left; the ones it does not take (type promotion, legacy empty inputs) stay torch's."""
import pytest
import torch

import minidynamo
from minidynamo.codegen.cpp_copy import Copy, Gather, use_copies
from minidynamo.codegen.graph_lowering import ExternArg
from minidynamo.codegen.ir import Buffer, ExternNode
from minidynamo.codegen.sizes import is_symbolic
from minidynamo.counters import fallbacks
from test_cpp_backend import assert_close
from test_cpp_dynamic import Counting, _symbolic_graphs

cat = torch.ops.aten.cat.default


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(minidynamo.config, "cache_dir", str(tmp_path))
    minidynamo.reset()
    fallbacks.clear()
    yield
    minidynamo.reset()


def rotate_half(x):
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-b, a), dim=-1)


def kv_step(cache, x, w):
    """A decoder step's shape: the new key appended to the cache, rotary's rotate_half on it."""
    k = (x @ w).view(1, 2, 1, 8)
    keys = torch.cat([cache, k], dim=-2)
    return keys, rotate_half(keys) * 2, torch.cat([x, x, x.t().reshape(1, -1)], 0)


def _steps(graph):
    return [s for s in graph.steps if isinstance(s, Copy)], [s.fn for s in graph.steps if isinstance(s, ExternNode)]


def _check(fn, inputs_of, sizes, dynamic):
    backend = Counting()
    compiled = minidynamo.optimize(backend, dynamic=dynamic)(fn)
    with torch.no_grad():
        for n in sizes:
            inputs = inputs_of(n)
            for got, want in zip(compiled(*inputs), fn(*inputs)):
                assert got.shape == want.shape and got.stride() == want.stride()
                assert_close(got, want)
    assert minidynamo.stats()["backend_fallbacks"] == 0, list(fallbacks)
    return backend


def test_static_concatenations_are_copies_in_the_generated_code():
    torch.manual_seed(0)
    w = torch.randn(16, 16)
    backend = _check(kv_step, lambda n: (torch.randn(1, 2, n, 8), torch.randn(1, 16), w), [5], dynamic=False)
    graph, = backend.compiled
    copies, externs = _steps(graph)
    assert len(copies) == 3 and cat not in externs


def test_symbolic_concatenations_compile_once_for_many_cache_lengths():
    torch.manual_seed(0)
    w = torch.randn(16, 16)
    backend = _check(kv_step, lambda n: (torch.randn(1, 2, n, 8), torch.randn(1, 16), w), range(2, 12), dynamic=True)
    graph, = _symbolic_graphs(backend)
    copies, externs = _steps(graph)
    assert len(backend.compiled) == 1 and len(copies) == 3 and cat not in externs
    assert any(is_symbolic(c.starts[-1]) for c in copies)  # the new key lands after the symbolic cache


def test_concatenations_of_strided_views_and_one_input_twice():
    def fn(x, y):
        return torch.cat([x.t(), y[1:, ::2], x.t()], 0), torch.cat([x[:, 1:3], x[:, 1:3]], 1), torch.cat([x, y.t()[:4]], 1)

    _check(fn, lambda n: (torch.randn(4, 3), torch.randn(7, 8)), [0], dynamic=False)


def test_promoting_and_legacy_empty_concatenations_stay_torch_calls():
    def fn(x, i, e):
        return torch.cat([x, i], 1), torch.cat([x, e], 0) * 2

    backend = _check(fn, lambda n: (torch.randn(3, 4), torch.ones(3, 2, dtype=torch.int64), torch.empty(0)), [0],
                     dynamic=False)
    graph, = backend.compiled
    copies, externs = _steps(graph)
    assert not copies and externs.count(cat) == 1  # the promoting one; torch's legacy rule drops `e`


def gathers(w, ids, x, rows):
    return torch.nn.functional.embedding(ids, w) * 2, x[rows] + 1, x.t()[rows[:2]]


def _gather_inputs(n):
    g = torch.Generator().manual_seed(n)
    ids = torch.randint(0, 10, (2, n), generator=g)
    rows = torch.tensor([3, -1, 0, n % 4], dtype=torch.int64)
    return torch.randn(10, 6, generator=g), ids, torch.randn(4, 5, generator=g), rows


@pytest.mark.parametrize("dynamic", [False, True])
def test_embeddings_and_row_gathers_are_generated_code(dynamic):
    backend = _check(gathers, _gather_inputs, range(2, 7) if dynamic else [3], dynamic=dynamic)
    graph = (_symbolic_graphs(backend) if dynamic else backend.compiled)[0]
    assert sum(isinstance(s, Gather) for s in graph.steps) == 3
    assert not [s for s in graph.steps if isinstance(s, ExternNode)]


def test_gather_index_out_of_range_raises_as_eager():
    compiled = minidynamo.optimize(Counting())(gathers)
    w, ids, x, rows = _gather_inputs(3)
    with torch.no_grad():
        compiled(w, ids, x, rows)
        for bad in ((w, ids.clone().fill_(10), x, rows), (w, ids, x, torch.tensor([0, 4, 1, 2])),
                    (w, ids, x, torch.tensor([0, -5, 1, 2]))):
            with pytest.raises(IndexError) as want:
                gathers(*bad)
            with pytest.raises(IndexError, match=str(want.value)[:20]):
                compiled(*bad)
    assert minidynamo.stats()["backend_fallbacks"] == 0, list(fallbacks)


def test_boolean_masks_are_not_gathers():
    """x[mask] selects (nonzero), not rows by number: it stays torch's call; an int64 index is a Gather."""
    def node(index_dtype):
        buffers = {"x": Buffer("x", (4, 3), (3, 1), torch.float32), "i": Buffer("i", (4,), (1,), index_dtype),
                   "o": Buffer("o", (4, 3), (3, 1), torch.float32)}
        step = ExternNode(("o",), torch.ops.aten.index.Tensor,
                          (ExternArg("x", (4, 3), (3, 1), 0), [ExternArg("i", (4,), (1,), 0)]), {}, ("x", "i"))
        return use_copies([step], buffers)[0], step
    got, step = node(torch.bool)
    assert got is step
    assert isinstance(node(torch.int64)[0], Gather)


def test_empty_permuted_is_an_allocation_not_a_torch_call():
    """A mixture of experts' routing makes its inverse permutation in torch.empty_permuted."""
    def inverse(perm):
        inv = torch.empty_permuted(perm.shape, (0,), dtype=perm.dtype)
        return (inv.index_put((perm,), torch.arange(perm.numel())),)

    backend = _check(inverse, lambda n: (torch.randperm(6, generator=torch.Generator().manual_seed(1)),), [0],
                     dynamic=False)
    graph, = backend.compiled
    assert [s.fn for s in graph.steps if isinstance(s, ExternNode)] == [torch.ops.aten.index_put.default]
