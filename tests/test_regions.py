"""Regional compilation: `minidynamo.compile(model, regions="auto")` compiles the repeated blocks of a
model in place, once per block class, with results, gradients and later changes to one block as eager."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import minidynamo
from minidynamo.regions import repeated_blocks
from minidynamo.testing import CompileCounter


class MLPBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 16)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class AttentionBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.qkv = nn.Linear(16, 48)
        self.out = nn.Linear(16, 16)
        self.mlp = MLPBlock()  # a block inside a block: compiled with it, not on its own

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        x = x + self.out(F.scaled_dot_product_attention(q, k, v, is_causal=True))
        return self.mlp(x)


class ConvBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(16, 16, 3, padding=1)
        self.norm = nn.BatchNorm1d(16)

    def forward(self, x):
        return F.relu(self.norm(self.conv(x))) + x


class Stack(nn.Module):
    def __init__(self, block, n=32, seq=False):
        super().__init__()
        self.embed = nn.Linear(16, 16)
        blocks = [block() for _ in range(n)]
        self.blocks = nn.Sequential(*blocks) if seq else nn.ModuleList(blocks)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        x = self.embed(x)
        if isinstance(self.blocks, nn.Sequential):
            x = self.blocks(x.transpose(1, 2).contiguous()).transpose(1, 2)  # each block gets a dense input
        else:
            for block in self.blocks:
                x = block(x)
        return self.head(x)


ARCHS = {"mlp": (MLPBlock, False), "attention": (AttentionBlock, False), "conv": (ConvBlock, True)}


def _pair(arch, train):
    """The same model twice (one stays eager), in train or eval mode."""
    block, seq = ARCHS[arch]
    torch.manual_seed(0)
    eager = Stack(block, seq=seq).train(train)
    torch.manual_seed(0)
    return eager, Stack(block, seq=seq).train(train)


def _x():
    return torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_32_blocks_compile_once_and_match_eager(arch, train):
    eager, model = _pair(arch, train)
    counter = CompileCounter()
    assert minidynamo.compile(model, backend=counter, regions="auto") is model
    for _ in range(3):
        x = _x()
        got, expected = model(x), eager(x)
        torch.testing.assert_close(got, expected)
        if train:
            got.square().mean().backward()
            expected.square().mean().backward()
    assert counter.frame_count == 1
    if train:
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=name)
        for a, b in zip(model.buffers(), eager.buffers()):  # batch-norm running statistics
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_changing_or_replacing_one_block_gives_eagers_result(arch):
    eager, model = _pair(arch, False)
    minidynamo.compile(model, backend=CompileCounter(), regions="auto")
    model(_x())
    with torch.no_grad():
        for m in (model, eager):
            next(m.blocks[5].parameters()).mul_(3)  # in place, on one block only
    torch.testing.assert_close(model(_x()), eager(_x()))
    block, _ = ARCHS[arch]
    torch.manual_seed(7)
    model.blocks[9] = block().eval()
    torch.manual_seed(7)
    eager.blocks[9] = block().eval()
    torch.testing.assert_close(model(_x()), eager(_x()))


def test_blocks_found_are_the_outermost_repeated_children():
    model = Stack(AttentionBlock, n=4)
    blocks = repeated_blocks(model)
    assert blocks == list(model.blocks)  # not the MLPBlock inside each


def test_a_model_without_repeated_blocks_is_compiled_whole():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    counter = CompileCounter()
    compiled = minidynamo.compile(model, backend=counter, regions="auto")
    assert compiled is not model
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), model(x))
    assert counter.frame_count == 1


def test_regions_is_checked():
    with pytest.raises(ValueError, match="regions must be None or 'auto'"):
        minidynamo.compile(nn.Linear(2, 2), regions="blocks")
    with pytest.raises(TypeError, match="repeated blocks of an nn.Module"):
        minidynamo.compile(lambda x: x, regions="auto")


def test_transformers_gpt2_layers():
    transformers = pytest.importorskip("transformers")
    # without a KV cache: with one, each layer writes its own entry (layer_idx), a graph per layer
    config = transformers.GPT2Config(n_layer=12, n_embd=32, n_head=2, vocab_size=64, n_positions=16, use_cache=False)
    torch.manual_seed(0)
    eager = transformers.GPT2Model(config).eval()
    torch.manual_seed(0)
    model = transformers.GPT2Model(config).eval()
    counter = CompileCounter()
    minidynamo.compile(model, backend=counter, regions="auto")
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(model(ids).last_hidden_state, eager(ids).last_hidden_state)
    assert counter.frame_count == 1
