"""Libraries beyond transformers (benchmarks/libraries.py): graphs and breaks with minidynamo and with
torch._dynamo, and, where minidynamo compiles a case whole, `cpp` against inductor in eval.

    python -m benchmarks.bench_libraries [--quick] [--only NAME ...]
"""
from __future__ import annotations

import argparse
import importlib.util
import time
import warnings
from typing import Dict, List, Optional

import torch

from benchmarks import libraries
from benchmarks.models import check_close, compile_with, reset_all
from benchmarks.timing import interleaved_medians

QUICK = ("diffusers_unet2d", "peft_lora_llama", "monai_unet", "kornia_filters")


def _graphs(explainer, fn, args) -> str:
    try:
        out = explainer(fn)(*args)
        return f"{out.graph_count} / {out.graph_break_count}"
    except Exception as exc:  # recorded in the table
        return f"error: {type(exc).__name__}"


def _timed(name: str, quick: bool) -> Dict[str, Optional[float]]:
    """First-call seconds and median ms per call of eager, minidynamo cpp and inductor, interleaved."""
    fn, args = libraries.build(name)
    output = libraries.WORKLOADS[name].output
    out: Dict[str, Optional[float]] = {}
    runs = {}
    with torch.no_grad():
        expected = output(fn(*args))
        for system in ("minidynamo cpp", "torch inductor"):
            reset_all()
            compiled = compile_with(system, fn)
            start = time.perf_counter()
            out[f"{system} error"] = check_close(output(compiled(*args)), expected)
            out[f"{system} first s"] = time.perf_counter() - start
            runs[system] = lambda c=compiled: c(*args)
        runs["eager"] = lambda: fn(*args)
        medians = interleaved_medians(runs, number=3 if quick else 10, repeat=3 if quick else 7)
    out.update({f"{system} ms": ns / 1e6 for system, ns in medians.items()})
    return out


def measure(name: str, quick: bool, timed: bool) -> dict:
    import minidynamo

    row: dict = {"case": name, "library": libraries.WORKLOADS[name].library}
    if importlib.util.find_spec(row["library"].split(".")[0]) is None:
        return {**row, "error": "not installed"}
    fn, args = libraries.build(name)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reset_all()
        row["minidynamo"] = _graphs(minidynamo.explain, fn, args)
        reset_all()
        row["torch"] = _graphs(torch._dynamo.explain, fn, args)
    if timed and row["minidynamo"] == "1 / 0":
        row.update(_timed(name, quick))
    return row


def run(quick: bool = False, threads: int = 1, only: Optional[List[str]] = None) -> dict:
    torch.set_num_threads(threads)
    names = only or list(libraries.WORKLOADS)
    rows = [measure(name, quick, timed=not quick or name in QUICK) for name in names]
    return {"rows": rows, "threads": threads}


def _cell(value: Optional[float], digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(section: dict) -> List[str]:
    lines = [f"## Libraries beyond transformers (eval; {section['threads']} thread(s); `benchmarks/bench_libraries.py`)",
             "", "graphs / breaks from `explain`; median ms per call, eager, cpp and inductor interleaved, "
             "where minidynamo compiles the case whole.", "",
             "| case | minidynamo graphs/breaks | torch._dynamo graphs/breaks | eager ms | cpp ms | inductor ms "
             "| cpp / inductor | cpp first s | inductor first s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in section["rows"]:
        if "error" in r:
            lines.append(f"| {r['case']} | {r['error']} | | | | | | | |")
            continue
        cpp, ind = r.get("minidynamo cpp ms"), r.get("torch inductor ms")
        lines.append(f"| {r['case']} | {r['minidynamo']} | {r['torch']} | {_cell(r.get('eager ms'), 3)} | "
                     f"{_cell(cpp, 3)} | {_cell(ind, 3)} | {_cell(cpp / ind if cpp and ind else None)} | "
                     f"{_cell(r.get('minidynamo cpp first s'))} | {_cell(r.get('torch inductor first s'))} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", nargs="+", choices=list(libraries.WORKLOADS))
    opts = parser.parse_args()
    print("\n".join(markdown(run(opts.quick, opts.threads, opts.only))))


if __name__ == "__main__":
    main()
