"""torch's own compiler, for side-by-side comparison with our code generators."""
from typing import Any, Callable, Dict, List, Optional

import torch

from .registry import register_backend


@register_backend
def inductor(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor],
             options: Optional[Dict[str, Any]] = None) -> Callable:
    """torch's inductor; `options` (a mode's, or the user's) patch its config for this graph."""
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs, config_patches=options or {})
