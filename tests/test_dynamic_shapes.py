"""Dynamic shapes: automatic dynamic (a size change makes that dim symbolic), optimize(dynamic=...),
mark_dynamic, guards on the relations the code relied on, and size-0/1 specialisation."""
import random

import pytest
import torch
from torch import nn

import minidynamo
from minidynamo.guards import GuardKind
from minidynamo.testing import CompileCounter


def assert_matches(actual, expected):
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor) and actual.shape == expected.shape
        torch.testing.assert_close(actual, expected)
    elif isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_matches(a, e)
    else:
        assert type(actual) is type(expected) and actual == expected


def run_sizes(fn, sizes, make_args, **optimize_kwargs):
    """Calls the compiled fn for each size, comparing with eager; returns the compile counter,
    with `history`: the number of graphs compiled after each call."""
    cnt = CompileCounter()
    cnt.history = []
    compiled = minidynamo.optimize(cnt, **optimize_kwargs)(fn)
    for size in sizes:
        args = make_args(size)
        assert_matches(compiled(*args), fn(*args))
        cnt.history.append(cnt.frame_count)
    return cnt


def size_inputs(gm):
    """Placeholders of a graph that stand for sizes (not tensors)."""
    return [n.name for n in gm.graph.nodes if n.op == "placeholder" and "size" in n.name]


def batch_ops(x):
    flat = x.view(x.shape[0], -1)
    mean = x.sum(0) / x.shape[0]
    z = torch.zeros(x.size(0), 3)
    return flat * 2, mean, z + x[:, :1, 0], (x - mean).relu(), x.shape[0] * 2 + 1


def rows(b):
    return (torch.randn(b, 3, 2),)


# ---------------------------------------------------------------------------------------------
# automatic dynamic shapes and optimize(dynamic=...)
# ---------------------------------------------------------------------------------------------
def test_first_compile_is_static():
    cnt = run_sizes(batch_ops, [4, 4], rows)
    assert cnt.frame_count == 1 and size_inputs(cnt.graphs[0]) == []


def test_automatic_dynamic_recompiles_once_with_symbolic_dim():
    cnt = run_sizes(batch_ops, [4, 5, 6, 9, 4], rows)
    assert cnt.history == [1, 2, 2, 2, 2]
    assert size_inputs(cnt.graphs[1]) == ["l_x_size_0"]


def test_fifty_batch_sizes_compile_at_most_twice():
    sizes = list(range(2, 52))
    random.Random(0).shuffle(sizes)
    cnt = run_sizes(batch_ops, sizes, rows)
    assert cnt.frame_count <= 2


def test_fifty_sizes_with_eager_backend_passes_sizes_as_ints():
    seen = []

    def backend(gm, example_inputs):
        seen.append([type(a) for a in example_inputs])
        return gm.forward

    compiled = minidynamo.optimize(backend)(batch_ops)
    eager = minidynamo.optimize("eager")(batch_ops)
    for b in range(2, 52):
        args = rows(b)
        assert_matches(compiled(*args), batch_ops(*args))
        assert_matches(eager(*args), batch_ops(*args))
    assert seen == [[torch.Tensor], [torch.Tensor, int]]


def test_only_the_changed_dim_becomes_symbolic():
    def f(x):
        return x.reshape(x.shape[0] * x.shape[1])

    cnt = run_sizes(f, [(3, 4), (5, 4), (6, 4)], lambda s: (torch.randn(*s),))
    assert cnt.frame_count == 2 and size_inputs(cnt.graphs[1]) == ["l_x_size_0"]
    cnt = run_sizes(f, [(3, 4), (3, 4), (3, 5)], lambda s: (torch.randn(*s),))
    assert cnt.frame_count == 2 and size_inputs(cnt.graphs[1]) == ["l_x_size_1"]
    # a change at the other dim later: one more compile, then both are symbolic
    cnt = run_sizes(f, [(3, 4), (5, 4), (5, 6), (7, 8), (2, 9)], lambda s: (torch.randn(*s),))
    assert cnt.frame_count == 3


def test_dynamic_false_compiles_per_size():
    cnt = run_sizes(batch_ops, [2, 3, 4, 5, 6], rows, dynamic=False)
    assert cnt.frame_count == 5
    assert all(size_inputs(gm) == [] for gm in cnt.graphs)


def test_dynamic_true_compiles_once():
    cnt = run_sizes(batch_ops, [4, 7, 2, 30], rows, dynamic=True)
    assert cnt.frame_count == 1
    assert size_inputs(cnt.graphs[0]) == ["l_x_size_0", "l_x_size_1", "l_x_size_2"]


def test_mark_dynamic_first_compile_is_symbolic():
    def make(b):
        x = torch.randn(b, 3, 2)
        minidynamo.mark_dynamic(x, 0)
        return (x,)

    cnt = run_sizes(batch_ops, [5, 6, 7, 40], make)
    assert cnt.frame_count == 1 and size_inputs(cnt.graphs[0]) == ["l_x_size_0"]


def test_mark_dynamic_on_a_later_argument():
    def f(w, x):
        return (x * 2).sum(0) + w, x.shape[0]

    def make(b):
        x = torch.randn(b, 3)
        minidynamo.mark_dynamic(x, [0])
        return torch.randn(3), x

    cnt = run_sizes(f, [4, 5, 9], make)
    assert cnt.frame_count == 1 and size_inputs(cnt.graphs[0]) == ["l_x_size_0"]


def test_torch_dynamo_mark_dynamic_is_honoured():
    def make(b):
        x = torch.randn(b, 3, 2)
        torch._dynamo.mark_dynamic(x, 0)
        return (x,)

    cnt = run_sizes(batch_ops, [5, 6, 7], make)
    assert cnt.frame_count == 1 and size_inputs(cnt.graphs[0]) == ["l_x_size_0"]


@pytest.mark.parametrize("mark_static", [minidynamo.mark_static, torch._dynamo.mark_static])
def test_mark_static_keeps_a_dim_static_under_dynamic_true(mark_static):
    def make(b):
        x = torch.randn(b, 3, 2)
        mark_static(x, 0)
        return (x,)

    cnt = run_sizes(batch_ops, [4, 7, 9], make, dynamic=True)
    assert cnt.frame_count == 3 and size_inputs(cnt.graphs[0]) == ["l_x_size_1", "l_x_size_2"]


def test_mark_dynamic_wins_over_mark_static():
    def make(b):
        x = torch.randn(b, 3, 2)
        minidynamo.mark_static(x)
        minidynamo.mark_dynamic(x, 0)
        return (x,)

    cnt = run_sizes(batch_ops, [4, 7, 9], make)
    assert cnt.frame_count == 1 and size_inputs(cnt.graphs[0]) == ["l_x_size_0"]


def test_mark_dynamic_rejects_bad_dims():
    with pytest.raises(IndexError):
        minidynamo.mark_dynamic(torch.randn(2, 3), 2)


# ---------------------------------------------------------------------------------------------
# guards on relations, specialisation
# ---------------------------------------------------------------------------------------------
def branch_on_size(x):
    if x.shape[0] > 4:
        return x + 1
    return x - 1


def test_branch_on_size_guards_the_relation():
    cnt = run_sizes(branch_on_size, [2, 3, 4, 2, 5, 6, 9, 3, 4, 12], lambda b: (torch.randn(b, 2),))
    # 2 static, then one graph for the sizes <= 4, and crossing the threshold one for those > 4
    assert cnt.history == [1, 2, 2, 2, 3, 3, 3, 3, 3, 3]


def test_relation_between_inputs():
    def f(x, y):
        if x.shape[0] == y.shape[0]:
            return torch.cat([x, y], 1)
        return x.sum(0)

    cnt = run_sizes(f, [(2, 2), (3, 3), (4, 4), (5, 3), (6, 2), (7, 7)],
                    lambda s: (torch.randn(s[0], 2), torch.randn(s[1], 3)))
    assert cnt.frame_count == 3  # static, then equal sizes, then unequal sizes


def test_size_0_and_1_are_specialised():
    def f(x, y):
        return x + y, x.shape[0]

    sizes = [3, 4, 1, 0, 5, 1, 0, 6]
    cnt = run_sizes(f, sizes, lambda b: (torch.randn(b, 3), torch.randn(b, 1)))
    assert cnt.frame_count == 4  # 3 static, symbolic (>= 2), 1, 0


def test_broadcast_with_size_1_not_served_by_symbolic_graph():
    def f(x, y):
        return (x * y).sum(1)

    cnt = run_sizes(f, [2, 3, 1, 4], lambda b: (torch.randn(4, b), torch.randn(4, 3 if b == 1 else b)))
    assert cnt.frame_count == 3


def test_unrolled_loop_over_size_specialises():
    def f(x):
        return tuple(x[i].sum() for i in range(x.shape[0]))

    cnt = run_sizes(f, [2, 3, 4, 3], lambda b: (torch.randn(b, 2),))
    assert cnt.frame_count == 3


def test_size_tuples_len_slices_and_numel():
    def f(x):
        n = len(x)
        if x.size() == (n, 3):
            return x[: n // 2].sum() + x.numel(), x.shape, x.shape[1:], x.new_zeros(x.shape)
        return x

    cnt = run_sizes(f, [4, 5, 6, 7], lambda b: (torch.randn(b, 3),), nopython=True)
    assert cnt.frame_count == 2


def test_size_arithmetic_returned():
    def f(x):
        n = x.shape[0]
        return n * 2 + 1, n // 3, n % 2 == 0, max(n, 5), n / 2, -n

    cnt = run_sizes(f, [2, 3, 8, 9, 10], lambda b: (torch.randn(b),), nopython=True)
    assert cnt.history == [0, 1, 1, 1, 1]  # no tensor ops while static; a graph of size arithmetic


def test_symbolic_size_across_a_graph_break():
    def f(x):
        n = x.shape[0] * 2
        y = x + 1
        print(end="")
        return y.view(n, -1), n

    cnt = run_sizes(f, [4, 6, 8], lambda b: (torch.randn(b, 4),))
    assert cnt.frame_count >= 2


def test_mlp_module_dynamic_batch():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))
    cnt = run_sizes(mlp, range(2, 40), lambda b: (torch.randn(b, 6),))
    assert cnt.frame_count <= 2


def test_explain_reports_shape_guard():
    x = torch.randn(6, 2)
    minidynamo.mark_dynamic(x, 0)
    out = minidynamo.explain(branch_on_size)(x)
    shape_guards = [g for g in out.out_guards if g.kind is GuardKind.SHAPE_ENV]
    assert len(shape_guards) == 1
    assert "4 < L['x'].size()[0]" in shape_guards[0].value or "5 <= L['x'].size()[0]" in shape_guards[0].value
    assert "L['x'].size()[0]" in str(shape_guards[0])
