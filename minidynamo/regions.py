"""Regional compilation: the repeated blocks of a model (a transformer's layers) compiled in place."""
from __future__ import annotations

import collections
from typing import Callable, List

import torch


def repeated_blocks(model: torch.nn.Module) -> List[torch.nn.Module]:
    """The blocks: children of the model's ModuleLists and Sequentials that hold modules of their own
    and whose class repeats among their siblings, outermost first (what is inside a block is its)."""
    blocks: List[torch.nn.Module] = []
    taken: List[str] = []
    for name, module in model.named_modules():  # parents come before their children
        if any(name.startswith(prefix) for prefix in taken):
            continue
        if not isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)):
            continue
        counts = collections.Counter(type(child) for child in module.children())
        for child_name, child in module.named_children():
            if counts[type(child)] > 1 and next(child.children(), None) is not None:
                blocks.append(child)
                taken.append(f"{name}.{child_name}." if name else f"{child_name}.")
    return blocks


def compile_blocks_in_place(model: torch.nn.Module, context: Callable[[Callable], Callable]) -> List[torch.nn.Module]:
    """Compile each repeated block as `block.compile()` does in torch: its calls go through
    `context(block._call_impl)`; the rest of the model runs eagerly. Blocks of one class share their
    compiled entries (guarded by class and by what the trace reads), so N blocks cost one compile."""
    blocks = repeated_blocks(model)
    for block in blocks:
        block._compiled_call_impl = context(block._call_impl)
    return blocks
