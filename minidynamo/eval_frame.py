"""Python side of the eval-frame hook: contexts and decorators that set this thread's callback.

The callback protocol (see csrc/eval_frame.c): `callback(frame: _C.FrameInfo)` returns a
`GuardedCode` to cache and run, or None to never convert that code again (until `reset()`).
Setting the callback to `False` runs cached code without compiling anything new.
"""
from __future__ import annotations

import gc
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch

from . import _C, config
from .counters import reset_counters
from .frame_hook import GuardedCode, is_disabled, with_callback  # noqa: F401 - is_disabled beside disable
from .guard_set import dropped_entries
from .skip_policy import never_convert_module

FrameCallback = Union[None, bool, Callable[[Any], Optional[GuardedCode]]]


class _CallbackContext:
    """Sets this thread's eval-frame callback inside a `with` block or around each call."""

    verifiable = False  # minidynamo's own compiling contexts: checked against eager in verify mode

    def __init__(self, callback: FrameCallback, remake: Optional[Tuple[Callable, tuple]] = None) -> None:
        self.callback = callback
        self._saved: List[FrameCallback] = []
        self._remake = remake

    def __reduce__(self) -> Tuple[Callable, tuple]:
        # Copied and pickled as the call that made it: the C callback and its caches are not data.
        if self._remake is None:
            raise TypeError(f"cannot pickle a context made from the raw callback {self.callback!r}")
        return self._remake

    def __enter__(self) -> "_CallbackContext":
        self._saved.append(_C.set_eval_frame(self.callback))
        return self

    def __exit__(self, *exc_info: Any) -> None:
        _C.set_eval_frame(self._saved.pop())

    def __call__(self, fn: Callable) -> Callable:
        if isinstance(fn, torch.nn.Module):
            from .compile_api import OptimizedModule  # compile_api imports this module

            return OptimizedModule(fn, self)
        target = fn
        if config.verify and self.verifiable:
            from .verify import Verified

            target = Verified(fn, self.callback)
        return with_callback(target, self.callback, wrapped=fn)


def optimize_with_callback(callback: Callable[[Any], Optional[GuardedCode]]) -> _CallbackContext:
    """Convert frames with a raw frame callback (the low-level form of `optimize`)."""
    if not callable(callback):
        raise TypeError(f"callback must be callable, got {callback!r}")
    return _CallbackContext(callback)


def run(fn: Optional[Callable] = None) -> Union[_CallbackContext, Callable]:
    """Run code already in the cache, compiling nothing new."""
    context = _CallbackContext(False, remake=(run, ()))
    return context(fn) if fn is not None else context


def disable(fn: Optional[Callable] = None) -> Union[_CallbackContext, Callable]:
    """Run `fn` (or a `with` block) with no conversion at all."""
    context = _CallbackContext(None, remake=(disable, ()))
    return context(fn) if fn is not None else context


def reset() -> None:
    """Drop every compiled entry, so that every function compiles afresh on its next call."""
    _C.reset()
    dropped_entries.clear()
    reset_counters()
    for callback in list(_CALLBACKS.values()):  # what earlier compiles saw (automatic dynamic shapes)
        callback.frame_states.clear()


def _on_gc(phase: str, info: Dict[str, int]) -> None:
    if phase == "start" and info.get("generation") == 2:
        _C.drop_function_caches()


# Library frames can run while a callback is set (context managers, gc callbacks).
never_convert_module(globals())
gc.callbacks.append(_on_gc)


def optimize(
    backend: Union[str, Callable] = "eager", nopython: bool = False, dynamic: Optional[bool] = None
) -> _CallbackContext:
    """Compile the frames run inside (a decorator or a `with` block) with `backend`.

    `backend` is a registered name ("eager", "cpp", "triton", "inductor", ...) or a callable
    `(gm: torch.fx.GraphModule, example_inputs) -> callable`, torch.compile's backend contract.
    With `nopython=True` anything that cannot be captured raises instead of running eagerly.
    `dynamic`: True traces sizes symbolically from the start, False never does, None (default)
    makes a dimension symbolic after a recompile caused by its size changing.
    """
    from .backends import lookup_backend

    context = _CallbackContext(_shared_callback(lookup_backend(backend), nopython, dynamic),
                               remake=(optimize, (backend, nopython, dynamic)))
    context.verifiable = True
    return context


# Live callbacks by (id of the backend, nopython, dynamic): each holds its backend, so the id is
# not reused while it lives.
_CALLBACKS: "weakref.WeakValueDictionary[Tuple[int, bool, Optional[bool]], Any]" = weakref.WeakValueDictionary()


def _shared_callback(compiler_fn: Callable, nopython: bool, dynamic: Optional[bool]) -> Any:
    """One callback per backend and settings: cache entries belong to the callback that compiled
    them, so `optimize("eager")(f)` made twice traces `f` once, as torch.compile shares them."""
    from .convert_frame import ConvertFrame

    key = (id(compiler_fn), bool(nopython), dynamic)
    callback = _CALLBACKS.get(key)
    if callback is None:
        callback = _CALLBACKS[key] = ConvertFrame(compiler_fn, nopython=nopython, dynamic=dynamic)
    return callback
