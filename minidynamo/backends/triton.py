"""The "triton" backend: the shared loop IR emitted as Triton kernels (minidynamo.codegen.triton).

Graphs on CUDA tensors run their kernels on the GPU. Without a CUDA device, importing this module
sets TRITON_INTERPRET=1 (unless the variable is already set), and the same kernels run on CPU
tensors in Triton's interpreter: slow, but exact enough to test the whole backend anywhere. With
a GPU present, graphs on CPU tensors run eagerly.

Needs the optional `triton` package (`pip install 'minidynamo[triton]'`). Like the cpp backend,
graphs that need gradients go through aot_autograd with both passes compiled here, and anything
the code generator cannot take runs eagerly instead.
"""
from __future__ import annotations

import copy
import logging
import os
from typing import Callable, List

import torch

from .. import config
from .cpp import _has_eager_only_ops, _needs_grad, _static_tensors
from .registry import register_backend

log = logging.getLogger(__name__)

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

try:
    import triton as _triton  # noqa: F401
except ImportError as e:
    raise ImportError(
        "the 'triton' backend needs the triton package: pip install 'minidynamo[triton]' "
        "(or pip install triton)") from e


def compile_inference(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]) -> Callable:
    """Compile a graph whose outputs need no autograd history; eager fallback on any failure."""
    from ..codegen.triton_wrapper import compile_triton_graph

    if not _static_tensors(example_inputs):
        return gm.forward
    try:
        return compile_triton_graph(gm, example_inputs)
    except Exception:
        if config.strict:
            raise
        log.warning("triton backend: falling back to eager", exc_info=True)
        return gm.forward


def _compile_autograd(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]) -> Callable:
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func

    output = next(n for n in gm.graph.nodes if n.op == "output")
    single = not isinstance(output.args[0], (tuple, list))
    if single:
        # aot_autograd wants tuple outputs; wrap a copy and unwrap the result.
        gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
        out = next(n for n in gm.graph.nodes if n.op == "output")
        out.args = ((out.args[0],),)
        gm.recompile()

    def boxed(g: torch.fx.GraphModule, inputs: List[torch.Tensor]) -> Callable:
        return make_boxed_func(compile_inference(g, inputs))

    compiled = aot_module_simplified(gm, example_inputs, fw_compiler=boxed, bw_compiler=boxed)
    return (lambda *args: compiled(*args)[0]) if single else compiled


@register_backend(name="triton")
def triton(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]) -> Callable:
    if not _static_tensors(example_inputs) or _has_eager_only_ops(gm):
        return gm.forward
    if _needs_grad(gm, example_inputs):
        return _compile_autograd(gm, example_inputs)
    compiled = compile_inference(gm, example_inputs)
    if compiled == gm.forward:
        return compiled

    def run(*args):
        # Compiled without autograd: if the caller now wants gradients, keep them correct.
        if _needs_grad(gm, args):
            return gm.forward(*args)
        return compiled(*args)
    run.compiled = compiled  # type: ignore[attr-defined]
    return run
