"""The steps both pipelines share: re-trace the graph, lower it to the loop IR, schedule kernels."""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
import torch.fx

from .errors import CannotCompile
from .graph_lowering import GraphLowering
from .scheduler import Scheduler, Step
from .sizes import SizeVars, hints_of, symbolic_ints
from .trace import trace


def symbolic_shape_env(example_inputs: Sequence[Any]) -> Optional[Any]:
    """The shape env of the symbolic sizes among the example inputs (fake tensors and SymInts), if any."""
    for t in example_inputs:
        for v in symbolic_ints(t):
            return v.node.shape_env
    return None


def guarded_after_compile(shape_env: Any) -> bool:
    """Whether torch.compile owns `shape_env`: it builds its guards from it after the backend
    compiled, so what the trace assumes about the sizes is checked on every call (as inductor's
    assumptions are)."""
    context = torch._guards.TracingContext.try_get()
    return context is not None and context.fake_mode is not None and context.fake_mode.shape_env is shape_env


def lower_and_schedule(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                       device_type: str = "cpu", input_writes: bool = False,
                       generated_conv: Optional[Callable[..., bool]] = None) -> Tuple[GraphLowering, List[Step]]:
    """`generated_conv(x_size, w_size, out_size, dtype, transposed)`: whether the code generator
    runs such a convolution itself (so it needs no layout chosen for oneDNN)."""
    shape_env = symbolic_shape_env(example_inputs)
    size_vars = SizeVars(shape_env) if shape_env is not None else None
    guards = len(shape_env.guards) if shape_env is not None else 0
    with hints_of(size_vars):
        traced, inputs = trace(gm, example_inputs, input_writes)
        lowering = GraphLowering(traced, inputs, device_type=device_type, size_vars=size_vars,
                                 generated_conv=generated_conv)
        lowering.run()
        if shape_env is not None:
            # minidynamo's guards are final: code assuming more about the sizes would be wrong for others
            if len(shape_env.guards) > guards and not guarded_after_compile(shape_env):
                raise CannotCompile(f"the kernels would assume {shape_env.guards[guards].expr} about symbolic sizes")
            size_vars.check_bound()
        keep = {o.buffer for o in lowering.outputs if o.kind == "buffer"}
        return lowering, Scheduler(lowering.nodes, keep).run()
