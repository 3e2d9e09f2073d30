"""Compile latency: the first call of a function or model, each in a fresh subprocess.

Every measurement is its own `python -m benchmarks.bench_compile --worker CASE SYSTEM` process
(imports, model construction and one eager call happen before the clock starts), repeated and
reported as a median. "cold" runs get fresh empty MINIDYNAMO_CACHE_DIR / TORCHINDUCTOR_CACHE_DIR
directories; "warm" runs reuse the directories the cold run of the same repeat just filled.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple


from benchmarks.report import aim_row, ratio

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ("pointwise", "mlp")
MODELS = ("gpt2", "bert", "gpt2_24", "gpt2_block")


def plan(quick: bool, cases: Tuple[str, ...]) -> List[Tuple[str, str, str]]:
    """(case, system, cache) triples; warm entries follow the cold one whose cache they reuse."""
    out = []
    for case in cases:
        out += [(case, "minidynamo eager", "cold"), (case, "torch eager", "cold")]
        if case in ("pointwise", "gpt2"):
            out += [(case, "minidynamo cpp", "cold"), (case, "minidynamo cpp", "warm")]
            if not quick:  # inductor's cold compile alone takes ~25 s here
                out += [(case, "torch inductor", "cold"), (case, "torch inductor", "warm")]
    return out


def _inputs(case: str):
    from benchmarks import bench_overhead
    from benchmarks.models import build

    if case in MODELS:
        model, args = build(case)
        return model.eval(), args
    name = {"pointwise": "pointwise, 10-element tensors", "mlp": "3-layer MLP module, batch 1"}[case]
    make_fn, make_inputs = bench_overhead.cases()[name]
    return make_fn(), make_inputs()


def worker(case: str, system: str) -> dict:
    """Runs in the subprocess: time the first compiled call and check it against eager."""
    import minidynamo  # noqa: F401  (imported before the clock, like torch._dynamo)
    import torch._dynamo  # noqa: F401

    from benchmarks.models import check_close, compile_with

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    fn, args = _inputs(case)
    with torch.no_grad():
        expected = fn(*args)
        t0 = time.perf_counter()
        got = compile_with(system, fn)(*args)
        first = time.perf_counter() - t0
    return {"first_call_s": first, "max_abs_err": check_close(got, expected)}


def _spawn(case: str, system: str, cache_dir: str, threads: int) -> dict:
    env = dict(os.environ, MINIDYNAMO_CACHE_DIR=os.path.join(cache_dir, "minidynamo"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache_dir, "inductor"), BENCH_THREADS=str(threads),
               PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_compile", "--worker", case, system],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError((proc.stderr.strip().splitlines() or ["no output"])[-1])
    return json.loads(lines[-1])


def measure(steps: List[Tuple[str, str, str]], repeats: int, threads: int) -> List[dict]:
    """Run the plan `repeats` times, interleaved; one row per (case, system, cache)."""
    samples: Dict[Tuple[str, str, str], List[dict]] = {s: [] for s in steps}
    for _ in range(repeats):
        dirs: Dict[Tuple[str, str], str] = {}
        with tempfile.TemporaryDirectory(prefix="bench-compile-") as root:
            for step in steps:
                case, system, cache = step
                key = (case, system)
                if cache == "cold":
                    dirs[key] = tempfile.mkdtemp(dir=root)
                try:
                    samples[step].append(_spawn(case, system, dirs[key], threads))
                except Exception as exc:  # recorded, the run goes on
                    samples[step].append({"error": f"{type(exc).__name__}: {exc}"[:500]})
    return [_row(step, runs) for step, runs in samples.items()]


def _row(step: Tuple[str, str, str], runs: List[dict]) -> dict:
    case, system, cache = step
    row = {"case": case, "system": system, "cache": cache, "runs": len(runs)}
    errors = [r["error"] for r in runs if "error" in r]
    if errors:
        return {**row, "error": errors[0]}
    times = [r["first_call_s"] for r in runs]
    return {**row, "first_call_s": statistics.median(times), "all_s": times, "checked": True,
            "max_abs_err": max(r["max_abs_err"] for r in runs)}


def _lookup(rows: List[dict], case: str, system: str, cache: str = "cold") -> Optional[float]:
    for r in rows:
        if (r["case"], r["system"], r["cache"]) == (case, system, cache):
            return r.get("first_call_s")
    return None


def aims(rows: List[dict]) -> List[dict]:
    """The figures issues 3, 4 and 6 ask for."""
    out = [aim_row(f"issue 3: first call of small function '{case}', minidynamo eager / torch eager",
                   ratio(_lookup(rows, case, "minidynamo eager"), _lookup(rows, case, "torch eager")),
                   1 / 5) for case in SMALL]
    out.append(aim_row("issue 4: first call of tiny GPT-2, minidynamo eager / torch eager",
                       ratio(_lookup(rows, "gpt2", "minidynamo eager"), _lookup(rows, "gpt2", "torch eager")),
                       1 / 4))
    out.append(aim_row("issue 6: cold first call of tiny GPT-2, minidynamo cpp / torch inductor",
                       ratio(_lookup(rows, "gpt2", "minidynamo cpp"), _lookup(rows, "gpt2", "torch inductor")),
                       1 / 5))
    out.append(aim_row("issue 6: warm-cache first call of tiny GPT-2, minidynamo cpp",
                       _lookup(rows, "gpt2", "minidynamo cpp", "warm"), 1.0, unit="s"))
    return out


def run_regions(quick: bool = False, threads: int = 1, repeats: Optional[int] = None) -> dict:
    """Regional compilation: the first call of a 24-block GPT-2 compiled whole and by regions, and of
    one of its blocks alone, with the eager and cpp backends (cold caches); beside it torch's recipe
    (`block.compile()` on each block) with its eager backend and inductor."""
    backends = ("eager",) if quick else ("eager", "cpp")
    steps = [(case, f"minidynamo {b}{suffix}", "cold") for b in backends
             for case, suffix in (("gpt2_block", ""), ("gpt2_24", ""), ("gpt2_24", " regions"))]
    steps += [("gpt2_24", f"torch {b} regions", "cold") for b in (("eager",) if quick else ("eager", "inductor"))]
    rows = measure(steps, repeats or (1 if quick else 3), threads)
    aims = [aim_row(f"regions: first call of 24 GPT-2 blocks by regions / one block alone, {b}",
                    ratio(_lookup(rows, "gpt2_24", f"minidynamo {b} regions"), _lookup(rows, "gpt2_block", f"minidynamo {b}")),
                    2.0) for b in backends]
    return {"rows": rows, "aims": aims}


def run(quick: bool = False, threads: int = 1, cases: Tuple[str, ...] = SMALL + MODELS[:2],
        repeats: Optional[int] = None) -> dict:
    if quick:
        cases = tuple(c for c in cases if c != "mlp" and c != "bert")
    rows = measure(plan(quick, cases), repeats or (1 if quick else 3), threads)
    return {"rows": rows, "aims": aims(rows)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=2, metavar=("CASE", "SYSTEM"), required=True)
    opts = parser.parse_args()
    print(json.dumps(worker(*opts.worker)))
