"""Shortcuts that make compiling quicker answer what the general path answers: the static class
lookup against inspect.getattr_static, and a value reached again at the same place while tracing."""
import abc
import collections
import enum
import inspect

import pytest
import torch

import minidynamo
from minidynamo.module_lookup import getattr_static


class Plain:
    attr = 1

    def method(self):
        return 2


class Child(Plain):
    __slots__ = ()


class WithMeta(metaclass=abc.ABCMeta):
    pass


class Color(enum.Enum):
    RED = 1


class ShadowingMeta(type):
    @property
    def __dict__(cls):  # inspect then skips the class's own namespace
        return {}


class Shadowed(metaclass=ShadowingMeta):
    attr = 1


_MISSING = object()
_CLASSES = [Plain, Child, WithMeta, Color, Shadowed, ShadowingMeta, int, dict, collections.OrderedDict, torch.nn.Linear,
            torch.nn.Parameter, torch.Tensor, abc.ABCMeta, type, object]
_NAMES = ["attr", "method", "__init__", "__dict__", "__mro__", "__name__", "mro", "__call__", "register", "RED",
          "forward", "missing_name", "__getattribute__", "__slots__", "__abstractmethods__", "__members__", "data",
          "__torch_function__", "_abc_impl"]


@pytest.mark.parametrize("cls", _CLASSES, ids=lambda c: c.__name__)
def test_static_lookup_matches_inspect(cls):
    for name in _NAMES:
        assert getattr_static(cls, name, _MISSING) is inspect.getattr_static(cls, name, _MISSING), name
    with pytest.raises(AttributeError):
        getattr_static(cls, "missing_name")


def test_static_lookup_of_an_instance_matches_inspect():
    obj = Plain()
    obj.attr = 5
    assert getattr_static(obj, "attr") == 5 and getattr_static(obj, "method") is Plain.__dict__["method"]


class Holder:
    def __init__(self, value):
        self.value = value


def test_an_attribute_rebound_by_the_trace_is_read_again():
    holder = Holder(1)

    def fn(x, h):
        a = h.value
        h.value = 2
        return x + a + h.value

    compiled = minidynamo.optimize("eager")(fn)
    assert compiled(torch.zeros(1), holder).item() == 3 and holder.value == 2
    holder.value = 1
    assert compiled(torch.zeros(1), holder).item() == 3
