"""The Triton pipeline: trace -> lower -> schedule (shared with the C++ pipeline) -> render Triton
-> load -> a TritonGraph launching the kernels on the graph's device."""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.fx

from .errors import CannotCompile
from .pipeline import lower_and_schedule
from .scheduler import Kernel
from .sizes import hints_of
from .triton_cache import interpreting, load_module
from .triton_render import render_triton
from .triton_wrapper import TritonGraph


def graph_device(tensors: Sequence[torch.Tensor]) -> torch.device:
    """The single device of a graph's tensors, if the kernels can run there."""
    devices = {t.device for t in tensors if isinstance(t, torch.Tensor)}
    if len(devices) > 1:
        raise CannotCompile(f"tensors on several devices: {sorted(map(str, devices))}")
    device = devices.pop() if devices else torch.device("cpu")
    if device.type == "cpu" and not interpreting():
        raise CannotCompile("CPU tensors need TRITON_INTERPRET=1 (the GPU runs CUDA tensors only)")
    if device.type not in ("cpu", "cuda"):
        raise CannotCompile(f"device {device}")
    return device


def compile_triton_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor],
                         persistent_max: Optional[int] = None) -> TritonGraph:
    device = graph_device(example_inputs)
    lowering, steps = lower_and_schedule(gm, example_inputs, device.type)
    graph_device(list(lowering.example_inputs) + list(lowering.constants.values()))
    kernels = [s for s in steps if isinstance(s, Kernel)]
    symbols = [str(s) for s in lowering.size_vars.symbols] if lowering.size_vars is not None else []
    with hints_of(lowering.size_vars):
        source, rendered = render_triton(kernels, lowering.buffers, persistent_max, symbols)
    module = load_module(source) if kernels else None
    return TritonGraph(lowering, steps, module, rendered, source, gm.forward, device)
