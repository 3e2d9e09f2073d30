"""Boolean-mask writes (`x[mask] = v`) as `x.copy_(where(mask, v, x))` before aot_autograd traces gradients.

The backward of a masked write reads `grad[mask]`, whose size depends on the mask's values (a
`nonzero`): aot_autograd cannot trace it and the whole graph would run eagerly. When the mask covers
the leading dims of `x` and `v` fills the remaining dims the same way for every selected position
(wav2vec2's SpecAugment: `hidden[mask_time] = masked_spec_embed`), the write is a `where`, whose
backward has static sizes. Every other masked write is left as it is.
"""
from __future__ import annotations

import copy
import operator
from typing import Any, Optional

import torch
import torch.fx


def _example(arg: Any) -> Any:
    return arg.meta.get("example_value") if isinstance(arg, torch.fx.Node) else arg


def _as_where(node: torch.fx.Node) -> Optional[int]:
    """The number of dims the mask covers, when `node` is a masked write that is a `where`; else None."""
    if node.op != "call_function" or node.target is not operator.setitem:
        return None
    target, mask, value = (_example(a) for a in node.args)
    if not (isinstance(target, torch.Tensor) and isinstance(mask, torch.Tensor)) or mask.dtype != torch.bool:
        return None
    k = mask.dim()
    if k == 0 or k > target.dim() or tuple(mask.shape) != tuple(target.shape[:k]):
        return None
    rest = tuple(target.shape[k:])
    if isinstance(value, torch.Tensor):
        # a value with a dim for the selected positions has eager's own size rule (and error)
        if value.dtype != target.dtype or value.dim() > len(rest) or value.device != target.device:
            return None
        try:
            if tuple(torch.broadcast_shapes(tuple(value.shape), rest)) != rest:
                return None
        except RuntimeError:
            return None
    elif not isinstance(value, (bool, int, float)):
        return None
    return k


def rewrite_mask_writes(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm`, or a copy of it whose masked writes that are `where`s are written as such."""
    if not any(_as_where(n) is not None for n in gm.graph.nodes):
        return gm
    gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    for node in list(gm.graph.nodes):
        k = _as_where(node)
        if k is None:
            continue
        target, mask, value = node.args
        trailing = _example(target).dim() - k
        with gm.graph.inserting_before(node):
            if trailing:
                mask = gm.graph.call_function(operator.getitem, (mask, (Ellipsis,) + (None,) * trailing))
            written = gm.graph.call_function(torch.where, (mask, value, target))
            gm.graph.call_method("copy_", (target, written))
        gm.graph.erase_node(node)
    gm.recompile()
    return gm
