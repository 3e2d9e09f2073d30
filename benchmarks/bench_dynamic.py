"""Symbolic sizes under cpp: per-call time of one graph compiled with symbolic sizes (serving every
size) against the same graph compiled for each size alone and against eager, side by side.

    python -m benchmarks.bench_dynamic [--quick]
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Dict, List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

import minidynamo
from benchmarks.timing import interleaved_medians


class Block(nn.Module):
    def __init__(self, d: int = 64, heads: int = 4):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        y = self.ln1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


def _cases() -> Dict[str, Tuple[Callable, Callable[[int], tuple], List[int]]]:
    torch.manual_seed(0)
    return {
        "gelu_chain": (lambda x: F.gelu(x * 1.5 + 0.25) * torch.sigmoid(x), lambda n: (torch.randn(n, 1024),),
                       [64, 256, 1024]),
        "softmax_rows": (lambda x: torch.softmax(x, -1), lambda n: (torch.randn(256, n),), [128, 512, 2048]),
        "layer_norm": (lambda x: F.layer_norm(x, x.shape[-1:]), lambda n: (torch.randn(n, 768),), [64, 256, 1024]),
        "transformer_block": (Block().eval(), lambda n: (torch.randn(4, n, 64),), [16, 64, 128]),
    }


def run(quick: bool = False) -> List[dict]:
    torch.set_num_threads(1)
    rows = []
    for name, (fn, make, sizes) in _cases().items():
        minidynamo.reset()
        # two code objects, so each keeps its own compiled entries: one symbolic graph for all
        # sizes, and one static graph per size
        dynamic = minidynamo.optimize("cpp", dynamic=True)(lambda *a: fn(*a))
        static = minidynamo.optimize("cpp", dynamic=False)(lambda *a: fn(*a))
        with torch.no_grad():
            for n in sizes:
                inputs = make(n)
                torch.testing.assert_close(dynamic(*inputs), fn(*inputs), rtol=1e-4, atol=1e-4)
                static(*inputs)
                t = interleaved_medians({
                    "eager": lambda: fn(*inputs),
                    "static": lambda: static(*inputs),
                    "dynamic": lambda: dynamic(*inputs),
                }, number=5 if quick else 20, repeat=5 if quick else 15)
                rows.append({"case": name, "size": n, **{k: v / 1e3 for k, v in t.items()}})
                r = rows[-1]
                print(f"{name:18s} n={n:5d}  eager {r['eager']:9.1f} us  static {r['static']:9.1f} us  "
                      f"dynamic {r['dynamic']:9.1f} us  dynamic/static {r['dynamic'] / r['static']:.2f}  "
                      f"eager/dynamic {r['eager'] / r['dynamic']:.2f}", file=sys.stderr)
    assert minidynamo.stats()["backend_fallbacks"] == 0, "a graph ran eagerly: the figures would not be the kernels'"
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    run(parser.parse_args().quick)
