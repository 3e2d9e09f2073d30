"""Training: forward+backward, and the whole train step, of the tiny GPT-2, BERT and CNN, and
forward+backward of the four `transformers` families of the eval benchmark (benchmarks/zoo.py: llama,
t5, vit, wav2vec2, without dropout or random training masks), under eager, minidynamo cpp and torch
inductor, side by side in one process (`python -m benchmarks --only train`).

"fwd+bwd" compiles the model and times forward, loss (mean square of the output), backward and
clearing the gradients. "train step" compiles the whole step function: forward, loss, backward,
AdamW's step and zero_grad (backward breaks the graph in both systems). Each system gets an
identically seeded model; its results are checked against eager (loss and gradients, or loss and
parameters after three steps; a gradient eager leaves None, for a parameter only an unused output
depends on, is zeros in both compilers) before anything is timed; then all systems are timed interleaved,
call by call, and medians reported, in CPU time of the calling thread (1 thread; on a machine
shared with other work, wall time penalises the longer calls, which are descheduled more often).
Each row runs in a fresh `python -m benchmarks.bench_train --worker MODEL/MODE` process, and the
first call of each compiled system is timed there with the code generators' caches empty (fresh
minidynamo and inductor cache directories, inductor's FX graph cache off, nothing loaded into
memory by an earlier row): the compile time a user sees the first time.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch

import minidynamo
from benchmarks import models as tiny, zoo
from benchmarks.models import SOURCE, compile_with, main_tensor, reset_all
from benchmarks.timing import interleaved_medians

SYSTEMS = ("eager", "minidynamo cpp", "torch inductor")
MODES = ("fwd+bwd", "train step")
MODELS = ("gpt2", "bert", "cnn", "llama", "t5", "vit", "wav2vec2")
STEPS_CHECKED = 3


def _loss(out: object) -> torch.Tensor:
    return main_tensor(out).float().pow(2).mean()


def _build(name: str) -> Tuple[torch.nn.Module, list, dict]:
    """A freshly seeded model in train mode, without dropout, and its inputs (args, kwargs)."""
    if name in tiny.MODELS:
        model, args = tiny.build(name)
        return model.train(), args, {}
    model, args, kwargs = zoo.build(name, train=True, random=False)
    return model, list(args), kwargs


def _modes(name: str) -> Tuple[str, ...]:
    return MODES if name in tiny.MODELS else MODES[:1]


def _fwd_bwd(model: torch.nn.Module, args: list, kwargs: dict, system: str) -> Callable[[], torch.Tensor]:
    call, params = compile_with(system, model), list(model.parameters())

    def run() -> torch.Tensor:
        loss = _loss(call(*args, **kwargs))
        loss.backward()
        for p in params:
            p.grad = None
        return loss.detach()
    run.grads = lambda: (_loss(call(*args, **kwargs)).backward(),  # type: ignore[attr-defined]
                         [p.grad for p in params])[1]
    return run


def _train_step(model: torch.nn.Module, args: list, kwargs: dict, system: str) -> Callable[[], torch.Tensor]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> torch.Tensor:
        loss = _loss(model(*args, **kwargs))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return compile_with(system, step)


def _cold_caches() -> None:
    """Empty kernel caches for the first calls that follow (see the module docstring)."""
    import minidynamo

    minidynamo.config.cache_dir = tempfile.mkdtemp(prefix="bench-train-cpp-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-train-inductor-")
    torch._inductor.config.fx_graph_cache = False


def _close(got: Optional[torch.Tensor], want: Optional[torch.Tensor], what: str) -> None:
    """Equal up to float32 summation order (batch norm's backward differs by ~1e-3 between
    inductor and eager too), relative to the tensor's largest magnitude. Where eager's gradient is
    None, the compiled one is None or zeros (aot_autograd's backward gets zero output gradients)."""
    if want is None and got is None:
        return
    if want is None:
        want = torch.zeros_like(got)
    scale = max(1.0, float(want.detach().abs().max())) if want.numel() else 1.0
    torch.testing.assert_close(got, want, rtol=1e-2, atol=5e-3 * scale, msg=lambda m: f"{what}: {m}")


def _check(mode: str, runs: Dict[str, Callable], models: Dict[str, torch.nn.Module]) -> None:
    """Each system against eager: loss and gradients (fwd+bwd) or losses and parameters after steps."""
    if mode == "fwd+bwd":
        expected = [None if g is None else g.clone() for g in runs["eager"].grads()]
        for system, run in runs.items():
            if system != "eager":
                for got, want in zip(run.grads(), expected):
                    _close(got, want, f"{system} gradient")
            for p in models[system].parameters():
                p.grad = None
        return
    for _ in range(STEPS_CHECKED):
        want = runs["eager"]()
        for system, run in runs.items():
            if system != "eager":
                _close(run(), want, f"{system} loss")
    for system, model in models.items():
        for p, q in zip(model.parameters(), models["eager"].parameters()):
            _close(p, q, f"{system} parameter")


def measure(name: str, mode: str, repeat: int) -> dict:
    """One (model, mode) row: first-call seconds and median ms per call of each system."""
    reset_all()
    _cold_caches()
    make = _fwd_bwd if mode == "fwd+bwd" else _train_step
    runs: Dict[str, Callable] = {}
    models: Dict[str, torch.nn.Module] = {}
    row: dict = {"model": name, "mode": mode, "first_s": {}, "ms": {}}
    for system in SYSTEMS:
        model, args, kwargs = _build(name)
        models[system], runs[system] = model, make(model, args, kwargs, system)
        start = time.perf_counter()
        runs[system]()
        row["first_s"][system] = time.perf_counter() - start
    _check(mode, runs, models)
    for run in runs.values():
        run()
    ns = interleaved_medians(runs, 1, repeat, clock=time.thread_time_ns)
    row["ms"] = {system: v / 1e6 for system, v in ns.items()}
    row["cpp_fallbacks"] = minidynamo.stats()["backend_fallbacks"]
    return row


def worker(row: str, repeat: int) -> dict:
    """One row ("MODEL/MODE") in this process, which `run` starts fresh for it (see spawn)."""
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    name, mode = row.split("/", 1)
    return measure(name, mode, repeat)


def run(quick: bool = False, models: Tuple[str, ...] = MODELS) -> dict:
    """Each row in a fresh process: no compiler reuses kernels an earlier row loaded into memory, and
    each pays its own one-time set-up, as a user's first call does."""
    from benchmarks.bench_cppmodels import spawn

    repeat = 15 if quick else 60
    rows: List[dict] = []
    for name in models:
        for mode in _modes(name):
            try:
                row = spawn("bench_train", f"{name}/{mode}", repeat, threads=1, timeout_s=1200)
            except subprocess.TimeoutExpired as exc:  # recorded, the run goes on
                row = {"error": f"timed out after {exc.timeout:.0f} s"}
            rows.append({"model": name, "mode": mode, **row})
            print(f"[train] {name} {mode}: first calls {row.get('first_s')}", file=sys.stderr, flush=True)
    return {"rows": rows, "systems": list(SYSTEMS), "source": SOURCE, "repeat": repeat}


def markdown(section: dict) -> List[str]:
    from benchmarks.report import _error_cell, _num, _table

    rows = []
    for r in section["rows"]:
        if "error" in r:
            rows.append([r["model"], r["mode"], _error_cell(r)] + [""] * 7)
            continue
        ms, first = r["ms"], r["first_s"]
        cpp, ind, eager = ms["minidynamo cpp"], ms["torch inductor"], ms["eager"]
        rows.append([r["model"], r["mode"], _num(eager, 3), f"{_num(cpp, 3)} ({_num(eager / cpp)}x)",
                     f"{_num(ind, 3)} ({_num(eager / ind)}x)", _num(ind / cpp),
                     _num(first["minidynamo cpp"], 2), _num(first["torch inductor"], 2),
                     _num(first["minidynamo cpp"] / first["torch inductor"]), str(r.get("cpp_fallbacks", "-"))])
    return ["## Training (median CPU ms per call, 1 thread; in brackets: speed-up over eager; "
            "`benchmarks/bench_train.py`)", "",
            f"GPT-2 and BERT: {section['source']}. cpp vs inductor > 1: cpp faster. First call: "
            "seconds, kernel caches empty. cpp fallbacks: graphs cpp ran eagerly (stats()).", ""] + \
        _table(["model", "mode", "eager ms", "minidynamo cpp ms", "torch inductor ms", "cpp vs inductor",
                "cpp first call s", "inductor first call s", "first call cpp / inductor", "cpp fallbacks"], rows)


if __name__ == "__main__":
    from benchmarks.bench_cppmodels import cli

    cli(worker, lambda quick, threads, only: run(quick, only or MODELS))
