"""Conformance on the long tail (issue 32): Python and torch API that torch._dynamo compiles whole, one
small function per concept, compared with eager and with torch._dynamo (reference mode), in one graph."""
import types

import pytest
import torch

from translator_harness import Args, assert_same, fresh_dynamo, rand, reference_only_skip  # noqa: F401

CASES = {}


def case(*input_sets, graphs=1, torch_breaks=None):
    """Register `fn` with its input sets (default: one tensor) and the graph count to assert;
    `torch_breaks`: what torch._dynamo 2.13 cannot trace in it (skipped in reference mode)."""
    def register(fn):
        assert fn.__name__ not in CASES, fn.__name__
        marks = [reference_only_skip(torch_breaks)] if torch_breaks else []
        CASES[fn.__name__] = pytest.param(fn, input_sets or (rand(3),), graphs, marks=marks, id=fn.__name__)
        return fn

    return register


# =============================================================================================
# the graph's own code and its guards spell every value
# =============================================================================================
@case(torch.arange(6.0), torch_breaks="Tensor.random_ with keyword arguments")
def keyword_named_like_a_python_keyword(x):
    return x.clone().random_(**{"from": 3, "to": 4}) * x  # the one value in [from, to)


class _WithMethods:
    def scale(self):
        return 3

    def shift(self):
        return 1


@case()
def mappingproxy_of_a_class_read(x):
    return x * len(_WithMethods.__dict__["scale"].__name__) + _WithMethods.__dict__["shift"](None)


@case((rand(3), types.MappingProxyType({"a": 1, "b": 2})))
def mappingproxy_argument_read(x, m):
    return x * m["a"] + m["b"] + len(m) + ("a" in m)


@pytest.mark.parametrize("fn,input_sets,graphs", [CASES[name] for name in sorted(CASES)])
def test_conformance(fn, input_sets, graphs):
    assert_same(fn, *input_sets, graphs=graphs)
