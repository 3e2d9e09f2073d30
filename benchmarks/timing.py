"""Timing helpers shared by the benchmarks: interleaved repeats, medians, never single times."""
import statistics
import time
from typing import Callable, Dict


def per_call_ns(fn: Callable[[], object], number: int, clock: Callable[[], int] = time.perf_counter_ns) -> float:
    start = clock()
    for _ in range(number):
        fn()
    return (clock() - start) / number


def interleaved_medians(cases: Dict[str, Callable[[], object]], number: int, repeat: int,
                        clock: Callable[[], int] = time.perf_counter_ns) -> Dict[str, float]:
    """Median per-call ns of each case, with the cases' repeats interleaved so drift hits all alike.
    `clock`: wall time by default; `time.thread_time_ns` counts only the time this thread ran (on
    a machine shared with other work, a long call is descheduled more often than a short one)."""
    samples = {name: [] for name in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            samples[name].append(per_call_ns(fn, number, clock))
    return {name: statistics.median(values) for name, values in samples.items()}
