"""Scaling: compile time and cached-call time against graph size and against cache entries per function.

Graph size: generated functions of N pointwise ops on one 1000-element tensor, first call timed in
this process (imports already warm). Cache entries: one function called with k input shapes fills
k entries (both systems' cache limits raised for the run, then restored); then a call hitting the
first-inserted shape, the last-inserted one, and all k shapes in turn.
"""
from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator, List, Tuple

import torch
import torch._dynamo.config as torch_config

import minidynamo
from benchmarks.models import compile_with, reset_all
from benchmarks.timing import interleaved_medians

SYSTEMS = ("minidynamo eager", "torch eager")
OPS = (10, 100, 1000)
ENTRIES = (1, 4, 16, 64)


def generated(ops: int) -> Callable:
    """A fresh function of `ops` pointwise ops (a new code object, so nothing is cached)."""
    body = [f"    x = x {'+' if i % 2 else '*'} {1.0 + i % 7 / 8}" for i in range(ops)]
    namespace: dict = {}
    exec("\n".join([f"def chain{ops}(x):"] + body + ["    return x"]), namespace)
    return namespace[f"chain{ops}"]


def _error(row: dict, exc: Exception) -> dict:
    return {**row, "error": f"{type(exc).__name__}: {exc}"[:500]}


def graph_size(ops: int, system: str, number: int, repeat: int) -> dict:
    row = {"ops": ops, "system": system}
    try:
        reset_all()
        fn, x = generated(ops), torch.randn(1000)
        expected = fn(x)
        compiled = compile_with(system, generated(ops))
        t0 = time.perf_counter()
        got = compiled(x)
        compile_s = time.perf_counter() - t0
        torch.testing.assert_close(got, expected)
        ns = interleaved_medians({"eager": lambda: fn(x), "compiled": lambda: compiled(x)},
                                 max(2, number * 10 // ops), repeat)
    except Exception as exc:  # recorded, the run goes on
        return _error(row, exc)
    return {**row, "compile_s": compile_s, "eager_us": ns["eager"] / 1e3, "call_us": ns["compiled"] / 1e3,
            "checked": True}


def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2.0 + 1.0


@contextlib.contextmanager
def cache_limits(limit: int) -> Iterator[None]:
    """Both systems' per-function cache limits raised to `limit`, restored afterwards."""
    names = [n for n in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                         "accumulated_recompile_limit") if hasattr(torch_config, n)]
    saved = minidynamo.config.cache_size_limit, {n: getattr(torch_config, n) for n in names}
    minidynamo.config.cache_size_limit = limit
    for n in names:
        setattr(torch_config, n, max(limit, saved[1][n]))
    try:
        yield
    finally:
        minidynamo.config.cache_size_limit = saved[0]
        for n, v in saved[1].items():
            setattr(torch_config, n, v)


def cache_entries(k: int, system: str, number: int, repeat: int) -> dict:
    row = {"entries": k, "system": system}
    try:
        reset_all()
        inputs = [torch.randn(i + 1) for i in range(k)]
        fn = compile_with(system, _fresh(scale))
        with cache_limits(k + 1):
            for x in inputs:
                torch.testing.assert_close(fn(x), scale(x))
            first, last = inputs[0], inputs[-1]
            ns = interleaved_medians({"first": lambda: fn(first), "last": lambda: fn(last)}, number, repeat)
            cycle = interleaved_medians({"all": lambda: [fn(x) for x in inputs]}, max(1, number // k), repeat)
    except Exception as exc:  # recorded, the run goes on
        return _error(row, exc)
    return {**row, "first_inserted_us": ns["first"] / 1e3, "last_inserted_us": ns["last"] / 1e3,
            "round_robin_us": cycle["all"] / k / 1e3, "checked": True}


def _fresh(fn: Callable) -> Callable:
    import types

    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__)


def run(quick: bool = False, ops: Tuple[int, ...] = OPS, entries: Tuple[int, ...] = ENTRIES) -> dict:
    number, repeat = (500, 5) if quick else (2_000, 11)
    sizes: List[dict] = [graph_size(n, s, number, repeat) for n in ops for s in SYSTEMS]
    caches: List[dict] = [cache_entries(k, s, number, repeat) for k in entries for s in SYSTEMS]
    reset_all()
    return {"graph_size": sizes, "cache_entries": caches}
