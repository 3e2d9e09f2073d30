"""minidynamo vs torch.compile vs eager, side by side: `python -m benchmarks` (or `make bench`).

    python -m benchmarks [--quick] [--threads N] [--only SECTION ...] [--out DIR]

Runs the sections below in one process (compile latency spawns a subprocess per measurement),
checks every result against eager, and writes results.json, summary.md and chart.png to DIR
(default benchmarks/results). A section or case that fails is recorded and the run goes on.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Callable, Dict, List, Optional

import torch

from benchmarks import (bench_compile, bench_cppmodels, bench_ddp, bench_generate, bench_libraries, bench_models,
                        bench_overhead, bench_scaling, bench_train, bench_zoo, report)


def kernels(quick: bool, threads: int) -> dict:
    from benchmarks import bench_kernels

    return {"rows": bench_kernels.run(quick, threads)}


SECTIONS: Dict[str, Callable[[bool, int], object]] = {
    "overhead": lambda quick, threads: bench_overhead.run(quick),
    "compile": lambda quick, threads: bench_compile.run(quick, threads),
    "regions": lambda quick, threads: bench_compile.run_regions(quick, threads),
    "kernels": kernels,
    "models": lambda quick, threads: bench_models.run(quick),
    "scaling": lambda quick, threads: bench_scaling.run(quick),
    "zoo": lambda quick, threads: bench_zoo.run(quick),
    "ddp": lambda quick, threads: bench_ddp.run(quick),
    "train": lambda quick, threads: bench_train.run(quick),
    "cppmodels": lambda quick, threads: bench_cppmodels.run(quick, threads),
    "generate": lambda quick, threads: bench_generate.run(quick, threads),
    "libraries": lambda quick, threads: bench_libraries.run(quick, threads),
}


def run_sections(names: List[str], quick: bool, threads: int) -> Dict[str, object]:
    """Each named section's results, or {"error": ...} for a section that raised."""
    out: Dict[str, object] = {}
    for name in names:
        print(f"[benchmarks] {name} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        torch.set_num_threads(threads)
        try:
            out[name] = SECTIONS[name](quick, threads)
        except Exception as exc:  # recorded, the run goes on
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        print(f"[benchmarks] {name} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return out


def main(argv: Optional[List[str]] = None) -> Dict[str, str]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer cases and repeats (about 2 minutes)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--only", nargs="+", choices=list(SECTIONS), default=list(SECTIONS), metavar="SECTION",
                        help=f"sections to run: {', '.join(SECTIONS)}")
    parser.add_argument("--out", default=report.RESULTS_DIR, help="output directory")
    opts = parser.parse_args(argv)
    start = time.perf_counter()
    meta = {"commit": report.commit(), "machine": report.machine(), "threads": opts.threads,
            "quick": opts.quick, "date": time.strftime("%Y-%m-%d %H:%M"),
            "argv": " ".join(argv if argv is not None else sys.argv[1:])}
    results = run_sections(opts.only, opts.quick, opts.threads)
    results["meta"] = {**meta, "duration_s": time.perf_counter() - start}
    paths = report.write(results, opts.out)
    print(open(paths["markdown"]).read())
    return paths


if __name__ == "__main__":
    main()
