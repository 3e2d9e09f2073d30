"""torch.nn's own modules compile to one graph with no break, and match eager on every backend."""
import copy

import pytest
import torch
from torch import nn

import minidynamo


def flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for item in out for t in flat(item)]


MODULES = {
    "transformer_layer": (lambda: nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True),
                          lambda: (torch.randn(2, 5, 32),)),
    "lstm": (lambda: nn.LSTM(8, 16, batch_first=True), lambda: (torch.randn(2, 5, 8),)),
    "gru_cell": (lambda: nn.GRUCell(8, 16), lambda: (torch.randn(3, 8),)),
    "multihead_attention": (lambda: nn.MultiheadAttention(16, 2, batch_first=True), lambda: (torch.randn(2, 4, 16),) * 3),
    "convnet": (lambda: nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                      nn.Flatten(), nn.Linear(8, 2)), lambda: (torch.randn(2, 3, 16, 16),)),
}


@pytest.mark.parametrize("name", list(MODULES))
@pytest.mark.parametrize("backend", ["eager", "cpp"])
def test_module_one_graph_matches_eager(name, backend, tmp_path, monkeypatch):
    monkeypatch.setenv("MINIDYNAMO_CACHE_DIR", str(tmp_path))
    make_module, make_inputs = MODULES[name]
    torch.manual_seed(0)
    module, inputs = make_module().eval(), make_inputs()
    with torch.no_grad():
        expected = module(*inputs)
        report = minidynamo.explain(module)(*inputs)
        got = minidynamo.optimize(backend)(module)(*inputs)
    assert (report.graph_count, report.graph_break_count) == (1, 0), [str(r) for r in report.break_reasons]
    for a, b in zip(flat(got), flat(expected), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


RNNS = {
    "lstm_batch_first": (lambda: nn.LSTM(8, 16, batch_first=True), (2, 5, 8)),
    "lstm_2_layers_bidirectional": (lambda: nn.LSTM(8, 16, num_layers=2, bidirectional=True), (5, 3, 8)),
    "gru_batch_first": (lambda: nn.GRU(8, 16, batch_first=True), (2, 5, 8)),
    "rnn_relu": (lambda: nn.RNN(8, 16, nonlinearity="relu"), (5, 2, 8)),
}


@pytest.mark.parametrize("name", list(RNNS))
@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_recurrent_layers_run_through_the_code_generators(name, backend, tmp_path, monkeypatch):
    """Their graphs are lowered (not handed back to eager): the permuted input that
    `batch_first` produces must reach mkldnn's RNN kernel contiguous, as in eager."""
    if backend == "triton":
        pytest.importorskip("triton")
    monkeypatch.setenv("MINIDYNAMO_CACHE_DIR", str(tmp_path))
    from minidynamo.backends.registry import lookup_backend
    make_module, shape = RNNS[name]
    torch.manual_seed(0)
    module, x = make_module().eval(), torch.randn(shape)
    graphs = []

    def capture(gm, example_inputs):
        graphs.append((gm, example_inputs))
        return gm.forward

    with torch.no_grad():
        expected = module(x)
        minidynamo.optimize(capture)(module)(x)
        (gm, example_inputs), = graphs
        compiled = lookup_backend(backend)(gm, example_inputs)
        assert compiled is not gm.forward and hasattr(compiled, "compiled")
        got = compiled(*example_inputs)
    for a, b in zip(flat(got), flat(expected), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["lstm_batch_first", "gru_batch_first"])
def test_recurrent_layers_train_with_the_cpp_backend(name, tmp_path, monkeypatch):
    monkeypatch.setenv("MINIDYNAMO_CACHE_DIR", str(tmp_path))
    make_module, shape = RNNS[name]
    torch.manual_seed(0)
    module, x = make_module(), torch.randn(shape)
    twin = copy.deepcopy(module)
    module(x)[0].square().sum().backward()
    loss = minidynamo.optimize("cpp")(twin)(x)[0].square().sum()
    loss.backward()
    assert loss.requires_grad
    for p, q in zip(module.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad)
