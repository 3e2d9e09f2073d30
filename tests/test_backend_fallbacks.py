"""Every graph (or call) the cpp/triton code generators leave to eager torch is counted in stats()
and named, with why, by explain(backend=...) and the `fallbacks` log channel; the benchmark models
compile with none, inside aot_autograd too."""
import logging

import pytest
import torch

import minidynamo
from benchmarks import models
from minidynamo.counters import fallbacks
from test_codegen_backends import backend, cache_dir  # noqa: F401  (fixtures)
from test_cpp_backend import assert_close


@pytest.fixture(autouse=True)
def _fresh():
    minidynamo.reset()
    yield
    minidynamo.reset()


def _fallback_count() -> int:
    return minidynamo.stats()["backend_fallbacks"]


@pytest.mark.parametrize("name", list(models.MODELS))
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_benchmark_models_compile_with_no_fallback(name, train, cache_dir):  # noqa: F811
    model, inputs = models.build(name)
    model.train(train)
    expected_model, _ = models.build(name)
    expected_model.train(train)
    compiled = minidynamo.compile(model, backend="cpp")
    with torch.set_grad_enabled(train):
        out, expected = compiled(inputs[0]), expected_model(inputs[0])
        assert_close(models.main_tensor(out), models.main_tensor(expected))
        if train:
            models.main_tensor(out).float().square().mean().backward()
            models.main_tensor(expected).float().square().mean().backward()
            for p, q in zip(model.parameters(), expected_model.parameters()):
                assert_close(p.grad, q.grad)
    for b, c in zip(model.buffers(), expected_model.buffers()):  # batch norm's running statistics
        assert_close(b, c)
    assert _fallback_count() == 0, list(fallbacks)


def test_batch_norm_updating_running_stats_without_grad_is_a_counted_fallback(cache_dir):  # noqa: F811
    bn, expected = torch.nn.BatchNorm1d(3).train(), torch.nn.BatchNorm1d(3).train()
    x = torch.randn(8, 3)
    with torch.no_grad():
        assert_close(minidynamo.compile(bn, backend="cpp")(x), expected(x))
    assert_close(bn.running_mean, expected.running_mean)
    assert _fallback_count() == 1
    assert "mutates its inputs" in str(fallbacks[-1])


def test_graph_calling_a_torch_func_transform_is_named_by_explain(backend):  # noqa: F811
    def fn(x):
        return torch.func.grad(lambda y: (y.sin() * 2).sum())(x)

    x = torch.randn(5)
    report = minidynamo.explain(fn, backend=backend)(x)
    assert [f.reason for f in report.backend_fallbacks] == ["a subgraph run under checkpoint or a torch.func transform"]
    assert report.backend_fallbacks[0].backend == backend
    assert "--- run eagerly by the backend ---" in str(report)
    assert minidynamo.explain(fn)(x).backend_fallbacks == []  # no backend: nothing is compiled


def test_graph_compiled_inside_a_torch_func_transform_is_counted(backend):  # noqa: F811
    compiled = minidynamo.compile(lambda y: (y.cos() * 3).sum(), backend=backend)
    x = torch.randn(4)
    torch.testing.assert_close(torch.func.grad(compiled)(x), -3 * x.sin())
    assert [f.reason for f in fallbacks] == ["traced inside a torch.func transform"]


def test_explain_with_a_backend_reports_no_fallback_when_there_is_none(backend):  # noqa: F811
    report = minidynamo.explain(lambda x: (x * 2).relu(), backend=backend)(torch.randn(4))
    assert report.graph_count == 1 and report.backend_fallbacks == []
    assert "run eagerly by the backend" not in str(report)


def test_each_call_needing_gradients_of_a_graph_compiled_without_them_is_counted(backend):  # noqa: F811
    from minidynamo.backends import lookup_backend

    gm = torch.fx.symbolic_trace(lambda a: (a * 3).tanh())
    x = torch.randn(2, 3)
    compiled = lookup_backend(backend)(gm, [x])  # no input needs gradients: compiled for inference
    assert_close(compiled(x), (x * 3).tanh())
    assert _fallback_count() == 0
    x.requires_grad_(True)
    compiled(x).sum().backward()  # needs the autograd history only eager records
    assert_close(x.grad, 3 * (1 - (x.detach() * 3).tanh() ** 2))
    assert _fallback_count() == 1
    assert "called with inputs that need them" in str(fallbacks[-1])


def test_an_input_laid_out_otherwise_than_compiled_for_is_counted_where_it_runs_eagerly(backend):  # noqa: F811
    from test_codegen_backends import graph_compiler

    x = torch.randn(4, 6)
    gm = torch.fx.symbolic_trace(lambda a: a[:, :2])  # the output is a view of the input
    compiled = graph_compiler(backend)(gm, [x])
    xt = torch.randn(6, 4).t()
    assert torch.equal(compiled(xt), xt[:, :2])
    assert "laid out" in str(fallbacks[-1])


def test_fallbacks_are_logged_on_their_channel_and_cleared_by_reset(backend, caplog, capsys):  # noqa: F811
    def fn(x):
        return torch.func.grad(lambda y: y.sin().sum())(x)

    with caplog.at_level(logging.INFO, logger="minidynamo.fallbacks"):
        minidynamo.explain(fn, backend=backend)(torch.randn(3))
    minidynamo.set_logs("fallbacks")
    try:
        minidynamo.explain(fn, backend=backend)(torch.randn(3))
    finally:
        minidynamo.set_logs()
    assert "[minidynamo.fallbacks]" in capsys.readouterr().err
    assert "ran a graph eagerly: a subgraph run under checkpoint or a torch.func transform" in caplog.text
    minidynamo.compile(lambda x: torch.func.grad(lambda y: y.sin().sum())(x), backend=backend)(torch.randn(3))
    assert _fallback_count() >= 1
    minidynamo.reset()
    assert _fallback_count() == 0 and len(fallbacks) == 0
