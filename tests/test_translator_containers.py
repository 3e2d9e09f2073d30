"""Translator: building and unpacking containers (BUILD_*, LIST_*, DICT_*, UNPACK_*), slices,
tensor indexing, and item assignment on local lists and dicts.  Whole-graph functions only."""
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
# BUILD_TUPLE / BUILD_LIST / BUILD_MAP / BUILD_SET / BUILD_CONST_KEY_MAP / BUILD_SLICE
# ---------------------------------------------------------------------------------------------
def build_tuple(x, y):
    t = (x, y, x + y)
    return t[2] * t[0]


def build_list(x, y):
    lst = [x, y]
    lst2 = [x * 2, lst[1]]
    return lst2[0] + lst2[1] + lst[0]


def build_map_dynamic_keys(x, k1, k2):
    d = {k1: x, k2: x * 2}
    return d[k1] + d[k2]


def build_const_key_map(x):
    d = {"a": x, "b": x + 1, "c": 3}
    return d["a"] * d["b"] + d["c"]


def build_set(x, a, b):
    s = {a, b, 3}
    return x * len(s), 3 in s


def build_slice(x, lo, hi):
    s = slice(lo, hi)
    return x[s] * 2, x[lo:hi:1]


def build_empty(x):
    a, b, c = [], {}, ()
    a.append(x)
    b["k"] = x * 2
    return a[0] + b["k"], len(c)


def build_tuple_from_list(x):
    return tuple([x, x + 1]), list((x * 2, x * 3))


def test_build_tuple():
    assert_same(build_tuple, (rand(2), rand(2)), graphs=1)


def test_build_list():
    assert_same(build_list, (rand(2), rand(2)), graphs=1)


def test_build_map_dynamic_keys():
    assert_same(build_map_dynamic_keys, (rand(2), "u", "v"), (rand(2), "p", "q"), graphs=2)


def test_build_const_key_map():
    assert_same(build_const_key_map, rand(2), graphs=1)


def test_build_set():
    assert_same(build_set, (rand(2), 1, 2), (rand(2), 3, 3), graphs=2)


def test_build_slice():
    assert_same(build_slice, (rand(6), 1, 4), (rand(6), 0, 2), graphs=2)


def test_build_empty():
    assert_same(build_empty, rand(2), graphs=1)


def test_build_tuple_from_list():
    assert_same(build_tuple_from_list, rand(2), graphs=1)


# ---------------------------------------------------------------------------------------------
# LIST_EXTEND / LIST_APPEND / DICT_UPDATE / DICT_MERGE / SET_UPDATE / LIST_TO_TUPLE
# ---------------------------------------------------------------------------------------------
def list_extend_literal(x, xs):
    lst = [x, *xs, x * 2]
    return lst


def list_extend_method(x):
    lst = [x]
    lst.extend([x + 1, x + 2])
    lst += [x + 3]
    return sum(lst)


def list_append_loop(x):
    out = []
    for i in range(3):
        out.append(x * i)
    out.insert(0, x)
    out.pop()
    return torch.cat(out)


def dict_update_literal(x, extra):
    d = {"a": x * 2, **extra}
    return d


def dict_merge_call(x):
    def kw(**kwargs):
        return kwargs["a"] * kwargs["b"]

    base = {"a": x}
    more = {"b": x + 1}
    return kw(**base, **more)


def dict_update_method(x):
    d = {"a": x}
    d.update({"b": x * 2}, c=x * 3)
    d.update(a=x - 1)
    return d


def dict_merge_operator(x):
    d = {"a": x} | {"b": x + 1}
    d |= {"c": x + 2}
    return d


def set_update_literal(x, a):
    s = {*range(3), a}
    return x * len(s)


def tuple_star_unpack(x, xs):
    t = (x + 1, *xs)
    return t, len(t)


def test_list_extend_literal():
    assert_same(list_extend_literal, (rand(2), [rand(2), rand(2)]), graphs=1)


def test_list_extend_method():
    assert_same(list_extend_method, rand(2), graphs=1)


def test_list_append_insert_pop():
    assert_same(list_append_loop, rand(2), graphs=1)


def test_dict_update_literal():
    assert_same(dict_update_literal, (rand(2), {"b": rand(2), "c": 4}), graphs=1)


def test_dict_merge_call():
    assert_same(dict_merge_call, rand(2), graphs=1)


def test_dict_update_method():
    assert_same(dict_update_method, rand(2), graphs=1)


def test_dict_merge_operator():
    assert_same(dict_merge_operator, rand(2), graphs=1)


def test_set_update_literal():
    assert_same(set_update_literal, (rand(2), 1), (rand(2), 9), graphs=2)


def test_tuple_star_unpack():
    assert_same(tuple_star_unpack, (rand(2), (rand(2), rand(2))), graphs=1)


# ---------------------------------------------------------------------------------------------
# UNPACK_SEQUENCE / UNPACK_EX
# ---------------------------------------------------------------------------------------------
def unpack_tuple(pair):
    a, b = pair
    return a * b


def unpack_list(xs):
    a, b, c = xs
    return a + b - c


def unpack_nested(x):
    (a, b), c = (x, x + 1), x * 2
    return a + b + c


def unpack_ex_head(xs):
    a, *rest = xs
    return a * 2, rest


def unpack_ex_middle(xs):
    first, *mid, last = xs
    return first - last, len(mid), mid


def unpack_ex_tail(x):
    *init, last = [x, x + 1, x + 2]
    return init, last


def unpack_tensor_chunks(x):
    a, b = x.chunk(2)
    return b - a


def unpack_tensor_rows(x):
    r0, r1, r2 = x
    return r0 + r1 * r2


def unpack_shape(x):
    n, c = x.shape
    return x.reshape(c, n), n * c


def unpack_dict_items(d):
    (k1, v1), (k2, v2) = d.items()
    return {k2: v1 + 1, k1: v2}


def unpack_string(x, s):
    a, b = s
    return x, a + b


@pytest.mark.parametrize(
    "fn,args",
    [
        (unpack_tuple, lambda: ((rand(2), rand(2)),)),
        (unpack_list, lambda: ([rand(2), rand(2), rand(2)],)),
        (unpack_nested, lambda: (rand(2),)),
        (unpack_ex_head, lambda: ([rand(2), rand(2), rand(2)],)),
        (unpack_ex_middle, lambda: ((rand(2), rand(2), rand(2), rand(2)),)),
        (unpack_ex_tail, lambda: (rand(2),)),
        (unpack_tensor_chunks, lambda: (rand(4),)),
        (unpack_tensor_rows, lambda: (rand(3, 2),)),
        (unpack_shape, lambda: (rand(2, 3),)),
        (unpack_dict_items, lambda: ({"a": rand(2), "b": rand(2)},)),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_unpack(fn, args):
    assert_same(fn, args(), args(), graphs=1)


def test_unpack_string_no_graph():
    assert_same(unpack_string, (rand(2), "pq"), graphs=0)


# ---------------------------------------------------------------------------------------------
# tensor indexing and slicing
# ---------------------------------------------------------------------------------------------
def idx_int(x):
    return x[0], x[-1]


def idx_slice_2d(x):
    return x[:, 1:3]


def idx_ellipsis_none(x):
    return x[..., None], x[None, :, 0]


def idx_tensor(x, idx):
    return x[idx]


def idx_bool_mask(x):
    return x[x > 0].sum()


def idx_step(x):
    return x[::2], x[1::2]


def idx_tuple_mixed(x):
    return x[1, :, 1:], x[:, -1, ::2], x[0, 1, 2]


def idx_python_list(x):
    return x[[0, 2]]


def idx_setitem(x):
    y = x.clone()
    y[0] = 0
    y[:, 1] = y[:, 1] * 2
    y[y < 0] = -1
    return y


def idx_setitem_tensor_index(x, idx, val):
    y = x.clone()
    y[idx] = val
    return y


def idx_by_arg(x, i, j):
    return x[i:j]


def idx_with_shape(x):
    return x[: x.shape[0] // 2]


def test_index_int():
    assert_same(idx_int, rand(4), rand(3, 2), graphs=2)


def test_index_slice_2d():
    assert_same(idx_slice_2d, rand(3, 5), graphs=1)


def test_index_ellipsis_none():
    assert_same(idx_ellipsis_none, rand(2, 3), graphs=1)


def test_index_tensor():
    assert_same(idx_tensor, (rand(5), torch.tensor([0, 3, 1])), (rand(5), torch.tensor([4, 4, 2])), graphs=1)


def test_index_bool_mask_reduced():
    # x[mask] has a data-dependent shape; only its sum leaves the function
    assert_same(idx_bool_mask, rand(6), graphs=None, nopython=False)


def test_index_step():
    assert_same(idx_step, rand(7), graphs=1)


def test_index_tuple_mixed():
    assert_same(idx_tuple_mixed, rand(2, 3, 4), graphs=1)


def test_index_python_list():
    assert_same(idx_python_list, rand(4, 2), graphs=1)


def test_index_setitem():
    assert_same(idx_setitem, rand(3, 3), graphs=1)


def test_index_setitem_tensor_index():
    assert_same(idx_setitem_tensor_index, (rand(5), torch.tensor([1, 3]), rand(2)), graphs=1)


def test_index_by_int_args():
    assert_same(idx_by_arg, (rand(6), 1, 3), (rand(6), 2, 5), graphs=2)


def test_index_with_shape():
    assert_same(idx_with_shape, rand(6), rand(4), graphs=2)


# ---------------------------------------------------------------------------------------------
# item assignment on local lists and dicts (STORE_SUBSCR / DELETE_SUBSCR)
# ---------------------------------------------------------------------------------------------
def list_setitem(x):
    lst = [x, x, x]
    lst[1] = x * 2
    lst[-1] = lst[0] + lst[1]
    return lst


def list_slice_assign(x):
    lst = [0, 1, 2, 3]
    lst[1:3] = [x, x * 2]
    return lst[1] + lst[2] + lst[3]


def dict_setitem(x):
    d = {}
    d["a"] = x
    d["b"] = d["a"] * 3
    d["a"] += 1
    return d


def dict_delitem(x):
    d = {"a": x, "b": x + 1, "c": x + 2}
    del d["b"]
    return d


def list_delitem(x):
    lst = [x, x + 1, x + 2]
    del lst[0]
    return lst


def dict_methods(x):
    d = {"a": x}
    v = d.get("a")
    w = d.get("missing", 3)
    d.setdefault("b", x * 2)
    p = d.pop("a")
    return v + w + p, list(d.keys()), d


def list_methods(x):
    lst = [3, 1, 2]
    lst.sort()
    lst.reverse()
    i = lst.index(1)
    c = lst.count(3)
    return x * i + c, lst


def mutate_input_list(xs, x):
    xs.append(x * 2)
    xs[0] = xs[0] + 1
    return len(xs)


def mutate_input_dict(d, x):
    d["new"] = x + 1
    return d["old"] * 2


def test_list_setitem():
    assert_same(list_setitem, rand(2), graphs=1)


def test_list_slice_assign():
    assert_same(list_slice_assign, rand(2), graphs=1)


def test_dict_setitem():
    assert_same(dict_setitem, rand(2), graphs=1)


def test_dict_delitem():
    assert_same(dict_delitem, rand(2), graphs=1)


def test_list_delitem():
    assert_same(list_delitem, rand(2), graphs=1)


def test_dict_methods():
    assert_same(dict_methods, rand(2), graphs=1)


def test_list_methods():
    assert_same(list_methods, rand(2), graphs=1)


def test_mutate_input_list_side_effect():
    # the caller's list must see the append and the store after the compiled call
    assert_same(mutate_input_list, ([rand(2)], rand(2)), graphs=1)
    xs = [rand(2)]
    x0 = xs[0]
    cf = optimize("eager", nopython=True)(mutate_input_list)
    x = rand(2)
    assert cf(xs, x) == 2
    assert len(xs) == 2
    assert_equal(xs[0], x0 + 1)
    assert_equal(xs[1], x * 2)


def test_mutate_input_dict_side_effect():
    d = {"old": rand(2)}
    x = rand(2)
    cf = optimize("eager", nopython=True)(mutate_input_dict)
    out = cf(d, x)
    assert_equal(out, d["old"] * 2)
    assert list(d) == ["old", "new"]
    assert_equal(d["new"], x + 1)


def test_list_length_change_recompiles():
    cnt = CompileCounter()
    cf = optimize(cnt, nopython=True)(unpack_ex_head)
    for n in (2, 3, 3, 2, 4):
        xs = [rand(2) for _ in range(n)]
        assert_equal(cf(xs), unpack_ex_head(xs))
    assert cnt.frame_count == 3
