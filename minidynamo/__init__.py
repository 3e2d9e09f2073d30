"""minidynamo: a PEP 523 frame-evaluation JIT for PyTorch."""
from . import config
from .backends import list_backends, lookup_backend, register_backend
from .compile_api import OptimizedModule, compile
from .counters import stats
from .dynamic_shapes import mark_dynamic, mark_static
from .exc import CacheSizeLimitWarning
from .explain import ExplainOutput, explain
from .frame_hook import GuardedCode
from .eval_frame import disable, optimize, optimize_with_callback, reset, run
from .logs import set_logs
from .perf import profile
from .verify import VerifyError

__all__ = [
    "CacheSizeLimitWarning",
    "ExplainOutput",
    "GuardedCode",
    "OptimizedModule",
    "compile",
    "config",
    "disable",
    "explain",
    "list_backends",
    "mark_dynamic",
    "mark_static",
    "lookup_backend",
    "optimize",
    "optimize_with_callback",
    "profile",
    "register_backend",
    "reset",
    "run",
    "stats",
    "set_logs",
    "VerifyError",
]
