"""Greedy `generate()` with a KV cache side by side: `model.forward` compiled by minidynamo `cpp` vs
torch.compile inductor vs eager, on decoder LMs and an encoder-decoder of benchmarks/zoo.py.

    python -m benchmarks --only generate [--threads N]

Each model runs in a fresh `python -m benchmarks.bench_generate --worker MODEL` process with empty
kernel caches: eager generates first (imports, the expected tokens), then each compiled system gets an
identically seeded model whose `forward` is compiled with its defaults (automatic dynamic shapes); its
first generate() is timed cold and its tokens checked equal to eager's, a second generate() must
compile nothing more; then eager, cpp and inductor are timed interleaved, one generate() per sample,
in CPU time of the calling thread. Aims (issue 17): cpp per generate() at most inductor's, and at most
3 recompiles while the sequence grows.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Callable, Dict, List

from benchmarks.bench_cppmodels import cli, spawn
from benchmarks.report import model_aims, ratio

MODELS = ("gpt2", "llama", "mixtral", "phi", "bart")
SYSTEMS = ("eager", "cpp", "inductor")
NEW_TOKENS = 20
PROMPT = 6
PAD = 1  # the zoo's pad token
BACKENDS = {"cpp": "cpp", "inductor": "inductor"}  # system -> backend of its compiler (minidynamo, torch)


def prompt() -> tuple:
    """Token ids of one prompt and greedy generate() arguments for exactly NEW_TOKENS tokens."""
    import torch

    from benchmarks import zoo

    ids = torch.randint(3, zoo.VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(3))
    return ids, dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=PAD)


def _compile_counts(system: str) -> Dict[str, int]:
    """Counts so far of `system`: frames compiled, recompiles among them, and graphs left to eager.
    torch's counters have no recompiles; they are counted in _first_generate."""
    if system == "cpp":
        import minidynamo

        s = minidynamo.stats()
        return {"compiles": s["compiled"], "recompiles": s["recompiles"], "fallbacks": s["backend_fallbacks"]}
    from torch._dynamo.utils import counters

    return {"compiles": counters["frames"]["ok"], "recompiles": 0, "fallbacks": 0}


def _compiled_model(name: str, system: str):
    import torch

    import minidynamo
    from benchmarks import zoo

    model, _, _ = zoo.build(name)
    compile_fn = minidynamo.compile if system == "cpp" else torch.compile
    model.forward = compile_fn(model.forward, backend=BACKENDS[system])
    return model


def _first_generate(name: str, system: str, ids, kwargs: dict, expected) -> tuple:
    """The system's model, and its row fields: cold first generate() s, compile counts; tokens checked."""
    import torch

    model, before = _compiled_model(name, system), _compile_counts(system)
    start = time.perf_counter()
    got = model.generate(ids, **kwargs)
    row: Dict[str, object] = {f"{system}_first_s": time.perf_counter() - start}
    if not torch.equal(got, expected):
        raise AssertionError(f"{system}: tokens differ from eager's: {got.tolist()} vs {expected.tolist()}")
    counts = _compile_counts(system)
    if not torch.equal(model.generate(ids, **kwargs), expected) or _compile_counts(system) != counts:
        raise AssertionError(f"{system}: a second generate() compiled again or made other tokens")
    row.update({f"{system}_{k}": v - before[k] for k, v in counts.items()})
    if system != "cpp":  # one frame (the forward) compiled: every compile after its first is a recompile
        row[f"{system}_recompiles"] = max(0, row[f"{system}_compiles"] - 1)
    return model, row


def worker(name: str, repeat: int, systems: tuple = SYSTEMS) -> dict:
    """One model's row: per-generate() medians (ms), first calls (s) and compile counts per system."""
    import torch

    from benchmarks import zoo
    from benchmarks.timing import interleaved_medians

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    ids, kwargs = prompt()
    row: Dict[str, object] = {}
    with torch.no_grad():
        eager, _, _ = zoo.build(name)
        expected = eager.generate(ids, **kwargs)
        models = {"eager": eager}
        for system in systems[1:]:
            models[system], fields = _first_generate(name, system, ids, kwargs, expected)
            row.update(fields)
        calls: Dict[str, Callable[[], object]] = {
            s: (lambda m: lambda: m.generate(ids, **kwargs))(m) for s, m in models.items()}
        medians = interleaved_medians(calls, 1, repeat, clock=time.thread_time_ns)
    row["tokens"] = int(expected.shape[1])
    row.update({f"{s}_ms": medians[s] / 1e6 for s in systems})
    return row


AIMS = [("issue 17: generate() per call, {model}, cpp / inductor", "cpp_vs_inductor", 1.0),
        ("issue 17: generate() recompiles, {model}, cpp", "cpp_recompiles", 3)]


def _measured(name: str, repeat: int, threads: int) -> dict:
    row: dict = {"model": name, "threads": threads, **spawn("bench_generate", name, repeat, threads, timeout_s=1200)}
    row["cpp_vs_inductor"] = ratio(row.get("cpp_ms"), row.get("inductor_ms"))
    row["first_call_ratio"] = ratio(row.get("cpp_first_s"), row.get("inductor_first_s"))
    print(f"[generate] {json.dumps(row)}", file=sys.stderr, flush=True)
    return row


def aims(rows: List[dict]) -> List[dict]:
    return [dict(a, unit="count") if "recompiles" in a["figure"] else a for a in model_aims(rows, AIMS)]


def run(quick: bool = False, threads: int = 1, only: tuple = ()) -> dict:
    repeat = 7 if quick else 21
    rows = [_measured(name, repeat, threads) for name in only or MODELS]
    return {"rows": rows, "aims": aims(rows), "new_tokens": NEW_TOKENS, "prompt": PROMPT}


def _cells(r: dict) -> List[str]:
    from benchmarks.report import _error_cell, _num

    if "error" in r:
        return [r["model"], _error_cell(r)] + [""] * 9
    per_token = {s: r[f"{s}_ms"] / NEW_TOKENS for s in SYSTEMS}
    counts = {s: f"{r[f'{s}_compiles']} / {r[f'{s}_recompiles']}" for s in SYSTEMS[1:]}
    return [r["model"], _num(r["eager_ms"], 2), _num(r["cpp_ms"], 2), _num(r["inductor_ms"], 2),
            " / ".join(_num(per_token[s], 3) for s in SYSTEMS), _num(r["eager_ms"] / r["cpp_ms"]),
            _num(r["inductor_ms"] / r["cpp_ms"]), f"{_num(r['cpp_first_s'], 2)} / {_num(r['inductor_first_s'], 2)}",
            counts["cpp"], counts["inductor"], str(r["cpp_fallbacks"])]


def markdown(section: dict) -> List[str]:
    from benchmarks.report import _table

    rows = [_cells(r) for r in section["rows"]]
    threads = section["rows"][0]["threads"] if section["rows"] else "-"
    return [f"## generate(): greedy, KV cache, {section['new_tokens']} new tokens from a {section['prompt']}-token "
            f"prompt ({threads} thread(s); fresh process and cold caches per model; `benchmarks/bench_generate.py`)", "",
            "`model.forward` compiled, automatic dynamic shapes; tokens equal to eager's. Median CPU ms per "
            "generate() call, eager, cpp and inductor interleaved; cpp vs inductor > 1: cpp faster. First call: "
            "seconds, kernel caches empty. Compiles / recompiles: minidynamo stats(), torch._dynamo counters.", ""] + \
        _table(["model", "eager ms", "cpp ms", "inductor ms", "ms per token eager / cpp / inductor", "cpp vs eager",
                "cpp vs inductor", "first call s cpp / inductor", "cpp compiles / recompiles",
                "inductor compiles / recompiles", "cpp fallbacks"], rows)


if __name__ == "__main__":
    cli(worker, run)
