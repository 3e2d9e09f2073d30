"""Graphs with symbolic sizes (dynamic=True, mark_dynamic, automatic dynamic shapes) compile under
the cpp backend: kernels take the sizes as arguments, so one compiled graph (one g++ build)
serves every size its guards admit, equal to eager, with no fallback to eager torch."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import minidynamo
from benchmarks.bench_dynamic import Block
from minidynamo.backends import lookup_backend
from minidynamo.codegen import cpp_build
from minidynamo.codegen.cpp_gemm import Gemm
from minidynamo.codegen.cpp_wrapper import CppGraph
from minidynamo.codegen.ir import ExternNode
from minidynamo.counters import fallbacks
from test_cpp_backend import assert_close

SIZES = range(2, 22)  # 20 sizes; dynamic dims are never 0 or 1


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(minidynamo.config, "cache_dir", str(tmp_path))  # g++ builds counted afresh
    minidynamo.reset()
    fallbacks.clear()
    yield
    minidynamo.reset()


class Counting:
    """The cpp backend, counting its calls and keeping what it returned."""

    def __init__(self, name: str = "cpp"):
        self.inner = lookup_backend(name)
        self.compiled = []

    def __call__(self, gm, example_inputs):
        out = self.inner(gm, example_inputs)
        self.compiled.append(getattr(out, "compiled", out))
        return out


torch.manual_seed(0)
_LINEAR = nn.Linear(16, 24)
_BLOCK = Block(d=32).eval()

CASES = {
    "pointwise": (lambda x: torch.sigmoid(x) * x + 1, lambda n: (torch.randn(n, 3, n + 1),)),
    "reductions": (lambda x: (x.sum(0), x.amax(-1), x.mean(), x.var(1), x.argmax(1), x.sum()),
                   lambda n: (torch.randn(n, n + 2),)),
    "softmax_layer_norm": (lambda x: (torch.softmax(x, -1), F.layer_norm(x, x.shape[-1:])),
                           lambda n: (torch.randn(3, n),)),
    "matmul_epilogue": (lambda x: F.gelu(_LINEAR(x)) + x.sum(-1, keepdim=True), lambda n: (torch.randn(n, 16),)),
    "views": (lambda x: (x.t() + 1, x.reshape(-1) * 2, x[:, 1:] - 1, x.unsqueeze(0).expand(2, -1, -1).sum(0)),
              lambda n: (torch.randn(n, n + 1),)),
    "transformer_block": (_BLOCK, lambda n: (torch.randn(2, n, 32),)),
}


def _check_sizes(fn, make, compiled_fn, sizes=SIZES):
    with torch.no_grad():
        for n in sizes:
            inputs = make(n)
            got, expected = compiled_fn(*inputs), fn(*inputs)
            got = got if isinstance(got, tuple) else (got,)
            expected = expected if isinstance(expected, tuple) else (expected,)
            for a, b in zip(got, expected):
                assert a.shape == b.shape and a.stride() == b.stride()
                assert_close(a, b)


def _symbolic_graphs(backend: Counting):
    return [g for g in backend.compiled if isinstance(g, CppGraph) and g.size_vars is not None]


@pytest.mark.parametrize("case", list(CASES))
def test_dynamic_true_compiles_once_for_20_sizes(case):
    fn, make = CASES[case]
    backend = Counting()
    builds = cpp_build.stats["compiles"]
    _check_sizes(fn, make, minidynamo.optimize(backend, dynamic=True)(fn))
    assert len(backend.compiled) == 1
    assert cpp_build.stats["compiles"] - builds <= 1
    assert len(_symbolic_graphs(backend)) == 1  # compiled kernels, not the graph run eagerly
    assert minidynamo.stats()["backend_fallbacks"] == 0, list(fallbacks)


@pytest.mark.parametrize("case", ["reductions", "transformer_block"])
def test_automatic_dynamic_compiles_at_most_twice(case):
    """The first call compiles static sizes, the second (another size) a symbolic graph that
    serves all the others."""
    fn, make = CASES[case]
    backend = Counting()
    builds = cpp_build.stats["compiles"]
    _check_sizes(fn, make, minidynamo.optimize(backend)(fn))
    assert len(backend.compiled) == 2
    assert cpp_build.stats["compiles"] - builds <= 2
    assert len(_symbolic_graphs(backend)) == 1
    assert minidynamo.stats()["backend_fallbacks"] == 0, list(fallbacks)


def test_mark_dynamic_compiles_symbolic_kernels():
    def fn(x, y):
        return torch.softmax(x @ y, -1).sum(0)

    backend = Counting()
    compiled = minidynamo.optimize(backend)(fn)
    with torch.no_grad():
        for n in SIZES:
            x, y = torch.randn(n, 8), torch.randn(8, 5)
            minidynamo.mark_dynamic(x, 0)
            assert_close(compiled(x, y), fn(x, y))
    assert len(backend.compiled) == 1
    graph, = _symbolic_graphs(backend)
    assert "int64_t ks0" in graph.source  # the size is a kernel argument
    assert minidynamo.stats()["backend_fallbacks"] == 0, list(fallbacks)


def test_symbolic_graph_handles_noncontiguous_inputs_and_views():
    """Inputs laid out otherwise than traced are relaid out with this call's sizes; outputs that
    are views of inputs keep eager's strides and storage."""
    def fn(x):
        return x.t(), x * 2

    backend = Counting()
    compiled = minidynamo.optimize(backend, dynamic=True)(fn)
    with torch.no_grad():
        for n in (3, 4, 7):
            x = torch.randn(n, n + 1)
            for arg in (x, x.t().contiguous().t()):
                (a, b), (c, d) = compiled(arg), fn(arg)
                assert a.stride() == c.stride() and a.data_ptr() == c.data_ptr()
                assert_close(b, d)
    assert minidynamo.stats()["backend_fallbacks"] == 0, list(fallbacks)


@pytest.mark.parametrize("case", ["pointwise", "reductions", "softmax_layer_norm", "transformer_block"])
def test_triton_dynamic_sizes_compile_once(case):
    """The Triton kernels take the sizes as arguments too (interpreter: a few small sizes)."""
    pytest.importorskip("triton", reason="the triton backend needs the optional triton package")
    import minidynamo.backends.triton  # noqa: F401  (sets TRITON_INTERPRET=1 without a GPU)
    from minidynamo.codegen.triton_wrapper import TritonGraph

    fn, make = CASES[case]
    backend = Counting("triton")
    _check_sizes(fn, make, minidynamo.optimize(backend)(fn), sizes=(2, 3, 5))
    assert len(backend.compiled) == 2  # automatic dynamic: static sizes first, then symbolic ones
    assert any(isinstance(g, TritonGraph) and g.size_vars is not None for g in backend.compiled)
    assert minidynamo.stats()["backend_fallbacks"] == 0, list(fallbacks)


def test_training_with_symbolic_sizes_compiles_forward_and_backward():
    """aot_autograd traces forward and backward with the symbols: both compile once (two g++
    builds at most) and the gradients equal eager's for every size."""
    torch.manual_seed(0)

    def make():
        return nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.LayerNorm(16), nn.Softmax(-1))

    model, reference = make(), make()
    reference.load_state_dict(model.state_dict())
    builds = cpp_build.stats["compiles"]
    compiled = minidynamo.compile(model, backend="cpp", dynamic=True)
    for n in range(2, 12):
        x = torch.randn(2, n, 16)
        compiled(x).sum(1).square().sum().backward()
        reference(x).sum(1).square().sum().backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            assert_close(p.grad, q.grad)
    assert cpp_build.stats["compiles"] - builds <= 2
    assert minidynamo.stats()["backend_fallbacks"] == 0, list(fallbacks)


def test_symbolic_int_arguments_are_kernel_arguments():
    """An int argument that varies becomes a symbolic graph input (automatic dynamic): used as a
    value and as a size, 1 included, it is passed to the kernels, not compiled in."""
    def fn(x, n):
        return x * n + 1, torch.ones(n) * 2

    backend = Counting()
    compiled = minidynamo.optimize(backend)(fn)
    for n in range(1, 10):
        x = torch.randn(3, 4)
        for a, b in zip(compiled(x, n), fn(x, n)):
            assert_close(a, b)
    assert len(backend.compiled) == 2
    assert len(_symbolic_graphs(backend)) == 1
    assert minidynamo.stats()["backend_fallbacks"] == 0, list(fallbacks)


def test_symbolic_int_argument_without_a_lower_bound():
    """An int used only as a value has no range below (torch's -int_oo, which sympy calls finite)."""
    def fn(x, n):
        return (x * n).relu() + 1

    backend = Counting()
    compiled = minidynamo.optimize(backend)(fn)
    for n in (2, 3, 4, 5, -3):
        x = torch.randn(8)
        assert_close(compiled(x, n), fn(x, n))
    assert len(backend.compiled) == 2 and len(_symbolic_graphs(backend)) == 1
    assert minidynamo.stats()["backend_fallbacks"] == 0, list(fallbacks)


def _one_graph_over_row_lengths(fn, lengths):
    """Runs `fn` compiled with dynamic=True on (4, n) inputs for each row length, comparing with
    eager; returns the one symbolic graph it compiled."""
    backend = Counting()
    compiled = minidynamo.optimize(backend, dynamic=True)(fn)
    with torch.no_grad():
        for n in lengths:
            x = torch.randn(4, n) * 4
            for a, b in zip(compiled(x), fn(x)):
                assert_close(a, b)
    graph, = _symbolic_graphs(backend)
    return graph


def test_symbolic_row_sums_accumulate_in_float_chunks():
    """A float sum over a row of symbolic length adds float partials of 4096 elements into a
    double (as exact as the static float sum for short rows, as a double sum for long ones), and
    softmax keeps its exponentials in the output row (computed once) as with static sizes."""
    fn = lambda x: (torch.softmax(x, -1), x.sum(-1))  # noqa: E731
    graph = _one_graph_over_row_lengths(fn, (3, 100, 4096, 5000, 20000))
    kernels = graph.source.split("static void kernel0")[1]
    assert "rc += 4096" in kernels and kernels.count("md_expf(") == 1
    assert minidynamo.stats()["backend_fallbacks"] == 0, list(fallbacks)


def test_symbolic_long_rows_reduce_in_lanes_with_a_tail():
    """Rows long at the example input (256+ elements) reduce into blocks of lane accumulators as
    with static sizes; the elements past the last whole block go through a tail loop."""
    fn = lambda x: (torch.softmax(x, -1), x.amax(-1), x.sum(-1))  # noqa: E731
    graph = _one_graph_over_row_lengths(fn, (512, 3, 100, 777, 5000))
    assert "const int64_t rfull0 = ks1 - ks1 % 64;" in graph.source
    assert minidynamo.stats()["backend_fallbacks"] == 0, list(fallbacks)


def test_static_products_of_a_symbolic_graph_run_in_generated_code():
    """A decode step's shape: the new token's projection has static sizes while the cache length is
    symbolic. That product is a BLAS call in the generated code (a Gemm step, with its GELU in the
    same kernel group); the one with a symbolic size stays a torch call."""
    def fn(x, cache):
        y = F.gelu(_LINEAR(x))
        return y, torch.softmax(cache @ y.t(), 0)

    backend = Counting()
    _check_sizes(fn, lambda n: (torch.randn(1, 16), torch.randn(n, 24)), minidynamo.optimize(backend, dynamic=True)(fn))
    graph, = _symbolic_graphs(backend)
    assert [tuple(graph.buffers[s.out].size) for s in graph.steps if isinstance(s, Gemm)] == [(1, 24)]
    assert [s.fn for s in graph.steps if isinstance(s, ExternNode)] == [torch.ops.aten.mm.default]
    assert "sgemm" in graph.source and "int64_t ks0" in graph.source
    assert minidynamo.stats()["backend_fallbacks"] == 0, list(fallbacks)
