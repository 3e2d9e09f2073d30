"""The model zoo (benchmarks/zoo.py) under minidynamo and torch.compile, eager backend, eval mode.

Each (model, system) runs in a fresh `python -m benchmarks.bench_zoo --worker MODEL SYSTEM` process:
graphs and breaks (explain), the first compiled call (after one eager call, so imports and lazy
initialisation are not counted), then compiled and eager calls interleaved for the per-call medians.
Aims (issue 15): first call at most 1/4 of torch's; per call not slower than eager.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Dict, List

from benchmarks.report import model_aims, ratio

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEMS = ("minidynamo", "torch")


def worker(name: str, system: str, repeat: int) -> dict:
    import torch

    from benchmarks import zoo
    from benchmarks.timing import interleaved_medians

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    if system == "torch":
        import torch._dynamo as dynamo
    else:
        import minidynamo as dynamo
    model, args, kwargs = zoo.build(name)
    with torch.no_grad():
        expected = model(*args, **kwargs)
        explained = dynamo.explain(model)(*args, **kwargs)
        dynamo.reset()
        compiled = torch.compile(model, backend="eager") if system == "torch" else dynamo.optimize("eager")(model)
        start = time.perf_counter()
        actual = compiled(*args, **kwargs)
        first = time.perf_counter() - start
        torch.testing.assert_close(actual.to_tuple()[0], expected.to_tuple()[0])
        medians = interleaved_medians({"eager": lambda: model(*args, **kwargs),
                                       "compiled": lambda: compiled(*args, **kwargs)}, 20, repeat)
    return {"graphs": explained.graph_count, "breaks": explained.graph_break_count, "first_s": first,
            "eager_us": medians["eager"] / 1e3, "compiled_us": medians["compiled"] / 1e3}


def _spawn(name: str, system: str, repeat: int) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.bench_zoo", "--worker", name, system, "--repeat", str(repeat)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1][:300] if proc.stderr.strip() else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(quick: bool = False, only: tuple = ()) -> dict:
    from benchmarks import zoo

    repeat = 5 if quick else 11
    rows: List[Dict] = []
    for name in only or zoo.names():
        row: Dict = {"model": name, "family": zoo.family(name)}
        for system in SYSTEMS:
            for key, value in _spawn(name, system, repeat).items():
                row[f"{system}_{key}"] = value
        row["first_call_ratio"] = ratio(row.get("minidynamo_first_s"), row.get("torch_first_s"))
        row["per_call_vs_eager"] = ratio(row.get("minidynamo_compiled_us"), row.get("minidynamo_eager_us"))
        rows.append(row)
        print(f"[zoo] {json.dumps(row)}", file=sys.stderr, flush=True)
    aims = model_aims(rows, [("issue 15: first call, {model}, minidynamo / torch", "first_call_ratio", 0.25),
                             ("issue 15: per call, {model}, compiled / eager", "per_call_vs_eager", 1.0)])
    return {"rows": rows, "aims": aims}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "SYSTEM"))
    parser.add_argument("--repeat", type=int, default=11)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("models", nargs="*")
    opts = parser.parse_args()
    if opts.worker:
        print(json.dumps(worker(*opts.worker, opts.repeat)))
        return
    print(json.dumps(run(opts.quick, tuple(opts.models)), indent=1))


if __name__ == "__main__":
    main()
