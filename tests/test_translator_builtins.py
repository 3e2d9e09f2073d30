"""Translator: Python builtins and the math / operator modules on constants, with tensors around.
Whole-graph functions only."""
import math
import operator

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


def b_len(x, xs):
    return x * len(xs) + len("abc") + len({"a": 1}) + len(x)


def b_isinstance(x, v):
    out = x
    if isinstance(v, int) and not isinstance(v, bool):
        out = out + v
    if isinstance(v, (list, tuple)):
        out = out * len(v)
    if isinstance(x, torch.Tensor):
        out = out - 1
    return out


def b_range_ops(x):
    r = range(2, 10, 3)
    return x * len(r) + r[1] + sum(r) + (5 in r) + list(r)[-1]


def b_zip_enumerate(x):
    names = ["a", "b", "c"]
    vals = [1, 2, 3]
    d = {n: v * i for i, (n, v) in enumerate(zip(names, vals))}
    return x * d["c"], d


def b_min_max(x, a, b):
    return x * min(a, b) + max(a, b) + max([3, 1, 2]) - min(4, 5, 6), min(a, 10, key=lambda v: -v)


def b_abs_round(x, v):
    return x + abs(v) + round(v) + round(v, 1), round(2.675, 2)


def b_sum(x):
    return x + sum([1, 2, 3]) + sum((0.5, 0.25), 10)


def b_getattr_hasattr(x):
    name = "shape"
    n = getattr(x, name)[0]
    ok = hasattr(x, "dtype") and not hasattr(x, "nonexistent_attr")
    return x * n, ok


def b_conversions(x, v):
    return x * int(v) + float(v) + bool(v), str(v), int("12"), float("1.5"), bool(0), int(True)


def b_container_ctors(x):
    t = tuple([1, 2, 3])
    l = list((4, 5))  # noqa: E741
    d = dict(a=1, b=2)
    d2 = dict([("c", 3)])
    return x + t[0] + l[1] + d["b"] + d2["c"], t, l, d


def b_sorted(x):
    ks = sorted([3, 1, 2])
    rs = sorted(["b", "a", "c"], reverse=True)
    return x * ks[0], ks, rs


def b_any_all(x, flags):
    if any(flags) and not all(flags):
        return x + 1
    return x - 1


def b_math(x, v):
    return x * math.sqrt(v) + math.pi + math.floor(2.7) + math.ceil(v) + math.log(v) + math.exp(0.5)


def b_math_functions_of_shape(x):
    return x / math.sqrt(x.shape[-1]) + math.prod(x.shape)


def b_operator(x, y):
    return operator.add(x, y) + operator.mul(2, 3), operator.getitem([x, y], 1), operator.sub(5, 2)


def b_operator_attrgetter_itemgetter(x):
    pairs = [(1, 2), (3, 4)]
    firsts = list(map(operator.itemgetter(0), pairs))
    return x * firsts[1] + operator.attrgetter("ndim")(x)


def b_divmod_pow(x, a):
    q, r = divmod(a, 3)
    return x * q + r + pow(a, 2) + pow(2, 3, 5)


def b_map_filter(x):
    vals = list(map(lambda v: v * 2, [1, 2, 3]))
    odd = list(filter(lambda v: v % 2 == 1, range(6)))
    return x + vals[-1] + odd[-1], vals, odd


def b_callable_id(x, fn):
    if callable(fn):
        return fn(x)
    return x


def b_chr_ord(x):
    return x * ord("a"), chr(98)


def b_str_methods(x, name):
    key = name.upper().strip() + "_" + "-".join(["a", "b"])
    if key.startswith("RELU"):
        return torch.relu(x), key
    return x * 2, key.lower().replace("_", ".")


def b_iter_next(x):
    it = iter([1, 2, 3])
    a = next(it)
    b = next(it)
    return x * a + b


def b_tuple_methods(x):
    t = (1, 2, 2, 3)
    return x * t.count(2) + t.index(3)


def b_slice_objects(x):
    s = slice(1, None)
    return x[s], s.start


@pytest.mark.parametrize(
    "fn",
    [b_range_ops, b_zip_enumerate, b_sum, b_getattr_hasattr, b_container_ctors, b_sorted,
     b_math_functions_of_shape, b_operator_attrgetter_itemgetter, b_map_filter, b_chr_ord,
     b_iter_next, b_tuple_methods, b_slice_objects],
    ids=lambda f: f.__name__,
)
def test_builtins_on_constants(fn):
    assert_same(fn, rand(3), rand(3), graphs=1)


def test_len():
    assert_same(b_len, (rand(3), [1, 2]), (rand(3), [1, 2]), (rand(3), [1, 2, 3]), graphs=2)


def test_isinstance():
    assert_same(b_isinstance, (rand(2), 3), (rand(2), True), (rand(2), [1, 2]), (rand(2), 3), graphs=3)


def test_min_max():
    assert_same(b_min_max, (rand(2), 1, 2), (rand(2), 7, -1), graphs=2)


def test_abs_round():
    assert_same(b_abs_round, (rand(2), -2.35), (rand(2), 4.75), graphs=2)


def test_conversions():
    assert_same(b_conversions, (rand(2), 3), (rand(2), 2.5), graphs=2)


def test_any_all():
    assert_same(b_any_all, (rand(2), [True, False]), (rand(2), [True, True]), graphs=2)


def test_math():
    assert_same(b_math, (rand(2), 2.0), (rand(2), 9.0), graphs=2)


def test_operator():
    assert_same(b_operator, (rand(2), rand(2)), graphs=1)


def test_divmod_pow():
    assert_same(b_divmod_pow, (rand(2), 7), (rand(2), 11), graphs=2)


def test_callable():
    assert_same(b_callable_id, (rand(2), torch.sigmoid), (rand(2), torch.tanh), graphs=2)


def test_str_methods():
    assert_same(b_str_methods, (rand(2), " relu "), (rand(2), "gelu"), graphs=2)
