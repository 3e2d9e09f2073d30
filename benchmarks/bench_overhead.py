"""Cached-call overhead: median time of a compiled call minus the plain eager call, six small cases.

minidynamo and torch.compile both use their "eager" backend, so the difference is the frame hook,
guards and graph call alone. Aim (issues 3 and 5): at most 1/4 of torch's overhead on every case.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Tuple

import torch
import torch.nn as nn

from benchmarks.models import check_close, compile_with, reset_all
from benchmarks.report import aim_row
from benchmarks.timing import interleaved_medians

SYSTEMS = ("minidynamo eager", "torch eager")
AIM = 0.25
SCALE = 0.5


def pointwise(x, y):
    return torch.relu(x * y + 1.0).sin() - y


def with_break(x, y):
    a = x * y + 1.0
    if a.sum() > 0:  # data-dependent branch: a graph break for both systems
        return a.sin()
    return a.cos()


def ten_args(a, b, c, d, e, f, g, h, i, j):
    return a + b * c - d + e * f - g + h * i - j


def reads_globals(x):
    return torch.tanh(x * SCALE) + math.pi * torch.nn.functional.relu(x)


def scalars(x, n, alpha):
    return x * alpha + n


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def _tensors(n: int) -> List[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(10, generator=g) for _ in range(n)]


def cases() -> Dict[str, Tuple[Callable, Callable[[], list]]]:
    """name -> (function or module factory, inputs factory)."""
    return {
        "pointwise, 10-element tensors": (lambda: pointwise, lambda: _tensors(2)),
        "same with a graph break": (lambda: with_break, lambda: _tensors(2)),
        "3-layer MLP module, batch 1": (_mlp, lambda: [torch.randn(1, 32)]),
        "10 tensor arguments": (lambda: ten_args, lambda: _tensors(10)),
        "globals and module attributes": (lambda: reads_globals, lambda: _tensors(1)),
        "int and float arguments": (lambda: scalars, lambda: _tensors(1) + [3, 0.5]),
    }


def measure(name: str, make_fn: Callable, make_inputs: Callable, number: int, repeat: int) -> dict:
    """One case: eager vs each system, interleaved; overheads are compiled minus eager medians."""
    reset_all()
    fn, args = make_fn(), make_inputs()
    expected = fn(*args)
    calls = {"eager": fn}
    errors = {}
    for system in SYSTEMS:
        compiled = compile_with(system, fn)
        errors[system] = check_close(compiled(*args), expected)
        calls[system] = compiled
    medians = interleaved_medians({k: (lambda f=f: f(*args)) for k, f in calls.items()}, number, repeat)
    ours, theirs = (medians[s] - medians["eager"] for s in SYSTEMS)
    return {
        "case": name, "eager_ns": medians["eager"],
        "minidynamo_ns": medians[SYSTEMS[0]], "torch_ns": medians[SYSTEMS[1]],
        "minidynamo_overhead_ns": ours, "torch_overhead_ns": theirs,
        "ratio": ours / theirs, "aim": AIM, "met": ours <= AIM * theirs,
        "checked": True, "max_abs_err": max(errors.values()),
    }


def aims(rows: List[dict]) -> List[dict]:
    """Issue 5: every case at most 1/4 of torch's overhead (issue 3 asks it of the pointwise case)."""
    return [aim_row(f"issue {3 if r['case'].startswith('pointwise') else 5}: cached-call overhead, "
                    f"{r['case']}, minidynamo / torch", r.get("ratio"), AIM) for r in rows]


def run(quick: bool = False, only: Tuple[str, ...] = ()) -> dict:
    number, repeat = (2_000, 7) if quick else (10_000, 21)
    rows = []
    for name, (make_fn, make_inputs) in cases().items():
        if only and name not in only:
            continue
        try:
            rows.append(measure(name, make_fn, make_inputs, number, repeat))
        except Exception as exc:  # a failing case is recorded, the run goes on
            rows.append({"case": name, "error": f"{type(exc).__name__}: {exc}"[:500]})
    reset_all()
    return {"rows": rows, "aims": aims(rows)}
