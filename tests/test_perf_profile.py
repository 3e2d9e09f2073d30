"""minidynamo.profile and the `perf` log channel: per-step times of compiled cpp graphs, forward and
backward, with results unchanged by the instrumentation; extern calls with list arguments are
called directly by the generated wrapper."""
import torch
import torch.nn as nn

import minidynamo
from minidynamo import perf


def _model_and_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    x = torch.randn(5, 8)
    # flip runs as an extern call (the products run inside kernel groups); the loss is unchanged
    compiled = minidynamo.optimize("cpp")(lambda x: torch.flip(model(x), [0]))

    def step():
        loss = compiled(x).pow(2).mean()
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        return loss.detach(), grads
    return model, x, step


def test_profile_reports_forward_and_backward_steps_and_keeps_results():
    model, x, step = _model_and_step()
    loss, grads = step()
    report = minidynamo.profile(step, repeat=3, warmup=1, show=False)
    names = [name for name, _, _ in report.graphs]
    assert any(n.startswith("forward graph") for n in names)
    assert any(n.startswith("backward graph") for n in names)
    categories = {label.split(":")[0] for _, _, label in report.steps}
    assert {"kernel", "extern"} <= categories
    assert any(op == "aten.flip.default" for _, _, op in report.externs)
    assert report.total_ms > 0 and report.calls == 3
    assert "outside compiled graphs" in str(report)
    # instrumentation is switched off again, and results equal the uninstrumented ones
    assert all(g.run.__code__ is g._plain_code for g in perf._graphs if hasattr(g, "_plain_code"))
    loss2, grads2 = step()
    torch.testing.assert_close(loss2, loss)
    for a, b in zip(grads2, grads):
        torch.testing.assert_close(a, b)
    # same as eager
    eager = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    eager.load_state_dict(model.state_dict())
    torch.testing.assert_close(eager(x).pow(2).mean(), loss)


def test_perf_channel_instruments_graphs_and_logs_totals(capsys):
    first = perf.new_number()
    minidynamo.set_logs("perf")
    try:
        model, x, step = _model_and_step()
        step()
        step()
        graphs = [g for g in perf._graphs if g.times.number > first]
        assert {g.times.role for g in graphs} >= {"forward", "backward"}
        assert all(g.times.calls == 2 for g in graphs)
        perf._log_totals()
        err = capsys.readouterr().err
        assert "[minidynamo.perf]" in err and "forward graph" in err and "extern" in err
    finally:
        minidynamo.set_logs()
    assert all(g.run.__code__ is g._plain_code for g in perf._graphs if hasattr(g, "_plain_code"))


def test_extern_with_list_arguments_is_called_directly():
    from minidynamo.codegen.cpp_pipeline import compile_cpp_graph

    def f(z, idx, v):
        return z.index_put((idx,), v.exp()) * 2  # accumulating ones run in the kernel group

    args = [torch.zeros(10, 3), torch.tensor([1, 4, 2]), torch.randn(3, 3)]
    g = compile_cpp_graph(torch.fx.symbolic_trace(f), args)
    torch.testing.assert_close(g(*args), f(*args))
    assert "index_put" in str([s.fn for s in g.steps if hasattr(s, "fn")])
    assert "({'" not in g.pycode  # not through the environment-dict helper (fx's immutable_list)
