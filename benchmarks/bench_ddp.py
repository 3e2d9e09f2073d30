"""Compiled models under DistributedDataParallel (2 gloo processes, 1 thread each): how long before
the end of backward the first bucket's all-reduce starts, split into one graph per bucket or not.

The lead is the time from the first bucket's all-reduce start to the last one's (the last bucket
is ready when backward's compute ends); with one unsplit compiled backward every gradient arrives
at the end, so the lead is near zero. Medians over the steps after the first (DDP rebuilds its
buckets after step 1). Run: `python -m benchmarks --only ddp` (or `python -m benchmarks.bench_ddp`).
"""
from __future__ import annotations

import statistics
from typing import Dict, List

from benchmarks import ddp_worker

MODEL = dict(width=512, layers=8, bucket_cap_mb=1.0, batch=256)  # one layer (1 MiB) per bucket
SYSTEMS: Dict[str, dict] = {
    "minidynamo cpp, split per bucket": dict(backend="cpp", wrap="compile_outside"),
    "minidynamo cpp, one graph": dict(backend="cpp", wrap="compile_outside", optimize_ddp=False),
    "torch.compile inductor": dict(backend="inductor", wrap="compile_outside", system="torch"),
}


def run(quick: bool) -> dict:
    steps = 6 if quick else 12
    specs = [dict(MODEL, steps=steps, **system) for system in SYSTEMS.values()]
    rows: List[dict] = []
    for name, result in zip(SYSTEMS, ddp_worker.run(specs, timeout=900)):
        rows.append({"system": name, "parts": len(result["parts"]) or None, "equal": result["equal"],
                     "lead_ms": statistics.median(result["first_to_last_ms"][1:]),
                     "step_ms": statistics.median(result["compiled_step_ms"][1:]),
                     "eager_step_ms": statistics.median(result["eager_step_ms"][1:])})
    return {"rows": rows, "model": MODEL}


if __name__ == "__main__":
    for row in run(quick=True)["rows"]:
        print(row)
