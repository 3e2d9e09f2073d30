"""The C++ pipeline: trace -> lower -> schedule (shared with the Triton pipeline) -> render C++ ->
build -> a CppGraph calling the kernels."""
from __future__ import annotations

from typing import Sequence, Union

import torch
import torch.fx

from .cpp_build import load_library
from .errors import CannotCompile
from .cpp_render import render_cpp
from .cpp_wrapper import CppGraph
from .pipeline import lower_and_schedule
from .sizes import hints_of


def compile_cpp_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor],
                      input_writes: bool = False) -> Union[CppGraph, "InputWriting"]:
    """`input_writes`: a graph changing its inputs in place is taken (see InputWriting)."""
    lowering, steps = lower_and_schedule(gm, example_inputs, input_writes=input_writes)
    writes = lowering.gm.meta.get("input_writes")
    keep = {o.buffer for o in lowering.outputs if o.kind == "buffer"}
    symbols = [str(s) for s in lowering.size_vars.symbols] if lowering.size_vars is not None else []
    with hints_of(lowering.size_vars):
        source, rendered, groups = render_cpp(steps, lowering.buffers, keep, symbols)
    lib = load_library(source) if rendered else None
    if not writes:
        return CppGraph(lowering, steps, lib, rendered, groups, source, gm.forward)
    inputs = set(lowering.input_names) | set(lowering.constants)
    if any(o.kind == "buffer" and o.buffer in inputs for o in lowering.outputs[-len(writes):]):
        raise CannotCompile("a changed input's new value is a view of an input")
    return InputWriting(CppGraph(lowering, steps, lib, rendered, groups, source,
                                 lambda *args: (gm.forward(*args), None)), writes)


class InputWriting:
    """A compiled graph that changes inputs in place: its kernels write the new values to buffers
    of their own, copied into the inputs (one foreach copy) once the whole graph has run, so an
    error midway leaves the inputs as they were and eager can run the graph again. Its eager
    fallback changes the inputs itself and returns no new values."""

    def __init__(self, graph: CppGraph, writes: Sequence[int]):
        self.graph = graph
        graph.writes_inputs = self.writes = list(writes)
        self.times = graph.times
        run_graph, copy = graph.run, torch._foreach_copy_
        positions = self.writes

        def run(*args):
            out, new = run_graph(*args)
            if new is not None:
                copy([args[i] for i in positions], new)
            return out
        run.compiled = self  # type: ignore[attr-defined]  # keeps the graph (and its profile) alive
        self.run = run

    def __call__(self, *args: torch.Tensor):
        return self.run(*args)
