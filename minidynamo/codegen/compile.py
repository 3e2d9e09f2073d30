"""The pipeline: trace to core ATen -> lower to IR -> schedule -> emit C++ -> build -> wrap."""
from __future__ import annotations

import functools
from typing import Dict, Sequence

import torch
import torch.fx
from torch._decomp import core_aten_decompositions, get_decompositions
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.experimental.proxy_tensor import make_fx

from .build import load_library
from .cpp import emit_source
from .lowering import GraphLowering, Unsupported
from .scheduler import Scheduler
from .wrapper import CompiledGraph, CppGraph

aten = torch.ops.aten


@functools.lru_cache(maxsize=None)
def decompositions() -> Dict:
    """Core ATen, plus composite ops we prefer as their parts so they fuse with their neighbours
    (softmax, layer_norm, batch_norm, gelu, variance) and linear layers whose bias becomes an epilogue."""
    table = dict(core_aten_decompositions())
    table.update(get_decompositions([
        aten._softmax, aten._log_softmax, aten.native_layer_norm, aten.gelu, aten.mean, aten.var,
        aten.var_mean, aten.std, aten.std_mean, aten.addmm, aten.hardtanh, aten.leaky_relu,
        aten.elu, aten.softplus, aten.logsumexp, aten.silu, aten.hardsigmoid, aten.hardswish,
        aten.mish, aten.addcmul, aten.addcdiv, aten.lerp, aten.native_batch_norm,
        aten._native_batch_norm_legit_no_training, aten._native_batch_norm_legit_functional,
    ]))
    return table


def trace(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]):
    """Re-trace `gm` functionalised and decomposed; returns (graph, fresh inputs like the examples)."""
    with unset_fake_temporarily():
        inputs = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
                  for t in example_inputs]
    traced = _functional_trace(gm, inputs)
    if _mutating_op(traced) is not None:
        # Decompositions run below functionalization, so an in-place op inside one (GRU's
        # decomposition adds in place) survives; decomposing first and then functionalising
        # the decomposed graph removes those, leaving only genuine input mutations.
        traced = _functional_trace(_decomposed_trace(gm, inputs), inputs)
    target = _mutating_op(traced)
    if target is not None:
        raise Unsupported(f"graph mutates its inputs ({target})")
    return traced, inputs


def _functional_trace(fn, inputs) -> torch.fx.GraphModule:
    with torch.no_grad():
        return make_fx(torch.func.functionalize(fn, remove="mutations"),
                       decomposition_table=decompositions(), tracing_mode="fake",
                       _allow_non_fake_inputs=True)(*inputs)


def _decomposed_trace(fn, inputs) -> torch.fx.GraphModule:
    with torch.no_grad():
        return make_fx(fn, decomposition_table=decompositions(), tracing_mode="fake",
                       _allow_non_fake_inputs=True)(*inputs)


def _mutating_op(gm: torch.fx.GraphModule):
    for node in gm.graph.nodes:
        target = node.target
        if isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
            return target
    return None


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> CompiledGraph:
    traced, inputs = trace(gm, example_inputs)
    lowering = GraphLowering(traced, inputs)
    lowering.run()
    keep = {o.buffer for o in lowering.outputs if o.kind == "buffer"}
    steps = Scheduler(lowering.nodes, keep).run()
    source, emitted, groups = emit_source(steps, lowering.buffers, keep)
    lib = load_library(source) if emitted else None
    return CppGraph(lowering, steps, lib, emitted, groups, source, gm.forward)
