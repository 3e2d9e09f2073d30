"""A graph break at a call of the frame's own code that recorded nothing before it raised
(`.backward()`, a disabled function) ends the first trace there instead of tracing the frame again
(InstructionTranslator.end_before_failed_call): the same graphs, guards, generated code and results
as the second trace gives, one trace instead of two. Calls that recorded something are traced again."""
import dis

import pytest
import torch

import minidynamo
from minidynamo import convert_frame
from minidynamo.guards import render_source
from minidynamo.symbolic_convert import InstructionTranslator


@minidynamo.disable
def disabled_scale(t, factor=1.0):
    return t * factor


def step(model, x):
    loss = model(x).pow(2).mean()
    loss.backward()
    y = disabled_scale(x, factor=2.0)
    return loss.detach() + y.sum()


def helper_then_break(x):
    y = x.sin() + 1
    print("", end="")
    return y


def inlined_break(x):
    return helper_then_break(x * 2).cos()


def compile_and_record(fn, args, monkeypatch, retrace: bool):
    """Results, per converted frame (break reasons, graph code, guards, generated opnames), traces run."""
    minidynamo.reset()
    if retrace:
        monkeypatch.setattr(InstructionTranslator, "end_before_failed_call", lambda self, error: False)
    records, traces = [], []
    original = convert_frame.ConvertFrame.trace
    monkeypatch.setattr(convert_frame.ConvertFrame, "trace",
                        lambda self, *a: traces.append(a[1]) or original(self, *a))
    monkeypatch.setattr(convert_frame, "compile_listeners", [records.append])
    result = minidynamo.compile(fn, backend="eager")(*args)
    frames = [([r.msg for r in rec.break_reasons], [g.code for g in rec.graphs], render_source(rec.check.guards),
               [i.opname for i in dis.get_instructions(rec.transformed_code)]) for rec in records]
    monkeypatch.undo()
    return result, frames, traces


def test_backward_and_disabled_call_trace_once_and_match_a_second_trace(monkeypatch):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
    x = torch.randn(5, 4)
    expected = step(model, x)
    want = [p.grad.clone() for p in model.parameters()]
    runs = []
    for retrace in (False, True):
        model.zero_grad(set_to_none=True)
        out, frames, traces = compile_and_record(step, (model, x), monkeypatch, retrace)
        torch.testing.assert_close(out, expected)
        for p, g in zip(model.parameters(), want):
            torch.testing.assert_close(p.grad, g)
        runs.append((frames, traces))
    (frames, traces), (frames_again, traces_again) = runs
    assert frames == frames_again
    reasons = [r for reasons, *_ in frames for r in reasons]
    assert reasons == ["calling .backward() inside a compiled region",
                       f"a call to {disabled_scale.__qualname__} (compiling disabled by a disable() wrapper)"]
    assert all(b is None for b in traces), traces  # every frame traced once
    assert len([b for b in traces_again if b is not None]) == 2  # the other way: each break traced again


def test_a_call_that_recorded_ops_before_breaking_is_traced_again(monkeypatch):
    x = torch.randn(6)
    out, frames, traces = compile_and_record(inlined_break, (x,), monkeypatch, retrace=False)
    torch.testing.assert_close(out, inlined_break(x))
    assert traces[:2] == [None, traces[1]] and traces[1] is not None  # the caller's frame: a second trace
    out_again, frames_again, _ = compile_and_record(inlined_break, (x,), monkeypatch, retrace=True)
    assert frames == frames_again


@pytest.mark.parametrize("grad", [True, False])
def test_break_under_grad_mode_switch_keeps_eager_mode(grad, monkeypatch):
    def fn(x):
        with torch.set_grad_enabled(grad):
            y = x * 3
            z = disabled_scale(y)
        return z + torch.is_grad_enabled()

    x = torch.randn(3, requires_grad=True)
    out, frames, _ = compile_and_record(fn, (x,), monkeypatch, retrace=False)
    torch.testing.assert_close(out, fn(x))
    assert out.requires_grad == fn(x).requires_grad
    assert torch.is_grad_enabled()
    _, frames_again, _ = compile_and_record(fn, (x,), monkeypatch, retrace=True)
    assert frames == frames_again
