"""Greedy `model.generate()` with a compiled `forward` (issue 15, Generation): tiny random-init decoder LMs
(learned positions, rotary, mixture of experts) and an encoder-decoder from benchmarks/zoo.py make the
same 20 tokens as eager while the KV cache grows, in at most 3 compiles (a static first step, then the
sequence dimension made dynamic), and a second identical generate compiles nothing. With
MINIDYNAMO_TEST_REFERENCE=torch the same checks run against torch.compile."""
import pytest
import torch

pytest.importorskip("transformers")

from benchmarks import zoo  # noqa: E402
from translator_harness import REFERENCE, frames_compiled, reset  # noqa: E402

if REFERENCE:
    compile_forward = torch.compile
else:
    import minidynamo

    compile_forward = minidynamo.compile

NEW_TOKENS = 20
MAX_COMPILES = 3
PAD = 1  # the zoo's pad token


@pytest.fixture(autouse=True)
def default_dynamo():
    """Empty caches before and after, and the compiler's default settings (the harness's fixture
    makes the reference specialise every size, which generation must not)."""
    reset()
    yield
    reset()


def _prompt(batch: int):
    """Token ids and generate() arguments; in a batch of 2 the second prompt is left-padded."""
    ids = torch.randint(3, zoo.VOCAB, (batch, 6), generator=torch.Generator().manual_seed(3))
    kwargs = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=PAD)
    if batch == 2:
        mask = torch.ones_like(ids)
        mask[1, :2] = 0
        ids[1, :2] = PAD
        kwargs["attention_mask"] = mask
    return ids, kwargs


def _check_generate(name: str, batch: int) -> None:
    model, _, _ = zoo.build(name)
    ids, kwargs = _prompt(batch)
    with torch.no_grad():
        expected = model.generate(ids, **kwargs)
        model.forward = compile_forward(model.forward, backend="eager")
        before = frames_compiled()
        first = model.generate(ids, **kwargs)
        compiled = frames_compiled() - before
        second = model.generate(ids, **kwargs)
    prompt = 1 if model.config.is_encoder_decoder else ids.shape[1]  # a decoder starts from its start token
    assert expected.shape[1] == prompt + NEW_TOKENS
    assert torch.equal(first, expected)
    assert torch.equal(second, expected)
    assert 1 <= compiled <= MAX_COMPILES, f"{compiled} compiles for {NEW_TOKENS} tokens"
    assert frames_compiled() == before + compiled, "the second generate compiled again"


@pytest.mark.parametrize("name", ["gpt2", "llama", "opt", "mixtral", "bart"])
def test_greedy_generate_matches_eager(name):
    _check_generate(name, batch=1)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_padded_batch_generate_matches_eager(name):
    _check_generate(name, batch=2)
