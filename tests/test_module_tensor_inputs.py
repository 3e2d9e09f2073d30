"""Module parameters and buffers reached from the frame are graph inputs, read by generated code from
the dicts the modules keep them in; their guards read the same dicts, and share one accessor for the
class of several instances of one class."""
import pytest
import torch
from torch import nn

import minidynamo
from minidynamo import _C
from minidynamo.testing import CompileCounter


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))


def _graphs(fn, *args):
    seen = []

    def backend(gm, example_inputs):
        seen.append((gm, list(example_inputs)))
        return gm.forward

    out = minidynamo.optimize(backend)(fn)(*args)
    return out, seen


def test_parameters_are_graph_inputs_read_from_the_module_dicts():
    m, x = _mlp(), torch.randn(2, 8)
    out, seen = _graphs(m, x)
    torch.testing.assert_close(out, m(x))
    (gm, example_inputs), = seen
    assert [n.op for n in gm.graph.nodes].count("get_attr") == 0
    params = list(m.parameters())
    assert all(any(p is e for e in example_inputs) for p in params)
    code = _C.get_cache_entries(type(m).forward.__code__)[0][1]
    assert "_parameters" in code.co_names and "_modules" in code.co_names
    assert "weight" not in code.co_names  # never read through Module.__getattr__


def test_changed_parameters_are_seen_and_in_place_updates_hit_the_cache():
    m, x = _mlp(), torch.randn(2, 8)
    cnt = CompileCounter()
    compiled = minidynamo.optimize(cnt)(m)
    torch.testing.assert_close(compiled(x), m(x))
    with torch.no_grad():
        m[0].weight.mul_(2)  # in place: the same graph, new values
    torch.testing.assert_close(compiled(x), m(x))
    assert cnt.frame_count == 1
    m[2].weight = nn.Parameter(torch.randn(16, 16))  # another tensor alike: read by the same entry
    torch.testing.assert_close(compiled(x), m(x))
    assert cnt.frame_count == 1
    m[4].bias.data = torch.randn(4)  # same object, new tensor behind it
    torch.testing.assert_close(compiled(x), m(x))
    m[4].bias = None
    torch.testing.assert_close(compiled(x), m(x))
    assert cnt.frame_count == 2


def test_tied_and_aliased_parameters():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4, bias=False)
            self.b = nn.Linear(4, 4, bias=False)
            self.b.weight = self.a.weight

        def forward(self, x, w):
            return self.b(self.a(x)) + w.sum()

    m, x = Tied(), torch.randn(2, 4)
    cnt = CompileCounter()
    compiled = minidynamo.optimize(cnt)(m)
    torch.testing.assert_close(compiled(x, m.a.weight), m(x, m.a.weight))
    torch.testing.assert_close(compiled(x, torch.ones(3)), m(x, torch.ones(3)))
    m.b.weight = nn.Parameter(torch.randn(4, 4))  # untied: seen
    torch.testing.assert_close(compiled(x, torch.ones(3)), m(x, torch.ones(3)))


def test_module_made_in_the_frame_keeps_its_tensors_in_the_graph():
    def f(x):
        torch.manual_seed(3)
        lin = nn.Linear(4, 2)
        return lin(x)

    x = torch.randn(3, 4)
    cnt = CompileCounter()
    compiled = minidynamo.optimize(cnt)(f)
    torch.testing.assert_close(compiled(x), f(x))
    torch.testing.assert_close(compiled(x), f(x))


def test_training_gradients_reach_the_parameters():
    m, x = _mlp(), torch.randn(2, 8)
    twin = _mlp()
    compiled = minidynamo.optimize("eager")(m)
    compiled(x).sum().backward()
    twin(x).sum().backward()
    for p, q in zip(m.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


@pytest.mark.parametrize("n", [3, 40])
def test_many_tensors_aliasing_each_other_are_told_apart(n):
    def f(*xs):
        out = xs[0] * 0
        for i, x in enumerate(xs):
            out = out + x * (i + 1)
        xs[1].add_(1)
        return out

    compiled = minidynamo.optimize("eager")(f)
    distinct = [torch.randn(3) for _ in range(n)]
    twin = [t.clone() for t in distinct]
    torch.testing.assert_close(compiled(*distinct), f(*twin))
    shared = torch.randn(3)
    aliased = [torch.randn(3) for _ in range(n)]
    aliased[1] = aliased[n - 1] = shared  # the in-place add is seen through both
    twin = [t.clone() for t in aliased]
    twin[1] = twin[n - 1] = twin[1]
    torch.testing.assert_close(compiled(*aliased), f(*twin))


def test_class_attribute_guards_follow_each_instance_class():
    class Twice(nn.Module):
        def forward(self, x):
            return x * 2

    class Thrice(nn.Module):
        def forward(self, x):
            return x * 3

    seq = nn.Sequential(Twice(), Twice())
    x = torch.randn(3)
    compiled = minidynamo.optimize("eager")(seq)
    torch.testing.assert_close(compiled(x), x * 4)
    seq[1].__class__ = Thrice  # one instance changes class: its class's forward now runs
    torch.testing.assert_close(compiled(x), x * 6)
    Twice.forward = lambda self, x: x + 1  # the shared class changes
    torch.testing.assert_close(compiled(x), (x + 1) * 3)


def test_instance_dict_entry_shadowing_a_parameter_read():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = 2.0

        def forward(self, x):
            return x * self.scale

    m, x = M(), torch.randn(3)
    compiled = minidynamo.optimize("eager")(m)
    torch.testing.assert_close(compiled(x), x * 2)
    m.__dict__["scale"] = 5.0
    torch.testing.assert_close(compiled(x), x * 5)
    m.__dict__.clear()  # Module internals gone: eager raises, and so must the compiled call
    with pytest.raises(AttributeError):
        m(x)
    with pytest.raises(AttributeError):
        compiled(x)


def test_parameters_whose_source_names_differ_only_in_punctuation_are_distinct_inputs():
    class Nested(nn.Module):
        def __init__(self):
            super().__init__()
            self.a_b = nn.Linear(2, 2)
            self.a = nn.Module()
            self.a.b = nn.Linear(2, 2)
            self.layer_norm = nn.Linear(2, 2)
            self.layer = nn.ModuleDict({"norm": nn.Linear(2, 2)})

        def forward(self, x):
            return self.a_b(x) + self.a.b(x) + self.layer_norm(x) + self.layer["norm"](x)

    m, x = Nested(), torch.randn(3, 2)
    out, seen = _graphs(m, x)
    torch.testing.assert_close(out, m(x))
    (gm, example_inputs), = seen
    assert len({n.target for n in gm.graph.nodes if n.op == "placeholder"}) == len(example_inputs) == 9
