"""Caches that settle: a frame that makes an object and hands it past a graph break to its resume
function compiles only on the first of identical calls (the object is guarded by type and by what
is read of it, never by its identity); what still recompiles says why, and a resume function's
cache stops growing at the cache size limit."""
import logging
import warnings

import pytest
import torch
import torch.nn as nn

import minidynamo
from minidynamo.convert_frame import compile_listeners
from minidynamo.testing import CompileCounter


@pytest.fixture(autouse=True)
def fresh():
    minidynamo.reset()
    yield
    minidynamo.reset()


def _break():
    print("graph break")  # noqa: T201


def _compiles_per_call(fn, *args, calls=4):
    compiled = minidynamo.optimize(CompileCounter())(fn)
    counts = []
    for _ in range(calls):
        before = minidynamo.stats()["compiled"]
        torch.testing.assert_close(compiled(*args), fn(*args))
        counts.append(minidynamo.stats()["compiled"] - before)
    return counts


def _slope_after_break(x, slope):
    act = nn.LeakyReLU(slope)
    _break()
    return act(x)


def _linear_after_break(x):
    torch.manual_seed(0)
    layer = nn.Linear(4, 4)
    _break()
    return layer(x)


def _closure_after_break(x):
    y = x + 1

    def scale(t):
        return t * y

    _break()
    return scale(x)


def _slice_after_break(x, layers):
    part = layers[1:]
    _break()
    for layer in part:
        x = layer(x)
    return x


@pytest.mark.parametrize("fn", [_linear_after_break, _closure_after_break])
def test_new_object_each_call_compiles_once(fn):
    counts = _compiles_per_call(fn, torch.randn(2, 4))
    assert counts[0] > 0 and counts[1:] == [0, 0, 0]


def test_sliced_container_after_break_compiles_once():
    layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
    counts = _compiles_per_call(_slice_after_break, torch.randn(2, 4), layers)
    assert counts[0] > 0 and counts[1:] == [0, 0, 0]


def test_new_module_is_guarded_by_type_and_what_is_read():
    """The resume function guards the new LeakyReLU by type and by its negative_slope, not by identity:
    another slope recompiles (and computes with that slope), the same slope reuses the entry."""
    x = torch.randn(2, 4)
    compiled = minidynamo.optimize("eager")(_slope_after_break)
    for slope in (0.1, 0.1, 0.5, 0.5, 0.1):
        torch.testing.assert_close(compiled(x, slope), _slope_after_break(x, slope))
    explained = minidynamo.explain(_slope_after_break)(x, 0.1)
    resume_guards = {(g.name, g.kind.name) for g in explained.out_guards if g.name.startswith("L['act']")}
    assert ("L['act']", "TYPE_MATCH") in resume_guards
    assert not any(kind in ("NN_MODULE", "ID_MATCH") and name == "L['act']" for name, kind in resume_guards)


def test_new_module_parameters_are_graph_inputs():
    """A module with parameters made before the break: its parameters reach the resume function's
    graph as inputs (checked by their properties), so new values each call are read, not baked in."""
    def fn(x, scale):
        layer = nn.Linear(4, 4)
        with torch.no_grad():
            layer.weight.fill_(scale)
            layer.bias.zero_()
        _break()
        return layer(x)

    x = torch.randn(2, 4)
    compiled = minidynamo.optimize("eager")(fn)
    for scale in (1.0, 2.0, 3.0):
        torch.testing.assert_close(compiled(x, scale), fn(x, scale))


@minidynamo.disable
def _make_double():
    return lambda t: t * 2


def _result_function_after_break(x):
    double = _make_double()  # a new function on each call, returned by a call run at the break
    _break()
    return double(x)


def test_function_returned_at_the_break_compiles_once():
    """The new function is guarded by its code, not its identity."""
    counts = _compiles_per_call(_result_function_after_break, torch.randn(3))
    assert counts[0] > 0 and counts[1:] == [0, 0, 0]


class _Marker:
    pass


_SENTINEL = _Marker()


@minidynamo.disable
def _make_marker():
    return _Marker()


def _identified_result_after_break(x):
    marker = _make_marker()  # a new object on each call, which the trace identifies (`is`)
    _break()
    return x + 1 if marker is _SENTINEL else x - 1


def test_every_recompile_has_a_logged_reason(caplog):
    """Entries of the resume functions die with the object they identified (dropped, not failed):
    the next compile still says why, in the minidynamo.recompiles log and in the stats."""
    records = []
    compile_listeners.append(records.append)
    x = torch.randn(3)
    compiled = minidynamo.optimize("eager")(_identified_result_after_break)
    try:
        with caplog.at_level(logging.INFO, logger="minidynamo.recompiles"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for call in range(5):
                if call == 1:
                    first_call = len(records)
                torch.testing.assert_close(compiled(x), x - 1)
    finally:
        compile_listeners.remove(records.append)
    later = records[first_call:]
    assert later and all(r.recompile_reason for r in later), [(r.code.co_qualname, r.recompile_reason) for r in later]
    logged = [r.getMessage() for r in caplog.records if r.name == "minidynamo.recompiles"]
    assert len(logged) == len(later) == minidynamo.stats()["recompiles"]


def test_cache_size_limit_applies_to_resume_functions():
    """Entries dropped because the object they identified died count toward a resume function's
    limit: it stops compiling (with the limit's warning) instead of compiling on every call."""
    x = torch.randn(3)
    compiled = minidynamo.optimize("eager")(_identified_result_after_break)
    limit = minidynamo.config.cache_size_limit
    with pytest.warns(RuntimeWarning, match="cache size limit"):
        for _ in range(limit + 4):
            torch.testing.assert_close(compiled(x), x - 1)
    before = minidynamo.stats()["compiled"]
    for _ in range(3):
        torch.testing.assert_close(compiled(x), x - 1)
    assert minidynamo.stats()["compiled"] == before


def test_hook_added_later_recompiles_and_runs():
    layer = nn.Linear(4, 4)
    x = torch.randn(2, 4)
    compiled = minidynamo.optimize("eager", nopython=True)(lambda t: layer(t))
    torch.testing.assert_close(compiled(x), layer(x))
    handle = layer.register_forward_hook(lambda m, a, out: out * 3)
    torch.testing.assert_close(compiled(x), layer(x))
    handle.remove()
    torch.testing.assert_close(compiled(x), layer(x))
    pre = layer.register_forward_pre_hook(lambda m, a: (a[0] * 0,))
    torch.testing.assert_close(compiled(x), layer(x))
    pre.remove()
    global_hook = torch.nn.modules.module.register_module_forward_hook(lambda m, a, out: out + 5)
    try:
        torch.testing.assert_close(compiled(x), layer(x))
    finally:
        global_hook.remove()
    torch.testing.assert_close(compiled(x), layer(x))


def test_hook_replaced_in_place_is_seen():
    """A hook table entry replaced under the same key (not a public API, but a dict write): the hook's
    identity is guarded."""
    layer = nn.Linear(4, 4)
    x = torch.randn(2, 4)
    layer.register_forward_hook(lambda m, a, out: out * 2)
    compiled = minidynamo.optimize("eager", nopython=True)(lambda t: layer(t))
    torch.testing.assert_close(compiled(x), layer(x))
    key = next(iter(layer._forward_hooks))
    layer._forward_hooks[key] = lambda m, a, out: out - 7
    torch.testing.assert_close(compiled(x), layer(x))
