"""Tiny random-init `transformers` models of many architectures in their default form (return_dict=True)."""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Tuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

VOCAB = 128
_SIZES = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=VOCAB,
              max_position_embeddings=64)
_SEQ2SEQ = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=VOCAB, pad_token_id=1, bos_token_id=0,
                eos_token_id=2, decoder_start_token_id=0)
_VISION = {k: v for k, v in _SIZES.items() if k not in ("vocab_size", "max_position_embeddings")}


def _ids(batch: int = 2, length: int = 8, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def _images() -> torch.Tensor:
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def _configs(T: Any) -> Dict[str, Tuple[str, Callable[[], Any], Callable[[], Tuple[tuple, dict]]]]:
    """name -> (family, model factory, inputs factory returning (args, kwargs))."""
    text = lambda: ((_ids(),), {})  # noqa: E731
    seq2seq = lambda: ((_ids(),), {"decoder_input_ids": _ids(2, 5, seed=2)})  # noqa: E731
    return {
        "llama": ("decoder LM, rotary, grouped-query attention",
                  lambda: T.LlamaForCausalLM(T.LlamaConfig(**_SIZES, num_key_value_heads=2)), text),
        "qwen2": ("decoder LM, rotary, grouped-query attention",
                  lambda: T.Qwen2ForCausalLM(T.Qwen2Config(**_SIZES, num_key_value_heads=2)), text),
        "mixtral": ("decoder LM, mixture of experts", lambda: T.MixtralForCausalLM(T.MixtralConfig(
            **_SIZES, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2)), text),
        "phi": ("decoder LM, partial rotary", lambda: T.PhiForCausalLM(T.PhiConfig(**_SIZES)), text),
        "gpt2": ("decoder LM, learned positions", lambda: T.GPT2LMHeadModel(T.GPT2Config(
            n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=64, bos_token_id=0, eos_token_id=0)), text),
        "opt": ("decoder LM", lambda: T.OPTForCausalLM(T.OPTConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128, vocab_size=VOCAB,
            max_position_embeddings=64, word_embed_proj_dim=64)), text),
        "bert": ("encoder", lambda: T.BertModel(T.BertConfig(**_SIZES)), text),
        "roberta": ("encoder", lambda: T.RobertaModel(T.RobertaConfig(**_SIZES, pad_token_id=1)), text),
        "distilbert": ("encoder", lambda: T.DistilBertModel(T.DistilBertConfig(
            dim=64, n_layers=2, n_heads=4, hidden_dim=128, vocab_size=VOCAB)), text),
        "albert": ("encoder, shared layers", lambda: T.AlbertModel(T.AlbertConfig(**_SIZES, embedding_size=32)), text),
        "t5": ("encoder-decoder, relative positions", lambda: T.T5ForConditionalGeneration(T.T5Config(
            d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16, vocab_size=VOCAB)), seq2seq),
        "bart": ("encoder-decoder", lambda: T.BartForConditionalGeneration(T.BartConfig(
            **_SEQ2SEQ, max_position_embeddings=64)), seq2seq),
        "vit": ("vision transformer", lambda: T.ViTModel(T.ViTConfig(**_VISION, image_size=32, patch_size=8)),
                lambda: ((_images(),), {})),
        "resnet": ("vision CNN", lambda: T.ResNetModel(T.ResNetConfig(
            embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1])), lambda: ((_images(),), {})),
        "convnext": ("vision CNN", lambda: T.ConvNextModel(T.ConvNextConfig(
            hidden_sizes=[16, 32], depths=[1, 1], num_stages=2)), lambda: ((_images(),), {})),
        "wav2vec2": ("speech encoder", lambda: T.Wav2Vec2Model(T.Wav2Vec2Config(
            **{k: v for k, v in _SIZES.items() if k != "max_position_embeddings"}, conv_dim=(16, 16),
            conv_stride=(5, 4), conv_kernel=(10, 8), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)),
            lambda: ((torch.randn(2, 800, generator=torch.Generator().manual_seed(1)),), {})),
        "whisper": ("speech encoder-decoder", lambda: T.WhisperModel(T.WhisperConfig(
            **_SEQ2SEQ, num_mel_bins=16, max_source_positions=32, max_target_positions=32)),
            lambda: ((torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(1)),),
                     {"decoder_input_ids": _ids(2, 5, seed=2)})),
    }


def names() -> list:
    import transformers

    return list(_configs(transformers))


def family(name: str) -> str:
    import transformers

    return _configs(transformers)[name][0]


class _Deterministic:
    """`transformers` whose configs have every dropout, layer drop and training mask at probability 0."""

    def __init__(self, transformers: Any) -> None:
        self.transformers = transformers

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.transformers, name)
        if not name.endswith("Config"):
            return found

        def config(**kwargs: Any) -> Any:
            cfg = found(**kwargs)
            for key, value in vars(cfg).items():
                if isinstance(value, float) and ("drop" in key or (key.startswith("mask_") and key.endswith("_prob"))):
                    setattr(cfg, key, 0.0)
            return cfg
        return config


def build(name: str, train: bool = False, random: bool = True) -> Tuple[torch.nn.Module, tuple, dict]:
    """A freshly seeded model (every build has the same weights) in train or eval mode, and its inputs;
    `random=False`: without dropout or random training masks (a training step is then a function of
    the weights and inputs alone, comparable between systems)."""
    import transformers

    _, make_model, make_inputs = _configs(transformers if random else _Deterministic(transformers))[name]
    torch.manual_seed(0)
    model = make_model().train(train)
    args, kwargs = make_inputs()
    return model, args, kwargs


def loss_of(out: Any) -> torch.Tensor:
    """A scalar to train on: the sum of the output's first tensor (logits or last hidden state)."""
    first = out.to_tuple()[0] if hasattr(out, "to_tuple") else out[0]
    return first.float().pow(2).mean()
