"""torch.compile(model, backend="minidynamo_cpp") against backend="inductor" on zoo models, eval,
static and dynamic=True shapes: the first call (trace, compile, build, run; both backends' disk
caches empty) and the steady-state time per call (median over calls, the two backends interleaved
in one process).

    PYTHONPATH=. python benchmarks/bench_torch_compile.py [--models llama,bert,resnet] [--calls 30]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Callable, Dict, List

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-cache-"))

import torch  # noqa: E402

import minidynamo  # noqa: E402
from benchmarks import zoo  # noqa: E402
from minidynamo.backends import lookup_backend  # noqa: E402

BACKENDS = {"minidynamo_cpp": lookup_backend("cpp"), "inductor": "inductor"}


def _timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def measure(name: str, dynamic: bool, calls: int) -> Dict[str, Dict[str, float]]:
    """First-call seconds and median steady-state milliseconds per backend for one model."""
    torch._dynamo.reset()
    runs: Dict[str, Callable[[], object]] = {}
    first: Dict[str, float] = {}
    for backend, compiler in BACKENDS.items():
        model, args, kwargs = zoo.build(name, random=False)
        compiled = torch.compile(model, backend=compiler, dynamic=dynamic)
        runs[backend] = lambda c=compiled, a=args, k=kwargs: c(*a, **k)
        first[backend] = _timed(runs[backend])
    steady: Dict[str, List[float]] = {backend: [] for backend in BACKENDS}
    for _ in range(calls):
        for backend, run in runs.items():  # interleaved: the machine's load affects both alike
            steady[backend].append(_timed(run))
    return {backend: {"first_s": first[backend], "steady_ms": 1e3 * statistics.median(steady[backend])}
            for backend in BACKENDS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="llama,bert,resnet")
    parser.add_argument("--calls", type=int, default=30)
    options = parser.parse_args()
    minidynamo.config.cache_dir = tempfile.mkdtemp(prefix="minidynamo-cache-")
    print(f"{'model':8s} {'shapes':8s} {'backend':15s} {'first call':>11s} {'steady/call':>12s}")
    with torch.no_grad():
        for name in options.models.split(","):
            for dynamic in (False, True):
                for backend, row in measure(name, dynamic, options.calls).items():
                    print(f"{name:8s} {'dynamic' if dynamic else 'static':8s} {backend:15s} "
                          f"{row['first_s']:10.2f}s {row['steady_ms']:10.3f}ms", flush=True)
    print(f"fallbacks to eager: {minidynamo.stats()['backend_fallbacks']}")


if __name__ == "__main__":
    main()
