"""Cold and warm compile latency of the "cpp" backend on the tiny GPT-2 and BERT.

    python benchmarks/bench_cpp_models.py [--inductor] [--threads N]

Each measurement is a fresh subprocess: model construction, imports and one eager call happen
before the clock; the clock covers `minidynamo.optimize("cpp")(model)(*args)` under no_grad.
"cold" gets an empty MINIDYNAMO_CACHE_DIR, "warm" reuses the one the cold run filled. The child
also reports how many graphs the backend received, g++ runs, g++ seconds, and the per-call time
against eager. --inductor adds torch.compile(backend="inductor") cold (slow: ~30 s).
Results go to benchmarks/results/cpp_models.json.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results", "cpp_models.json")


def child(model_name: str, system: str) -> dict:
    sys.path.insert(0, ROOT)
    import torch
    import minidynamo
    from minidynamo.codegen import cpp_build as build
    from benchmarks.models import build as build_model, check_close

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    seconds = [0.0]
    compile_ = build._compile

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return compile_(*a, **k)
        finally:
            seconds[0] += time.perf_counter() - t0
    build._compile = timed
    graphs = [0]
    from minidynamo.backends import lookup_backend
    cpp = lookup_backend("cpp")

    def counting(gm, inputs):
        graphs[0] += 1
        return cpp(gm, inputs)

    model, args = build_model(model_name)
    model.eval()
    with torch.no_grad():
        expected = model(*args)
        t0 = time.perf_counter()
        if system == "inductor":
            opt = torch.compile(model, backend="inductor")
        else:
            opt = minidynamo.optimize(counting)(model)
        got = opt(*args)
        first = time.perf_counter() - t0
        err = check_close(got, expected)
        per_call = {}
        for name, f in (("eager", model), (system, opt)):
            for _ in range(10):
                f(*args)
            t0 = time.perf_counter()
            for _ in range(100):
                f(*args)
            per_call[name] = (time.perf_counter() - t0) / 100 * 1e3
    return {"first_call_s": round(first, 3), "max_abs_err": err, "graphs": graphs[0],
            "gxx_runs": build.stats["compiles"], "gxx_s": round(seconds[0], 3),
            "eager_ms": round(per_call["eager"], 3), "compiled_ms": round(per_call[system], 3)}


def spawn(model_name: str, system: str, cache: str, threads: int) -> dict:
    env = dict(os.environ, MINIDYNAMO_CACHE_DIR=os.path.join(cache, "md"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"), BENCH_THREADS=str(threads),
               PYTHONPATH=ROOT, PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", model_name, system],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2)
    parser.add_argument("--inductor", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    opts = parser.parse_args()
    if opts.child:
        print(json.dumps(child(*opts.child)))
        return
    rows = []
    for model_name in ("gpt2", "bert"):
        with tempfile.TemporaryDirectory(prefix="bench-cpp-") as cache:
            for state in ("cold", "warm"):
                rows.append({"model": model_name, "system": "cpp", "cache": state,
                             "threads": opts.threads, **spawn(model_name, "cpp", cache, opts.threads)})
                print(json.dumps(rows[-1]), flush=True)
        if opts.inductor:
            with tempfile.TemporaryDirectory(prefix="bench-ind-") as cache:
                rows.append({"model": model_name, "system": "inductor", "cache": "cold",
                             "threads": opts.threads,
                             **spawn(model_name, "inductor", cache, opts.threads)})
                print(json.dumps(rows[-1]), flush=True)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
