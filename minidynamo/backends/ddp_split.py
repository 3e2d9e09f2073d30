"""Graphs traced inside DistributedDataParallel's forward, split where DDP's gradient buckets end, so that
each bucket's all-reduce starts while the rest of backward still runs."""
from __future__ import annotations

import itertools
import operator
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.passes.split_module import split_module

from .. import config


def active_ddp_module() -> Optional[torch.nn.Module]:
    """The DistributedDataParallel module whose forward is running, if any."""
    if not torch.distributed.is_available():
        return None
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel._get_active_ddp_module()


def bucket_limits(ddp: torch.nn.Module) -> Iterator[int]:
    """Byte limits of DDP's buckets in the order gradients become ready (its rebuilt buckets):
    the user's per-bucket list if given, else a small first bucket (by default) then the cap."""
    bucket_config = ddp._bucket_config
    if bucket_config.per_bucket_bytes_caps:
        caps = bucket_config.per_bucket_bytes_caps
        return itertools.chain(caps, itertools.repeat(caps[-1]))
    return itertools.chain([bucket_config.first_bucket_bytes_cap], itertools.repeat(bucket_config.bucket_bytes_cap))


def partition_by_bucket(gm: torch.fx.GraphModule, param_bytes: Dict[torch.fx.Node, int],
                        limits: Iterator[int]) -> Dict[torch.fx.Node, int]:
    """Each op's part, numbered in forward order. Walking backward (the order gradients become
    ready), a part closes once the parameters its ops read fill a bucket, as DDP fills its buckets."""
    reverse_part: Dict[torch.fx.Node, int] = {}
    part, filled, limit, seen = 0, 0, next(limits), set()
    for node in reversed(gm.graph.nodes):
        if node.op in ("placeholder", "output"):
            continue
        if filled >= limit and any(p in param_bytes and p not in seen for p in node.all_input_nodes):
            part, filled, limit = part + 1, 0, next(limits)
        reverse_part[node] = part
        for p in node.all_input_nodes:
            if p in param_bytes and p not in seen:
                seen.add(p)
                filled += param_bytes[p]
    parts = {node: part - k for node, k in reverse_part.items()}
    for node in gm.graph.nodes:  # a tuple's items stay with the op that made the tuple
        if node.target is operator.getitem and node.args[0] in parts:
            parts[node] = parts[node.args[0]]
    return parts


class _CompileEachPart(torch.fx.Interpreter):
    """Runs the split graph on fake inputs, compiling each part with the inputs it meets."""

    def __init__(self, split_gm: torch.fx.GraphModule, compiler_fn: Callable, fake_mode: FakeTensorMode):
        super().__init__(split_gm)
        self.compiler_fn = compiler_fn
        self.fake_mode = fake_mode

    def call_module(self, target: str, args: Sequence[Any], kwargs: Dict[str, Any]) -> Any:
        part = self.fetch_attr(target)
        compiled = self.compiler_fn(part, list(args))
        setattr(self.module, target, _CompiledPart(compiled))
        with self.fake_mode:
            return part(*args, **kwargs)


class _CompiledPart(torch.nn.Module):
    def __init__(self, compiled: Callable):
        super().__init__()
        self.compiled = compiled

    def forward(self, *args: Any) -> Any:
        return self.compiled(*args)


def compile_split(compiler_fn: Callable, gm: torch.fx.GraphModule, example_inputs: List[Any],
                  param_bytes: Dict[torch.fx.Node, int], ddp: torch.nn.Module) -> Callable:
    """`gm` compiled as one part per DDP bucket (one part: compiled whole)."""
    parts = partition_by_bucket(gm, param_bytes, bucket_limits(ddp))
    if len(set(parts.values())) < 2:
        return compiler_fn(gm, example_inputs)
    split_gm = split_module(gm, None, lambda node: parts[node], keep_original_order=True)
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [fake_mode.from_tensor(t) for t in example_inputs]
    _CompileEachPart(split_gm, compiler_fn, fake_mode).run(*fakes)
    return split_gm.forward


def compile_for_ddp(compiler_fn: Callable, gm: torch.fx.GraphModule, example_inputs: List[Any],
                    real_inputs: Callable[[], Sequence[Any]]) -> Optional[Callable]:
    """Split compilation when the graph is traced inside DDP's forward (and `config.optimize_ddp`),
    with `real_inputs()` the graph's inputs as the frame has them; None when it does not apply."""
    ddp = active_ddp_module() if config.optimize_ddp else None
    if ddp is None or not all(isinstance(t, torch.Tensor) for t in example_inputs):
        return None
    if any(isinstance(s, torch.SymInt) for t in example_inputs for s in t.shape):
        return None
    bucketed = {id(p) for p in ddp.module.parameters() if p.requires_grad}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    try:
        values = real_inputs()
    except Exception:  # an input generated code reads in a way `eval` cannot: compile it whole
        return None
    param_bytes = {node: value.numel() * value.element_size()
                   for node, value in zip(placeholders, values) if id(value) in bucketed}
    return compile_split(compiler_fn, gm, example_inputs, param_bytes, ddp)
