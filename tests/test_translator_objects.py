"""Translator: user classes and objects: attribute reads, dataclasses, namedtuples, class
attributes, @property, @staticmethod / @classmethod, methods, objects created inside the frame.
Whole-graph functions only."""
import collections
import dataclasses
import typing

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


class Config:
    factor = 3  # class attribute
    mode = "add"

    def __init__(self, bias, weight=None):
        self.bias = bias
        self.weight = weight

    @property
    def doubled_bias(self):
        return self.bias * 2

    @staticmethod
    def combine(a, b):
        return a * b + 1

    @classmethod
    def scaled(cls, x):
        return x * cls.factor

    def apply(self, x):
        if self.mode == "add":
            return x + self.bias
        return x * self.bias

    def chain(self, x):
        return self.apply(x) * self.factor


class SubConfig(Config):
    factor = 5

    def apply(self, x):
        return super().apply(x) - 1


@dataclasses.dataclass
class Pair:
    left: torch.Tensor
    right: torch.Tensor
    alpha: float = 1.0


@dataclasses.dataclass(frozen=True)
class Hyper:
    lr: float
    steps: int


Stats = collections.namedtuple("Stats", ["mean", "std"])


class Span(typing.NamedTuple):
    start: int
    stop: int


# ---------------------------------------------------------------------------------------------
# plain objects
# ---------------------------------------------------------------------------------------------
def obj_attr_read(cfg, x):
    return x * cfg.bias + cfg.weight


def obj_class_attr(cfg, x):
    return x * cfg.factor + Config.factor


def obj_property(cfg, x):
    return x + cfg.doubled_bias


def obj_staticmethod(cfg, x):
    return cfg.combine(x, x) + Config.combine(x, 2)


def obj_classmethod(cfg, x):
    return cfg.scaled(x) + Config.scaled(x)


def obj_method(cfg, x):
    return cfg.apply(x) + cfg.chain(x)


def obj_getattr_default(cfg, x):
    return x * getattr(cfg, "missing", 4) + getattr(cfg, "bias")


def obj_hasattr(cfg, x):
    if hasattr(cfg, "weight") and not hasattr(cfg, "nope"):
        return x + 1
    return x - 1


def obj_type_check(cfg, x):
    if type(cfg) is Config:
        return x + 1
    if isinstance(cfg, Config):
        return x + 2
    return x


def obj_created_inside(x):
    cfg = Config(2.0, x)
    cfg.bias = 3.0
    return cfg.apply(x) * cfg.weight


@pytest.mark.parametrize(
    "fn",
    [obj_attr_read, obj_class_attr, obj_property, obj_staticmethod, obj_classmethod, obj_method,
     obj_getattr_default, obj_hasattr, obj_type_check],
    ids=lambda f: f.__name__,
)
def test_object_access(fn):
    cfg = Config(1.5, torch.randn(3))
    assert_same(fn, (cfg, rand(3)), (cfg, rand(3)), graphs=1)


def test_object_subclass_super():
    cfg = SubConfig(0.5, torch.randn(3))
    assert_same(obj_method, (cfg, rand(3)), graphs=1)
    assert_same(obj_type_check, (cfg, rand(3)), graphs=1)


def test_object_created_inside():
    assert_same(obj_created_inside, rand(3), graphs=1)


def test_object_attr_change_recompiles():
    cfg = Config(1.5, torch.randn(3))
    cnt = CompileCounter()
    f = optimize(cnt, nopython=True)(obj_method)
    x = rand(3)
    assert_equal(f(cfg, x), obj_method(cfg, x))
    cfg.mode = "mul"  # instance attribute now shadows the class attribute
    assert_equal(f(cfg, x), obj_method(cfg, x))
    assert cnt.frame_count == 2


def test_class_attr_change_recompiles(monkeypatch):
    cfg = Config(1.5, torch.randn(3))
    cnt = CompileCounter()
    f = optimize(cnt, nopython=True)(obj_class_attr)
    x = rand(3)
    assert_equal(f(cfg, x), obj_class_attr(cfg, x))
    monkeypatch.setattr(Config, "factor", 7)
    assert_equal(f(cfg, x), obj_class_attr(cfg, x))
    assert cnt.frame_count == 2


def test_different_object_type_recompiles():
    cnt = CompileCounter()
    f = optimize(cnt, nopython=True)(obj_method)
    x = rand(3)
    a, b = Config(1.0, None), SubConfig(1.0, None)
    assert_equal(f(a, x), obj_method(a, x))
    assert_equal(f(b, x), obj_method(b, x))
    assert cnt.frame_count == 2


def test_object_tensor_attr_replaced():
    cfg = Config(1.0, torch.randn(3))
    f = optimize(CompileCounter(), nopython=True)(obj_attr_read)
    x = rand(3)
    assert_equal(f(cfg, x), obj_attr_read(cfg, x))
    cfg.weight = torch.randn(3)
    assert_equal(f(cfg, x), obj_attr_read(cfg, x))


# ---------------------------------------------------------------------------------------------
# dataclasses
# ---------------------------------------------------------------------------------------------
def dc_read(p):
    return p.left * p.alpha + p.right


def dc_construct(x, y):
    p = Pair(x, y, alpha=0.5)
    return p.left - p.right * p.alpha


def dc_frozen(h, x):
    for _ in range(h.steps):
        x = x - h.lr * x
    return x


def dc_fields(p):
    return [getattr(p, f.name) for f in dataclasses.fields(p) if isinstance(getattr(p, f.name), torch.Tensor)][0] * 2


def test_dataclass_read():
    p = Pair(torch.randn(3), torch.randn(3), 2.0)
    assert_same(dc_read, (p,), graphs=1)


def test_dataclass_construct():
    assert_same(dc_construct, (rand(3), rand(3)), graphs=1)


def test_dataclass_frozen_values_guarded():
    assert_same(dc_frozen, (Hyper(0.1, 3), rand(3)), (Hyper(0.1, 3), rand(3)), (Hyper(0.5, 2), rand(3)), graphs=2)


def test_dataclass_fields():
    p = Pair(torch.randn(3), torch.randn(3), 2.0)
    assert_same(dc_fields, (p,), graphs=1)


# ---------------------------------------------------------------------------------------------
# namedtuples
# ---------------------------------------------------------------------------------------------
def nt_construct_and_read(x):
    s = Stats(x.mean(), x.std())
    return (x - s.mean) / s.std, s[0] + s[1]


def nt_returned(x):
    return Stats(mean=x.mean(0), std=x.std(0))


def nt_argument(s, x):
    return (x - s.mean) / s.std


def nt_unpack(s, x):
    m, sd = s
    return x * sd + m


def typed_nt(span, x):
    return x[span.start:span.stop] * len(span), span._replace(stop=span.stop + 1)


def nt_fields_asdict(x):
    s = Stats(x, x * 2)
    d = s._asdict()
    return d["std"] - d["mean"], Stats._fields


def test_namedtuple_construct_read():
    assert_same(nt_construct_and_read, rand(5), graphs=1)


def test_namedtuple_returned():
    assert_same(nt_returned, rand(3, 2), graphs=1)


def test_namedtuple_argument():
    assert_same(nt_argument, (Stats(torch.randn(3), torch.rand(3) + 1), rand(3)), graphs=1)


def test_namedtuple_unpack():
    assert_same(nt_unpack, (Stats(torch.randn(3), torch.randn(3)), rand(3)), graphs=1)


def test_typed_namedtuple():
    assert_same(typed_nt, (Span(1, 3), rand(5)), (Span(0, 2), rand(5)), graphs=2)


def test_namedtuple_asdict():
    assert_same(nt_fields_asdict, rand(3), graphs=1)


# ---------------------------------------------------------------------------------------------
# objects in containers, methods via getattr
# ---------------------------------------------------------------------------------------------
def objs_in_list(cfgs, x):
    for c in cfgs:
        x = c.apply(x)
    return x


def method_via_getattr(cfg, x, name):
    return getattr(cfg, name)(x)


def bound_method_stored(cfg, x):
    m = cfg.apply
    return m(x) + m(x * 2)


def test_objects_in_list():
    cfgs = [Config(1.0), SubConfig(2.0)]
    assert_same(objs_in_list, (cfgs, rand(3)), graphs=1)


def test_method_via_getattr():
    cfg = Config(1.0)
    assert_same(method_via_getattr, (cfg, rand(3), "apply"), (cfg, rand(3), "chain"), graphs=2)


def test_bound_method_stored():
    assert_same(bound_method_stored, (Config(2.0), rand(3)), graphs=1)


def test_compiled_bound_method():
    cfg = Config(0.5, torch.randn(3))
    assert_same(cfg.chain, rand(3), rand(3), graphs=1)
