"""Helpers for tests and benchmarks: backends that count what they are given."""
from typing import Callable, List

import torch


class CompileCounter:
    """A backend recording each graph it compiles; runs graphs unchanged."""

    def __init__(self) -> None:
        self.frame_count = 0
        self.op_count = 0
        self.graphs: List[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]) -> Callable:
        self.frame_count += 1
        self.op_count += sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))
        self.graphs.append(gm)
        return gm.forward

    def clear(self) -> None:
        self.frame_count = 0
        self.op_count = 0
        self.graphs.clear()
