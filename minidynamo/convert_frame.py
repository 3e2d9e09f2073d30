"""The frame callback: decide whether to convert a frame, translate it, and build its cache entry."""
from __future__ import annotations

import collections
import gc
import logging
import os
import site
import time
import types
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import torch

from . import _C, config
from .eval_frame import GuardedCode
from .exc import BackendCompilerFailed, Unsupported
from .global_state import GlobalState, resume_saved_tensors_hooks, suspend_saved_tensors_hooks
from .guard_set import build_check_function
from .guards import CheckFunction
from .output_graph import OutputGraph
from .symbolic_convert import InstructionTranslator

log = logging.getLogger("minidynamo")

_SKIP_DIRS = tuple(
    path + os.sep
    for path in (
        os.path.dirname(os.path.abspath(__file__)),
        os.path.dirname(torch.__file__),
        os.path.dirname(os.__file__),  # the standard library (not the venv, not site-packages)
    )
)
# Third-party packages can live under the standard library's directory; they are user code to us.
_SITE_DIRS = tuple(path + os.sep for path in site.getsitepackages() + [site.getusersitepackages()])
# Libraries whose frames are never converted, even when called from a graph break.
_THIRD_PARTY_SKIP = {"_pytest", "pytest", "pluggy", "numpy", "tqdm", "tabulate", "pandas", "sklearn", "hypothesis",
                     "networkx", "IPython", "depyf", "triton", "sympy", "typing_extensions", "packaging"}
# torch.nn's modules are user-facing code: their forward frames are converted like the user's own.
_CONVERTIBLE_TORCH_DIR = os.path.join(os.path.dirname(torch.__file__), "nn", "modules") + os.sep
_MODULE_BASE_FILE = torch.nn.modules.module.__file__
# The demo plays the user: its functions are compiled although it ships inside the package.
_USER_CODE_FILES = {os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo.py")}


def skip_reason(code: types.CodeType, f_globals: Optional[Dict[str, Any]] = None) -> Optional[str]:
    """Why frames of `code` are never converted (library code), or None."""
    module = str(f_globals.get("__name__", "")) if f_globals is not None else ""
    if module.startswith("namedtuple_"):
        return "namedtuple internals"
    if module.split(".")[0] in _THIRD_PARTY_SKIP:
        return "a library that is not traced"
    filename = code.co_filename
    if filename in _USER_CODE_FILES:
        return None
    if filename.startswith(_CONVERTIBLE_TORCH_DIR):  # forward methods (and their resume functions) only
        is_forward = code.co_name == "forward" or code.co_name.endswith("_in_forward")
        return None if is_forward and filename != _MODULE_BASE_FILE else "library code"
    if filename.startswith(_SKIP_DIRS[:2]) or (filename.startswith(_SKIP_DIRS[2]) and not filename.startswith(_SITE_DIRS)):
        return "library code"
    if filename.startswith("<") and filename not in ("<string>", "<stdin>") and not filename.startswith("<ipython"):
        return "generated code"
    return None


def _holds_tensors(value: Any, depth: int = 1) -> bool:
    if isinstance(value, (torch.Tensor, torch.nn.Module)):
        return True
    if depth > 0 and type(value) in (list, tuple, dict):
        items = value.values() if type(value) is dict else value
        return any(_holds_tensors(v, depth - 1) for v in items)
    return depth > 0 and any(_holds_tensors(v, 0) for v in getattr(value, "__dict__", {}).values())


def may_use_tensors(frame: Any) -> bool:
    """Frames with no tensors in reach (arguments, or globals the code names) have nothing to
    trace: they run as they are."""
    if any(_holds_tensors(v) for v in frame.f_locals.values()):
        return True
    names = frame.f_code.co_names
    return any(frame.f_globals.get(n) is torch or _holds_tensors(frame.f_globals.get(n), 0) for n in names)


@dataclass
class FrameRecord:
    """What converting one frame produced, for explain() and logs."""

    code: types.CodeType
    graphs: List[torch.fx.GraphModule] = field(default_factory=list)
    compile_times: List[float] = field(default_factory=list)
    check: Optional[CheckFunction] = None
    transformed_code: Optional[types.CodeType] = None
    unsupported: Optional[Unsupported] = None  # why the frame runs unconverted
    recompile_reason: Optional[str] = None  # why the latest entry of this code did not match
    break_reasons: List[Unsupported] = field(default_factory=list)
    seconds: float = 0.0


compile_listeners: List[Callable[[FrameRecord], None]] = []
counters: "collections.Counter[str]" = collections.Counter()
recompiles_log = logging.getLogger("minidynamo.recompiles")


def recompile_reason(frame: Any, owner: Any = None) -> Optional[str]:
    """Why the most recent entry of this code (compiled by `owner`, or by anyone) rejects the frame."""
    for check_fn, _, entry_owner in _C.get_cache_entries(frame.f_code):
        if owner is not None and entry_owner is not owner:
            continue
        check = getattr(check_fn, "check_function", None)  # set on the guard sets we build
        if check is None:
            return "the guards of the latest entry failed"
        return check.failure_reason(frame.f_locals, frame.f_globals) or "the guards of the latest entry failed"
    return None


def _on_cache_limit(frame: Any) -> None:
    code = frame.f_code
    reason = recompile_reason(frame)
    warnings.warn(
        f"minidynamo: function '{code.co_qualname}' ({code.co_filename}:{code.co_firstlineno}) reached the cache "
        f"size limit ({_C.get_cache_size_limit()} entries); it now runs without compiling. "
        f"Last guard failure: {reason}",
        RuntimeWarning,
        stacklevel=2,
    )


_C.set_cache_limit_hook(_on_cache_limit)


def stats() -> Dict[str, int]:
    """Counters since the last reset(): frames seen by the hook, frames compiled, cache hits and
    misses, recompiles, graph breaks, frames left unconverted, frames run eagerly because their
    compiled graph raised."""
    hook = _C.stats()
    return {
        "frames_seen": hook["frames"],
        "compiled": counters["compiled"],
        "cache_hits": hook["hits"],
        "cache_misses": hook["misses"],
        "recompiles": counters["recompiles"],
        "graph_breaks": counters["graph_breaks"],
        "unconverted": counters["unconverted"],
        "eager_reruns": hook["reruns"],
    }


def _release_frames(error: BaseException) -> None:
    """Drop the tracebacks of `error` and the errors chained to it: the frames they hold can hold
    torch's mode guards (inference mode, ...), which would reset a mode whenever they are freed."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        error.__traceback__ = None
        error = error.__context__
    gc.collect()  # frames in cycles (interrupted context-manager generators) too


def format_unsupported(error: Unsupported) -> str:
    lines = [error.msg]
    lines.extend(str(frame) for frame in error.user_stack)
    return "\n".join(lines)


class ConvertFrame:
    """The callback the C core calls on a cache miss."""

    def __init__(self, compiler_fn: Callable, nopython: bool = False, dynamic: Optional[bool] = None) -> None:
        self.compiler_fn = compiler_fn
        self.nopython = nopython
        self.dynamic = dynamic
        # per code object: what earlier compiles saw (sizes per input), for automatic dynamic shapes
        self.frame_states: "weakref.WeakKeyDictionary[types.CodeType, Dict[str, Any]]" = weakref.WeakKeyDictionary()

    def __call__(self, frame: Any) -> Optional[GuardedCode]:
        if skip_reason(frame.f_code, frame.f_globals) is not None or not may_use_tensors(frame):
            return None
        record = FrameRecord(frame.f_code)
        record.recompile_reason = recompile_reason(frame, owner=self)
        if record.recompile_reason is not None:
            counters["recompiles"] += 1
            recompiles_log.info("recompiling %s (%s:%d): %s", frame.f_code.co_qualname, frame.f_code.co_filename,
                                frame.f_code.co_firstlineno, record.recompile_reason)
        start = time.perf_counter()
        state = GlobalState.capture()
        hooks = suspend_saved_tensors_hooks()
        try:
            return self.convert_or_fall_back(frame, record)
        except BaseException as e:
            if not isinstance(e, Exception):  # KeyboardInterrupt, SystemExit: the user's, once we are clean
                _release_frames(e)
            raise
        finally:
            state.restore()
            resume_saved_tensors_hooks(hooks)
            record.seconds = time.perf_counter() - start
            for listener in compile_listeners:
                listener(record)

    def convert_or_fall_back(self, frame: Any, record: FrameRecord) -> Optional[GuardedCode]:
        """The frame's cache entry, or None to run it unconverted (what stopped it is in `record`)."""
        try:
            guarded = self.convert(frame, record)
            counters["compiled"] += 1
            counters["graph_breaks"] += len(record.break_reasons)
            return guarded
        except Unsupported as e:
            counters["unconverted"] += 1
            record.unsupported = e
            log.debug("running %s unconverted: %s", frame.f_code.co_name, format_unsupported(e))
            if self.nopython:
                raise Unsupported(format_unsupported(e)) from None
            return None
        except BackendCompilerFailed:
            raise
        except Exception as e:
            if config.strict or self.nopython:
                raise
            log.warning("minidynamo: internal error converting %s, running it unconverted: %s",
                        frame.f_code.co_qualname, e, exc_info=log.isEnabledFor(logging.DEBUG))
            record.unsupported = Unsupported(f"internal error: {type(e).__name__}: {e}")
            return None

    def convert(self, frame: Any, record: FrameRecord) -> GuardedCode:
        """Trace the frame; if something unsupported stops it, trace again up to that point and
        break the graph there (unless nopython)."""
        try:
            output, tracer = self.trace(frame, None)
        except Unsupported as e:
            if self.nopython or e.break_index is None:
                raise
            output, tracer = self.trace(frame, (e.break_index, e))
        record.break_reasons = list(output.break_reasons)
        if tracer.generated_code is None:
            raise Unsupported("the frame ended without returning")
        record.graphs = [c.graph_module for c in output.compiled]
        record.compile_times = [c.compile_seconds for c in output.compiled]
        record.transformed_code = tracer.generated_code
        record.check = build_check_function(frame.f_code, list(output.guards.values()), frame.f_locals,
                                            frame.f_globals, output.namespaces)
        return GuardedCode(tracer.generated_code, record.check.fn)

    def trace(self, frame: Any, break_at: Optional[tuple]) -> tuple:
        frame_state = self.frame_states.setdefault(frame.f_code, {})
        output = OutputGraph(frame.f_code, frame.f_globals, self.compiler_fn, dynamic=self.dynamic,
                             frame_state=frame_state)
        tracer = InstructionTranslator(frame, output, break_at)
        state = GlobalState.capture()
        try:
            tracer.run()
        finally:  # the trace switches modes as the frame would; the frame has not run yet
            state.restore()
        return output, tracer
