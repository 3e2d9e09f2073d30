"""Conformance: torch.utils._pytree traced like Python, collections.Counter, binary operators written
in Python by user classes, guards on values keyed by classes and enum members, helpers decorated with
torch.no_grad(); one small function per concept, compared with eager and with torch._dynamo."""
import collections
import enum

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map, tree_map_only, tree_unflatten

from translator_harness import Args, ConformanceCases, assert_same, fresh_dynamo, rand  # noqa: F401

CASES = ConformanceCases()
case = CASES.case


# =============================================================================================
# torch.utils._pytree: Python functions over containers, traced (not a tensor op)
# =============================================================================================
@case()
def pytree_tree_map_nested(x):
    return tree_map(lambda t: t * 2, {"a": x, "b": [x + 1, (x, 3)]})


@case()
def pytree_tree_map_two_trees(x):
    return tree_map(lambda a, b: a + b, [x, (x, x)], [1, (x, 2)])


@case()
def pytree_tree_map_only_tensors(x):
    return tree_map_only(torch.Tensor, lambda t: t.sin(), {"a": x, "n": 4, "s": "k"})


@case()
def pytree_flatten_unflatten(x):
    leaves, spec = tree_flatten({"a": x, "b": [x + 1, x]})
    return tree_unflatten([leaf * i for i, leaf in enumerate(leaves)], spec)


@case()
def pytree_leaves_sum(x):
    return sum(tree_leaves(((x, 1), {"k": [x, x * 2]})))


@case()
def pytree_num_leaves(x):
    leaves, spec = tree_flatten([x, (x, {"a": x})])
    return x * spec.num_leaves + len(leaves)


# =============================================================================================
# collections.Counter
# =============================================================================================
@case()
def counter_from_string(x):
    c = collections.Counter("abca")
    return x * c["a"] + c["b"]


@case()
def counter_missing_key_is_zero(x):
    c = collections.Counter("abc")
    return x + c["z"]


@case(torch_breaks="heapq.nlargest calls object()")
def counter_most_common(x):
    c = collections.Counter("abcabca")
    (key, count), = c.most_common(1)
    return x * count, key


@case()
def counter_update_and_total(x):
    c = collections.Counter("ab")
    c.update("aab")
    return x * c["a"] + c.total()


@case()
def counter_arithmetic(x):
    c = collections.Counter("aab") + collections.Counter("bc")
    d = collections.Counter("aaab") - collections.Counter("ab")
    return x * c["b"] + d["a"], sorted(c.items()), sorted(d.items())


@case(torch_breaks="max(counter, key=counter.get)")
def counter_from_list_of_ints(x):
    c = collections.Counter([1, 2, 2, 3, 3, 3])
    return x * max(c, key=c.get) + len(c)


@case()
def counter_from_mapping_and_keywords(x):
    c = collections.Counter({"a": 2}, b=3)
    return x * c["a"] * c["b"], sorted(c)


# =============================================================================================
# binary operators user classes write in Python
# =============================================================================================
class Vec:
    def __init__(self, k):
        self.k = k

    def __add__(self, other):
        if isinstance(other, Vec):
            return Vec(self.k + other.k)
        return NotImplemented

    def __radd__(self, other):
        return Vec(self.k + other)

    def __mul__(self, scale):
        return Vec(self.k * scale)

    def __matmul__(self, other):
        return self.k * other.k


class Acc:
    def __init__(self, k):
        self.k = k

    def __iadd__(self, other):
        self.k = self.k + other
        return self


class SubVec(Vec):
    def __radd__(self, other):
        return SubVec(self.k * 10 + (other.k if isinstance(other, Vec) else other))


@case()
def user_add(x):
    return (Vec(x) + Vec(2)).k


@case()
def user_mul_by_constant(x):
    return (Vec(x) * 3).k


@case()
def user_radd_with_number(x):
    return (1 + Vec(x)).k


@case()
def user_sum_of_objects(x):
    return sum([Vec(x), Vec(1), Vec(2)], Vec(0)).k


@case(torch_breaks="operator.matmul on user objects")
def user_matmul(x):
    return Vec(x) @ Vec(x + 1)


@case(torch_breaks="a user __iadd__ with a tensor operand")
def user_iadd_in_place(x):
    acc = Acc(x)
    alias = acc
    acc += 2
    acc += x
    return alias.k, acc is alias


@case()
def user_subclass_reflected_first(x):
    return (Vec(x) + SubVec(x)).k


# =============================================================================================
# guards on values keyed by classes and enum members (their names must be valid Python)
# =============================================================================================
class KeyA:
    pass


class KeyB:
    pass


class Color(enum.Enum):
    RED = 1
    BLUE = 2


class DoublingRegistry(dict):
    def __getitem__(self, key):
        return dict.__getitem__(self, key) * 2


class Registry(dict):
    pass


@case(Args(rand(3), DoublingRegistry({KeyA: 2.0, "b": 3.0})))
def registry_keyed_by_class_overriding_getitem(x, reg):
    return x * reg[KeyA] + reg["b"]


@case(Args(rand(3), Registry({KeyA: 2.0, KeyB: 3.0})))
def registry_get_by_class(x, reg):
    return x * reg.get(KeyA) + reg.get(KeyB, 0)


@case(Args(rand(3), DoublingRegistry({Color.RED: 1.5, Color.BLUE: 4.0})))
def registry_keyed_by_enum_member(x, reg):
    return x * reg[Color.RED] - reg[Color.BLUE]


@case(Args(rand(3), {KeyA: 2, KeyB: 5}))
def plain_dict_keyed_by_class(x, table):
    return x * table[KeyB]


# =============================================================================================
# helpers decorated with torch.no_grad() / enable_grad()
# =============================================================================================
@torch.no_grad()
def _doubled_without_grad(t):
    return t * 2


@torch.enable_grad()
def _tripled_with_grad(t):
    return t * 3


@case(rand(3, requires_grad=True))
def call_no_grad_decorated_helper(x):
    y = _doubled_without_grad(x)
    return y + 1, y.requires_grad, torch.is_grad_enabled()


@case(rand(3, requires_grad=True))
def call_enable_grad_decorated_helper_under_no_grad(x):
    with torch.no_grad():
        y = _tripled_with_grad(x)
    return y, y.requires_grad


@pytest.mark.parametrize("fn,input_sets,graphs", CASES.params())
def test_conformance(fn, input_sets, graphs):
    assert_same(fn, *input_sets, graphs=graphs)
