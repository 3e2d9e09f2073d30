"""The frame callback: translate a frame the skip policy lets through, and build its cache entry."""
from __future__ import annotations

import contextlib
import gc
import logging
import sys
import time
import types
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional

import torch

from . import _C, config
from .counters import counters
from .exc import REFUSALS, CacheSizeLimitWarning, Unsupported
from .frame_hook import GuardedCode
from .global_state import GlobalState, resume_saved_tensors_hooks, suspend_saved_tensors_hooks
from .guard_set import build_check_function, dropped_entries
from .guards import CheckFunction
from .frame_codegen import transformed_code
from .output_graph import OutputGraph
from .resume_execution import frame_name, is_resume_function
from .skip_policy import frame_skip_reason
from .symbolic_convert import InstructionTranslator

log = logging.getLogger("minidynamo")

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


def dropped_entry_reason(code: types.CodeType) -> Optional[str]:
    """Why this code has no entry left although it compiled before: the latest dropped entry's."""
    if code not in dropped_entries:
        return None
    return f"an earlier entry was dropped: the object its guard on {dropped_entries[code][1]} named was freed"


def reached_limit_by_dropping(code: types.CodeType) -> bool:
    """Whether the live and dropped entries of this code reach its limit: an object new on each call
    that an identity guard names (an argument made by the caller, a value handed on to a resume
    function) dies after each call, and would otherwise compile the code again, forever. A resume
    function's arguments come from the frame before it: the cache size limit; other code (a fresh
    module each time, say) `config.dropped_entry_limit`."""
    if code not in dropped_entries:
        return False
    limit = _C.get_cache_size_limit() if is_resume_function(code) else config.dropped_entry_limit
    return len(_C.get_cache_entries(code)) + dropped_entries[code][0] >= limit


def _on_cache_limit(frame: Any) -> None:
    """Warn (once per code object: it then runs unconverted) that the code reached the limit. The
    warning is the user's to filter; one that a filter turns into an error is not raised into the call."""
    code = frame.f_code
    reason = recompile_reason(frame) or dropped_entry_reason(code)
    try:
        warnings.warn(
            f"minidynamo: function '{code.co_qualname}' ({code.co_filename}:{code.co_firstlineno}) reached the cache "
            f"size limit ({_C.get_cache_size_limit()} entries); it now runs without compiling. "
            f"Last guard failure: {reason}",
            CacheSizeLimitWarning,
            stacklevel=2,
        )
    except Exception:  # noqa: BLE001 - `-W error`: the call goes on as it would have
        log.warning("minidynamo: %s reached the cache size limit (the warning was turned into an error)",
                    code.co_qualname)


_C.set_cache_limit_hook(_on_cache_limit)
# inside a torch.compile'd call, torch's hook converts the frames
_C.set_foreign_callback_getter(torch._C._dynamo.eval_frame.get_eval_frame_callback)


def _release_frames(error: BaseException) -> None:
    """Drop the tracebacks of `error` and the errors chained to it: the frames they hold can hold
    torch's mode guards (inference mode, ...), which would reset a mode whenever they are freed."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        error.__traceback__ = None
        error = error.__context__
    gc.collect()  # frames in cycles (interrupted context-manager generators) too


@contextlib.contextmanager
def old_objects_frozen() -> Iterator[None]:
    """Keep the objects that exist now out of the collector's reach while compiling (gc.freeze):
    a full collection over the whole heap (torch and a model library make it hundreds of thousands
    of objects) costs a tenth of a second or more, and a compile allocates enough to trigger one. Collections
    still free what the compile itself makes; the frozen objects are collected again after. Nothing
    is done where the program froze objects itself or turned the collector off."""
    freeze = gc.isenabled() and gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    try:
        yield
    finally:
        if freeze:
            gc.unfreeze()


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
        if frame_skip_reason(frame, sys._getframe(1)) is not None:
            return None
        if reached_limit_by_dropping(frame.f_code):
            _on_cache_limit(frame)
            return None
        record = FrameRecord(frame.f_code)
        record.recompile_reason = recompile_reason(frame, owner=self) or dropped_entry_reason(frame.f_code)
        if record.recompile_reason is not None:
            counters["recompiles"] += 1
            recompiles_log.info("recompiling %s (%s:%d): %s", frame.f_code.co_qualname, frame.f_code.co_filename,
                                frame.f_code.co_firstlineno, record.recompile_reason)
        start = time.perf_counter()
        state = GlobalState.capture()
        hooks = suspend_saved_tensors_hooks()
        try:
            with old_objects_frozen():
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
            log.debug("running %s unconverted: %s", frame_name(frame.f_code), format_unsupported(e))
            if self.nopython:
                raise Unsupported(format_unsupported(e)) from None
            return None
        except REFUSALS:
            raise
        except Exception as e:
            if config.strict or self.nopython:
                raise
            log.warning("minidynamo: internal error converting %s, running it unconverted: %s",
                        frame.f_code.co_qualname, e, exc_info=log.isEnabledFor(logging.DEBUG))
            record.unsupported = Unsupported(f"internal error: {type(e).__name__}: {e}")
            return None

    def convert(self, frame: Any, record: FrameRecord) -> GuardedCode:
        """Trace the frame, compile the graph, emit the transformed code."""
        output, tracer = self.trace_with_break(frame, static_scalars=False)
        if tracer.ending is None:
            raise Unsupported("the frame ended without returning")
        graph_fn = output.compile()
        code = transformed_code(output, tracer.ending, graph_fn)
        record.break_reasons = list(output.break_reasons)
        record.graphs = [c.graph_module for c in output.compiled]
        record.compile_times = [c.compile_seconds for c in output.compiled]
        record.transformed_code = code
        record.check = build_check_function(frame.f_code, list(output.guards.values()), frame.f_locals,
                                            frame.f_globals, output.namespaces)
        return GuardedCode(record.transformed_code, record.check.fn)

    def trace_with_break(self, frame: Any, static_scalars: bool) -> tuple:
        """Trace the frame; where something unsupported stops it, trace again up to there and break
        the graph (unless nopython; where the frame's own call raised having recorded nothing, the
        first trace ends there instead, see InstructionTranslator.end_before_failed_call). Int and float locals that vary between calls are traced as
        symbolic values only in frames that trace whole: otherwise the frame is traced with them as
        constants, so a symbolic value never costs a graph break its constant would not."""
        try:
            return self.trace(frame, None, static_scalars)
        except Unsupported as e:
            if e.symbolic_scalars:
                return self.trace_with_break(frame, static_scalars=True)
            if self.nopython or e.break_index is None:
                raise
            return self.trace(frame, (e.break_index, e), static_scalars)

    def trace(self, frame: Any, break_at: Optional[tuple], static_scalars: bool) -> tuple:
        frame_state = self.frame_states.setdefault(frame.f_code, {})
        output = OutputGraph(frame.f_code, frame.f_globals, self.compiler_fn, frame.f_locals, dynamic=self.dynamic,
                             frame_state=frame_state, static_scalars=static_scalars)
        tracer = InstructionTranslator(frame, output, break_at)
        state = GlobalState.capture()
        try:
            tracer.run()
        except Unsupported as e:
            e.symbolic_scalars = output.has_symbolic_scalars()
            if self.nopython or e.symbolic_scalars or not tracer.end_before_failed_call(e):
                raise
        finally:  # the trace switches modes as the frame would; the frame has not run yet
            state.restore()
        return output, tracer
