"""Facts a trace reads or folds must be guarded: identity (`is`, `==`, `in` on Enum members,
sentinels, classes and functions), constants (tuple element types, -0.0), attributes that appear
(`hasattr`), storage offsets, process-wide torch settings, container sizes, live dict views, methods
patched on a class or an instance, functions whose code or defaults change. Each test changes the
fact between calls and compares every compiled call with eager."""
import enum
import functools
import math
import sys

import pytest
import torch

from translator_harness import (  # noqa: F401
    REFERENCE,
    CompileCounter,
    assert_equal,
    fresh_dynamo,
    minidynamo_only,
    optimize,
    rand,
    reference_only_skip,
)


# where torch 2.13 itself returns a stale result
_TORCH_TYPE_GUARD_ONLY = reference_only_skip("torch 2.13 folds this identity with only a type guard")
_TORCH_CLASS_UNGUARDED = reference_only_skip("torch 2.13 does not guard this class attribute lookup")
_TORCH_LOOSE_CONSTANT = reference_only_skip("torch 2.13 compares this constant with == only")


def run_calls(fn, steps, nopython=False):
    """Compile `fn`, then for each (change, args) step apply `change` (a callable or None) and
    compare the compiled call with eager; returns the CompileCounter."""
    cnt = CompileCounter()
    compiled = optimize(cnt, nopython=nopython)(fn)
    for i, (change, args) in enumerate(steps):
        if change is not None:
            change()
        expected = fn(*args)
        actual = compiled(*args)
        assert_equal(actual, expected, f"call {i}")
    return cnt


def same_args(args, *changes):
    """Steps calling with the same arguments: first unchanged, then after each change."""
    return [(None, args), *[(change, args) for change in changes]]


# ---------------------------------------------------------------------------------------------
# identity and equality
# ---------------------------------------------------------------------------------------------
class Color(enum.Enum):
    RED = 1
    GREEN = 2
    BLUE = 3


class Sentinel:
    pass


FIRST, SECOND, THIRD = Sentinel(), Sentinel(), Sentinel()
MODE = FIRST
FAVOURITES = (Color.RED, Color.BLUE)


def enum_is(c, x):
    return x + 1 if c is Color.RED else x - 1


def enum_eq(c, x):
    return x + 1 if c == Color.RED else x - 1


def enum_ne(c, x):
    return x + 1 if c != Color.GREEN else x - 1


def enum_in(c, x):
    return x * 2 if c in [Color.RED, Color.BLUE] else x * 3


def enum_in_global_tuple(c, x):
    return x * 2 if c in FAVOURITES else x * 3


def enum_value(c, x):
    return x + c.value


@pytest.mark.parametrize("fn", [enum_is, enum_eq, enum_ne, enum_in, enum_in_global_tuple, enum_value])
def test_enum_member_folds_are_guarded_by_identity(fn):
    x = rand(3)
    members = [Color.RED, Color.GREEN, Color.RED, Color.BLUE, Color.GREEN]
    cnt = run_calls(fn, [(None, (c, x)) for c in members], nopython=True)
    assert cnt.frame_count == 3  # one entry per member, each reused


def sentinel_is(s, x):
    return x + 1 if s is FIRST else x - 1


def sentinel_is_not(s, x):
    return x + 1 if s is not SECOND else x - 1


def sentinel_in(s, x):
    return x * 2 if s in [FIRST, THIRD] else x * 3


def sentinel_eq(s, x):
    return x * 2 if s == FIRST else x * 3


def sentinel_id(s, x):
    return x * 2 if id(s) == id(FIRST) else x * 3


@pytest.mark.parametrize("fn", [*[pytest.param(f, marks=_TORCH_TYPE_GUARD_ONLY)
                                  for f in (sentinel_is, sentinel_is_not, sentinel_in, sentinel_eq)], sentinel_id])
def test_sentinel_folds_are_guarded_by_identity(fn):
    x = rand(3)
    run_calls(fn, [(None, (s, x)) for s in (FIRST, SECOND, THIRD, FIRST, SECOND)])


def global_mode(x):
    return x + 1 if MODE is FIRST else x - 1


@_TORCH_TYPE_GUARD_ONLY
def test_rebound_global_sentinel():
    global MODE

    def rebind(value):
        def change():
            global MODE
            MODE = value

        return change

    x = rand(3)
    try:
        run_calls(global_mode, same_args((x,), rebind(SECOND), rebind(FIRST), rebind(THIRD)))
    finally:
        MODE = FIRST


class Square:
    def __call__(self, t):
        return t * t


def helper_a(t):
    return t + 1


def helper_b(t):
    return t - 1


def class_and_function_identity(cls, fn, x):
    y = x * 2 if cls is Square else x * 3
    return y + 1 if fn == helper_a else y - 1


def test_class_and_function_identity():
    x = rand(3)
    steps = [(None, (Square, helper_a, x)), (None, (Sentinel, helper_a, x)), (None, (Square, helper_b, x))]
    run_calls(class_and_function_identity, steps)


# ---------------------------------------------------------------------------------------------
# constants: element types and signed zeros
# ---------------------------------------------------------------------------------------------
def first_is_int(t, x):
    return x + 1 if type(t[0]) is int else x - 1


def first_is_true(t, x):
    return x + 1 if t[0] is True else x - 1


def frozen_member_type(s, x):
    return x + 1 if type(sorted(s)[0]) is float else x - 1


def sign_of_zero(f, x):
    return x * math.copysign(1.0, f) + math.atan2(f, -1.0)


@pytest.mark.parametrize("fn, values", [
    (first_is_int, [(2,), (2.0,), (2,)]),
    (first_is_true, [(True,), (1,), (True,)]),
    pytest.param(frozen_member_type, [frozenset({1}), frozenset({1.0}), frozenset({1})], marks=_TORCH_LOOSE_CONSTANT),
    pytest.param(sign_of_zero, [0.0, -0.0, 0.0, -0.0], marks=_TORCH_LOOSE_CONSTANT),
])
def test_constants_are_guarded_on_type_and_sign(fn, values):
    x = rand(3)
    run_calls(fn, [(None, (v, x)) for v in values])


def nan_branch(f, x):
    return x + 1 if f != f else x - 1


def test_nan_argument_matches_eager_and_reuses_its_entry():
    x = rand(3)
    cnt = run_calls(nan_branch, [(None, (float("nan"), x)) for _ in range(3)] + [(None, (1.5, x))])
    assert cnt.frame_count <= 2


# ---------------------------------------------------------------------------------------------
# attributes that appear or disappear
# ---------------------------------------------------------------------------------------------
class Plain:
    pass


def has_b(o, x):
    return x + 1 if hasattr(o, "b") else x - 1


def getattr_default(o, x):
    return x + getattr(o, "b", 5)


@pytest.mark.parametrize("fn", [has_b, getattr_default])
def test_attribute_added_to_the_instance(fn):
    o, x = Plain(), rand(3)
    run_calls(fn, same_args((o, x), lambda: setattr(o, "b", 1), lambda: delattr(o, "b")))


@pytest.mark.parametrize("fn", [has_b, getattr_default])
def test_attribute_added_to_the_class(fn):
    class Local:
        pass

    o, x = Local(), rand(3)
    run_calls(fn, same_args((o, x), lambda: setattr(Local, "b", 2), lambda: delattr(Local, "b")))


def test_attribute_added_to_a_module():
    m, x = torch.nn.Linear(3, 3), rand(3)
    run_calls(has_b, same_args((m, x), lambda: setattr(m, "b", 1)))


# ---------------------------------------------------------------------------------------------
# tensor facts the tensor guards do not check
# ---------------------------------------------------------------------------------------------
def offset_of_input(v):
    return v + v.storage_offset()


def offset_of_view(v):
    return v + v[1:].storage_offset()


@pytest.mark.parametrize("fn", [offset_of_input, offset_of_view])
def test_storage_offset_of_views(fn):
    base = torch.arange(8.0)
    run_calls(fn, [(None, (base[0:3],)), (None, (base[1:4],)), (None, (base[2:5],)), (None, (base[0:3],))])


def leaf_branch(t):
    return t * 2 if t.is_leaf else t * 3


@reference_only_skip("torch 2.13 folds .is_leaf of an input unguarded")
def test_is_leaf_of_inputs():
    leaf = torch.ones(3, requires_grad=True)
    not_leaf = leaf * 1
    run_calls(leaf_branch, [(None, (leaf,)), (None, (not_leaf,)), (None, (leaf,))])


def has_tag(t):
    return t + 1 if hasattr(t, "tag") else t - 1


def reads_tag(t):
    return t + t.tag


def test_attribute_set_on_an_input_tensor():
    plain, tagged, other = rand(3), rand(3), rand(3)
    tagged.tag, other.tag = 1, 2
    run_calls(has_tag, [(None, (plain,)), (None, (tagged,)), (None, (plain,))])
    run_calls(reads_tag, [(None, (tagged,)), (None, (other,)), (None, (tagged,))])


# ---------------------------------------------------------------------------------------------
# process-wide torch settings
# ---------------------------------------------------------------------------------------------
def deterministic(x):
    return x + 1 if torch.are_deterministic_algorithms_enabled() else x - 1


def test_deterministic_algorithms_flag():
    x = rand(3)
    try:
        run_calls(deterministic, same_args((x,), lambda: torch.use_deterministic_algorithms(True),
                                           lambda: torch.use_deterministic_algorithms(False)))
    finally:
        torch.use_deterministic_algorithms(False)


def default_dtype(x):
    return x + 1 if torch.get_default_dtype() is torch.float32 else x - 1


def test_default_dtype():
    x = rand(3)
    try:
        run_calls(default_dtype, same_args((x,), lambda: torch.set_default_dtype(torch.float64),
                                           lambda: torch.set_default_dtype(torch.float32)))
    finally:
        torch.set_default_dtype(torch.float32)


def grad_enabled(x):
    return x + 1 if torch.is_grad_enabled() else x - 1


def test_grad_mode_flag():
    x = rand(3)
    try:
        run_calls(grad_enabled, same_args((x,), lambda: torch.set_grad_enabled(False),
                                          lambda: torch.set_grad_enabled(True)))
    finally:
        torch.set_grad_enabled(True)


def profiler_enabled(x):
    return x + 1 if torch.autograd._profiler_enabled() else x - 1


def autocast_enabled(x):
    return x + 1 if torch.is_autocast_enabled("cpu") else x - 1


def inference_mode_enabled(x):
    return x + 1 if torch.is_inference_mode_enabled() else x - 1


@pytest.mark.parametrize("fn, context", [
    (profiler_enabled, torch.autograd.profiler.profile),
    (autocast_enabled, functools.partial(torch.autocast, "cpu")),
    (inference_mode_enabled, torch.inference_mode),
])
def test_flag_read_inside_and_outside_its_context(fn, context):
    x = rand(3)
    cnt = CompileCounter()
    compiled = optimize(cnt)(fn)
    for inside in (False, True, False, True):
        if inside:
            with context():
                expected, actual = fn(x), compiled(x)
        else:
            expected, actual = fn(x), compiled(x)
        assert_equal(actual, expected)


def mha_fastpath(x):
    return x + 1 if torch.backends.mha.get_fastpath_enabled() else x - 1


def test_setting_read_without_arguments():
    x = rand(3)
    try:
        run_calls(mha_fastpath, same_args((x,), lambda: torch.backends.mha.set_fastpath_enabled(False),
                                          lambda: torch.backends.mha.set_fastpath_enabled(True)))
    finally:
        torch.backends.mha.set_fastpath_enabled(True)


def seeded(x):
    return x + (torch.initial_seed() % 7)


def test_initial_seed():
    x, state = rand(3), torch.get_rng_state()
    try:
        run_calls(seeded, same_args((x,), lambda: torch.manual_seed(3), lambda: torch.manual_seed(4)))
    finally:
        torch.set_rng_state(state)


def autocast_dtype(x):
    return x + 1 if torch.get_autocast_dtype("cpu") is torch.bfloat16 else x - 1


@reference_only_skip("torch 2.13 folds torch.get_autocast_dtype() unguarded")
def test_unknown_setting_read():
    x = rand(3)
    try:
        run_calls(autocast_dtype, same_args((x,), lambda: torch.set_autocast_dtype("cpu", torch.float16),
                                            lambda: torch.set_autocast_dtype("cpu", torch.bfloat16)))
    finally:
        torch.set_autocast_dtype("cpu", torch.bfloat16)


# ---------------------------------------------------------------------------------------------
# containers mutated between calls, and live dict views
# ---------------------------------------------------------------------------------------------
GLOBAL_SET = {1, 2}
GLOBAL_LIST = [1, 2]
GLOBAL_DICT = {"a": 1}


def len_of_set(x):
    return x + len(GLOBAL_SET)


def len_of_list(x):
    return x + len(GLOBAL_LIST)


def len_of_dict(x):
    return x + len(GLOBAL_DICT)


@pytest.mark.parametrize("fn, container, grow, shrink", [
    (len_of_set, GLOBAL_SET, lambda: GLOBAL_SET.add(3), lambda: GLOBAL_SET.discard(3)),
    (len_of_list, GLOBAL_LIST, lambda: GLOBAL_LIST.append(3), lambda: GLOBAL_LIST.pop()),
    (len_of_dict, GLOBAL_DICT, lambda: GLOBAL_DICT.update(b=2), lambda: GLOBAL_DICT.pop("b")),
])
def test_len_of_global_container_mutated_later(fn, container, grow, shrink):
    run_calls(fn, same_args((rand(3),), grow, shrink, grow, shrink))


def local_values_view(x):
    d = {"a": 1}
    v = d.values()
    d["b"] = 2
    return x + len(v) + sum(v)


def local_keys_view(x):
    d = {"a": 1}
    keys = d.keys()
    d["b"] = 2
    return x * 2 if "b" in keys else x * 3


def items_view_read_twice(x):
    d = {"a": 1, "b": 2}
    items = d.items()
    first = [k for k, _ in items]
    second = [v for _, v in items]
    return x + len(first) + sum(second)


def global_view(x):
    v = GLOBAL_DICT.values()
    GLOBAL_DICT["z"] = 10
    out = x + len(v)
    del GLOBAL_DICT["z"]
    return out


@pytest.mark.parametrize("fn", [local_values_view, local_keys_view, items_view_read_twice, global_view])
def test_live_dict_views(fn):
    run_calls(fn, same_args((rand(3),), None, lambda: GLOBAL_DICT.update(q=5), lambda: GLOBAL_DICT.pop("q")))


def worklist(x):
    todo, total = [1], x
    for v in todo:  # items appended while iterating are reached
        if v < 4:
            todo.append(v + 1)
        total = total + v
    return total


def iterator_then_append(x, lst):
    it = iter(lst)
    lst.append(5)
    return x + sum(it)


def worklist_with_a_break(x):
    todo, total = [1], x
    for v in todo:
        if v < 4:
            todo.append(v + 1)
        if total.sum() > 100:  # data-dependent: a graph break inside the loop
            total = total * 0
        total = total + v
    return total


@pytest.mark.parametrize("fn, args", [(worklist, ()), (iterator_then_append, ([1, 2],)),
                                      (worklist_with_a_break, ())])
def test_iterating_a_list_that_grows(fn, args):
    x = rand(3)
    compiled = optimize(CompileCounter())(fn)
    for _ in range(2):
        assert_equal(compiled(x, *[list(a) for a in args]), fn(x, *[list(a) for a in args]))


def returns_a_view(d, x):
    v = d.keys()
    d["new"] = x
    return v, x + 1


def test_returned_view_is_live():
    x = rand(3)
    compiled = optimize(CompileCounter())(returns_a_view)
    d = {"a": 1}
    view, _ = compiled(d, x)
    assert type(view) is type({}.keys())
    d["later"] = 2
    assert list(view) == ["a", "new", "later"]


# ---------------------------------------------------------------------------------------------
# methods patched on a class or an instance, code swapped on a function
# ---------------------------------------------------------------------------------------------
def call_m(o, x):
    return o.m(x)


def make_class():
    class Base:
        def m(self, x):
            return x + 1

        @staticmethod
        def s(x):
            return x * 2

        @classmethod
        def c(cls, x):
            return x * 3

        @property
        def p(self):
            return 4

    return Base


@_TORCH_CLASS_UNGUARDED
def test_method_patched_on_the_class():
    cls = make_class()
    o, x = cls(), rand(3)
    run_calls(call_m, same_args((o, x), lambda: setattr(cls, "m", lambda self, x: x - 1),
                                lambda: setattr(cls, "m", lambda self, x: x * 10)))


def test_method_patched_on_the_instance():
    cls = make_class()
    o, x = cls(), rand(3)
    run_calls(call_m, same_args((o, x), lambda: setattr(o, "m", lambda x: x * 7), lambda: delattr(o, "m")))


@_TORCH_CLASS_UNGUARDED
def test_method_defined_later_in_a_subclass():
    base = make_class()

    class Child(base):
        pass

    o, x = Child(), rand(3)
    run_calls(call_m, same_args((o, x), lambda: setattr(Child, "m", lambda self, x: x - 5)))


def call_static_class_property(o, x):
    return o.s(x) + o.c(x) + o.p + type(o).s(x)


@_TORCH_CLASS_UNGUARDED
def test_static_class_methods_and_properties_patched():
    cls = make_class()
    o, x = cls(), rand(3)
    run_calls(call_static_class_property, same_args(
        (o, x),
        lambda: setattr(cls, "s", staticmethod(lambda x: x * 20)),
        lambda: setattr(cls, "c", classmethod(lambda k, x: x * 30)),
        lambda: setattr(cls, "p", property(lambda self: 40)),
    ))


def call_super(o, x):
    return o.m(x)


def test_base_method_reached_through_super_patched():
    base = make_class()

    class Child(base):
        def m(self, x):
            return super().m(x) * 2

    o, x = Child(), rand(3)
    run_calls(call_super, same_args((o, x), lambda: setattr(base, "m", lambda self, x: x - 3)))


def call_object(o, x):
    return o(x)


def test_call_patched_on_the_class():
    class Callable_:
        def __call__(self, x):
            return x + 1

    o, x = Callable_(), rand(3)
    run_calls(call_object, same_args((o, x), lambda: setattr(Callable_, "__call__", lambda self, x: x * 9)))


class Built:
    def __init__(self, k):
        self.k = k


def build_in_frame(x):
    return x + Built(2).k


@_TORCH_CLASS_UNGUARDED
def test_init_patched_for_an_object_built_in_the_frame():
    original = Built.__init__

    def other_init(self, k):
        self.k = k * 100

    try:
        run_calls(build_in_frame, same_args((rand(3),), lambda: setattr(Built, "__init__", other_init)))
    finally:
        Built.__init__ = original


def inlined(t):
    return t + 1


def _replacement(t):
    return t - 1


def with_default(t, k=1):
    return t + k


def calls_inlined(x):
    return inlined(x)


def calls_with_default(x):
    return with_default(x)


def test_function_code_swapped():
    original = inlined.__code__
    try:
        run_calls(calls_inlined, same_args((rand(3),), lambda: setattr(inlined, "__code__", _replacement.__code__),
                                           lambda: setattr(inlined, "__code__", original)))
    finally:
        inlined.__code__ = original


def test_function_defaults_changed():
    original = with_default.__defaults__
    try:
        run_calls(calls_with_default, same_args((rand(3),), lambda: setattr(with_default, "__defaults__", (5,))))
    finally:
        with_default.__defaults__ = original


def two_defaults(t, a=1, b=2):
    return t * a + b


def test_defaults_realigned_by_a_new_length():
    # defaults align with the last parameters: with (1, 2, 9), b's default is 9 although
    # __defaults__[0] and [1] are unchanged
    original = two_defaults.__defaults__

    def call(x):
        return two_defaults(x, 3)

    try:
        run_calls(call, same_args((rand(3),), lambda: setattr(two_defaults, "__defaults__", (1, 2, 9))))
    finally:
        two_defaults.__defaults__ = original


class Holder:
    def m(self, x):
        return x + 1

    def n(self, x):
        return x * 5


BOUND = Holder().m


def calls_bound_global(x):
    return BOUND(x)


def test_bound_method_in_a_global_rebound():
    global BOUND

    def rebind():
        global BOUND
        BOUND = Holder().n  # the same type of `__self__`, another function

    original = BOUND
    try:
        run_calls(calls_bound_global, same_args((rand(3),), rebind))
    finally:
        BOUND = original


def calls_partial(p, x):
    return p(x)


def scaled(x, a=1, b=0):
    return x * a + b


def test_partial_with_more_arguments():
    x = rand(3)
    steps = [(None, (functools.partial(scaled, a=2), x)), (None, (functools.partial(scaled, 2), x)),
             (None, (functools.partial(scaled, 2, 3), x)), (None, (functools.partial(scaled, a=2, b=1), x))]
    run_calls(calls_partial, steps)


def mkldnn_flag(x):
    return x + 1 if torch.backends.mkldnn.enabled else x - 1


def test_flag_of_a_torch_module():
    x = rand(3)
    try:
        run_calls(mkldnn_flag, same_args((x,), lambda: setattr(torch.backends.mkldnn, "enabled", False),
                                         lambda: setattr(torch.backends.mkldnn, "enabled", True)))
    finally:
        torch.backends.mkldnn.enabled = True


def recursion_limit(x):
    return x + sys.getrecursionlimit() % 7


@reference_only_skip("torch 2.13 folds sys.getrecursionlimit() unguarded")
def test_recursion_limit():
    x, limit = rand(3), sys.getrecursionlimit()
    try:
        run_calls(recursion_limit, same_args((x,), lambda: sys.setrecursionlimit(limit + 1),
                                             lambda: sys.setrecursionlimit(limit + 2)))
    finally:
        sys.setrecursionlimit(limit)


def append_then_len(a, b, x):
    a.append(1)
    return x + len(b)


def test_the_same_list_passed_twice_then_two_lists():
    x = rand(3)
    compiled = optimize(CompileCounter())(append_then_len)

    def same_list():
        shared = []
        return shared, shared, x

    # the first call's trace relies on `a is b`; the next ones pass two lists
    for make_args in (same_list, lambda: ([], [5, 6, 7], x), same_list):
        assert_equal(compiled(*make_args()), append_then_len(*make_args()))
