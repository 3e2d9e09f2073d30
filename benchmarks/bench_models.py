"""Models: tiny GPT-2, tiny BERT and a small CNN, inference and a training step, per backend vs eager.

A training step is forward, mean-square loss of the output, backward and an SGD step, with only the
model compiled. Each system is measured on its own (caches reset), with an identically seeded copy
of the model, interleaved call by call with eager; its first call (or first step: the loss and the
updated weights) is checked against eager before anything is timed.
"""
from __future__ import annotations

import contextlib
import statistics
from typing import Callable, List, Tuple

import torch

from benchmarks.models import SOURCE, build, check_close, compile_with, main_tensor, reset_all
from benchmarks.timing import interleaved_medians

WARMUP = 2


def systems() -> List[str]:
    out = ["minidynamo eager", "minidynamo cpp", "torch eager", "torch inductor"]
    if torch.cuda.is_available():
        out.append("minidynamo triton")
    return out


def _step(model: torch.nn.Module, call: Callable, args: list, train: bool) -> Callable[[], object]:
    if not train:
        return lambda: call(*args)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> torch.Tensor:
        loss = main_tensor(call(*args)).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def _prepare(name: str, system: str, train: bool) -> Tuple[torch.nn.Module, Callable[[], object]]:
    model, args = build(name)
    model.train(train)
    return model, _step(model, compile_with(system, model), args, train)


def _check(model: torch.nn.Module, got: object, reference: torch.nn.Module, expected: object) -> float:
    err = check_close(got, expected)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-3, atol=1e-3)
    return err


def _versus_eager(name: str, system: str, train: bool, budget_s: float) -> dict:
    """One system, alone with minidynamo's and torch's caches fresh, timed interleaved with eager."""
    reset_all()
    eager_model, eager_step = _prepare(name, "eager", train)
    model, step = _prepare(name, system, train)
    err = _check(model, step(), eager_model, eager_step())
    for _ in range(WARMUP):
        step()
    calls = {"eager": eager_step, system: step}
    per_call = interleaved_medians(calls, 1, 3)["eager"] / 1e9
    repeat = max(5, min(50, int(budget_s / (2 * per_call))))
    ns = interleaved_medians(calls, 1, repeat)
    return {"ms": ns[system] / 1e6, "eager_ms": ns["eager"] / 1e6, "repeat": repeat, "checked": True,
            "max_abs_err": err}


def measure(name: str, train: bool, quick: bool, budget_s: float) -> dict:
    """One (model, mode) row: each system's median ms per call against eager's, checked first."""
    row = {"model": name, "mode": "train step" if train else "eval", "systems": {}}
    with contextlib.nullcontext() if train else torch.no_grad():
        for system in systems():
            if quick and system == "torch inductor":
                row["systems"][system] = {"skipped": "skipped in --quick"}
                continue
            try:
                row["systems"][system] = _versus_eager(name, system, train, budget_s)
            except Exception as exc:  # recorded, the run goes on
                row["systems"][system] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    eager = [t["eager_ms"] for t in row["systems"].values() if "eager_ms" in t]
    row["eager_ms"] = statistics.median(eager) if eager else None
    return row


def run(quick: bool = False, models: Tuple[str, ...] = ("gpt2", "bert", "cnn"),
        modes: Tuple[bool, ...] = (False, True)) -> dict:
    budget = 1.0 if quick else 4.0
    rows = [measure(name, train, quick, budget) for name in models for train in modes]
    reset_all()
    return {"rows": rows, "systems": systems(), "source": SOURCE}
