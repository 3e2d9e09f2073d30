"""Backends that run the captured graph with torch's own kernels."""
from typing import Callable, List

import torch

from .registry import register_backend


@register_backend
def eager(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]) -> Callable:
    return gm.forward


@register_backend
def aot_eager(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]) -> Callable:
    """Trace forward and backward through aot_autograd, then run both with eager kernels (graphs
    inside torch.func transforms run as they are: aot_autograd cannot trace their tensors)."""
    from torch._dynamo.backends.common import aot_autograd

    from .codegen_backend import under_functorch

    if under_functorch(gm, example_inputs):
        return gm.forward

    return aot_autograd(fw_compiler=lambda g, _: g.forward)(gm, example_inputs)
