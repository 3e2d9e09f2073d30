"""Libraries beyond transformers (benchmarks/libraries.py): diffusers, peft, einops, kornia, MONAI,
torchmetrics, torch-geometric, gpytorch, as a user compiles them. Each is compared with eager in eval
and with gradients (modules in train mode), and its graph count is pinned: minidynamo's, and torch._dynamo's
in reference mode (`MINIDYNAMO_TEST_REFERENCE=torch`). A library that is not installed is skipped;
`make test`'s set-up installs them all."""
import pytest
import torch

from benchmarks import libraries
from translator_harness import REFERENCE, CompileCounter, explain, fresh_dynamo, optimize  # noqa: F401

# name: graphs with minidynamo and with torch._dynamo 2.13 (the same where not said)
GRAPHS = {
    **{name: (1, 1) for name in libraries.WORKLOADS},
    "monai_dice_loss": (2, 2),  # Tensor.tolist() of the reduced dims breaks both
    "pyg_gcn": (4, 4),  # nonzero (a data-dependent shape) breaks both
    "pyg_gat": (3, 3),
    "gpytorch_exact_mll": (18, 18),  # linear operators: both break at each
}


def _build(name, train=False):
    pytest.importorskip(libraries.WORKLOADS[name].library)
    return libraries.build(name, train)


def _close(got, expected, tol=1e-4):
    torch.testing.assert_close(got, expected, rtol=tol, atol=1e-5)


@pytest.mark.parametrize("name", sorted(libraries.WORKLOADS))
def test_eval_matches_eager_with_the_pinned_graph_count(name):
    fn, args = _build(name)
    output = libraries.WORKLOADS[name].output
    with torch.no_grad():
        expected = output(fn(*args))
        counter = CompileCounter()
        compiled = optimize(counter)(fn)
        for _ in range(3):
            _close(output(compiled(*args)), expected)
    assert counter.frame_count == GRAPHS[name][1 if REFERENCE else 0]


@pytest.mark.parametrize("name", sorted(libraries.WORKLOADS))
def test_gradients_match_eager(name):
    fn, args = _build(name, train=True)
    output = libraries.WORKLOADS[name].output
    params = [p for p in fn.parameters() if p.requires_grad] if hasattr(fn, "parameters") else []
    leaves = [a.clone().requires_grad_() if a.is_floating_point() else a for a in args]
    wrt = [a for a in leaves if a.requires_grad] + params

    def grads(run):
        torch.manual_seed(2)  # dropout draws the same masks in both runs
        loss = output(run(*leaves)).float().square().mean()
        return torch.autograd.grad(loss, wrt, allow_unused=True)

    expected = grads(fn)
    got = grads(optimize(CompileCounter())(fn))
    assert any(e is not None for e in expected)
    for g, e in zip(got, expected):
        assert (g is None) == (e is None)
        if e is not None:
            _close(g, e, tol=1e-3)


@pytest.mark.parametrize("name", sorted(n for n, graphs in GRAPHS.items() if graphs == (1, 1)))
def test_no_graph_break(name):
    fn, args = _build(name)
    with torch.no_grad():
        out = explain(fn, *args)
    assert (out.graph_count, out.graph_break_count) == (1, 0), out.break_reasons


def test_disabling_a_peft_adapter_is_seen():
    model, (ids,) = _build("peft_lora_llama")
    compiled = optimize(CompileCounter())(model)
    with torch.no_grad():
        with_adapter = compiled(ids).logits
        with model.disable_adapter():
            without = compiled(ids).logits
            _close(without, model(ids).logits)
        _close(compiled(ids).logits, with_adapter)
    assert not torch.allclose(with_adapter, without)
