"""Our own code generator: FX graph -> loop IR -> fused C++ kernels (see compile.py)."""
from .compile import compile_graph

__all__ = ["compile_graph"]
