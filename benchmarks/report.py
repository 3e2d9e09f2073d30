"""Results of `python -m benchmarks`: one JSON file, a markdown summary and a PNG chart of the ratios."""
from __future__ import annotations

import json
import os
import platform
import subprocess
from typing import Callable, Dict, List, Optional

import torch

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ratio(ours: Optional[float], theirs: Optional[float]) -> Optional[float]:
    return None if ours is None or not theirs else ours / theirs


def aim_row(figure: str, value: Optional[float], limit: float, unit: str = "ratio") -> dict:
    """An issue's target: `value` (a ratio, or seconds when unit="s") must be at most `limit`."""
    return {"figure": figure, "value": value, "limit": limit, "unit": unit,
            "met": None if value is None else value <= limit}


def model_aims(rows: List[dict], aims: List[tuple]) -> List[dict]:
    """aim_row for every (figure with a {model} field, row key, limit) in `aims`, for each row."""
    return [aim_row(figure.format(model=r["model"]), r.get(key), limit) for figure, key, limit in aims for r in rows]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def commit() -> str:
    """Short HEAD, with -dirty when tracked files differ from it (as `git describe --dirty`)."""
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return (_git("rev-parse", "--short", "HEAD") or "unknown") + ("-dirty" if dirty else "")


def machine() -> Dict[str, object]:
    cpu = platform.processor()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    return {"cpu": cpu, "cores": os.cpu_count(), "torch": torch.__version__,
            "python": platform.python_version(), "cuda": torch.cuda.is_available()}


def write(results: dict, out_dir: str = RESULTS_DIR) -> Dict[str, str]:
    """Write results.json, summary.md and chart.png into out_dir; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {k: os.path.join(out_dir, name) for k, name in
             (("json", "results.json"), ("markdown", "summary.md"), ("chart", "chart.png"))}
    with open(paths["json"], "w") as f:
        json.dump(results, f, indent=1, default=str)
    with open(paths["markdown"], "w") as f:
        f.write(markdown(results))
    chart(results, paths["chart"])
    return paths


# ----------------------------------------------------------------------------------------------
# Markdown


def _num(value: Optional[float], digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if abs(value) < 1000 else f"{value:.0f}"


def _table(header: List[str], rows: List[List[str]]) -> List[str]:
    align = ["---"] + ["---:"] * (len(header) - 1)
    return ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"] + \
        ["| " + " | ".join(r) + " |" for r in rows] + [""]


def _error_cell(row: dict) -> str:
    return "error: " + row["error"].replace("|", "/").replace("\n", " ")[:200]


def _aims(results: dict) -> List[str]:
    rows = []
    for section in SECTIONS:
        for a in results.get(section, {}).get("aims", []):
            limit = f"≤ {a['limit']:.2g} s" if a["unit"] == "s" else f"≤ 1/{round(1 / a['limit'])} of torch" \
                if a["limit"] < 1 else f"≤ {a['limit']:.2g}"
            value = "not measured" if a["value"] is None else f"{a['value']:.3f} s" if a["unit"] == "s" else \
                str(a["value"]) if a["unit"] == "count" else f"{a['value']:.3f}"
            mark = "-" if a["met"] is None else ("✓" if a["met"] else "✗")
            rows.append([a["figure"], value, f"aim: {limit}", mark])
    return ["## Aims of the other issues", ""] + _table(["figure", "measured", "aim", "met"], rows)


def _overhead(section: dict) -> List[str]:
    rows = []
    for r in section["rows"]:
        if "error" in r:
            rows.append([r["case"], _error_cell(r)] + [""] * 5)
            continue
        rows.append([r["case"], _num(r["eager_ns"] / 1e3), _num(r["minidynamo_overhead_ns"] / 1e3),
                     _num(r["torch_overhead_ns"] / 1e3), _num(r["ratio"], 3), "aim: ≤ 1/4 of torch",
                     "✓" if r["met"] else "✗"])
    return ["## Cached-call overhead (compiled minus eager, median µs; both with the eager backend)", ""] + \
        _table(["case", "eager µs", "minidynamo +µs", "torch.compile +µs", "ratio", "aim", "met"], rows)


def _compile(section: dict) -> List[str]:
    rows = [[r["case"], r["system"], r["cache"], str(r["runs"]),
             _error_cell(r) if "error" in r else _num(r["first_call_s"], 3)] for r in section["rows"]]
    return ["## Compile latency (first call in a fresh subprocess, median seconds)", ""] + \
        _table(["case", "system", "disk cache", "runs", "first call s"], rows)


def _kernels(section: dict) -> List[str]:
    from benchmarks.bench_kernels import markdown as kernels_markdown

    return ["## Kernels (cpp backend vs eager and inductor, median ms; `benchmarks/bench_kernels.py`)", "",
            kernels_markdown(section["rows"]), ""]


def _models(section: dict) -> List[str]:
    systems = section["systems"]
    rows = []
    for r in section["rows"]:
        cells = [r["model"], r["mode"], _num(r["eager_ms"], 3)]
        for s in systems:
            t = r["systems"].get(s, {})
            cells.append(_error_cell(t) if "error" in t else t.get("skipped") or
                         f"{_num(t['ms'], 3)} ({_num(t['eager_ms'] / t['ms'])}x)")
        rows.append(cells)
    return ["## Models (median ms per call; in brackets: speed-up over eager timed alongside it)", "",
            f"GPT-2 and BERT: {section['source']}.", ""] + _table(["model", "mode", "eager ms"] + systems, rows)


def _scaling(section: dict) -> List[str]:
    size_rows = [[str(r["ops"]), r["system"]] + ([_error_cell(r), "", ""] if "error" in r else
                 [_num(r["compile_s"], 3), _num(r["eager_us"]), _num(r["call_us"])])
                 for r in section["graph_size"]]
    entry_rows = [[str(r["entries"]), r["system"]] + ([_error_cell(r), "", ""] if "error" in r else
                  [_num(r["first_inserted_us"]), _num(r["last_inserted_us"]), _num(r["round_robin_us"])])
                  for r in section["cache_entries"]]
    return ["## Scaling with graph size (N pointwise ops, 1000-element tensor)", ""] + \
        _table(["ops", "system", "compile s (in-process)", "eager µs", "cached call µs"], size_rows) + \
        ["## Scaling with cache entries per function (k input shapes; median µs per call)", "",
         "round robin: the k shapes called in turn, so every call looks up a different entry.", ""] + \
        _table(["entries", "system", "first-inserted µs", "last-inserted µs", "round robin µs"], entry_rows)


def _zoo(section: dict) -> List[str]:
    rows = []
    for r in section["rows"]:
        cells = [r["model"], r["family"]]
        for s in ("minidynamo", "torch"):
            cells += [_error_cell({"error": r[f"{s}_error"]}), "", ""] if f"{s}_error" in r else \
                [f"{r[f'{s}_graphs']} / {r[f'{s}_breaks']}", _num(r[f"{s}_first_s"], 3),
                 f"{_num(r[f'{s}_compiled_us'] / 1e3, 3)} ({_num(r[f'{s}_eager_us'] / r[f'{s}_compiled_us'])}x)"]
        rows.append(cells)
    return ["## Model zoo (eval, eager backend; fresh process per model and system; `benchmarks/bench_zoo.py`)", "",
            "graphs / breaks; first compiled call s; median ms per call (speed-up over eager timed alongside).", ""] + \
        _table(["model", "family", "minidynamo graphs/breaks", "first call s", "ms per call",
                "torch graphs/breaks", "first call s", "ms per call"], rows)


def _cppmodels_cells(r: dict) -> List[str]:
    if "error" in r:
        return [r["model"], _error_cell(r)] + [""] * 7
    return [r["model"], _num(r["eager_ms"], 3), _num(r["cpp_ms"], 3), _num(r["inductor_ms"], 3),
            _num(r["eager_ms"] / r["cpp_ms"]), _num(r["eager_ms"] / r["inductor_ms"]),
            _num(r["cpp_vs_inductor"]), _num(r["cpp_first_s"], 3), _num(r["inductor_first_s"], 3)]


def _cppmodels(section: dict) -> List[str]:
    rows = [_cppmodels_cells(r) for r in section["rows"]]
    threads = section["rows"][0]["threads"] if section["rows"] else "-"
    return [f"## cpp vs inductor, eval forward ({threads} thread(s); fresh process and cold caches per model; "
            "`benchmarks/bench_cppmodels.py`)", "",
            "Median ms per call, eager, cpp and inductor interleaved; first call s with empty kernel caches.", ""] + \
        _table(["model", "eager ms", "cpp ms", "inductor ms", "cpp vs eager", "inductor vs eager",
                "cpp / inductor", "cpp first s", "inductor first s"], rows)


def _generate(section: dict) -> List[str]:
    from benchmarks.bench_generate import markdown as generate_markdown

    return generate_markdown(section) + [""]


def _libraries(section: dict) -> List[str]:
    from benchmarks.bench_libraries import markdown as libraries_markdown

    return libraries_markdown(section) + [""]


def _ddp(section: dict) -> List[str]:
    rows = [[r["system"], str(r["parts"] or "-"), str(r["equal"]), _num(r["lead_ms"]), _num(r["step_ms"]),
             _num(r["eager_step_ms"])] for r in section["rows"]]
    m = section["model"]
    return [f"## DDP (2 gloo processes; {m['layers']} x Linear({m['width']}), batch {m['batch']}, "
            f"bucket_cap_mb={m['bucket_cap_mb']}; `benchmarks/bench_ddp.py`)", "",
            "lead: ms from the first bucket's all-reduce start to the last one's (≈ end of backward); "
            "medians over steps after the first.", ""] + \
        _table(["system", "graphs", "equal to eager DDP", "all-reduce lead ms", "step ms", "eager DDP step ms"], rows)


def _train(section: dict) -> List[str]:
    from benchmarks.bench_train import markdown as train_markdown

    return train_markdown(section) + [""]


SECTIONS: Dict[str, Callable[[dict], List[str]]] = {
    "overhead": _overhead, "compile": _compile, "regions": _compile, "kernels": _kernels, "models": _models, "scaling": _scaling,
    "zoo": _zoo, "ddp": _ddp, "train": _train, "cppmodels": _cppmodels,
    "generate": _generate, "libraries": _libraries}


def markdown(results: dict) -> str:
    meta = results["meta"]
    m = meta["machine"]
    lines = ["# minidynamo vs torch.compile", "",
             f"Commit `{meta['commit']}`, {meta['date']}; {m['cpu']}, {m['cores']} cores, torch {m['torch']}, "
             f"Python {m['python']}; {meta['threads']} thread(s){', --quick' if meta['quick'] else ''}; "
             f"run took {meta['duration_s']:.0f} s (`python -m benchmarks {meta['argv']}`).", "",
             "Every compiled result was checked against eager; times are medians of interleaved repeats.", ""]
    lines += _aims(results)
    for name, render in SECTIONS.items():
        section = results.get(name)
        if section is None:
            continue
        if "error" in section:
            lines += [f"## {name}", "", f"Section failed: {section['error']}", ""]
        else:
            lines += render(section)
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Chart


def _bars(ax, labels: List[str], values: List[Optional[float]], title: str, aim: Optional[float] = None) -> None:
    shown = [max(v, 1e-2) if v is not None else 0 for v in values]
    ax.barh(range(len(labels)), shown, color=["tab:green" if aim is None or v <= aim else "tab:red"
                                              for v in shown])
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", lw=0.8)
    if aim is not None:
        ax.axvline(aim, color="tab:blue", ls="--", lw=1, label=f"aim {aim:.2g}")
        ax.legend(fontsize=7)
    ax.set_title(title, fontsize=9)
    ax.invert_yaxis()


def chart(results: dict, path: str) -> None:
    """Ratios at a glance: overhead and compile latency vs torch, model and kernel speed-ups."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    over = [r for r in results.get("overhead", {}).get("rows", []) if "error" not in r]
    _bars(axes[0, 0], [r["case"] for r in over], [r["ratio"] for r in over],
          "cached-call overhead, minidynamo / torch.compile (lower is better)", aim=0.25)
    comp = [a for a in results.get("compile", {}).get("aims", []) if a["unit"] == "ratio" and a["value"]]
    _bars(axes[0, 1], [a["figure"].split(": ", 1)[1][:60] for a in comp], [a["value"] for a in comp],
          "compile latency, minidynamo / torch (lower is better; aims 1/4-1/5)")
    models = results.get("models", {})
    labels, values = [], []
    for r in models.get("rows", []):
        for s, t in r["systems"].items():
            if "ms" in t:
                labels.append(f"{r['model']} {r['mode']}: {s}")
                values.append(t["eager_ms"] / t["ms"])
    _bars(axes[1, 0], labels, values, "models, speed-up over eager (higher is better)")
    kern = [r for r in results.get("kernels", {}).get("rows", [])[1:] if "speedup_vs_eager" in r]
    _bars(axes[1, 1], [f"{r['workload']} vs {k}" for r in kern for k in ("eager", "inductor")],
          [r[f"speedup_vs_{k}"] for r in kern for k in ("eager", "inductor")],
          "cpp backend kernels, speed-up (higher is better)")
    meta = results["meta"]
    fig.suptitle(f"minidynamo vs torch.compile — {meta['commit']}, {meta['machine']['cpu']}, "
                 f"torch {meta['machine']['torch']}, {meta['threads']} thread(s)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
