"""Kernel benchmark: our "cpp" backend vs torch.compile(backend="inductor") vs eager.

    python benchmarks/bench_kernels.py [--quick] [--threads N]

All three run in one process, interleaved call by call; times are medians. Every result is checked
against eager. Memory-bound workloads report achieved GB/s (compulsory traffic: each input read
once, each output written once) next to the machine's bandwidth measured in the same run.
Results go to benchmarks/results/kernels.json and a markdown table on stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from minidynamo.backends import lookup_backend  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "kernels.json")


def chain6(x, y):
    return ((x * y + x) * 0.5 - y).abs() + 1.0


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def softmax(x):
    return F.softmax(x, dim=-1)


def layernorm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def total_sum(x):
    return x.sum()


def matmul_bias_gelu(x, w, b):
    return F.gelu(torch.addmm(b, x, w), approximate="tanh")


def triad(a, b):
    return a + 2.5 * b


def workloads(quick: bool) -> List[Tuple[str, Callable, Callable[[], list], Optional[int]]]:
    """(name, fn, make_inputs, compulsory bytes or None for compute-bound)."""
    sizes = [("1M", (1024, 1024))] + ([] if quick else [("16M", (4096, 4096))])
    out = []
    for tag, (m, n) in sizes:
        numel = m * n
        out += [
            (f"chain6 {tag}", chain6, lambda m=m, n=n: [torch.randn(m, n), torch.randn(m, n)], 12 * numel),
            (f"gelu_tanh {tag}", gelu_tanh, lambda m=m, n=n: [torch.randn(m, n)], 8 * numel),
            (f"softmax {tag}", softmax, lambda m=m, n=n: [torch.randn(m, n)], 8 * numel),
            (f"layernorm {tag}", layernorm,
             lambda m=m, n=n: [torch.randn(m, n), torch.randn(n), torch.randn(n)], 8 * numel),
            (f"sum {tag}", total_sum, lambda m=m, n=n: [torch.randn(m, n)], 4 * numel),
            (f"mm+bias+gelu {tag}", matmul_bias_gelu,
             lambda m=m, n=n: [torch.randn(m, 256), torch.randn(256, n) / 16, torch.randn(n)], None),
        ]
    for name, fn in (("softmax (4096,1024)", softmax), ("layernorm (4096,1024)", layernorm)):
        def make(fn=fn):
            x = torch.randn(4096, 1024)
            return [x] if fn is softmax else [x, torch.randn(1024), torch.randn(1024)]
        out.append((name, fn, make, 8 * 4096 * 1024))
    return out


def _time_interleaved(fns: Dict[str, Callable], args, reps: int) -> Dict[str, float]:
    times: Dict[str, List[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn(*args)
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def _reps_for(seconds_per_call: float, budget: float) -> int:
    return max(5, min(200, int(budget / max(seconds_per_call, 1e-6))))


def measure_bandwidth(threads: int, quick: bool) -> Dict[str, float]:
    """GB/s of a 64 MiB-per-array triad, as torch runs it and as our generated kernel runs it."""
    n = 16 * 1024 * 1024
    a, b = torch.randn(n), torch.randn(n)
    out = torch.empty(n)
    ours = lookup_backend("cpp")(torch.fx.symbolic_trace(triad), [a, b])
    fns = {"torch": lambda a, b: torch.add(a, b, alpha=2.5, out=out), "ours": ours,
           "copy": lambda a, b: out.copy_(a)}
    ms = _time_interleaved(fns, (a, b), 10 if quick else 30)
    return {"triad_torch": 12 * n / ms["torch"] / 1e6, "triad_ours": 12 * n / ms["ours"] / 1e6,
            "copy_torch": 8 * n / ms["copy"] / 1e6}


def run(quick: bool = False, threads: int = 1, only: Sequence[str] = ()) -> List[dict]:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cpp = lookup_backend("cpp")
    bw = measure_bandwidth(threads, quick)
    peak = max(bw.values())
    rows = [{"workload": "bandwidth", "threads": threads, **{k: round(v, 2) for k, v in bw.items()}}]
    budget = 1.0 if quick else 3.0
    for name, fn, make, nbytes in workloads(quick):
        if only and not any(o in name for o in only):
            continue
        args = make()
        with torch.no_grad():
            t0 = time.perf_counter()
            ours = cpp(torch.fx.symbolic_trace(fn), args)
            compile_ours = time.perf_counter() - t0
            torch._dynamo.reset()
            inductor = torch.compile(fn, backend="inductor", dynamic=False)
            t0 = time.perf_counter()
            inductor(*args)
            compile_inductor = time.perf_counter() - t0
            expected = fn(*args)
            errors = {}
            for k, f in (("cpp", ours), ("inductor", inductor)):
                got = f(*args)
                got = got[0] if isinstance(got, (tuple, list)) else got
                torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-3)
                errors[k] = float((got - expected).abs().max())
            t0 = time.perf_counter()
            fn(*args)
            reps = _reps_for(time.perf_counter() - t0, budget)
            ms = _time_interleaved({"eager": fn, "inductor": inductor, "cpp": ours}, args, reps)
        row = {
            "workload": name, "threads": threads, "reps": reps,
            "eager_ms": round(ms["eager"], 4), "inductor_ms": round(ms["inductor"], 4),
            "cpp_ms": round(ms["cpp"], 4),
            "speedup_vs_eager": round(ms["eager"] / ms["cpp"], 3),
            "speedup_vs_inductor": round(ms["inductor"] / ms["cpp"], 3),
            "compile_s_cpp": round(compile_ours, 2), "compile_s_inductor": round(compile_inductor, 2),
            "max_abs_err_cpp": errors["cpp"], "max_abs_err_inductor": errors["inductor"],
        }
        if nbytes:
            row["cpp_gbps"] = round(nbytes / ms["cpp"] / 1e6, 2)
            row["eager_gbps"] = round(nbytes / ms["eager"] / 1e6, 2)
            row["inductor_gbps"] = round(nbytes / ms["inductor"] / 1e6, 2)
            row["cpp_pct_of_bandwidth"] = round(100 * row["cpp_gbps"] / peak, 1)
        rows.append(row)
    return rows


def markdown(rows: Sequence[dict]) -> str:
    bw = rows[0]
    lines = [f"threads={bw['threads']}; bandwidth: triad torch {bw['triad_torch']} GB/s, "
             f"triad ours {bw['triad_ours']} GB/s, copy torch {bw['copy_torch']} GB/s", "",
             "| workload | eager ms | inductor ms | cpp ms | vs eager | vs inductor | cpp GB/s | % of bw |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows[1:]:
        lines.append(f"| {r['workload']} | {r['eager_ms']:.3f} | {r['inductor_ms']:.3f} | "
                     f"{r['cpp_ms']:.3f} | {r['speedup_vs_eager']:.2f}x | "
                     f"{r['speedup_vs_inductor']:.2f}x | {r.get('cpp_gbps', '-')} | "
                     f"{r.get('cpp_pct_of_bandwidth', '-')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1M-element sizes, fewer repetitions")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", nargs="*", default=[], help="workloads whose name contains one of these (not saved)")
    opts = parser.parse_args()
    rows = run(opts.quick, opts.threads, opts.only)
    if opts.only:
        print(markdown(rows))
        return
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    existing = []
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            existing = [r for r in json.load(f) if r.get("threads") != opts.threads]
    with open(RESULTS, "w") as f:
        json.dump(existing + rows, f, indent=1)
    print(markdown(rows))


if __name__ == "__main__":
    main()
