"""The C++ pipeline: trace -> lower -> schedule (shared with the Triton pipeline) -> render C++ ->
build -> a CppGraph calling the kernels."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.fx

from .cpp_build import load_library
from .cpp_render import render_cpp
from .cpp_wrapper import CppGraph
from .pipeline import lower_and_schedule
from .sizes import hints_of


def compile_cpp_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> CppGraph:
    lowering, steps = lower_and_schedule(gm, example_inputs)
    keep = {o.buffer for o in lowering.outputs if o.kind == "buffer"}
    symbols = [str(s) for s in lowering.size_vars.symbols] if lowering.size_vars is not None else []
    with hints_of(lowering.size_vars):
        source, rendered, groups = render_cpp(steps, lowering.buffers, keep, symbols)
    lib = load_library(source) if rendered else None
    return CppGraph(lowering, steps, lib, rendered, groups, source, gm.forward)
