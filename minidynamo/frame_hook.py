"""What Python and the C eval-frame hook exchange: the cache entry a callback returns, and
functions wrapped so that each call runs with a given callback (None: no conversion at all)."""
from __future__ import annotations

import functools
import types
from dataclasses import dataclass
from typing import Any, Callable, Optional

from . import _C


@dataclass(frozen=True)
class GuardedCode:
    """A cache entry: run `code` in place of the frame's code when `check_fn` passes. `check_fn` is a
    C `GuardSet` (checked straight on the frame's local slots) or any callable taking the locals dict."""

    code: types.CodeType
    check_fn: Callable[..., bool]


def with_callback(fn: Callable, callback: Any, wrapped: Optional[Callable] = None) -> Callable:
    """`fn` wrapped by the C `CallbackWrapper`, which sets this thread's callback around each call;
    the wrapper looks like `wrapped` (by default `fn`): name, docstring, `__wrapped__`."""
    wrapper = _C.CallbackWrapper(fn, callback)
    functools.update_wrapper(wrapper, wrapped if wrapped is not None else fn)
    return wrapper


def disabled(fn: Callable) -> Callable:
    """`fn` (a function or a class) run with no conversion at all, as `minidynamo.disable(fn)`."""
    return with_callback(fn, None)


def is_disabled(fn: Any) -> bool:
    """Wrapped by `minidynamo.disable` or by `torch.compiler.disable` (`torch._dynamo.disable`)."""
    if isinstance(fn, _C.CallbackWrapper):
        return fn.callback is None
    return (isinstance(fn, types.FunctionType) and getattr(fn, "_torchdynamo_disable", False) is True
            and hasattr(fn, "_torchdynamo_orig_callable"))
