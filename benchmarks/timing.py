"""Timing helpers shared by the benchmarks: interleaved repeats, medians, never single times."""
import statistics
import time
from typing import Callable, Dict


def per_call_ns(fn: Callable[[], object], number: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(number):
        fn()
    return (time.perf_counter_ns() - start) / number


def interleaved_medians(cases: Dict[str, Callable[[], object]], number: int, repeat: int) -> Dict[str, float]:
    """Median per-call ns of each case, with the cases' repeats interleaved so drift hits all alike."""
    samples = {name: [] for name in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            samples[name].append(per_call_ns(fn, number))
    return {name: statistics.median(values) for name, values in samples.items()}
