"""torch's own compiler, for side-by-side comparison with our code generators."""
from typing import Callable, List

import torch

from .registry import register_backend


@register_backend
def inductor(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]) -> Callable:
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs)
