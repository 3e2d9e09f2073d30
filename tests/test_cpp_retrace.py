"""The re-trace for the code generators without torch.func.functionalize where it is not needed:
aot_autograd's graphs (nothing writes) decomposed only, optimizer steps made functional at FX
level (codegen/fx_functional), and the functionalising trace where that would not be exact."""
import operator

import pytest
import torch

import minidynamo
from minidynamo import counters
from minidynamo.codegen import fx_functional, trace

aten = torch.ops.aten


def test_aot_graphs_are_traced_without_functionalization(retraces):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    x = torch.randn(4, 6, requires_grad=True)
    compiled = minidynamo.optimize("cpp")(model)
    out = compiled(x)
    out.pow(2).sum().backward()
    grads = [x.grad] + [p.grad for p in model.parameters()]
    x.grad = None
    model.zero_grad()
    expected = model(x)
    expected.pow(2).sum().backward()
    torch.testing.assert_close(out, expected)
    for got, want in zip(grads, [x.grad] + [p.grad for p in model.parameters()]):
        torch.testing.assert_close(got, want)
    assert minidynamo.stats()["backend_fallbacks"] == 0, list(counters.fallbacks)
    assert retraces["functionalize"] == 0


def test_aten_graph_whose_decomposition_writes_is_functionalised(retraces):
    # GRU's decomposition adds in place: the decomposed trace writes, the functional one does not
    g = torch.fx.Graph()
    x, h, *weights = [g.placeholder(n) for n in ("x", "h", "w_ih", "w_hh", "b_ih", "b_hh")]
    result = g.call_function(aten.gru.input, (x, h, weights, True, 1, 0.0, False, False, True))
    g.output(tuple(g.call_function(operator.getitem, (result, i)) for i in range(2)))
    gm = torch.fx.GraphModule({}, g)
    inputs = [torch.randn(2, 3, 4), torch.randn(1, 2, 5), torch.randn(15, 4), torch.randn(15, 5),
              torch.randn(15), torch.randn(15)]
    assert trace.writes_nothing(gm)
    traced, _ = trace.trace(gm, inputs)
    assert retraces["functionalize"] == 1 and trace._mutating_op(traced) is None
    for got, want in zip(traced(*inputs), gm(*inputs)):
        torch.testing.assert_close(got, want)


def test_in_place_variants_are_known_by_their_schemas():
    assert all(map(fx_functional.is_in_place_variant, ["add_", "lerp_", "addcdiv_", "copy_", "_foreach_mul_"]))
    # views, random draws, aliasing and names that are no in-place variant stay with functionalize
    assert not any(map(fx_functional.is_in_place_variant,
                       ["t_", "squeeze_", "uniform_", "bernoulli_", "_philox_normal_", "set_", "resize_", "sparse_resize_",
                        "detach_", "add", "__iadd__"]))


def _step(p, q, r):
    with torch.no_grad():
        q.mul_(0.5).add_(p)
        torch._foreach_add_([p, r], [q, q], alpha=2.0)
        r += 1
        torch.maximum(p, r, out=p)
        return (p * q).sum()


def _aliased(p, q, r):
    with torch.no_grad():
        v = p.view(-1)
        p.mul_(2)
        q.add_(v[:3])  # reads p's new values through the view
        return r.sum()


def _promoting(p, q, r):
    with torch.no_grad():
        p.add_(r.double())  # computed in float64, stored as float32: not an out-of-place add
        q.add_(1)


def _relu_in_place(p, q, r):
    with torch.no_grad():
        q.mul_(2)
        torch.nn.functional.relu(p, inplace=True)  # not rewritten: shows in the re-trace


@pytest.mark.parametrize("fn,fx", [(_step, True), (_aliased, False), (_promoting, False), (_relu_in_place, False)],
                         ids=["rewritten", "view", "promoting", "inplace-kwarg"])
def test_graph_writing_its_inputs_equals_eager(retraces, fn, fx):
    def inputs():
        torch.manual_seed(0)
        return [torch.randn(3), torch.randn(3), torch.randn(3)]
    compiled, expected = inputs(), inputs()
    step = minidynamo.optimize("cpp")(fn)
    for _ in range(3):
        torch.testing.assert_close(step(*compiled), fn(*expected))
        for got, want in zip(compiled, expected):
            torch.testing.assert_close(got, want)
    assert minidynamo.stats()["backend_fallbacks"] == 0, list(counters.fallbacks)
    assert (retraces["fx"], retraces["functionalize"]) == ((1, 0) if fx else (0, 1))
