"""Per-call cost of a cache hit through the eval-frame hook, against a plain call and torch.compile.

torch.compile's figure is its fixed cost for a frame it decides to skip (no tensor code), the
nearest thing it has to "the hook with a trivial guard".
"""
import argparse
import json
from typing import Dict

import torch

from benchmarks.timing import interleaved_medians
from minidynamo import GuardedCode
from minidynamo.eval_frame import optimize_with_callback


def small(a, b):
    return a


def _always(L):
    return True


def _identity(frame):
    return GuardedCode(frame.f_code, _always)


def run(quick: bool = False) -> Dict[str, float]:
    ours = optimize_with_callback(_identity)(_copy(small))
    theirs = torch.compile(_copy(small), backend="eager")
    ours(1, 2)
    theirs(1, 2)
    number, repeat = (20_000, 7) if quick else (100_000, 21)
    m = interleaved_medians(
        {"plain": lambda: small(1, 2), "minidynamo": lambda: ours(1, 2), "torch.compile": lambda: theirs(1, 2)},
        number,
        repeat,
    )
    return {
        "plain_ns": m["plain"],
        "minidynamo_hit_ns": m["minidynamo"],
        "torch_compile_skipped_ns": m["torch.compile"],
        "minidynamo_overhead_ns": m["minidynamo"] - m["plain"],
        "torch_overhead_ns": m["torch.compile"] - m["plain"],
    }


def _copy(fn):
    import types

    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    result = run(parser.parse_args().quick)
    print(json.dumps({k: round(v, 1) for k, v in result.items()}, indent=2))
