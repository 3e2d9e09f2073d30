"""Translator: loads/stores (locals, globals, closures, attributes), arithmetic, unary ops,
comparisons, identity and membership tests, and return values.  Whole-graph functions only."""
import operator

import pytest
import torch
import torch.nn.functional as F

from translator_harness import (  # noqa: F401  (fresh_dynamo is an autouse fixture)
    REFERENCE,
    CompileCounter,
    assert_equal,
    assert_guard,
    assert_same,
    compile_fn,
    explain,
    fresh_dynamo,
    optimize,
    rand,
    reset,
)

# ---------------------------------------------------------------------------------------------
# module-level state read by the functions under test
# ---------------------------------------------------------------------------------------------
G_TENSOR = torch.randn(4)
G_SCALE = 2.5
G_OFFSET = 3
G_FLAG = True
G_NAME = "relu"


def g_helper(x):
    return x.sin() * 2


class _Holder:
    pass


G_OBJ = _Holder()
G_OBJ.alpha = 0.5
G_OBJ.weight = torch.randn(4)


# ---------------------------------------------------------------------------------------------
# locals
# ---------------------------------------------------------------------------------------------
def locals_chain(x):
    y = x + 1
    z = y * 2
    w = z - x
    return w / 3


def locals_swap(a, b):
    a, b = b, a
    return a - b


def locals_rotate(a, b, c):
    a, b, c = c, a, b
    return a * 1 + b * 2 + c * 3


def locals_reassign_many(x):
    y = x
    for_name = y.cos()
    y = for_name + y
    y = y * y
    return y


def locals_del(x):
    y = x + 1
    z = y * 2
    del y
    return z


def locals_unused_arg(x, unused):
    return x.exp()


@pytest.mark.parametrize(
    "fn",
    [locals_chain, locals_reassign_many, locals_del],
    ids=lambda f: f.__name__,
)
def test_locals_one_arg(fn):
    assert_same(fn, rand(4), rand(4), rand(2, 3), graphs=2)


def test_locals_swap():
    assert_same(locals_swap, (rand(3), rand(3)), graphs=1)


def test_locals_rotate():
    assert_same(locals_rotate, (rand(3), rand(3), rand(3)), graphs=1)


def test_unused_tensor_arg_still_correct():
    assert_same(locals_unused_arg, (rand(3), rand(5)), (rand(3), rand(5)), graphs=1)


# ---------------------------------------------------------------------------------------------
# globals
# ---------------------------------------------------------------------------------------------
def glob_tensor(x):
    return x + G_TENSOR


def glob_scalar(x):
    return x * G_SCALE + G_OFFSET


def glob_function(x):
    return g_helper(x) + 1


def glob_module_function(x):
    return F.relu(x) + torch.sigmoid(x)


def glob_flag(x):
    if G_FLAG:
        return x + 1
    return x - 1


def glob_obj_attrs(x):
    return x * G_OBJ.alpha + G_OBJ.weight


@pytest.mark.parametrize(
    "fn",
    [glob_tensor, glob_scalar, glob_function, glob_module_function, glob_flag, glob_obj_attrs],
    ids=lambda f: f.__name__,
)
def test_globals(fn):
    assert_same(fn, rand(4), rand(4), graphs=1)


def test_changed_global_scalar_recompiles(monkeypatch):
    cnt = CompileCounter()
    f = optimize(cnt, nopython=True)(glob_scalar)
    x = rand(4)
    assert_equal(f(x), glob_scalar(x))
    assert_equal(f(x), glob_scalar(x))
    assert cnt.frame_count == 1
    monkeypatch.setattr(__import__(__name__), "G_SCALE", -1.25)
    assert_equal(f(x), glob_scalar(x))
    assert cnt.frame_count == 2
    assert_equal(f(x), glob_scalar(x))
    assert cnt.frame_count == 2


def test_changed_global_flag_recompiles(monkeypatch):
    cnt = CompileCounter()
    f = optimize(cnt, nopython=True)(glob_flag)
    x = rand(4)
    assert_equal(f(x), glob_flag(x))
    monkeypatch.setattr(__import__(__name__), "G_FLAG", False)
    assert_equal(f(x), glob_flag(x))
    assert cnt.frame_count == 2


def test_changed_global_tensor_value_is_seen(monkeypatch):
    cnt = CompileCounter()
    f = optimize(cnt, nopython=True)(glob_tensor)
    x = rand(4)
    assert_equal(f(x), glob_tensor(x))
    monkeypatch.setattr(__import__(__name__), "G_TENSOR", torch.randn(4))
    assert_equal(f(x), glob_tensor(x))  # a new tensor of the same kind must still give fresh values


def test_changed_global_obj_attr_recompiles():
    cnt = CompileCounter()
    f = optimize(cnt, nopython=True)(glob_obj_attrs)
    x = rand(4)
    old = G_OBJ.alpha
    try:
        assert_equal(f(x), glob_obj_attrs(x))
        G_OBJ.alpha = 4.0
        assert_equal(f(x), glob_obj_attrs(x))
        assert cnt.frame_count == 2
    finally:
        G_OBJ.alpha = old


def glob_store(x):
    global G_LAST
    G_LAST = 7
    return x + G_LAST


def test_global_store():
    assert_same(glob_store, rand(3), graphs=1)
    assert G_LAST == 7


# ---------------------------------------------------------------------------------------------
# closures
# ---------------------------------------------------------------------------------------------
def make_scaler(k, t):
    def scaled(x):
        return x * k + t

    return scaled


def cell_in_frame(x):
    y = x + 1

    def inner():
        return y * 2

    return inner() + y


def nonlocal_counter(x):
    acc = x

    def add(v):
        nonlocal acc
        acc = acc + v

    add(1)
    add(x)
    return acc


def closure_over_arg(x, n):
    def inner(z):
        return z * n + x

    return inner(x.cos())


def test_closure_free_vars():
    fn = make_scaler(3, torch.randn(4))
    assert_same(fn, rand(4), rand(4), graphs=1)


def test_closure_cell_in_frame():
    assert_same(cell_in_frame, rand(4), rand(2), graphs=2)


def test_closure_nonlocal_write():
    assert_same(nonlocal_counter, rand(3), graphs=1)


def test_closure_over_argument():
    assert_same(closure_over_arg, (rand(3), 2), (rand(3), 5), graphs=2)


def test_two_closures_same_code_different_cells():
    f1 = make_scaler(2, torch.randn(3))
    f2 = make_scaler(-1, torch.randn(3))
    x = rand(3)
    c1 = compile_fn(f1, nopython=True)
    c2 = compile_fn(f2, nopython=True)
    assert_equal(c1(x), f1(x))
    assert_equal(c2(x), f2(x))
    assert_equal(c1(x), f1(x))


# ---------------------------------------------------------------------------------------------
# attributes of objects
# ---------------------------------------------------------------------------------------------
class Point:
    def __init__(self, a, b):
        self.a = a
        self.b = b


def attr_read(p, x):
    return x * p.a + p.b


def attr_write_local_obj(x):
    p = Point(1, 2)
    p.a = x
    p.b = x * 3
    return p.a + p.b


def attr_write_arg(p, x):
    p.a = x + 1
    return p.a * 2


def test_attr_read():
    p = Point(2, 3)
    assert_same(attr_read, (p, rand(3)), (p, rand(3)), graphs=1)


def test_attr_write_local_object():
    assert_same(attr_write_local_obj, rand(3), graphs=1)


def test_attr_write_argument_object():
    p = Point(0, 0)
    x = rand(3)
    cf = compile_fn(attr_write_arg, nopython=True)
    out = cf(p, x)
    assert_equal(out, (x + 1) * 2)
    assert_equal(p.a, x + 1)


# ---------------------------------------------------------------------------------------------
# arithmetic on tensors: every BINARY_OP
# ---------------------------------------------------------------------------------------------
def t_add(x, y):
    return x + y


def t_sub(x, y):
    return x - y


def t_mul(x, y):
    return x * y


def t_truediv(x, y):
    return x / (y.abs() + 1)


def t_floordiv(x, y):
    return x // (y.abs() + 1)


def t_mod(x, y):
    return x % (y.abs() + 1)


def t_pow(x, y):
    return x.abs() ** y


def t_matmul(x, y):
    return x @ y.t()


def t_scalar_mix(x, y):
    return 2 * x - y / 4 + 1.5 - (3 - x) * 0.5 + 2 ** y


FLOAT_BINOPS = [t_add, t_sub, t_mul, t_truediv, t_floordiv, t_mod, t_pow, t_matmul, t_scalar_mix]


@pytest.mark.parametrize("fn", FLOAT_BINOPS, ids=lambda f: f.__name__)
def test_tensor_binop_float(fn):
    assert_same(fn, (rand(3, 3), rand(3, 3)), (rand(3, 3), rand(3, 3)), (rand(2, 2), rand(2, 2)), graphs=2)


def t_and(x, y):
    return x & y


def t_or(x, y):
    return x | y


def t_xor(x, y):
    return x ^ y


def t_lshift(x, y):
    return x << (y.abs() % 4)


def t_rshift(x, y):
    return x >> (y.abs() % 4)


def t_int_floordiv_mod(x, y):
    d = y.abs() + 1
    return x // d, x % d


INT_BINOPS = [t_and, t_or, t_xor, t_lshift, t_rshift, t_int_floordiv_mod, t_add, t_mul]


@pytest.mark.parametrize("fn", INT_BINOPS, ids=lambda f: f.__name__)
def test_tensor_binop_int(fn):
    assert_same(fn, (rand(5, dtype=torch.int64), rand(5, dtype=torch.int64)), graphs=1)


def test_tensor_binop_bool():
    def f(a, b):
        return (a & b) | (a ^ b), ~a

    assert_same(f, (rand(6, dtype=torch.bool), rand(6, dtype=torch.bool)), graphs=1)


def inplace_on_clone(x, y):
    z = x.clone()
    z += y
    z -= 1
    z *= y
    z /= 2
    return z


def inplace_int_ops(x, y):
    z = x.clone()
    z //= 3
    z %= 5
    z &= y
    z |= 1
    z ^= y
    z <<= 1
    z >>= 1
    return z


def inplace_on_input(x, y):
    x += y
    return x


def inplace_pow_matmul(x, y):
    z = x.abs() + 1
    z **= 2
    z @= y
    return z


def test_inplace_binops_on_clone():
    assert_same(inplace_on_clone, (rand(3), rand(3)), graphs=1)


def test_inplace_int_binops():
    assert_same(inplace_int_ops, (rand(6, dtype=torch.int64), rand(6, dtype=torch.int64)), graphs=1)


def test_inplace_binop_mutates_input():
    assert_same(inplace_on_input, (rand(3), rand(3)), graphs=1)


def test_inplace_pow_matmul():
    assert_same(inplace_pow_matmul, (rand(3, 3), rand(3, 3)), graphs=1)


# ---------------------------------------------------------------------------------------------
# arithmetic on Python constants (folded at trace time, guarded)
# ---------------------------------------------------------------------------------------------
def c_int_ops(x, a, b):
    r = (a + b) * 2 - (a - b) + a * b + a // b + a % b + a ** 2 + (a & b) + (a | b) + (a ^ b) + (a << 1) + (a >> 1)
    return x * r


def c_float_ops(x, a, b):
    return x * (a / b) + (a ** 0.5) - b * 1.5 + a // b + a % b


def c_inplace_ops(x, a):
    n = a
    n += 3
    n *= 2
    n -= 1
    n //= 2
    n %= 7
    n **= 2
    n <<= 1
    n >>= 1
    n |= 8
    n &= 15
    n ^= 5
    f = float(a)
    f /= 4
    return x + n + f


def c_unary(x, a, flag):
    return x * (-a) + (+a) + (~a) + (1 if not flag else 2)


def c_value_or_and(x, a, b):
    k = a or b
    j = a and b
    return x * k + j


def c_local_constants(x):
    a = 7
    b = 3
    c = (a + b) * (a - b) // 2 % 11
    return x + c


def test_constant_int_ops():
    assert_same(c_int_ops, (rand(3), 5, 3), (rand(3), 5, 3), (rand(3), 9, 2), graphs=2)


def test_constant_float_ops():
    assert_same(c_float_ops, (rand(3), 5.0, 2.0), (rand(3), 3.5, 0.5), graphs=2)


def test_constant_inplace_ops():
    assert_same(c_inplace_ops, (rand(3), 4), (rand(3), 11), graphs=2)


def test_constant_unary_ops():
    assert_same(c_unary, (rand(3), 4, True), (rand(3), 4, False), graphs=2)


def test_constant_value_or_and():
    assert_same(c_value_or_and, (rand(3), 0, 4), (rand(3), 2, 5), graphs=2)


def test_constant_local_folding():
    assert_same(c_local_constants, rand(3), graphs=1)


# ---------------------------------------------------------------------------------------------
# unary ops on tensors
# ---------------------------------------------------------------------------------------------
def u_neg(x):
    return -x


def u_pos(x):
    return +x * 2


def u_invert_bool(x):
    return ~(x > 0)


def u_invert_int(x):
    return ~x.to(torch.int32)


def u_mixed(x):
    return -(-x).abs() + abs(x)


@pytest.mark.parametrize("fn", [u_neg, u_pos, u_invert_bool, u_invert_int, u_mixed], ids=lambda f: f.__name__)
def test_tensor_unary(fn):
    assert_same(fn, rand(5), graphs=1)


# ---------------------------------------------------------------------------------------------
# comparisons
# ---------------------------------------------------------------------------------------------
def cmp_tensors(x, y):
    return x < y, x <= y, x == y, x != y, x > y, x >= y


def cmp_tensor_scalar(x):
    return (x < 0.5) & (x >= -0.5), x == 0, 1 > x


def cmp_constants(x, a, b):
    r = [a < b, a <= b, a == b, a != b, a > b, a >= b]
    return x + sum(r), r


def cmp_chained(x, a):
    if 0 < a <= 5:
        return x + a
    return x - a


def cmp_strings(x, mode):
    if mode == "sum":
        return x.sum()
    if mode != "mean":
        return x
    return x.mean()


def test_compare_tensors():
    assert_same(cmp_tensors, (rand(5), rand(5)), graphs=1)


def test_compare_tensor_scalar():
    assert_same(cmp_tensor_scalar, rand(5), graphs=1)


def test_compare_constants():
    assert_same(cmp_constants, (rand(2), 1, 2), (rand(2), 2, 2), (rand(2), 3, 1), graphs=3)


def test_compare_chained():
    assert_same(cmp_chained, (rand(2), 3), (rand(2), 9), graphs=2)


def test_compare_strings():
    assert_same(cmp_strings, (rand(3), "sum"), (rand(3), "mean"), graphs=2)


# ---------------------------------------------------------------------------------------------
# is / is not / in / not in
# ---------------------------------------------------------------------------------------------
def is_none(x, y=None):
    if y is None:
        return x + 1
    return x + y


def is_not_none(x, bias):
    out = x * 2
    if bias is not None:
        out = out + bias
    return out


def is_same_object(x, y):
    if x is y:
        return x * 2
    return x + y


def in_tuple(x, mode):
    if mode in ("relu", "gelu"):
        return F.relu(x)
    return x.tanh()


def not_in_list(x, k):
    if k not in [1, 2, 3]:
        return x * k
    return x


def in_dict_and_set(x, key):
    table = {"a": 1, "b": 2}
    r = x
    if key in table:
        r = r + table[key]
    if key not in {"c", "d"}:
        r = r * 2
    return r


def in_string(x, s):
    if "ab" in s:
        return x + 1
    return x - 1


def test_is_none():
    assert_same(is_none, rand(3), (rand(3), rand(3)), graphs=2)


def test_is_not_none():
    assert_same(is_not_none, (rand(3), None), (rand(3), rand(3)), graphs=2)


def test_is_same_tensor():
    x = rand(3)
    cnt = CompileCounter()
    f = optimize(cnt, nopython=True)(is_same_object)
    assert_equal(f(x, x), is_same_object(x, x))
    y = rand(3)
    assert_equal(f(x, y), is_same_object(x, y))
    assert cnt.frame_count == 2


def test_in_tuple():
    assert_same(in_tuple, (rand(3), "relu"), (rand(3), "tanh"), graphs=2)


def test_not_in_list():
    assert_same(not_in_list, (rand(3), 2), (rand(3), 5), graphs=1)  # k=2 returns x: no graph


def test_in_dict_and_set():
    # "c" returns x untouched: no graph for it
    assert_same(in_dict_and_set, (rand(3), "a"), (rand(3), "c"), (rand(3), "z"), graphs=2)


def test_in_string():
    assert_same(in_string, (rand(3), "xaby"), (rand(3), "ba"), graphs=2)


# ---------------------------------------------------------------------------------------------
# returns
# ---------------------------------------------------------------------------------------------
def ret_tensor(x):
    return x.relu()


def ret_tuple(x, y):
    return x + y, x - y


def ret_list(x):
    return [x * 1, x * 2, x * 3]


def ret_dict(x):
    return {"double": x * 2, "square": x * x}


def ret_nested(x, y):
    return {"pair": (x + y, [x, y * 2]), "meta": {"n": 3, "sum": (x + y).sum()}}


def ret_input_unchanged(x):
    return x


def ret_inputs_swapped(x, y):
    return y, x


def ret_constants_mixed(x):
    return x + 1, 3, "tag", None, 2.5, True


def ret_none_after_inplace(x):
    x.add_(1)
    return None


def ret_only_constants(x, n):
    return n * 2, "done"


def ret_input_and_output(x):
    return x, x * 2


def test_return_tensor():
    assert_same(ret_tensor, rand(3), graphs=1)


def test_return_tuple():
    assert_same(ret_tuple, (rand(3), rand(3)), graphs=1)


def test_return_list():
    assert_same(ret_list, rand(3), graphs=1)


def test_return_dict():
    assert_same(ret_dict, rand(3), graphs=1)


def test_return_nested():
    assert_same(ret_nested, (rand(3), rand(3)), graphs=1)


def test_return_input_unchanged_no_graph():
    assert_same(ret_input_unchanged, rand(3), graphs=0)
    reset()
    x = rand(3)
    cf = compile_fn(ret_input_unchanged)
    assert cf(x) is x


def test_return_inputs_swapped_no_graph():
    assert_same(ret_inputs_swapped, (rand(3), rand(2)), graphs=0)


def test_return_constants_mixed():
    assert_same(ret_constants_mixed, rand(3), graphs=1)


def test_return_none():
    assert_same(ret_none_after_inplace, rand(3), graphs=1)


def test_return_only_constants_no_graph():
    assert_same(ret_only_constants, (rand(3), 4), (rand(3), 5), graphs=0)


def test_return_input_and_output():
    x = rand(3)
    cf = compile_fn(ret_input_and_output, nopython=True)
    a, b = cf(x)
    assert a is x
    assert_equal(b, x * 2)


# ---------------------------------------------------------------------------------------------
# the README toy function
# ---------------------------------------------------------------------------------------------
def toy(a, b):
    x = a / (torch.abs(a) + 1)
    return x * b


def toy_with_branch(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def test_toy_100_iterations_one_graph():
    cnt = CompileCounter()
    f = optimize(cnt)(toy)
    for _ in range(100):
        a, b = torch.randn(10), torch.randn(10)
        assert_equal(f(a, b), toy(a, b))
    assert cnt.frame_count == 1
    assert cnt.op_count >= 2


def test_toy_with_branch_matches_eager():
    cnt = CompileCounter()
    f = optimize(cnt)(toy_with_branch)
    for _ in range(100):
        a, b = torch.randn(10), torch.randn(10)
        assert_equal(f(a, b), toy_with_branch(a, b))


def test_print_tabular_compiler(capsys, monkeypatch):
    try:
        import tabulate  # noqa: F401
    except ImportError:  # print_tabular needs `tabulate`; a minimal stand-in keeps the test meaningful
        import sys
        import types

        fake = types.ModuleType("tabulate")

        def _tabulate(rows, headers=()):
            return "\n".join(" | ".join(str(c) for c in row) for row in [list(headers)] + [list(r) for r in rows])

        fake.tabulate = _tabulate
        monkeypatch.setitem(sys.modules, "tabulate", fake)

    seen = []

    def my_compiler(gm: torch.fx.GraphModule, example_inputs):
        seen.append(len(example_inputs))
        gm.graph.print_tabular()
        return gm.forward

    f = optimize(my_compiler)(toy)
    a, b = torch.randn(10), torch.randn(10)
    assert_equal(f(a, b), toy(a, b))
    out = capsys.readouterr().out
    assert seen and seen[0] >= 2
    assert "placeholder" in out and "output" in out
    assert "abs" in out
    assert "truediv" in out or "div" in out
    assert "mul" in out


# ---------------------------------------------------------------------------------------------
# operator module on tensors
# ---------------------------------------------------------------------------------------------
def op_module_calls(x, y):
    return operator.add(x, y), operator.mul(x, 2), operator.neg(y), operator.getitem(x, 0)


def test_operator_module():
    assert_same(op_module_calls, (rand(3), rand(3)), graphs=1)


# ---------------------------------------------------------------------------------------------
# explain on a basic function
# ---------------------------------------------------------------------------------------------
def test_explain_counts_one_graph():
    out = explain(toy, torch.randn(4), torch.randn(4))
    assert out.graph_count == 1
    assert out.graph_break_count == 0
    assert len(out.graphs) == 1
    assert out.op_count >= 2
    assert len(out.ops_per_graph) == 1
    assert_guard(out, "a", "TENSOR_MATCH")
    assert_guard(out, "b", "TENSOR_MATCH")
