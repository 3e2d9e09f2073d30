"""cpp optimizer steps as multi-tensor loops: each class of equal parameter updates (same ops and
dtypes) is one function called over a table of pointers and lengths, so the C++ stays the same size
however many parameters there are; parameters and state equal eager's."""
import re

import pytest
import torch

import minidynamo
from minidynamo import counters, perf
from minidynamo.codegen.cpp_multi_tensor import HELPER
from test_cpp_train_step import IDS, KINDS, OPTIMIZERS, optimizer_step

STEPS = 5


class _Mixed(torch.nn.Module):
    """`layers` float32 linear layers of different widths beside a float64 one."""

    def __init__(self, layers: int):
        super().__init__()
        widths = [4] + [3 + 2 * k for k in range(1, layers + 1)]
        self.f32 = torch.nn.Sequential(*[torch.nn.Linear(a, b) for a, b in zip(widths, widths[1:])])
        self.f64 = torch.nn.Linear(4, 6).double()

    def forward(self, x):
        loss = self.f32(x).pow(2).mean() + self.f64(x.double()).pow(2).mean()
        extra = getattr(self, "extra", None)  # a layer added with its own param group
        return loss if extra is None else loss + extra(x).pow(2).mean()


def _setup(kind, foreach, layers=3):
    torch.manual_seed(0)
    model = _Mixed(layers)
    return model, OPTIMIZERS[kind](model.parameters(), foreach)


def _assert_same(model_a, opt_a, model_e, opt_e):
    # Compiled (ours and torch.compile alike), Adam's bias corrections are float32 tensor math on
    # the float32 step count, where eager uses Python floats: float64 parameters then agree to
    # float32 precision only.
    tol = lambda t: {} if t.dtype == torch.float32 else {"rtol": 1e-3, "atol": 1e-5}  # noqa: E731
    for p_a, p_e in zip(model_a.parameters(), model_e.parameters()):
        torch.testing.assert_close(p_a, p_e, **tol(p_e))
        for key in opt_e.state[p_e]:
            torch.testing.assert_close(opt_a.state[p_a][key], opt_e.state[p_e][key], **tol(p_e))


def _run(kind, foreach, layers=3, steps=STEPS, between=None):
    """Eager and compiled optimizer steps on equal gradients; the compiled steps' new graphs."""
    # Each run compiles as a first compile: optimize("cpp") made again shares the earlier run's
    # callback, cache entries and the sizes they saw (as torch.compile does), so without a reset
    # another run's parameter sizes at the same sources would make this one's sizes symbolic
    minidynamo.reset()
    (model_e, opt_e), (model_c, opt_c) = _setup(kind, foreach, layers), _setup(kind, foreach, layers)
    before = set(map(id, perf._graphs))

    compiled = minidynamo.optimize("cpp")(lambda: optimizer_step(opt_c))
    torch.manual_seed(1)
    for i in range(steps):
        if between is not None and i == steps // 2:
            between(model_e, opt_e), between(model_c, opt_c)
        x = torch.randn(5, 4)
        for model in (model_e, model_c):
            model(x).backward()
        optimizer_step(opt_e)
        compiled()
    _assert_same(model_c, opt_c, model_e, opt_e)
    assert minidynamo.stats()["backend_fallbacks"] == 0, list(counters.fallbacks)
    written = [g for g in perf._graphs if id(g) not in before and getattr(g, "writes_inputs", None)]
    assert written, "no compiled graph wrote the parameters"
    return written


def _loops(source: str) -> int:
    return len(re.findall(r"for \(int64_t [pr]\w* = 0;", source))  # not the loop over a table


@pytest.mark.parametrize("kind,foreach", KINDS, ids=IDS)
def test_multi_tensor_update_equals_eager_with_one_loop_per_update_class(kind, foreach):
    graphs = _run(kind, foreach)
    assert any(_loops(g.source) for g in graphs)
    if foreach and kind != "sgd":
        # foreach Adam(W) decomposes to the same updates, but its last loop per parameter reads
        # values earlier loops of the kernel wrote to memory: only the others are shared so far
        assert all(g.source.count(HELPER) >= 2 for g in graphs if _loops(g.source))
        return
    for g in graphs:
        # 8 parameters, 6 float32 and 2 float64 (weights and biases update alike): each loop is a
        # function written once per class (a dtype, and for SGD momentum and update), never per
        # parameter
        assert _loops(g.source) == g.source.count(HELPER) <= 4, g.source


@pytest.mark.parametrize("kind,foreach", [("adamw", False), ("sgd", True)])
def test_multi_tensor_source_does_not_grow_with_the_parameter_count(kind, foreach):
    small, large = _run(kind, foreach, layers=2, steps=2), _run(kind, foreach, layers=6, steps=2)
    assert sorted(_loops(g.source) for g in small) == sorted(_loops(g.source) for g in large)
    kernels = re.compile(rf"{re.escape(HELPER)}\w+\(.*?\n}}\n", re.S)

    def shared(g):  # the functions written once per class, up to their buffer numbering
        return [re.sub(r"\b(buf|in|kernel)\d+", r"\1", k) for k in kernels.findall(g.source)]
    assert sorted(map(shared, small)) == sorted(map(shared, large))


def test_multi_tensor_update_after_adding_a_param_group():
    def add_group(model, opt):
        torch.manual_seed(2)
        model.extra = torch.nn.Linear(4, 3)
        opt.add_param_group({"params": model.extra.parameters(), "lr": 0.01})

    graphs = _run("adamw", False, steps=6, between=add_group)
    assert max(g.source.count(HELPER) for g in graphs) >= 2
