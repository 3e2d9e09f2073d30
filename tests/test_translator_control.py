"""Translator: control flow decided at trace time (python args, shapes, dtypes, isinstance), loops
over constant iterables and module containers, while loops, comprehensions, f-strings and grad-mode
context managers.  Whole-graph functions only."""
import pytest
import torch

from translator_harness import (  # noqa: F401
    CompileCounter,
    assert_equal,
    assert_same,
    fresh_dynamo,
    optimize,
    rand,
)


# ---------------------------------------------------------------------------------------------
# if / else
# ---------------------------------------------------------------------------------------------
def if_on_bool_arg(x, flag):
    if flag:
        return x.sin()
    else:
        return x.cos()


def if_on_int_arg(x, n):
    if n > 2:
        x = x * n
    elif n == 2:
        x = x + 100
    else:
        x = x - n
    return x


def if_on_shape(x):
    if x.shape[0] > 2:
        return x[:2] * 2
    return x + 1


def if_on_dim(x):
    if x.dim() == 1:
        return x.unsqueeze(0)
    elif x.ndim == 2:
        return x.sum(0, keepdim=True)
    return x.flatten(1)


def if_on_dtype(x):
    if x.dtype == torch.float32:
        return x * 0.5
    if x.dtype is torch.float64:
        return x * 0.25
    return x.float()


def if_on_isinstance(x, y):
    if isinstance(y, torch.Tensor):
        return x + y
    if isinstance(y, (int, float)):
        return x * y
    return x


def if_on_numel(x):
    if x.numel() >= 6:
        return x.reshape(-1)[:6]
    return x.reshape(-1)


def if_on_size_tuple(x):
    if x.size() == (2, 3):
        return x.t()
    return x


def if_ternary(x, neg):
    return -x if neg else x * 1


def if_and_or(x, a, b):
    if a and not b:
        return x + 1
    if a or b:
        return x + 2
    return x + 3


def if_on_requires_grad(x):
    if x.requires_grad:
        return x * 2
    return x * 3


def if_on_device(x):
    if x.device.type == "cpu":
        return x + 1
    return x - 1


def if_on_is_floating_point(x):
    if x.is_floating_point():
        return x.exp()
    return x * 2


def test_if_bool_arg():
    assert_same(if_on_bool_arg, (rand(3), True), (rand(3), False), graphs=2)


def test_if_int_arg():
    assert_same(if_on_int_arg, (rand(3), 5), (rand(3), 2), (rand(3), 0), graphs=3)


def test_if_shape():
    assert_same(if_on_shape, rand(5), rand(2), graphs=2)


def test_if_dim():
    assert_same(if_on_dim, rand(3), rand(2, 3), rand(2, 3, 4), graphs=3)


def test_if_dtype():
    assert_same(if_on_dtype, rand(3), rand(3, dtype=torch.float64), rand(3, dtype=torch.int32), graphs=3)


def test_if_isinstance():
    # a str returns x untouched: no graph for it
    assert_same(if_on_isinstance, (rand(3), rand(3)), (rand(3), 3), (rand(3), "s"), graphs=2)


def test_if_numel():
    assert_same(if_on_numel, rand(2, 4), rand(2, 2), graphs=2)


def test_if_size_tuple():
    assert_same(if_on_size_tuple, rand(2, 3), rand(3, 2), rand(3, 2), graphs=1)  # (3, 2) returns x: no graph


def test_if_ternary():
    assert_same(if_ternary, (rand(3), True), (rand(3), False), graphs=2)


def test_if_and_or():
    assert_same(if_and_or, (rand(2), True, False), (rand(2), False, True), (rand(2), False, False), graphs=3)


def test_if_requires_grad():
    assert_same(if_on_requires_grad, rand(3), rand(3, requires_grad=True), graphs=2)


def test_if_device():
    assert_same(if_on_device, rand(3), graphs=1)


def test_if_is_floating_point():
    assert_same(if_on_is_floating_point, rand(3), rand(3, dtype=torch.int64), graphs=2)


# ---------------------------------------------------------------------------------------------
# for loops
# ---------------------------------------------------------------------------------------------
def for_range(x):
    for i in range(4):
        x = x + i
    return x


def for_range_step(x, n):
    acc = x
    for i in range(n, 0, -2):
        acc = acc * 0.5 + i
    return acc


def for_list_of_tensors(xs):
    total = xs[0] * 0
    for t in xs:
        total = total + t
    return total


def for_tuple_consts(x):
    for scale in (0.5, 2.0, -1.0):
        x = x * scale
    return x


def for_dict_items(x):
    d = {"a": 1.0, "b": 2.0, "c": 3.0}
    for k, v in d.items():
        x = x + v
    return x


def for_dict_keys_values(x, d):
    out = x
    for k in d.keys():
        out = out + d[k]
    for v in d.values():
        out = out * v
    return out


def for_zip(xs, ws):
    out = []
    for x, w in zip(xs, ws):
        out.append(x * w)
    return out


def for_enumerate(xs):
    acc = xs[0] * 0
    for i, x in enumerate(xs):
        acc = acc + x * i
    return acc


def for_enumerate_start(x):
    outs = {}
    for i, name in enumerate(["a", "b"], start=1):
        outs[name] = x * i
    return outs


def for_reversed(xs):
    out = []
    for x in reversed(xs):
        out.append(x + len(out))
    return out


def for_nested(x):
    for i in range(2):
        for j in range(3):
            x = x + i * j
    return x


def for_break_continue(x):
    for i in range(10):
        if i % 2 == 0:
            continue
        if i > 6:
            break
        x = x + i
    return x


def for_else(x, n):
    for i in range(3):
        if i == n:
            break
    else:
        return x - 1
    return x + i


def for_over_tensor_shape(x):
    for d in x.shape:
        x = x * d
    return x


def for_unpack_pairs(x):
    pairs = [(1, 2), (3, 4)]
    for a, b in pairs:
        x = x * a + b
    return x


def test_for_range():
    assert_same(for_range, rand(3), graphs=1)


def test_for_range_step():
    assert_same(for_range_step, (rand(3), 5), (rand(3), 6), graphs=2)


def test_for_list_of_tensors():
    assert_same(for_list_of_tensors, ([rand(3), rand(3), rand(3)],), ([rand(3), rand(3)],), graphs=2)


def test_for_tuple_constants():
    assert_same(for_tuple_consts, rand(3), graphs=1)


def test_for_dict_items():
    assert_same(for_dict_items, rand(3), graphs=1)


def test_for_dict_keys_values():
    assert_same(for_dict_keys_values, (rand(3), {"p": rand(3), "q": rand(3)}), graphs=1)


def test_for_zip():
    assert_same(for_zip, ([rand(2), rand(2)], [rand(2), rand(2)]), graphs=1)


def test_for_enumerate():
    assert_same(for_enumerate, ([rand(2), rand(2), rand(2)],), graphs=1)


def test_for_enumerate_start():
    assert_same(for_enumerate_start, rand(2), graphs=1)


def test_for_reversed():
    assert_same(for_reversed, ([rand(2), rand(2), rand(2)],), graphs=1)


def test_for_nested():
    assert_same(for_nested, rand(2), graphs=1)


def test_for_break_continue():
    assert_same(for_break_continue, rand(2), graphs=1)


def test_for_else():
    assert_same(for_else, (rand(2), 1), (rand(2), 7), graphs=2)


def test_for_over_shape():
    assert_same(for_over_tensor_shape, rand(2, 3), rand(4), graphs=2)


def test_for_unpack_pairs():
    assert_same(for_unpack_pairs, rand(2), graphs=1)


class Blocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])
        self.seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))


BLOCKS = Blocks().eval()


def for_module_list(x):
    for layer in BLOCKS.layers:
        x = torch.relu(layer(x))
    return x


def for_module_list_enumerate(x):
    outs = []
    for i, layer in enumerate(BLOCKS.layers):
        outs.append(layer(x) * i)
    return torch.stack(outs)


def for_sequential(x):
    for m in BLOCKS.seq:
        x = m(x)
    return x


def for_sequential_call(x):
    return BLOCKS.seq(x) + len(BLOCKS.seq)


@pytest.mark.parametrize(
    "fn", [for_module_list, for_module_list_enumerate, for_sequential, for_sequential_call], ids=lambda f: f.__name__
)
def test_for_modules(fn):
    with torch.no_grad():
        assert_same(fn, rand(2, 4), rand(3, 4), graphs=2)


# ---------------------------------------------------------------------------------------------
# while
# ---------------------------------------------------------------------------------------------
def while_counter(x):
    i = 0
    while i < 5:
        x = x * 1.1
        i += 1
    return x


def while_on_shape(x):
    while x.shape[0] > 1:
        x = x[::2] + x[1::2] if x.shape[0] % 2 == 0 else x[1:]
    return x


def while_true_break(x, n):
    k = 0
    while True:
        k += 1
        x = x + k
        if k >= n:
            break
    return x


def test_while_counter():
    assert_same(while_counter, rand(3), graphs=1)


def test_while_on_shape():
    assert_same(while_on_shape, rand(8), rand(6), graphs=2)


def test_while_true_break():
    assert_same(while_true_break, (rand(2), 3), (rand(2), 4), graphs=2)


# ---------------------------------------------------------------------------------------------
# comprehensions
# ---------------------------------------------------------------------------------------------
def comp_list(x):
    ys = [x * i for i in range(4)]
    return ys


def comp_list_filtered(xs):
    return [t.sum() for i, t in enumerate(xs) if i % 2 == 0]


def comp_dict(x):
    return {f"p{i}": x + i for i in range(3)}


def comp_set_constants(x):
    s = {i % 3 for i in range(10)}
    return x * len(s), s


def comp_generator_sum(xs):
    return sum(t * t for t in xs)


def comp_generator_tuple(x):
    return tuple(x[i] for i in range(x.shape[0]))


def comp_nested(x):
    return [[x * i + j for j in range(2)] for i in range(2)]


def comp_over_dict(d):
    return {k: v.relu() for k, v in d.items()}


def comp_stack(xs):
    return torch.stack([t.flatten() for t in xs]).mean(0)


def test_comp_list():
    assert_same(comp_list, rand(2), graphs=1)


def test_comp_list_filtered():
    assert_same(comp_list_filtered, ([rand(2), rand(2), rand(2)],), graphs=1)


def test_comp_dict():
    assert_same(comp_dict, rand(2), graphs=1)


def test_comp_set_constants():
    assert_same(comp_set_constants, rand(2), graphs=1)


def test_comp_generator_sum():
    assert_same(comp_generator_sum, ([rand(2), rand(2), rand(2)],), graphs=1)


def test_comp_generator_tuple():
    assert_same(comp_generator_tuple, rand(3, 2), rand(2, 2), graphs=2)


def test_comp_nested():
    assert_same(comp_nested, rand(2), graphs=1)


def test_comp_over_dict():
    assert_same(comp_over_dict, ({"a": rand(2), "b": rand(3)},), graphs=1)


def test_comp_stack():
    assert_same(comp_stack, ([rand(2, 2), rand(2, 2)],), graphs=1)


# ---------------------------------------------------------------------------------------------
# f-strings (FORMAT_VALUE / BUILD_STRING)
# ---------------------------------------------------------------------------------------------
def fstring_keys(x, n):
    out = {}
    for i in range(n):
        out[f"layer_{i}"] = x * i
    return out


def fstring_returned(x, name):
    tag = f"{name}:{x.shape[0]}/{x.dim()}"
    return x + 1, tag


def fstring_format_spec(x, v):
    return x * v, f"{v:.2f}|{v!r}|{'pad':>5}"


def fstring_key_lookup(x, i):
    table = {"k0": 1.0, "k1": 2.0}
    return x * table[f"k{i}"]


def test_fstring_dict_keys():
    assert_same(fstring_keys, (rand(2), 3), graphs=1)


def test_fstring_returned():
    assert_same(fstring_returned, (rand(3), "a"), (rand(4, 2), "b"), graphs=2)


def test_fstring_format_spec():
    assert_same(fstring_format_spec, (rand(2), 1.5), graphs=1)


def test_fstring_key_lookup():
    assert_same(fstring_key_lookup, (rand(2), 0), (rand(2), 1), graphs=2)


# ---------------------------------------------------------------------------------------------
# grad-mode context managers (BEFORE_WITH)
# ---------------------------------------------------------------------------------------------
def with_no_grad(x, w):
    y = x * w
    with torch.no_grad():
        z = y * 2
    return y, z


def with_enable_grad(x, w):
    with torch.no_grad():
        a = x * w
        with torch.enable_grad():
            b = x * w
    return a, b


def with_set_grad_enabled(x, w):
    with torch.set_grad_enabled(False):
        a = x * w
    b = x * w
    return a, b


def with_no_grad_inside_inlined(x, w):
    def helper(t):
        with torch.no_grad():
            return t * w

    return helper(x) + x


def test_with_no_grad():
    assert_same(with_no_grad, (rand(3), rand(3, requires_grad=True)), graphs=1)


def test_with_enable_grad():
    assert_same(with_enable_grad, (rand(3), rand(3, requires_grad=True)), graphs=1)


def test_with_set_grad_enabled():
    assert_same(with_set_grad_enabled, (rand(3), rand(3, requires_grad=True)), graphs=1)


def test_with_no_grad_in_inlined_function():
    assert_same(with_no_grad_inside_inlined, (rand(3), rand(3, requires_grad=True)), graphs=1)


def test_compiled_under_outer_no_grad():
    def f(x, w):
        return x * w + 1

    cnt = CompileCounter()
    cf = optimize(cnt, nopython=True)(f)
    x, w = rand(3), rand(3, requires_grad=True)
    with torch.no_grad():
        assert_equal(cf(x, w), f(x, w))
    assert_equal(cf(x, w), f(x, w))  # grad mode is part of the guards
    assert cnt.frame_count == 2


def test_grad_mode_restored_after_call():
    cf = optimize("eager", nopython=True)(with_set_grad_enabled)
    assert torch.is_grad_enabled()
    cf(rand(2), rand(2, requires_grad=True))
    assert torch.is_grad_enabled()


def test_backward_through_compiled():
    def f(x, w):
        return (torch.tanh(x @ w) ** 2).sum()

    w1 = torch.randn(3, 3, requires_grad=True)
    w2 = w1.detach().clone().requires_grad_(True)
    x = torch.randn(2, 3)
    cf = optimize(CompileCounter(), nopython=True)(f)
    f(x, w1).backward()
    cf(x, w2).backward()
    assert_equal(w2.grad, w1.grad)


# ---------------------------------------------------------------------------------------------
# loops whose condition is tested at the bottom (POP_JUMP_BACKWARD_IF_*)
# ---------------------------------------------------------------------------------------------
class Node:
    def __init__(self, val, next=None):
        self.val = val
        self.next = next


def while_linked_list(x, node):
    while node is not None:
        x = x * node.val
        node = node.next
    return x


def while_bottom_test_none(x, items):
    item = None
    i = 0
    while item is None:
        item = items[i]
        i += 1
    return x + item


def while_bool_bottom(x, n):
    while n:
        x = x + n
        n -= 1
    return x


def test_while_linked_list():
    chain = Node(2.0, Node(3.0, Node(0.5)))
    assert_same(while_linked_list, (rand(2), chain), (rand(2), chain), graphs=1)


def test_while_bottom_test_none():
    assert_same(while_bottom_test_none, (rand(2), [None, None, 4]), graphs=1)


def test_while_bool_bottom():
    assert_same(while_bool_bottom, (rand(2), 3), (rand(2), 1), graphs=2)
