"""explain(fn)(*args): what compiling `fn` produced: graphs, graph breaks with user lines, guards."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, List

import torch

from . import convert_frame, eval_frame
from .exc import UserFrame
from .guards import Guard

_CALL_OPS = ("call_function", "call_method", "call_module")


@dataclass
class BreakReason:
    reason: str
    user_stack: List[UserFrame]

    def __str__(self) -> str:
        return "\n".join([self.reason, *map(str, self.user_stack)])


@dataclass
class ExplainOutput:
    graphs: List[torch.fx.GraphModule] = field(default_factory=list)
    break_reasons: List[BreakReason] = field(default_factory=list)
    out_guards: List[Guard] = field(default_factory=list)
    compile_times: List[float] = field(default_factory=list)
    frames: List[convert_frame.FrameRecord] = field(default_factory=list)

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
        if self.out_guards:
            lines.append("\n--- guards ---")
            lines.extend(f"  {guard}" for guard in self.out_guards)
        if self.compile_times:
            total = sum(r.seconds for r in self.frames)
            lines.append(f"\nCompile time: {total * 1000:.1f} ms over {len(self.frames)} frame(s)")
        return "\n".join(lines)


def explain(fn: Callable) -> Callable[..., ExplainOutput]:
    """`explain(fn)(*args, **kwargs)` compiles and runs `fn` once and reports what happened."""

    def inner(*args: Any, **kwargs: Any) -> ExplainOutput:
        out = ExplainOutput()
        eval_frame.reset()
        convert_frame.compile_listeners.append(out.frames.append)
        try:
            eval_frame.optimize(lambda gm, example_inputs: gm.forward)(fn)(*args, **kwargs)
        finally:
            convert_frame.compile_listeners.remove(out.frames.append)
            eval_frame.reset()
        for record in out.frames:
            out.graphs.extend(record.graphs)
            out.compile_times.extend(record.compile_times)
            if record.check is not None:
                out.out_guards.extend(record.check.guards)
            for reason in record.break_reasons:
                out.break_reasons.append(BreakReason(reason.msg, reason.user_stack))
            if record.unsupported is not None:
                out.break_reasons.append(BreakReason(record.unsupported.msg, record.unsupported.user_stack))
        return out

    return inner
