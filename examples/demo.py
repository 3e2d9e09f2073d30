"""`make demo`: the README's toy example and a tiny transformer, compiled, checked against eager,
and explained; writes the HTML report and prints where."""
import copy
import math
import os
import sys

import torch
from torch import nn

import minidynamo
from minidynamo.testing import CompileCounter


def toy(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def my_compiler(gm: torch.fx.GraphModule, example_inputs):
    print(f"my_compiler() called with an FX graph of {len(gm.graph.nodes)} nodes:")
    print(gm.code.strip())
    return gm.forward


class Block(nn.Module):
    """A pre-norm transformer encoder block: causal self-attention, then an MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        batch, seq, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (t.view(batch, seq, self.heads, dim // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(dim // self.heads)
        mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)
        attn = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(batch, seq, dim))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm2(x))))


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def toy_demo() -> minidynamo.ExplainOutput:
    print("== toy compiled with a custom backend ==")
    compiled = minidynamo.optimize(my_compiler)(toy)
    a, b = torch.randn(10), torch.randn(10)
    torch.testing.assert_close(compiled(a, b), toy(a, b))

    counter = CompileCounter()
    compiled = minidynamo.optimize(counter)(toy)
    for _ in range(100):
        a, b = torch.randn(10), torch.randn(10)
        torch.testing.assert_close(compiled(a, b), toy(a, b))
    print(f"\n100 random calls match eager; graphs compiled: {counter.frame_count} "
          "(the first graph, then one resume graph per branch taken)")

    print("\n== explain(toy) ==")
    out = minidynamo.explain(toy)(torch.randn(10), torch.randn(10))
    print(out)
    return out


def transformer_demo() -> minidynamo.ExplainOutput:
    print("\n== a tiny 2-layer transformer: minidynamo.compile, 5 training steps against eager ==")
    model = TinyTransformer()
    eager = copy.deepcopy(model)
    compiled = minidynamo.compile(model)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (eager, compiled)]
    for step in range(5):
        tokens = torch.randint(0, 64, (4, 16))
        losses = []
        for m, optimizer in zip((eager, compiled), optimizers):
            loss = nn.functional.cross_entropy(m(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        torch.testing.assert_close(losses[0], losses[1])
        print(f"step {step}: loss {losses[1]:.4f} (eager {losses[0]:.4f})")

    print("\n== explain(model) ==")
    out = minidynamo.explain(model)(torch.randint(0, 64, (2, 8)))
    print(out)
    return out


def main() -> None:
    torch.manual_seed(0)
    frames = [*toy_demo().frames, *transformer_demo().frames]
    path = sys.argv[1] if len(sys.argv) > 1 else "demo_report.html"
    report = minidynamo.ExplainOutput.from_frames(frames).render(path)
    print(f"\nHTML report of both (toy, then transformer): {os.path.abspath(report)}")


if __name__ == "__main__":
    main()
