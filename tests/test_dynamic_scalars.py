"""Automatic dynamic ints and floats: an int or float argument whose value changed between compiles
becomes a symbolic graph input, so later values reuse the graph; uses that need the exact value (an
index, a dict key, a range bound, int methods) guard it, and a frame that would break the graph keeps
them constant.

Runs against torch._dynamo with its default config too (`MINIDYNAMO_TEST_REFERENCE=torch`)."""
import contextlib
import io
import os

import pytest
import torch

REFERENCE = os.environ.get("MINIDYNAMO_TEST_REFERENCE", "").strip().lower() == "torch"
if REFERENCE:
    import torch._dynamo as dynamo
    from torch._dynamo.testing import CompileCounter
else:
    import minidynamo as dynamo
    from minidynamo.testing import CompileCounter

minidynamo_only = pytest.mark.skipif(REFERENCE, reason="checks minidynamo internals")
VALUES = (2, 3, 4, 5, 6, 7, 2, 3)


@pytest.fixture(autouse=True)
def fresh():
    dynamo.reset()
    yield
    dynamo.reset()


def scaled(x, n):
    return x * n + 1


def loop_to(x, n):
    for i in range(n):
        x = x + i
    return x


def branch_on(x, n):
    if n > 4:
        return x * 2
    return x - n


def index_list(x, n):
    table = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    return x + table[n]


def dict_key(x, n):
    table = {2: 1.0, 3: 2.0, 4: 3.0, 5: 4.0, 6: 5.0, 7: 6.0}
    return x + table[n]


def slice_to(x, n):
    return x[:n] * 2


def full_of(x, n):
    return torch.full((n,), 3.0) + x.sum()


def int_arithmetic(x, n):
    return x * (n ** 2) + n // 2 + n % 3


def new_zeros_size(x, n):
    return x.new_zeros(n).shape[0] + x


def true_divide(x, n):
    return x / n


def bit_length(x, n):
    return x * n.bit_length()


def str_length(x, n):
    return x + len(str(n))


def reshape_rows(x, n):
    return x.reshape(n, -1).sum(0)


# function -> frames compiled over VALUES, which is torch's count with its default config
FAMILY = {
    scaled: 2, loop_to: 6, branch_on: 3, index_list: 6, dict_key: 6, slice_to: 2, full_of: 2,
    int_arithmetic: 2, new_zeros_size: 2, true_divide: 2, bit_length: 6, str_length: 7,
}


def run_values(fn, values=VALUES, **optimize_kwargs):
    cnt = CompileCounter()
    cnt.compiled = dynamo.optimize(cnt, **optimize_kwargs)(fn)
    for n in values:
        x = torch.arange(24.0)
        try:
            expected = fn(x, n)
        except Exception as e:  # noqa: BLE001 - the compiled call must raise the same
            with pytest.raises(type(e)):
                cnt.compiled(x, n)
            continue
        got = cnt.compiled(x, n)
        torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
    return cnt


@pytest.mark.parametrize("fn", list(FAMILY), ids=lambda f: f.__name__)
def test_varying_int_recompiles_no_more_than_torch(fn):
    cnt = run_values(fn)
    assert cnt.frame_count <= FAMILY[fn]


@pytest.mark.parametrize("fn", list(FAMILY), ids=lambda f: f.__name__)
def test_repeated_values_compile_nothing(fn):
    cnt = run_values(fn)
    settled = cnt.frame_count
    for n in VALUES:
        cnt.compiled(torch.arange(24.0), n)
    assert cnt.frame_count == settled


@pytest.mark.skipif(REFERENCE, reason="torch 2.13 returns a result where eager raises (reshape of 24 into 5 rows)")
def test_shape_errors_from_a_symbolic_int_are_eagers():
    assert run_values(reshape_rows).frame_count <= 4


@minidynamo_only
def test_second_value_makes_the_int_a_graph_input():
    cnt = run_values(scaled, (3, 4, 5, 9))
    assert cnt.frame_count == 2
    placeholders = [n for n in cnt.graphs[-1].graph.nodes if n.op == "placeholder"]
    assert [str(n.target) for n in placeholders] == ["l_x", "l_n"]
    assert [str(n.target) for n in cnt.graphs[0].graph.nodes if n.op == "placeholder"] == ["l_x"]


@minidynamo_only
def test_dynamic_int_is_guarded_by_type_and_relations():
    from minidynamo.guards import GuardKind

    cnt = CompileCounter()
    records = []
    compiled = dynamo.optimize(cnt)(branch_on)
    with dynamo_records(records):
        compiled(torch.ones(3), 5)
        compiled(torch.ones(3), 6)
    guards = records[-1].check.guards
    kinds = {(g.name, g.kind) for g in guards}
    assert ("L['n']", GuardKind.TYPE_MATCH) in kinds and ("L['n']", GuardKind.EQUALS_MATCH) not in kinds
    shape = [g for g in guards if g.kind == GuardKind.SHAPE_ENV]
    assert shape and any("L['n']" in expr for expr in shape[0].value), "n > 4 was relied on"
    before = cnt.frame_count
    torch.testing.assert_close(compiled(torch.ones(3), 3), branch_on(torch.ones(3), 3))
    assert cnt.frame_count == before + 1, "n = 3 fails the relation and compiles the other branch"
    torch.testing.assert_close(compiled(torch.ones(3), 2.5), branch_on(torch.ones(3), 2.5))
    assert cnt.frame_count == before + 2, "a float fails the type guard"


@contextlib.contextmanager
def dynamo_records(into):
    from minidynamo import convert_frame

    convert_frame.compile_listeners.append(into.append)
    try:
        yield
    finally:
        convert_frame.compile_listeners.remove(into.append)


def print_between(x, n):
    y = x * n
    print("between")
    return y + n


@minidynamo_only
def test_a_frame_that_breaks_keeps_its_ints_constant():
    with contextlib.redirect_stdout(io.StringIO()) as out:
        cnt = run_values(print_between, (2, 3, 4))
    assert out.getvalue() == "between\n" * 6
    assert cnt.frame_count <= 6
    for gm in cnt.graphs:  # the frame that breaks has n constant (its resume function need not)
        names = [str(n.target) for n in gm.graph.nodes if n.op == "placeholder"]
        assert "l_n" not in names or "l_x" not in names


def test_zero_one_and_bools_stay_constants():
    cnt = run_values(scaled, (2, 3, 0, 1, 0, 1, 4))
    assert cnt.frame_count <= 4  # 2, the symbolic graph, then 0 and 1 each their own

    def pick(x, flag):
        return x * 2 if flag else x - 1

    cnt = CompileCounter()
    compiled = dynamo.optimize(cnt)(pick)
    for flag in (True, False, True, False):
        torch.testing.assert_close(compiled(torch.ones(2), flag), pick(torch.ones(2), flag))
    assert cnt.frame_count == 2


@minidynamo_only
def test_dynamic_false_keeps_one_entry_per_value():
    assert run_values(scaled, (2, 3, 4), dynamic=False).frame_count == 3


@minidynamo_only
def test_dynamic_true_makes_ints_symbolic_from_the_first_compile():
    cnt = run_values(scaled, (2, 3, 4), dynamic=True)
    assert cnt.frame_count == 1


def scale_by(x, lr):
    return x * lr + 1


def temperature_branch(x, t):
    if t > 0.5:
        return x / t
    return x * t


def softmax_rounded(x, t):
    return torch.softmax(x / t, 0) + round(t, 2) + int(t)


FLOATS = {scale_by: 2, temperature_branch: 3, softmax_rounded: 6}


@pytest.mark.parametrize("fn", list(FLOATS), ids=lambda f: f.__name__)
def test_varying_float_recompiles_no_more_than_torch(fn):
    cnt = run_values(fn, (0.1, 0.2, 0.3, 0.7, 0.9, 1.7, 0.1, 0.3))
    assert cnt.frame_count <= FLOATS[fn]
    settled = cnt.frame_count
    for t in (0.1, 0.2, 0.3, 0.7, 0.9, 1.7):
        cnt.compiled(torch.arange(24.0), t)
    assert cnt.frame_count == settled


def test_non_finite_floats_stay_constants():
    cnt = run_values(scale_by, (0.5, 0.25, float("inf"), float("nan"), 0.75))
    assert cnt.frame_count <= 4


def test_int_argument_of_a_module_forward():
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x, repeat):
            return self.lin(x).repeat(repeat, 1) * repeat

    torch.manual_seed(0)
    model = Scale()
    cnt = CompileCounter()
    compiled = dynamo.optimize(cnt)(model)
    x = torch.randn(2, 4)
    for repeat in (2, 3, 4, 5, 3):
        torch.testing.assert_close(compiled(x, repeat), model(x, repeat), rtol=0, atol=0)
    assert cnt.frame_count == 2
