"""Runtime configuration. Change attributes directly: `minidynamo.config.cache_size_limit = 4`."""
import os
import sys
import types
from typing import Optional

from . import _C

# Re-raise internal compile errors instead of falling back to eager (for our own tests).
strict: bool = os.environ.get("MINIDYNAMO_STRICT", "") == "1"
# Directory for compiled kernels (cpp/triton backends).
cache_dir: str = os.environ.get(
    "MINIDYNAMO_CACHE_DIR",
    os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "minidynamo"),
)
# Verify mode: each call of a function compiled while it is on also runs eagerly on copies of its
# inputs; a difference raises minidynamo.VerifyError (see verify.py).
verify: bool = os.environ.get("MINIDYNAMO_VERIFY", "") == "1"
# Tolerances for backends that do not run torch's own kernels (None: torch.testing's per dtype).
verify_rtol: Optional[float] = None
verify_atol: Optional[float] = None
# Graphs traced inside DistributedDataParallel's forward are compiled in parts, one per gradient
# bucket, so each bucket's all-reduce overlaps the rest of backward (see backends/ddp_split.py).
optimize_ddp: bool = True
# A kernel build (g++) running longer than compile_progress_after seconds shows how many kernels
# are built on stderr: a live line on a terminal, one line at the end otherwise.
compile_progress: bool = os.environ.get("MINIDYNAMO_COMPILE_PROGRESS", "1") != "0"
compile_progress_after: float = 2.0
# A code object whose entries keep being dropped (an object one of its identity guards names was
# freed: a fresh module, an object new on each call) compiles this many entries in all, live and
# dropped, then runs unconverted (with the cache-limit warning), so it never compiles on every call.
# Resume functions stop at cache_size_limit instead.
dropped_entry_limit: int = 64
# Modules are guarded by their class and by each fact the trace reads of them (attribute values,
# parameter and buffer properties, submodules, hooks), their parameters and buffers read at run time:
# one entry serves every instance alike (the 12 blocks of a model, each compiled on its own). False
# guards each module's identity instead (one entry per instance), as before.
share_module_entries: bool = True


class _ConfigModule(types.ModuleType):
    @property
    def cache_size_limit(self) -> int:
        """Entries per code object before it runs unconverted (with one warning). Default 8;
        0 never compiles (frames run as they are, without warnings)."""
        return _C.get_cache_size_limit()

    @cache_size_limit.setter
    def cache_size_limit(self, value: int) -> None:
        _C.set_cache_size_limit(value)


sys.modules[__name__].__class__ = _ConfigModule
