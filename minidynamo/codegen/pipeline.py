"""The steps both pipelines share: re-trace the graph, lower it to the loop IR, schedule kernels."""
from __future__ import annotations

from typing import List, Sequence, Tuple

import torch
import torch.fx

from .graph_lowering import GraphLowering
from .scheduler import Scheduler, Step
from .trace import trace


def lower_and_schedule(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor],
                       device_type: str = "cpu") -> Tuple[GraphLowering, List[Step]]:
    traced, inputs = trace(gm, example_inputs)
    lowering = GraphLowering(traced, inputs, device_type=device_type)
    lowering.run()
    keep = {o.buffer for o in lowering.outputs if o.kind == "buffer"}
    return lowering, Scheduler(lowering.nodes, keep).run()
