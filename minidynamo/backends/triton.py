"""The "triton" backend: the shared loop IR emitted as Triton kernels (minidynamo.codegen.triton_pipeline).

Graphs on CUDA tensors run their kernels on the GPU. Without a CUDA device, importing this module
sets TRITON_INTERPRET=1 (unless the variable is already set), and the same kernels run on CPU
tensors in Triton's interpreter: slow, but exact enough to test the whole backend anywhere. With
a GPU present, graphs on CPU tensors run eagerly.

Needs the optional `triton` package (`pip install 'minidynamo[triton]'`). Like the cpp backend,
graphs that need gradients go through aot_autograd with both passes compiled here, and anything
the code generator cannot take runs eagerly instead.
"""
import os
from typing import Callable, List

import torch

from .codegen_backend import CodegenBackend
from .registry import register_backend

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

try:
    import triton as _triton  # noqa: F401
except ImportError as e:
    raise ImportError(
        "the 'triton' backend needs the triton package: pip install 'minidynamo[triton]' "
        "(or pip install triton)") from e


def _compile_graph(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]) -> Callable:
    from ..codegen.triton_pipeline import compile_triton_graph

    return compile_triton_graph(gm, example_inputs)


triton = register_backend(CodegenBackend("triton", _compile_graph), name="triton")
