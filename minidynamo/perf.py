"""Where a compiled cpp graph's time goes: `minidynamo.profile(fn, *args)` and `MINIDYNAMO_LOGS=perf`.

Each compiled C++ graph can swap its generated call for a copy that reads the clock after every step
(kernel group, extern call, buffer allocation, input and output handling), so profiling costs nothing
while off. `profile` warms `fn` up, times `repeat` calls with every live graph instrumented and
prints time per call: per graph (forward / backward / inference), per step, per extern op, and the
part spent outside compiled graphs (guards, aot_autograd's runtime, the autograd engine). With the
`perf` log channel on, every graph is instrumented from its creation and the totals are logged at exit.
"""
from __future__ import annotations

import atexit
import collections
import itertools
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from . import logs

CLOCKS = {"cpu": time.thread_time_ns, "wall": time.perf_counter_ns}
_numbers = itertools.count(1)


@dataclass
class GraphTimes:
    """One graph's clock readings: ns per step (in step order) and per whole call."""

    number: int
    role: str  # forward, backward or inference
    labels: List[Tuple[str, str]]  # (category, label) per step
    step_ns: List[int] = field(default_factory=list)
    calls: int = 0
    total_ns: int = 0
    now: Callable[[], int] = time.perf_counter_ns  # the clock read after each step

    def __post_init__(self) -> None:
        self.step_ns = [0] * len(self.labels)

    def tick(self, step: int, start: int) -> int:
        """Charge the time since `start` to `step`; the next step starts now."""
        self.step_ns[step] += self.now() - start
        return self.now()

    def call(self, start: int) -> None:
        self.calls += 1
        self.total_ns += self.now() - start

    def reset(self) -> None:
        self.step_ns = [0] * len(self.labels)
        self.calls = self.total_ns = 0

    @property
    def name(self) -> str:
        return f"{self.role} graph {self.number}"


class Profiled:
    """What an instrumentable graph provides (cpp_wrapper.CppGraph)."""

    times: GraphTimes

    def instrument(self, on: bool) -> None:
        raise NotImplementedError


_graphs: "weakref.WeakSet[Any]" = weakref.WeakSet()
_always_on = False


def register(graph: Profiled) -> None:
    """A new instrumentable graph; instrumented at once while the perf channel is on."""
    _graphs.add(graph)
    if _always_on:
        graph.instrument(True)


def new_number() -> int:
    return next(_numbers)


@dataclass
class Report:
    """Per-call times (ms) of a profiled function; str() is the printed table."""

    calls: int
    total_ms: float
    graphs: List[Tuple[str, float, Dict[str, float]]]  # name, ms per call, ms per category
    steps: List[Tuple[float, str, str]]  # ms per call, graph, step label
    externs: List[Tuple[float, int, str]]  # ms per call, steps, op
    unit: str = "per call"

    @property
    def outside_ms(self) -> float:
        return self.total_ms - sum(ms for _, ms, _ in self.graphs)

    def __str__(self) -> str:
        lines = [f"minidynamo profile: {self.total_ms:.3f} ms {self.unit} ({self.calls} calls)"]
        for name, ms, cats in self.graphs:
            parts = ", ".join(f"{c} {v:.3f}" for c, v in sorted(cats.items(), key=lambda kv: -kv[1]))
            lines.append(f"  {name:<22} {ms:8.3f} ms   [{parts}]")
        lines.append(f"  {'outside compiled graphs':<22} {self.outside_ms:8.3f} ms   "
                     "[guards, aot_autograd runtime, autograd engine, eager ops]")
        if self.externs:
            lines.append(f"extern calls by op (ms {self.unit}, steps):")
            lines += [f"  {ms:8.3f}  {n:3d}  {op}" for ms, n, op in self.externs]
        lines.append(f"slowest steps (ms {self.unit}):")
        lines += [f"  {ms:8.3f}  {g:<20} {label}" for ms, g, label in self.steps[:25]]
        return "\n".join(lines)


def _report(graphs: Sequence[Profiled], calls: int, total_ns: int) -> Report:
    per = 1e6 * max(calls, 1)
    rows, steps = [], []
    externs: Dict[str, List[float]] = collections.defaultdict(lambda: [0.0, 0])
    for g in sorted(graphs, key=lambda g: g.times.number):
        t = g.times
        if not t.calls:
            continue
        cats: Dict[str, float] = collections.defaultdict(float)
        for (cat, label), ns in zip(t.labels, t.step_ns):
            cats[cat] += ns / per
            steps.append((ns / per, t.name, f"{cat}: {label}"))
            if cat == "extern":
                externs[label][0] += ns / per
                externs[label][1] += 1
        cats["wrapper"] = cats.get("wrapper", 0.0) + max(0.0, t.total_ns / per - sum(cats.values()))
        rows.append((t.name, t.total_ns / per, dict(cats)))
    steps.sort(reverse=True)
    ext = sorted(((ms, int(n), op) for op, (ms, n) in externs.items()), reverse=True)
    return Report(calls, total_ns / per, rows, steps, ext)


def profile(fn: Callable, *args: Any, repeat: int = 20, warmup: int = 2, show: bool = True,
            clock: str = "cpu", **kwargs: Any) -> Report:
    """Call `fn(*args, **kwargs)` `warmup` times (compiling it), then `repeat` times with every
    compiled cpp graph instrumented; print (unless `show` is false) and return the per-call times.
    `clock`: "cpu", the CPU time of the calling thread (what the work costs, whatever else the
    machine runs; run with one thread), or "wall"."""
    for _ in range(warmup):
        fn(*args, **kwargs)
    graphs, now = list(_graphs), CLOCKS[clock]
    for g in graphs:
        g.times.reset()
        g.times.now = now
        g.instrument(True)
    try:
        start = now()
        for _ in range(repeat):
            fn(*args, **kwargs)
        total = now() - start
    finally:
        for g in graphs:
            g.instrument(_always_on)
            g.times.now = time.perf_counter_ns
    report = _report(graphs, repeat, total)
    if show:
        print(report)
    return report


def _log_totals() -> None:
    graphs = [g for g in _graphs if g.times.calls]
    if graphs:
        report = _report(graphs, 1, sum(g.times.total_ns for g in graphs))
        report.unit, report.calls = "in all calls", sum(g.times.calls for g in graphs)
        logs.channel("perf").info("time in compiled cpp graphs since the channel was turned on:\n%s", report)


def _follow_channel(enabled: Set[str]) -> None:
    global _always_on
    on = "perf" in enabled
    if on != _always_on:
        _always_on = on
        for g in list(_graphs):
            g.instrument(on)


logs.watch(_follow_channel)
atexit.register(_log_totals)
