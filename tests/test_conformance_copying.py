"""Conformance: copy.copy and copy.deepcopy of containers, dataclasses and user objects (plain, with
__slots__, with their own __copy__/__deepcopy__/__getstate__/__setstate__, with a Python
__getattribute__ or a validating __setattr__) traced into one graph, the copies independent of the
originals, each function compared with eager and validated against torch._dynamo
(MINIDYNAMO_TEST_REFERENCE=torch).

Each table maps a function name to (function, input sets, expected graph count); one parametrized
test per table, so `pytest --collect-only -q` counts the functions."""
import collections
import copy
import dataclasses
from typing import Callable, Dict, Optional, Tuple

import pytest
import torch

from translator_harness import CompileCounter, assert_equal, assert_same, frames_compiled, optimize, rand
from translator_harness import fresh_dynamo, reference_only_skip  # noqa: F401

# family -> function name -> (function, input sets, graphs expected, has a graph break)
CASES: Dict[str, Dict[str, Tuple[Callable, tuple, Optional[int], bool]]] = collections.defaultdict(dict)
TORCH_FAILS: Dict[str, str] = {}  # function name -> how torch 2.13 fails it (the reference run skips it)


def case(family: str, *input_sets, graphs: Optional[int] = 1, breaks: bool = False, torch_fails: str = "") -> Callable:
    """Add the decorated function to `family`, run on `input_sets` (default: one 4-vector);
    `breaks`: it has a graph break, as under torch._dynamo."""

    def add(fn: Callable) -> Callable:
        assert fn.__name__ not in CASES[family], fn.__name__
        CASES[family][fn.__name__] = (fn, input_sets or (rand(4),), graphs, breaks)
        if torch_fails:
            TORCH_FAILS[fn.__name__] = torch_fails
        return fn

    return add


# ---------------------------------------------------------------------------------------------
# containers
# ---------------------------------------------------------------------------------------------
SCALES = {"a": 2.0, "b": [1.0, 3.0], "c": {"d": 4.0}}
NESTED_LIST = [[1, 2], [3, [4, 5]], (6, [7])]


@case("containers")
def deepcopy_global_dict_then_mutate_copy(x):
    d = copy.deepcopy(SCALES)
    d["b"].append(5.0)
    d["c"]["d"] = 10.0
    return x * d["a"] + sum(d["b"]) + d["c"]["d"] + len(SCALES["b"]) + SCALES["c"]["d"]


@case("containers", torch_fails='graph break: copy.copy of a builtin container calls its C copy method')
def shallow_copy_global_dict_shares_values(x):
    d = copy.copy(SCALES)
    d["a"] = 7.0
    return x * d["a"] + SCALES["a"] + (d["b"] is SCALES["b"])


@case("containers")
def deepcopy_global_dict_values_are_new(x):
    d = copy.deepcopy(SCALES)
    return x + (d["b"] is SCALES["b"]) + (d["c"] is SCALES["c"]) + (d == SCALES)


@case("containers")
def deepcopy_nested_list(x):
    lst = copy.deepcopy(NESTED_LIST)
    lst[1][1].append(6)
    return x * sum(lst[1][1]) + len(NESTED_LIST[1][1]) + lst[2][1][0]


@case("containers", torch_fails='graph break: copy.copy of a builtin container calls its C copy method')
def shallow_copy_list_aliases_inner(x):
    lst = copy.copy(NESTED_LIST)
    return x + (lst[0] is NESTED_LIST[0]) + (lst is NESTED_LIST) + len(lst)


@case("containers")
def deepcopy_local_dict_with_tensor_values_kept(x):
    d = {"k": [1, 2], "s": "name"}
    e = copy.deepcopy(d)
    e["k"].append(3)
    return x * len(e["k"]) + len(d["k"])


@case("containers")
def deepcopy_tuple_of_constants_is_same(x):
    t = (1, 2, ("a", 3.0))
    u = copy.deepcopy(t)
    return x + u[2][1] + (u == t)


@case("containers")
def deepcopy_tuple_with_list_is_new(x):
    t = (1, [2, 3])
    u = copy.deepcopy(t)
    u[1].append(4)
    return x + len(t[1]) + len(u[1]) + (u is t)


@case("containers")
def deepcopy_shared_inner_list_stays_shared(x):
    inner = [1, 2]
    outer = [inner, inner]
    c = copy.deepcopy(outer)
    c[0].append(3)
    return x + len(c[1]) + len(inner) + (c[0] is c[1])


@case("containers", torch_fails='graph break: copy.copy of a builtin container calls its C copy method')
def copy_set_and_frozenset(x):
    s = {1, 2, 3}
    t = copy.copy(s)
    t.add(4)
    f = copy.copy(frozenset(s))
    return x + len(s) + len(t) + len(f)


@case("containers", torch_fails="recompiles on every call (the deepcopy memo guards the argument's id)")
def deepcopy_list_argument(x, lst):
    c = copy.deepcopy(lst)
    c.append(5)
    return x * len(c) + len(lst)


CASES["containers"]["deepcopy_list_argument"] = (deepcopy_list_argument, ((rand(4), [1, 2, 3]),), 1, False)


@case("containers", torch_fails="recompiles on every call (the deepcopy memo guards the argument's id)")
def deepcopy_dict_argument(x, d):
    c = copy.deepcopy(d)
    c["n"] += 1
    c["inner"].append(0)
    return x * c["n"] + len(c["inner"]) + d["n"]


CASES["containers"]["deepcopy_dict_argument"] = (
    deepcopy_dict_argument, ((rand(4), {"n": 2, "inner": [1]}),), 1, False)


@case("containers")
def copy_method_of_dict_and_list(x):
    d = SCALES.copy()
    lst = NESTED_LIST.copy()
    d["a"] = 0.5
    return x * d["a"] + SCALES["a"] + len(lst)


# ---------------------------------------------------------------------------------------------
# dataclasses and plain objects
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Settings:
    scale: float = 2.0
    layers: list = dataclasses.field(default_factory=lambda: [1, 2])
    name: str = "s"


@dataclasses.dataclass(frozen=True)
class FrozenSettings:
    scale: float = 3.0
    tags: tuple = ("a", "b")


class Plain:
    def __init__(self, scale=2.0):
        self.scale = scale
        self.items = [1, 2, 3]
        self.meta = {"k": 1}

    def total(self):
        return self.scale * len(self.items)


class Slotted:
    __slots__ = ("scale", "items")

    def __init__(self):
        self.scale = 1.5
        self.items = [4, 5]


class SlottedChild(Slotted):
    def __init__(self):
        super().__init__()
        self.extra = [1]


SETTINGS = Settings()
FROZEN = FrozenSettings()
PLAIN = Plain()
SLOTTED = Slotted()
SLOTTED_CHILD = SlottedChild()


@case("objects")
def deepcopy_global_dataclass_then_mutate_copy(x):
    s = copy.deepcopy(SETTINGS)
    s.layers.append(3)
    s.scale = 5.0
    return x * s.scale + len(s.layers) + len(SETTINGS.layers) + SETTINGS.scale


@case("objects")
def shallow_copy_global_dataclass_shares_list(x):
    s = copy.copy(SETTINGS)
    s.scale = 9.0
    return x * SETTINGS.scale + s.scale + (s.layers is SETTINGS.layers) + (s is SETTINGS)


@case("objects")
def deepcopy_dataclass_equality_and_type(x):
    s = copy.deepcopy(SETTINGS)
    return x + (s == SETTINGS) + (type(s) is Settings) + (s.layers is SETTINGS.layers)


@case("objects")
def deepcopy_frozen_dataclass(x):
    f = copy.deepcopy(FROZEN)
    return x * f.scale + len(f.tags) + (f == FROZEN)


@case("objects")
def dataclasses_replace_of_copy(x):
    s = dataclasses.replace(copy.deepcopy(SETTINGS), scale=4.0)
    return x * s.scale + SETTINGS.scale + len(s.layers)


@case("objects")
def deepcopy_global_plain_object(x):
    p = copy.deepcopy(PLAIN)
    p.items.append(4)
    p.meta["k"] = 5
    return x * p.total() + len(PLAIN.items) + PLAIN.meta["k"] + p.meta["k"]


@case("objects")
def shallow_copy_global_plain_object(x):
    p = copy.copy(PLAIN)
    p.scale = 10.0
    return x * p.total() + PLAIN.scale + (p.items is PLAIN.items)


@case("objects")
def deepcopy_object_made_in_frame(x):
    p = Plain(3.0)
    q = copy.deepcopy(p)
    q.items.pop()
    return x * q.total() + p.total() + (q.items is p.items)


@case("objects")
def copy_object_made_in_frame(x):
    p = Plain(3.0)
    q = copy.copy(p)
    q.items.pop()
    return x * q.total() + p.total() + (q.items is p.items)


@case("objects")
def deepcopy_object_argument(x, p):
    q = copy.deepcopy(p)
    q.items.append(9)
    q.scale = 0.5
    return x * q.total() + p.total()


CASES["objects"]["deepcopy_object_argument"] = (deepcopy_object_argument, ((rand(4), Plain(4.0)),), 1, False)


@case("objects", torch_fails='raises AttributeError: its __reduce_ex__ reads a __dict__ that a slotted object lacks')
def deepcopy_slotted_object(x):
    s = copy.deepcopy(SLOTTED)
    s.items.append(6)
    return x * s.scale + len(s.items) + len(SLOTTED.items)


@case("objects", torch_fails='raises AttributeError: its __reduce_ex__ reads a __dict__ that a slotted object lacks')
def copy_slotted_object(x):
    s = copy.copy(SLOTTED)
    s.scale = 4.0
    return x * s.scale + SLOTTED.scale + (s.items is SLOTTED.items)


@case("objects", torch_fails='wrong: the copy loses the slot attributes (its __reduce_ex__ ignores __slots__)')
def deepcopy_slotted_child_with_dict(x):
    s = copy.deepcopy(SLOTTED_CHILD)
    s.extra.append(2)
    s.items.append(3)
    return x * s.scale + len(s.extra) + len(SLOTTED_CHILD.extra) + len(s.items) + len(SLOTTED_CHILD.items)


@case("objects")
def deepcopy_object_twice_gives_distinct_copies(x):
    a = copy.deepcopy(PLAIN)
    b = copy.deepcopy(PLAIN)
    a.items.append(0)
    return x * len(a.items) + len(b.items) + (a is b) + (a.items is b.items)


@case("objects")
def deepcopy_list_of_objects_memo_keeps_sharing(x):
    p = Plain()
    pair = copy.deepcopy([p, p])
    pair[0].scale = 8.0
    return x * pair[1].scale + p.scale + (pair[0] is pair[1])


@case("objects")
def deepcopy_object_holding_itself(x):
    p = Plain()
    p.me = p
    q = copy.deepcopy(p)
    return x + (q.me is q) + (q is p)


@case("objects")
def deepcopy_object_with_nested_object(x):
    outer = Plain()
    outer.inner = Plain(5.0)
    c = copy.deepcopy(outer)
    c.inner.scale = 1.0
    return x * c.inner.scale + outer.inner.scale + (c.inner is outer.inner)


@case("objects")
def copy_then_setattr_new_attribute(x):
    p = copy.copy(PLAIN)
    p.added = 3.0
    return x * p.added + hasattr(PLAIN, "added")


# ---------------------------------------------------------------------------------------------
# objects that define how they are copied
# ---------------------------------------------------------------------------------------------
class CustomDeepcopy:
    def __init__(self):
        self.scale = 2.0
        self.log = []

    def __deepcopy__(self, memo):
        new = CustomDeepcopy()
        new.scale = self.scale * 10
        return new


class CustomCopy:
    def __init__(self):
        self.scale = 3.0

    def __copy__(self):
        new = CustomCopy()
        new.scale = -self.scale
        return new


class WithGetstate:
    def __init__(self):
        self.scale = 2.0
        self.cache = [1, 2, 3]

    def __getstate__(self):
        state = dict(self.__dict__)
        state["cache"] = []
        return state


class WithSetstate:
    def __init__(self):
        self.scale = 2.0

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.restored = True


CUSTOM_DEEPCOPY = CustomDeepcopy()
CUSTOM_COPY = CustomCopy()
WITH_GETSTATE = WithGetstate()
WITH_SETSTATE = WithSetstate()


@case("custom")
def custom_deepcopy_is_called(x):
    c = copy.deepcopy(CUSTOM_DEEPCOPY)
    return x * c.scale + CUSTOM_DEEPCOPY.scale


@case("custom")
def custom_copy_is_called(x):
    c = copy.copy(CUSTOM_COPY)
    return x * c.scale + CUSTOM_COPY.scale


@case("custom", torch_fails="wrong answer: its __reduce_ex__ ignores a class's __getstate__")
def custom_getstate_drops_cache(x):
    c = copy.deepcopy(WITH_GETSTATE)
    return x * c.scale + len(c.cache) + len(WITH_GETSTATE.cache)


@case("custom")
def custom_setstate_runs(x):
    c = copy.deepcopy(WITH_SETSTATE)
    return x * c.scale + c.restored + hasattr(WITH_SETSTATE, "restored")


@case("custom")
def custom_deepcopy_in_frame_object(x):
    c = copy.deepcopy(CustomDeepcopy())
    return x * c.scale


# ---------------------------------------------------------------------------------------------
# classes with a Python __getattribute__ or a validating __setattr__ (configuration objects)
# ---------------------------------------------------------------------------------------------
class Aliased:
    """Maps attribute aliases at read and write time, as transformers' configurations do."""
    aliases = {"hidden": "d_model", "heads": "n_heads"}

    def __init__(self):
        self.d_model = 4
        self.n_heads = 2
        self.decoder_layers = 3

    def __setattr__(self, key, value):
        if key in super().__getattribute__("aliases"):
            key = super().__getattribute__("aliases")[key]
        super().__setattr__(key, value)

    def __getattribute__(self, key):
        if key != "aliases" and key in super().__getattribute__("aliases"):
            key = super().__getattribute__("aliases")[key]
        return super().__getattribute__(key)


class Validated:
    def __init__(self):
        self.size = 2

    def __setattr__(self, name, value):
        if name == "size" and value <= 0:
            raise ValueError("size must be positive")
        object.__setattr__(self, name, value)


class Counting:
    """A __getattribute__ with an effect: every read is counted."""

    def __init__(self):
        self.scale = 2.0
        self.reads = 0

    def __getattribute__(self, name):
        if name == "scale":
            object.__setattr__(self, "reads", object.__getattribute__(self, "reads") + 1)
        return object.__getattribute__(self, name)


ALIASED = Aliased()
VALIDATED = Validated()


@case("config")
def aliased_read_of_global(x):
    return x * ALIASED.hidden + ALIASED.heads


@case("config", torch_fails='cannot construct an instance of a class with a Python __getattribute__')
def aliased_object_made_in_frame(x):
    a = Aliased()
    a.hidden = 8
    return x * a.hidden + a.d_model + a.heads


@case("config")
def deepcopy_aliased_then_write_through_alias(x):
    a = copy.deepcopy(ALIASED)
    a.hidden = 16
    return x * a.hidden + ALIASED.hidden + a.d_model


@case("config")
def deepcopy_aliased_then_rename_keys(x):
    a = copy.deepcopy(ALIASED)
    for key in list(a.__dict__):
        if key.startswith("decoder_"):
            value = getattr(a, key)
            delattr(a, key)
            setattr(a, key[len("decoder_"):], value)
    return x * a.layers + hasattr(a, "decoder_layers") + hasattr(ALIASED, "layers") + ALIASED.decoder_layers


@case("config")
def deepcopy_validated_then_set(x):
    v = copy.deepcopy(VALIDATED)
    v.size = 5
    return x * v.size + VALIDATED.size


@case("config", torch_fails='cannot construct an instance of a class with a Python __getattribute__')
def getattribute_with_effect_on_new_object(x):
    c = Counting()
    s = c.scale + c.scale
    return x * s + object.__getattribute__(c, "reads")


@case("config")
def getattr_default_through_getattribute(x):
    return x * getattr(ALIASED, "missing", 3) + getattr(ALIASED, "heads", 0)


# ---------------------------------------------------------------------------------------------
# more shapes of values
# ---------------------------------------------------------------------------------------------
Point = collections.namedtuple("Point", "x y")


@dataclasses.dataclass
class Inner:
    values: list = dataclasses.field(default_factory=lambda: [1.0, 2.0])


@dataclasses.dataclass
class Outer:
    inner: Inner = dataclasses.field(default_factory=Inner)
    weight: float = 0.5


class WithProperty:
    kind = "class-level"

    def __init__(self):
        self._size = 3

    @property
    def size(self):
        return self._size * 2


class WithReduce:
    def __init__(self, n):
        self.n = n

    def __reduce__(self):
        return (WithReduce, (self.n + 1,))


OUTER = Outer()
WITH_PROPERTY = WithProperty()


@case("values")
def deepcopy_atomic_values(x):
    values = copy.deepcopy((1, 2.5, "s", None, True, range(3), len, Plain))
    return x * values[1] + values[0] + len(values[5]) + (values[6] is len) + (values[7] is Plain)


@case("values", torch_fails='raises AttributeError: its __reduce_ex__ reads a __dict__ that a namedtuple lacks')
def deepcopy_namedtuple(x):
    p = copy.deepcopy(Point(1.0, [2.0]))
    return x * p.x + p.y[0] + (type(p) is Point)


@case("values", torch_fails='raises AttributeError: its __reduce_ex__ reads a __dict__ that a namedtuple lacks')
def copy_namedtuple(x):
    p = copy.copy(Point(3.0, 4.0))
    return x * p.x + p.y


@case("values")
def deepcopy_dict_with_tuple_keys(x):
    d = copy.deepcopy({(1, 2): [3], ("a",): 4})
    d[(1, 2)].append(5)
    return x * len(d[(1, 2)]) + d[("a",)]


@case("values")
def deepcopy_with_explicit_memo(x):
    inner = [1]
    memo = {}
    a = copy.deepcopy([inner], memo)
    b = copy.deepcopy([inner], memo)
    return x + (a[0] is b[0]) + len(a)


@case("values")
def deepcopy_nested_dataclass(x):
    o = copy.deepcopy(OUTER)
    o.inner.values.append(3.0)
    return x * o.weight + len(o.inner.values) + len(OUTER.inner.values) + (o.inner is OUTER.inner)


@case("values")
def dataclasses_asdict_copies_leaves(x):
    d = dataclasses.asdict(OUTER)
    d["inner"]["values"].append(9.0)
    return x * d["weight"] + len(d["inner"]["values"]) + len(OUTER.inner.values)


@case("values")
def dataclasses_astuple(x):
    t = dataclasses.astuple(OUTER)
    return x * t[1] + len(t[0][0])


@case("values")
def copy_dataclass_made_in_frame(x):
    s = Settings(scale=3.0)
    c = copy.copy(s)
    c.scale = 1.0
    return x * s.scale + c.scale + (c.layers is s.layers)


@case("values")
def deepcopy_keeps_class_attribute_and_property(x):
    w = copy.deepcopy(WITH_PROPERTY)
    w._size = 5
    return x * w.size + WITH_PROPERTY.size + len(w.kind)


@case("values", torch_fails="wrong answer: its __reduce_ex__ ignores a class's __reduce__")
def copy_of_object_with_reduce(x):
    c = copy.copy(WithReduce(2))
    return x * c.n


@case("values", torch_fails="wrong answer: its __reduce_ex__ ignores a class's __reduce__")
def deepcopy_of_object_with_reduce(x):
    c = copy.deepcopy(WithReduce(4))
    return x * c.n


@case("values")
def copy_aliased_object(x):
    a = copy.copy(ALIASED)
    a.heads = 7
    return x * a.n_heads + ALIASED.heads + a.hidden


@case("values")
def deepcopy_copied_object_again(x):
    a = copy.deepcopy(PLAIN)
    a.items.append(5)
    b = copy.deepcopy(a)
    b.items.append(6)
    return x * len(b.items) + len(a.items) + len(PLAIN.items)


@case("values")
def deepcopy_list_of_dataclasses(x):
    lst = copy.deepcopy([SETTINGS, SETTINGS])
    lst[0].scale = 11.0
    return x * lst[1].scale + SETTINGS.scale + (lst[0] is lst[1])


# ---------------------------------------------------------------------------------------------
# object protocol details: __new__, __getattribute__, __delattr__, hasattr/getattr on copies
# ---------------------------------------------------------------------------------------------
class Guarded:
    """A __delattr__ of its own that records what was deleted."""

    def __init__(self):
        self.a = 1
        self.b = 2
        self.deleted = []

    def __delattr__(self, name):
        self.deleted.append(name)
        object.__delattr__(self, name)


@case("protocol")
def object_new_then_set(x):
    p = object.__new__(Plain)
    p.scale = 3.0
    return x * p.scale + hasattr(p, "items")


@case("protocol")
def class_new_of_dataclass(x):
    s = Settings.__new__(Settings)
    s.scale = 2.5
    return x * s.scale + (type(s) is Settings)


@case("protocol")
def delattr_on_new_object(x):
    p = Plain()
    delattr(p, "meta")
    return x * p.scale + hasattr(p, "meta")


@case("protocol", torch_fails='graph break: object.__delattr__ called in a traced __delattr__')
def delattr_through_python_delattr(x):
    g = Guarded()
    delattr(g, "a")
    return x * g.b + len(g.deleted) + hasattr(g, "a")


@case("protocol")
def hasattr_on_copy_with_getattribute(x):
    a = copy.deepcopy(ALIASED)
    return x + hasattr(a, "hidden") + hasattr(a, "missing") + hasattr(a, "decoder_layers")


@case("protocol")
def getattr_default_on_copy_with_getattribute(x):
    a = copy.deepcopy(ALIASED)
    return x * getattr(a, "missing", 2) + getattr(a, "heads", 0)


@case("protocol", torch_fails='graph break: object.__getattribute__ called on an object directly')
def object_getattribute_skips_aliases(x):
    a = copy.deepcopy(ALIASED)
    return x * object.__getattribute__(a, "d_model") + len(object.__getattribute__(a, "aliases"))


@case("protocol")
def vars_of_copy(x):
    a = copy.deepcopy(ALIASED)
    return x + len(vars(a)) + ("d_model" in vars(a))


@case("protocol")
def reduce_ex_of_plain_object(x):
    rv = PLAIN.__reduce_ex__(4)
    return x * len(rv) + (rv[1][0] is Plain) + (rv[3] is None) + len(rv[2])


@case("protocol", torch_fails='raises AttributeError: its __reduce_ex__ reads a __dict__ that a slotted object lacks')
def reduce_ex_of_slotted_object(x):
    rv = SLOTTED.__reduce_ex__(2)
    state, slots = rv[2]
    return x * slots["scale"] + (state is None) + len(slots)


@case("protocol")
def copy_of_object_in_list_in_dict(x):
    d = copy.deepcopy({"objs": [Plain(2.0), Plain(3.0)]})
    d["objs"][0].scale = 10.0
    return x * d["objs"][0].total() + d["objs"][1].total()


@case("protocol")
def copy_then_compare_dataclasses(x):
    a = copy.deepcopy(SETTINGS)
    b = copy.copy(SETTINGS)
    a.name = "other"
    return x + (a == SETTINGS) + (b == SETTINGS) + (a != b)


@case("protocol")
def deepcopy_inside_a_loop(x):
    copies = [copy.deepcopy(PLAIN) for _ in range(3)]
    for i, c in enumerate(copies):
        c.scale = float(i)
    return x * sum(c.scale for c in copies) + len(PLAIN.items)


@case("protocol")
def copy_of_frozen_dataclass_made_in_frame(x):
    f = copy.copy(FrozenSettings(scale=1.5))
    return x * f.scale + len(f.tags)


@case("protocol")
def deepcopy_dict_of_dataclasses(x):
    d = copy.deepcopy({"a": SETTINGS, "b": OUTER})
    d["a"].layers.append(0)
    return x * len(d["a"].layers) + len(SETTINGS.layers) + d["b"].weight


# ---------------------------------------------------------------------------------------------
# tensors inside a deep copy: torch._dynamo breaks the graph at copy.deepcopy of a tensor
# ---------------------------------------------------------------------------------------------
@case("tensors", graphs=None, breaks=True)
def deepcopy_list_holding_tensor(x):
    lst = copy.deepcopy([x, 1])
    lst[0].add_(1)
    return lst[0] * lst[1] + x


@case("tensors", torch_fails='graph break: copy.copy of a builtin container calls its C copy method')
def shallow_copy_list_holding_tensor_aliases(x):
    lst = copy.copy([x, 1])
    return lst[0] * 2 + (lst[0] is x)


def _params() -> list:
    marks = lambda name: [reference_only_skip(TORCH_FAILS[name])] if name in TORCH_FAILS else []  # noqa: E731
    return [pytest.param(family, name, marks=marks(name), id=f"{family}-{name}")
            for family in sorted(CASES) for name in sorted(CASES[family])]


@pytest.mark.parametrize("family,name", _params())
def test_copying(family, name):
    fn, input_sets, graphs, breaks = CASES[family][name]
    assert_same(fn, *input_sets, graphs=graphs, nopython=not breaks)


# ---------------------------------------------------------------------------------------------
# the original changes between calls: the copy made on the next call sees it
# ---------------------------------------------------------------------------------------------
def copy_scaled(x):
    s = copy.deepcopy(SETTINGS)
    return x * s.scale + len(s.layers)


def test_original_mutated_between_calls_is_seen():
    cnt = CompileCounter()
    compiled = optimize(cnt)(copy_scaled)
    x = rand(4)
    saved = copy.deepcopy(SETTINGS)
    try:
        assert_equal(compiled(x), copy_scaled(x))
        SETTINGS.scale = 7.0
        assert_equal(compiled(x), copy_scaled(x))
        SETTINGS.layers.append(9)
        assert_equal(compiled(x), copy_scaled(x))
        SETTINGS.extra = 1  # a new attribute of the original is copied too
        assert_equal(compiled(x), copy_scaled(x))
    finally:
        SETTINGS.scale, SETTINGS.layers = saved.scale, saved.layers
        vars(SETTINGS).pop("extra", None)


def copy_and_return(x):
    return x + 1, copy.deepcopy(PLAIN)


def test_returned_copy_is_independent_of_original():
    compiled = optimize(CompileCounter(), nopython=True)(copy_and_return)
    x = rand(4)
    _, first = compiled(x)
    first.items.append(100)
    first.meta["k"] = -1
    assert PLAIN.items == [1, 2, 3] and PLAIN.meta == {"k": 1}
    before = frames_compiled()
    _, second = compiled(x)
    assert frames_compiled() == before
    assert second is not first and second.items == [1, 2, 3] and second.meta == {"k": 1}
    assert type(second) is Plain and second.scale == PLAIN.scale


def set_alias_on_copy(x):
    a = copy.deepcopy(ALIASED)
    a.hidden = 32
    return x * a.hidden, a


def test_writes_to_a_copy_with_custom_setattr_stay_in_the_copy():
    compiled = optimize(CompileCounter(), nopython=True)(set_alias_on_copy)
    x = rand(4)
    for _ in range(3):
        out, a = compiled(x)
        assert_equal(out, x * 32)
        assert a.d_model == 32 and a.hidden == 32 and type(a) is Aliased and "hidden" not in vars(a)
        assert ALIASED.d_model == 4


SHARED_INNER = [1]
ALIASING_PAIR = [SHARED_INNER, SHARED_INNER]


@case("containers")
def deepcopy_keeps_aliasing_of_global_lists(x):
    c = copy.deepcopy(ALIASING_PAIR)
    c[0].append(2)
    return x * len(c[1]) + (c[0] is c[1]) + len(SHARED_INNER)


def assign_then_deepcopy(x, obj):
    obj.note = 3.0
    q = copy.deepcopy(obj)
    obj.note = 4.0
    return x * q.note, q


def test_deepcopy_sees_attributes_assigned_earlier_in_the_frame():
    compiled = optimize(CompileCounter(), nopython=True)(assign_then_deepcopy)
    x = rand(4)
    for _ in range(3):
        obj = Plain()
        out, q = compiled(x, obj)
        assert_equal(out, x * 3.0)
        assert q.note == 3.0 and obj.note == 4.0 and q.items == obj.items and q.items is not obj.items


COUNTING = Counting()


def read_counted_scale(x):
    return x * COUNTING.scale


@reference_only_skip("graph break: object.__getattribute__ called in a traced __getattribute__")
def test_python_getattribute_of_existing_object_runs_on_every_call():
    """The class's __getattribute__ is traced: its effect happens on each call, not once while
    tracing (and guards do not run it again)."""
    compiled = optimize(CompileCounter(), nopython=True)(read_counted_scale)
    x = rand(4)
    before = object.__getattribute__(COUNTING, "reads")
    for i in range(3):
        assert_equal(compiled(x), x * 2.0)
        assert object.__getattribute__(COUNTING, "reads") == before + i + 1


def test_python_getattribute_alias_change_between_calls_is_seen():
    compiled = optimize(CompileCounter(), nopython=True)(aliased_read_of_global)
    x = rand(4)
    assert_equal(compiled(x), aliased_read_of_global(x))
    ALIASED.d_model = 9
    try:
        assert_equal(compiled(x), x * 9 + 2)
    finally:
        ALIASED.d_model = 4


def deepcopy_pair(x, a, b):
    c = copy.deepcopy([a, b])
    c[0].append(1)
    return x * len(c[1])


def test_deepcopy_of_arguments_that_become_the_same_list():
    """The memo shares the copy of an object reached twice: two lists in one call, one list passed
    twice in the next."""
    compiled = optimize(CompileCounter(), nopython=True)(deepcopy_pair)
    x = rand(4)
    assert_equal(compiled(x, [0], [0]), x)
    shared = [0]
    assert_equal(compiled(x, shared, shared), x * 2)
    assert_equal(compiled(x, [0], [0]), x)


def test_transformers_decoder_config_copy_follows_the_original():
    """PreTrainedConfig.get_text_config(decoder=True) of a legacy encoder-decoder config deep-copies
    it (a Python __getattribute__, a validating __setattr__, to_dict, delattr): one graph, the copy
    renamed, the original untouched, and a change to the original seen by the next call."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BartConfig(encoder_layers=2, decoder_layers=3, d_model=16, encoder_attention_heads=2,
                                     decoder_attention_heads=4, vocab_size=32)

    def decoder_shape(x):
        text = config.get_text_config(decoder=True)
        return x * text.num_hidden_layers + text.num_attention_heads, text

    cnt = CompileCounter()
    compiled = optimize(cnt, nopython=True)(decoder_shape)
    x = rand(4)
    for layers in (3, 3, 5, 5):
        config.decoder_layers = layers
        out, text = compiled(x)
        assert_equal(out, x * layers + 4)
        assert text.num_hidden_layers == layers and text is not config and type(text) is type(config)
        assert config.num_hidden_layers == 2 and config.decoder_layers == layers
    assert cnt.frame_count == 2
