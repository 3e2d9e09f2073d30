"""Real models: GPT-2 and BERT from Hugging Face transformers, small random-init configs, offline.

Compiled outputs must equal eager; the acceptance target is one graph and no graph break per model
(asserted with explain).  Skipped when transformers is not installed.
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip("transformers")

from translator_harness import REFERENCE, CompileCounter, explain, optimize, fresh_dynamo  # noqa: E402,F401

VOCAB = 128


def _gpt2(lm_head=False):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=VOCAB, n_positions=32,
                                     bos_token_id=0, eos_token_id=0)
    cls = transformers.GPT2LMHeadModel if lm_head else transformers.GPT2Model
    return cls(config).eval()


def _bert():
    torch.manual_seed(0)
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                                     intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=32)
    return transformers.BertModel(config).eval()


def _input_ids():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, VOCAB, (2, 8), generator=g)


MODELS = {
    "gpt2": (_gpt2, "last_hidden_state"),
    "gpt2_lm_head": (lambda: _gpt2(lm_head=True), "logits"),
    "bert": (_bert, "last_hidden_state"),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_eager(name):
    build, field = MODELS[name]
    model = build()
    ids = _input_ids()
    cnt = CompileCounter()
    compiled = optimize(cnt)(model)
    with torch.no_grad():
        expected = model(ids)
        for _ in range(2):
            actual = compiled(ids.clone())
            torch.testing.assert_close(getattr(actual, field), getattr(expected, field))
            assert type(actual) is type(expected)
    assert torch.is_grad_enabled()


@pytest.mark.skipif(REFERENCE, reason="graph and break counts are minidynamo's")
@pytest.mark.parametrize("name", list(MODELS))
def test_model_one_graph_no_breaks(name):
    build, field = MODELS[name]
    model = build()
    ids = _input_ids()
    with torch.no_grad():
        out = explain(model, ids)
    reasons = [str(r) for r in out.break_reasons]
    assert out.graph_break_count == 0, f"{out.graph_break_count} breaks: {reasons}"
    assert out.graph_count == 1, f"{out.graph_count} graphs"
