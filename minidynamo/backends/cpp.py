"""The "cpp" backend: our own fused C++/OpenMP code generator (minidynamo.codegen)."""
from typing import Callable, List

import torch

from .codegen_backend import CodegenBackend
from .registry import register_backend


def _compile_graph(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]) -> Callable:
    from ..codegen.cpp_pipeline import compile_cpp_graph

    return compile_cpp_graph(gm, example_inputs)


def _compile_writing(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]) -> Callable:
    from ..codegen.cpp_pipeline import compile_cpp_graph

    return compile_cpp_graph(gm, example_inputs, input_writes=True)


cpp = register_backend(CodegenBackend("cpp", _compile_graph, _compile_writing), name="cpp")
