"""What the benchmarks run: tiny GPT-2 and BERT (random init, offline), a small CNN, and the systems.

GPT-2 and BERT come from `transformers` small configs when it is importable; otherwise from the
hand-written blocks below, which have the same layer structure. `SOURCE` says which one ran.
"""
from __future__ import annotations

import importlib.util
import math
from typing import Callable, Dict, List, Tuple

import torch
import torch.nn as nn

HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
SOURCE = "transformers" if HAVE_TRANSFORMERS else "hand-written (transformers not installed)"

VOCAB, SEQ, HIDDEN, LAYERS, HEADS = 1000, 32, 64, 2, 2


class _Attention(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.proj = nn.Linear(HIDDEN, HIDDEN)
        self.causal = causal

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(c // HEADS)
        if self.causal:
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
        out = scores.softmax(-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, t, c))


class _Block(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.causal = causal
        self.ln1, self.ln2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
        self.attn = _Attention(causal)
        self.mlp = nn.Sequential(nn.Linear(HIDDEN, 4 * HIDDEN), nn.GELU("tanh"), nn.Linear(4 * HIDDEN, HIDDEN))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.causal:  # GPT-2: pre-norm
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x))  # BERT: post-norm
        return self.ln2(x + self.mlp(x))


class _TinyTransformer(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, HIDDEN), nn.Embedding(SEQ, HIDDEN)
        self.blocks = nn.ModuleList(_Block(causal) for _ in range(LAYERS))
        self.head = nn.Linear(HIDDEN, VOCAB) if causal else None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(x) if self.head is not None else x


def tiny_gpt2() -> nn.Module:
    if not HAVE_TRANSFORMERS:
        return _TinyTransformer(causal=True)
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=LAYERS, n_head=HEADS, n_embd=HIDDEN, vocab_size=VOCAB, n_positions=SEQ,
                     bos_token_id=0, eos_token_id=0, attn_implementation="eager",
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(cfg)


def gpt2_layers(layers: int) -> nn.Module:
    """The tiny GPT-2 with `layers` blocks and no KV cache (with one, each block writes its own layer
    of the cache: a graph per block), regional compilation's case."""
    if not HAVE_TRANSFORMERS:
        raise RuntimeError("the regional-compilation cases need transformers")
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=layers, n_head=HEADS, n_embd=HIDDEN, vocab_size=VOCAB, n_positions=SEQ,
                     bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     use_cache=False)
    return GPT2LMHeadModel(cfg)


def tiny_bert() -> nn.Module:
    if not HAVE_TRANSFORMERS:
        return _TinyTransformer(causal=False)
    from transformers import BertConfig, BertModel

    cfg = BertConfig(num_hidden_layers=LAYERS, num_attention_heads=HEADS, hidden_size=HIDDEN,
                     intermediate_size=4 * HIDDEN, vocab_size=VOCAB, max_position_embeddings=SEQ,
                     attn_implementation="eager", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertModel(cfg, add_pooling_layer=False)


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(32, 10))


def _token_ids() -> List[torch.Tensor]:
    return [torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(0))]


def _images() -> List[torch.Tensor]:
    return [torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(0))]


def _hidden() -> List[torch.Tensor]:
    return [torch.randn(1, SEQ, HIDDEN, generator=torch.Generator().manual_seed(0))]


MODELS: Dict[str, Tuple[Callable[[], nn.Module], Callable[[], List[torch.Tensor]]]] = {
    "gpt2": (tiny_gpt2, _token_ids),
    "bert": (tiny_bert, _token_ids),
    "cnn": (small_cnn, _images),
    "gpt2_24": (lambda: gpt2_layers(24), _token_ids),
    "gpt2_block": (lambda: gpt2_layers(1).transformer.h[0], _hidden),
}


def build(name: str) -> Tuple[nn.Module, List[torch.Tensor]]:
    """A freshly seeded model (every build has the same weights; no dropout) and its inputs."""
    make_model, make_inputs = MODELS[name]
    torch.manual_seed(0)
    return make_model(), make_inputs()


def describe(name: str) -> str:
    return name if name == "cnn" else f"{name} ({SOURCE})"


def main_tensor(out: object) -> torch.Tensor:
    """The tensor a model call is judged by: logits / last hidden state / the tensor itself."""
    if isinstance(out, torch.Tensor):
        return out
    for key in ("logits", "last_hidden_state"):
        value = getattr(out, key, None)
        if isinstance(value, torch.Tensor):
            return value
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    raise TypeError(f"no tensor in model output {type(out).__name__}")


def check_close(got: object, expected: object) -> float:
    """Max abs error of the main tensors; raises AssertionError when they differ."""
    g, e = main_tensor(got).detach(), main_tensor(expected).detach()
    torch.testing.assert_close(g, e, rtol=1e-3, atol=1e-3)
    return float((g - e).abs().max()) if g.numel() else 0.0


def compile_with(system: str, fn: Callable) -> Callable:
    """`fn` (function or module) as `system` runs it: "eager", "minidynamo <backend>" or "torch <backend>"
    (with " regions": its repeated blocks compiled in place, by `regions="auto"` or by torch's
    `block.compile()` recipe)."""
    import minidynamo

    if system == "eager":
        return fn
    owner, backend = system.split(" ", 1)
    if owner == "minidynamo" and backend.endswith(" regions"):
        return minidynamo.compile(fn, backend=backend[:-len(" regions")], regions="auto")
    if owner == "minidynamo":
        return minidynamo.optimize(backend)(fn)
    if backend.endswith(" regions"):  # torch's recipe: each block compiled in place
        from minidynamo.regions import repeated_blocks

        for block in repeated_blocks(fn):
            block.compile(backend=backend[:-len(" regions")], dynamic=False)
        return fn
    return torch.compile(fn, backend=backend, dynamic=False)


def reset_all() -> None:
    import minidynamo

    minidynamo.reset()
    torch._dynamo.reset()
