"""GPU benchmark: minidynamo's "triton" backend vs torch.compile (inductor) vs eager, 16M elements.

    python benchmarks/bench_triton_gpu.py [--out results.json] [--reps 15]

Workloads (float32, 4096 x 4096): a pointwise chain, GELU in its tanh form written op by op,
softmax and layer norm over rows, and a full sum. All three implementations run in one process,
interleaved sample by sample; each sample times a burst of back-to-back calls with CUDA events,
and the reported time is the median sample. Two times per implementation:

- `ms`: plain calls, as a user sees them (launch and Python overhead included when the GPU
  work is shorter than the host work);
- `graph_ms`: the same call captured once in a CUDA graph and replayed, i.e. GPU time alone.

GB/s counts compulsory traffic (inputs read once, outputs written once) and is set against the
bandwidth of a large device-to-device copy measured in the same run. Every result is checked
against eager. Needs a CUDA GPU and the triton package; exits with a message otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

M = N = 4096
BURST = 20  # calls per timed sample


def _import_minidynamo():
    """Import minidynamo, building its C extension in place first if this checkout lacks it."""
    try:
        import minidynamo
    except ImportError as e:
        if "_C" not in str(e):
            raise
        print("building minidynamo's C extension (setup.py build_ext --inplace) ...", flush=True)
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=ROOT, check=True)
        import minidynamo
    return minidynamo


def _time_burst(fn: Callable[[], object]) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(BURST):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / BURST


def _graphed(fn: Callable, args) -> Optional[Callable[[], object]]:
    """A replay of `fn(*args)` captured in a CUDA graph, or None if it cannot be captured."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn(*args)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn(*args)
        torch.cuda.synchronize()
        return graph.replay
    except Exception as e:  # capture rules differ between implementations; report, don't fail
        print(f"  (CUDA graph capture failed: {type(e).__name__}: {e})", flush=True)
        torch.cuda.synchronize()
        return None


def interleaved(cases: Dict[str, Callable[[], object]], reps: int) -> Dict[str, float]:
    samples: Dict[str, List[float]] = {k: [] for k in cases}
    for fn in cases.values():
        fn()
    torch.cuda.synchronize()
    for _ in range(reps):
        for name, fn in cases.items():
            samples[name].append(_time_burst(fn))
    return {k: statistics.median(v) for k, v in samples.items()}


def copy_bandwidth(reps: int) -> float:
    """GB/s of a 1 GiB device-to-device copy (read + write)."""
    n = 1 << 28
    src = torch.empty(n, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = interleaved({"copy": lambda: dst.copy_(src)}, reps)["copy"]
    del src, dst
    torch.cuda.empty_cache()
    return 2 * 4 * n / ms / 1e6


def workloads():
    from benchmarks.bench_kernels import chain6, gelu_tanh, layernorm, softmax, total_sum

    numel = M * N

    def dev(*shape):
        return torch.randn(*shape, device="cuda")

    return [
        ("pointwise chain", chain6, lambda: [dev(M, N), dev(M, N)], 12 * numel),
        ("gelu (tanh, op by op)", gelu_tanh, lambda: [dev(M, N)], 8 * numel),
        ("softmax", softmax, lambda: [dev(M, N)], 8 * numel),
        ("layernorm", layernorm, lambda: [dev(M, N), dev(N), dev(N)], 8 * numel),
        ("sum", total_sum, lambda: [dev(M, N)], 4 * numel),
    ]


def _ours(md, fn: Callable, args) -> Callable:
    compiled = md.lookup_backend("triton")(torch.fx.symbolic_trace(fn), args)
    if not hasattr(compiled, "compiled"):
        raise RuntimeError("the triton backend ran this graph eagerly")
    return compiled


def run(reps: int) -> dict:
    md = _import_minidynamo()
    import triton

    md.config.strict = True  # a compile failure must show, not fall back to eager silently
    torch.manual_seed(0)
    peak = copy_bandwidth(reps)
    print(f"{torch.cuda.get_device_name()}: device-to-device copy {peak:.0f} GB/s", flush=True)
    rows = []
    for name, fn, make, nbytes in workloads():
        args = make()
        with torch.no_grad():
            expected = fn(*args)
            impls: Dict[str, Callable] = {"eager": fn}
            compile_s = {}
            torch._dynamo.reset()
            # Ours straight from an FX graph, as bench_kernels does for cpp: both PEP 523 hooks
            # (torch's and ours) are never live in one process at once.
            for key, build in (("inductor", lambda: torch.compile(fn, backend="inductor", dynamic=False)),
                               ("triton", lambda: _ours(md, fn, args))):
                t0 = time.perf_counter()
                impls[key] = build()
                got = impls[key](*args)  # first call compiles (and autotunes, for ours)
                torch.cuda.synchronize()
                compile_s[key] = time.perf_counter() - t0
                tol = dict(rtol=1e-4, atol=1e-2) if name == "sum" else dict(rtol=1e-4, atol=1e-4)
                torch.testing.assert_close(got, expected, **tol)
            plain = interleaved({k: (lambda f=f: f(*args)) for k, f in impls.items()}, reps)
            replays = {k: _graphed(f, args) for k, f in impls.items()}
            graph = interleaved({k: r for k, r in replays.items() if r is not None}, reps)
        row = {"workload": name, "bytes": nbytes, "compile_s": {k: round(v, 2) for k, v in compile_s.items()}}
        for k in impls:
            row[k] = {"ms": round(plain[k], 4), "graph_ms": round(graph[k], 4) if k in graph else None}
            best = graph.get(k, plain[k])
            row[k]["gbps"] = round(nbytes / best / 1e6, 1)
            row[k]["pct_of_copy_bw"] = round(100 * nbytes / best / 1e6 / peak, 1)
        row["triton_vs_inductor"] = round(plain["triton"] / plain["inductor"], 3)
        if "triton" in graph and "inductor" in graph:
            row["triton_vs_inductor_graph"] = round(graph["triton"] / graph["inductor"], 3)
        rows.append(row)
        print(_line(row), flush=True)
    return {
        "device": torch.cuda.get_device_name(), "copy_gbps": round(peak, 1),
        "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
        "burst": BURST, "reps": reps, "rows": rows,
    }


def _line(row: dict) -> str:
    parts = [f"{row['workload']:<22}"]
    for k in ("eager", "inductor", "triton"):
        r = row[k]
        g = f"{r['graph_ms']:.4f}" if r["graph_ms"] is not None else "-"
        parts.append(f"{k} {r['ms']:.4f} ms (graph {g}, {r['gbps']} GB/s, {r['pct_of_copy_bw']}%)")
    parts.append(f"triton/inductor {row['triton_vs_inductor']}x")
    return " | ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--reps", type=int, default=15, help="interleaved samples per implementation")
    opts = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_triton_gpu: no CUDA device available; run this on a machine with an NVIDIA GPU")
    try:
        import triton  # noqa: F401
    except ImportError:
        sys.exit("bench_triton_gpu: the triton package is missing (pip install triton)")
    results = run(opts.reps)
    if opts.out:
        os.makedirs(os.path.dirname(os.path.abspath(opts.out)), exist_ok=True)
        with open(opts.out, "w") as f:
            json.dump(results, f, indent=1)
        print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
