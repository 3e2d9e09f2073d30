"""Real models of many architectures (benchmarks/zoo.py: decoder LMs with rotary embeddings, grouped-query
attention and mixture of experts, encoders, encoder-decoders, vision CNNs and ViT, speech), tiny and
random-init, in their default form (return_dict=True), in eval and in train (forward and backward):
one graph, no break, results equal to eager, and identical second and third calls compile nothing."""
import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from benchmarks import zoo  # noqa: E402
from translator_harness import (  # noqa: E402,F401
    REFERENCE, CompileCounter, explain, frames_compiled, fresh_dynamo, optimize)

NAMES = zoo.names()
# where torch.compile itself breaks: graphs it makes (torch 2.13), which ours may not exceed
TORCH_GRAPHS = {("wav2vec2", True): 7}  # training: requires_grad set on an activation, NumPy-drawn masks


def _tensors(out):
    return [t for t in out.to_tuple() if isinstance(t, torch.Tensor)]


def _run(model, args, kwargs, train):
    torch.manual_seed(7)  # the same dropout masks for eager and compiled calls
    np.random.seed(7)  # wav2vec2 draws its training masks from NumPy
    out = model(*args, **kwargs)
    if train:
        zoo.loss_of(out).backward()
    return out


def _grads(model):
    return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def _check_calls(name, train):
    model, args, kwargs = zoo.build(name, train)
    twin, _, _ = zoo.build(name, train)
    cnt = CompileCounter()
    compiled = optimize(cnt)(model)
    with torch.set_grad_enabled(train):
        for call in range(3):
            model.zero_grad(set_to_none=True)
            twin.zero_grad(set_to_none=True)
            before = frames_compiled()
            actual = _run(compiled, args, kwargs, train)
            if call > 0:
                assert frames_compiled() == before, f"call {call} compiled again"
            expected = _run(twin, args, kwargs, train)
            assert type(actual) is type(expected)
            assert list(actual.keys()) == list(expected.keys())
            for a, e in zip(_tensors(actual), _tensors(expected)):
                torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-5)
            if train:
                got, want = _grads(model), _grads(twin)
                assert got.keys() == want.keys()
                for key in want:
                    torch.testing.assert_close(got[key], want[key], rtol=1e-4, atol=1e-5, msg=key)


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("name", NAMES)
def test_model_matches_eager_and_settles(name, train):
    if REFERENCE and (name, train) == ("wav2vec2", True):
        pytest.skip("torch 2.13 draws wav2vec2's NumPy training masks from another generator than eager")
    _check_calls(name, train)


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("name", NAMES)
def test_model_is_one_graph(name, train):
    model, args, kwargs = zoo.build(name, train)
    with torch.set_grad_enabled(train):
        out = explain(model, *args, **kwargs)
    reasons = [str(r)[:400] for r in out.break_reasons]
    limit = TORCH_GRAPHS.get((name, train), 1)
    assert out.graph_count <= limit, f"{out.graph_count} graphs, {out.graph_break_count} breaks: {reasons[:5]}"
    if limit == 1:
        assert out.graph_break_count == 0, f"{out.graph_break_count} breaks: {reasons[:5]}"
