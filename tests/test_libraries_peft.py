"""Libraries beyond transformers, peft: LoRA and IA3 adapters on tiny transformers decoders and an
encoder, compared with eager in eval and with gradients, in one graph (as with torch._dynamo,
`MINIDYNAMO_TEST_REFERENCE=torch`). A LoRA layer asks `adapter in self.lora_A.keys()` on every
call, inside the with block of peft's generator context manager."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

from translator_harness import REFERENCE, CompileCounter, explain, fresh_dynamo, optimize  # noqa: E402,F401

VOCAB = 128


def _llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, vocab_size=VOCAB))


def _gpt2():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=VOCAB, n_positions=32))


def _bert():
    return transformers.BertForSequenceClassification(transformers.BertConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
        vocab_size=VOCAB, max_position_embeddings=32))


CASES = {
    "lora_llama": (_llama, lambda: peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"])),
    "lora_gpt2": (_gpt2, lambda: peft.LoraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True)),
    "lora_llama_dropout_mlp": (_llama, lambda: peft.LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["gate_proj", "up_proj", "down_proj"])),
    "ia3_bert": (_bert, lambda: peft.IA3Config(target_modules=["key", "value", "output.dense"],
                                                feedforward_modules=["output.dense"], task_type="SEQ_CLS")),
}


def _model(name, train):
    build, config = CASES[name]
    torch.manual_seed(0)
    model = peft.get_peft_model(build(), config())
    for n, p in model.named_parameters():  # adapters start as the identity: make them count
        if "lora_B" in n or "ia3_l" in n:
            torch.nn.init.normal_(p, 1.0, 0.1)
    return model.train(train)


def _ids():
    return torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", sorted(CASES))
def test_eval_matches_eager_in_one_graph(name):
    model, ids = _model(name, False), _ids()
    with torch.no_grad():
        expected = model(ids).logits
        counter = CompileCounter()
        compiled = optimize(counter)(model)
        for _ in range(3):
            torch.testing.assert_close(compiled(ids).logits, expected, rtol=1e-4, atol=1e-5)
    assert counter.frame_count == 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_adapter_gradients_match_eager(name):
    model, ids = _model(name, True), _ids()
    torch.manual_seed(2)  # dropout draws the same masks in both runs
    model(ids).logits.square().mean().backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert expected, "the adapters are trainable"
    model.zero_grad(set_to_none=True)
    counter = CompileCounter()
    torch.manual_seed(2)
    optimize(counter)(model)(ids).logits.square().mean().backward()
    got = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert got.keys() == expected.keys()
    for n in expected:
        torch.testing.assert_close(got[n], expected[n], rtol=1e-3, atol=1e-5)
    assert counter.frame_count == 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_graph_break(name):
    with torch.no_grad():
        out = explain(_model(name, False), _ids())
    assert (out.graph_count, out.graph_break_count) == (1, 0), out.break_reasons


def test_disabling_the_adapter_is_seen():
    model, ids = _model("lora_llama", False), _ids()
    compiled = optimize(CompileCounter())(model)
    with torch.no_grad():
        with_adapter = compiled(ids).logits
        with model.disable_adapter():
            without = compiled(ids).logits
            torch.testing.assert_close(without, model(ids).logits)
        torch.testing.assert_close(compiled(ids).logits, with_adapter)
    assert not torch.allclose(with_adapter, without)
