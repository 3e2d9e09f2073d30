"""minidynamo: a PEP 523 frame-evaluation JIT for PyTorch."""
from . import config
from .backends import list_backends, lookup_backend, register_backend
from .explain import explain
from .eval_frame import GuardedCode, disable, optimize, optimize_with_callback, reset, run

__all__ = [
    "GuardedCode",
    "config",
    "disable",
    "explain",
    "list_backends",
    "lookup_backend",
    "optimize",
    "optimize_with_callback",
    "register_backend",
    "reset",
    "run",
]
