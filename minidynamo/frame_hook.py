"""What Python and the C eval-frame hook exchange: the cache entry a callback returns, and
functions wrapped so that each call runs with a given callback (None: no conversion at all)."""
from __future__ import annotations

import functools
import types
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch._compile

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


# torch's own functions decorated `torch._disable_dynamo` (Optimizer.zero_grad, ...) are this wrapper.
_TORCH_INTERNAL_DISABLE = next(c for c in torch._compile._disable_dynamo.__code__.co_consts
                               if isinstance(c, types.CodeType) and c.co_name == "inner")


def is_disabled(fn: Any) -> bool:
    """Wrapped by `minidynamo.disable`, by `torch.compiler.disable` (`torch._dynamo.disable`), or one of
    torch's functions it keeps out of compilation (`torch._disable_dynamo`)."""
    if isinstance(fn, _C.CallbackWrapper):
        return fn.callback is None
    if not isinstance(fn, types.FunctionType):
        return False
    if fn.__code__ is _TORCH_INTERNAL_DISABLE:
        return True
    return getattr(fn, "_torchdynamo_disable", False) is True and hasattr(fn, "_torchdynamo_orig_callable")
