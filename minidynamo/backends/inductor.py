"""torch's own compiler, for side-by-side comparison with our code generators."""
from typing import Any, Callable, Dict, List, Optional

import torch

from .registry import register_backend


@register_backend
def inductor(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor],
             options: Optional[Dict[str, Any]] = None) -> Callable:
    """torch's inductor; `options` (a mode's, or the user's) patch its config for this graph.
    Graphs calling checkpoint or a torch.func transform on a subgraph run eagerly (see codegen_backend)."""
    from torch._inductor.compile_fx import compile_fx

    from .codegen_backend import calls_traced_body

    if calls_traced_body(gm):
        return gm.forward

    return compile_fx(gm, example_inputs, config_patches=options or {})
