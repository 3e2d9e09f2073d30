"""explain(fn)(*args): what compiling `fn` produced: graphs, graph breaks with user lines, guards,
and for each converted frame its transformed code (decompiled) and guard check function; the
same reports written to the per-frame log channels."""
from __future__ import annotations

import dis
import functools
import io
import logging
import re
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Union

import torch

from . import _C, convert_frame, counters, eval_frame, logs, pyversion
from .exc import UserFrame
from .guards import Guard
from .resume_execution import frame_name

_CALL_OPS = ("call_function", "call_method", "call_module")
_RESUME_NAME = re.compile(r"__resume_at_(\d+)_in_(\w+)")
# depyf prints a constant it cannot spell (a function object) as this string literal.
_DEPYF_CONST = re.compile(r"'__co_consts\[(\d+)\]'")


@dataclass
class BreakReason:
    reason: str
    user_stack: List[UserFrame]

    def __str__(self) -> str:
        return "\n".join([self.reason, *map(str, self.user_stack)])


@dataclass
class DecompiledCode:
    source: str
    exact: bool  # False: a `dis` listing, because depyf is not installed, does not read this bytecode or failed


def _const_names(code: types.CodeType, first_graph: int) -> Dict[int, str]:
    """Readable names for the constants of generated code that are objects: the compiled graphs
    (called through `disable` wrappers) numbered as in explain's graph list, and functions."""
    names: Dict[int, str] = {}
    graph = first_graph
    for index, const in enumerate(code.co_consts):
        if isinstance(const, _C.CallbackWrapper):
            names[index] = f"__compiled_graph_{graph}"
            graph += 1
        elif isinstance(const, types.FunctionType):
            names[index] = const.__name__
    return names


def _listing(code: types.CodeType, why: str) -> DecompiledCode:
    listing = io.StringIO()
    dis.dis(code, file=listing, depth=0)
    return DecompiledCode(f"# bytecode listing ({why})\n{listing.getvalue()}", exact=False)


def decompile(code: types.CodeType, first_graph: int = 0) -> DecompiledCode:
    """Python source for `code` via depyf when it can; a `dis` listing otherwise."""
    if not pyversion.DECOMPILED_BY_DEPYF:
        return _listing(code, f"depyf does not decompile CPython {sys.version_info[0]}.{sys.version_info[1]} bytecode")
    try:
        import depyf

        source = depyf.decompile(code)
    except Exception as e:  # ImportError, or code depyf does not handle
        return _listing(code, "depyf is not installed" if isinstance(e, ImportError) else f"depyf failed: {e}")
    names = _const_names(code, first_graph)
    return DecompiledCode(_DEPYF_CONST.sub(lambda m: names.get(int(m.group(1)), m.group(0)), source).strip(), True)


@dataclass
class FrameReport:
    """One converted frame: a user function or a resume function after a graph break."""

    record: convert_frame.FrameRecord
    first_graph: int  # index in ExplainOutput.graphs of this frame's first graph

    @property
    def name(self) -> str:
        return frame_name(self.record.code)

    @property
    def resumes(self) -> Optional[str]:
        """For a resume function, 'fn at offset N': where in which function it continues."""
        match = _RESUME_NAME.fullmatch(self.name)
        return f"{match.group(2)} at offset {match.group(1)}" if match else None

    @property
    def graph_indices(self) -> List[int]:
        return list(range(self.first_graph, self.first_graph + len(self.record.graphs)))

    @functools.cached_property
    def transformed(self) -> Optional[DecompiledCode]:
        code = self.record.transformed_code
        return decompile(code, self.first_graph) if code is not None else None

    @property
    def check_source(self) -> Optional[str]:
        return self.record.check.source_code if self.record.check is not None else None

    @property
    def guards(self) -> List[Guard]:
        return self.record.check.guards if self.record.check is not None else []

    @property
    def location(self) -> str:
        return f"{self.record.code.co_filename}:{self.record.code.co_firstlineno}"

    def __str__(self) -> str:
        title = f"resume function: {self.name} (continues {self.resumes})" if self.resumes else self.name
        lines = [f"\n--- frame {title}  [{self.location}] ---"]
        if self.record.unsupported is not None:
            lines.append(f"runs unconverted: {self.record.unsupported.msg}")
        if self.transformed is not None:
            kind = "transformed code" if self.transformed.exact else "transformed code, not decompiled"
            lines += [f"# {kind}:", self.transformed.source]
        if self.check_source is not None:
            lines += ["# guard check:", self.check_source.rstrip()]
        return "\n".join(lines)


@dataclass
class ExplainOutput:
    graphs: List[torch.fx.GraphModule] = field(default_factory=list)
    break_reasons: List[BreakReason] = field(default_factory=list)
    out_guards: List[Guard] = field(default_factory=list)
    compile_times: List[float] = field(default_factory=list)
    frames: List[convert_frame.FrameRecord] = field(default_factory=list)
    # Graphs (or calls) the backend's code generator left to eager torch, with why.
    backend_fallbacks: List[counters.Fallback] = field(default_factory=list)

    @classmethod
    def from_frames(cls, frames: Iterable[convert_frame.FrameRecord]) -> "ExplainOutput":
        out = cls()
        for record in frames:
            out.frames.append(record)
            out.graphs.extend(record.graphs)
            out.compile_times.extend(record.compile_times)
            if record.check is not None:
                out.out_guards.extend(record.check.guards)
            for reason in record.break_reasons:
                out.break_reasons.append(BreakReason(reason.msg, reason.user_stack))
            if record.unsupported is not None:
                out.break_reasons.append(BreakReason(record.unsupported.msg, record.unsupported.user_stack))
        return out

    @property
    def recompile_reasons(self) -> List[str]:
        """For each frame compiled again within this run: `function: the guard that failed`."""
        return [f"{r.code.co_qualname}: {r.recompile_reason}" for r in self.frames if r.recompile_reason]

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    @property
    def graph_break_count(self) -> int:
        return len(self.break_reasons)

    @property
    def ops_per_graph(self) -> List[List[torch.fx.Node]]:
        return [[n for n in g.graph.nodes if n.op in _CALL_OPS] for g in self.graphs]

    @property
    def op_count(self) -> int:
        return sum(len(ops) for ops in self.ops_per_graph)

    @property
    def compile_seconds(self) -> float:
        return sum(r.seconds for r in self.frames)

    @functools.cached_property
    def frame_reports(self) -> List[FrameReport]:
        reports, first_graph = [], 0
        for record in self.frames:
            reports.append(FrameReport(record, first_graph))
            first_graph += len(record.graphs)
        return reports

    def render(self, path: str) -> str:
        """Write a self-contained HTML report to `path`; returns the path."""
        from .report import render_html

        with open(path, "w", encoding="utf-8") as f:
            f.write(render_html(self))
        return path

    def __str__(self) -> str:
        lines = [f"Graph count: {self.graph_count}", f"Graph break count: {self.graph_break_count}",
                 f"Op count: {self.op_count}"]
        for i, graph in enumerate(self.graphs):
            lines.append(f"\n--- graph {i} ({len(self.ops_per_graph[i])} ops) ---")
            lines.append(graph.code.strip())
        if self.break_reasons:
            lines.append("\n--- break reasons ---")
            for i, reason in enumerate(self.break_reasons, 1):
                lines.append(f"{i}. {reason}")
        if self.backend_fallbacks:
            lines.append("\n--- run eagerly by the backend ---")
            lines.extend(f"  {fallback}" for fallback in self.backend_fallbacks)
        if self.recompile_reasons:
            lines.append("\n--- recompiles ---")
            lines.extend(f"  {reason}" for reason in self.recompile_reasons)
        if self.out_guards:
            lines.append("\n--- guards ---")
            lines.extend(f"  {guard}" for guard in self.out_guards)
        lines.extend(map(str, self.frame_reports))
        if self.compile_times:
            lines.append(f"\nCompile time: {self.compile_seconds * 1000:.1f} ms over {len(self.frames)} frame(s)")
        return "\n".join(lines)


def _no_backend(gm: torch.fx.GraphModule, example_inputs: List[Any]) -> Callable:
    return gm.forward


def explain(fn: Callable, backend: Union[str, Callable, None] = None) -> Callable[..., ExplainOutput]:
    """`explain(fn)(*args, **kwargs)` compiles and runs `fn` once and reports what happened. With
    a `backend` ("cpp", ...) the graphs are also compiled by it, and the report lists the graphs it
    ran eagerly instead, with why."""

    def inner(*args: Any, **kwargs: Any) -> ExplainOutput:
        frames: List[convert_frame.FrameRecord] = []
        eval_frame.reset()
        convert_frame.compile_listeners.append(frames.append)
        try:
            eval_frame.optimize(backend if backend is not None else _no_backend)(fn)(*args, **kwargs)
            fallbacks = list(counters.fallbacks)
        finally:
            convert_frame.compile_listeners.remove(frames.append)
            eval_frame.reset()
        out = ExplainOutput.from_frames(frames)
        out.backend_fallbacks = fallbacks
        return out

    return inner


# ---- the per-frame log channels (see logs.py) ----


def _kernel_sources(code) -> Iterable[str]:
    """Generated kernel source of the compiled graphs a transformed code calls, where the backend
    keeps it (the cpp and triton backends' compiled graphs have a `source`)."""
    for const in code.co_consts:
        source = getattr(getattr(const, "__wrapped__", None), "source", None)
        if isinstance(source, str):
            yield source


def log_frame(record: convert_frame.FrameRecord) -> None:
    """Write one converted frame to the channels that are on."""
    name = f"{frame_name(record.code)} ({record.code.co_filename}:{record.code.co_firstlineno})"
    graph, guards, breaks = logs.channel("graph"), logs.channel("guards"), logs.channel("breaks")
    if graph.isEnabledFor(logging.DEBUG):
        for i, gm in enumerate(record.graphs):
            graph.debug("graph %d of %s:\n%s", i, name, gm.code.strip())
    if guards.isEnabledFor(logging.DEBUG) and record.check is not None:
        guards.debug("guards of %s:\n%s\n%s", name, "\n".join(f"  {g}" for g in record.check.guards),
                     record.check.source_code.rstrip())
    if breaks.isEnabledFor(logging.DEBUG):
        for reason in ExplainOutput.from_frames([record]).break_reasons:
            breaks.debug("graph break in %s: %s", name, reason)
    if record.transformed_code is None:
        return
    bytecode = logs.channel("bytecode")
    if bytecode.isEnabledFor(logging.DEBUG):
        bytecode.debug("original bytecode of %s:\n%s\ntransformed bytecode:\n%s", name,
                       dis.Bytecode(record.code).dis(), dis.Bytecode(record.transformed_code).dis())
    output_code = logs.channel("output_code")
    if output_code.isEnabledFor(logging.DEBUG):
        report = ExplainOutput.from_frames([record]).frame_reports[0]
        output_code.debug("transformed code of %s:\n%s", name, report.transformed.source)
        for source in _kernel_sources(record.transformed_code):
            output_code.debug("kernel source for %s:\n%s", name, source)


def _follow_frame_channels(enabled: Set[str]) -> None:
    """Keep `log_frame` a compile listener exactly while a per-frame channel is on."""
    listening = log_frame in convert_frame.compile_listeners
    if enabled & set(logs.FRAME_CHANNELS) and not listening:
        convert_frame.compile_listeners.append(log_frame)
    elif not enabled & set(logs.FRAME_CHANNELS) and listening:
        convert_frame.compile_listeners.remove(log_frame)


logs.watch(_follow_frame_channels)
