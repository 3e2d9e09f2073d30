"""Which code minidynamo converts and which it leaves to run as it is: the one place that decides.

`frame_skip_reason` answers the frame callback on a cache miss; `skip_reason` answers for a code
object (also asked by verify mode for what counts as user code). The C core only keeps the marks
this module sets, so that a skipped code object costs one flag test per call: `never_convert`
(and the callback returning None, until `reset()`). Frames C cannot convert at all (generators,
resumed frames) it tells by their state alone (csrc/frame_py311.c).
"""
from __future__ import annotations

import functools
import os
import site
import sys
import types
from typing import Any, Dict, Optional

import torch

from . import _C

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_STDLIB_DIR = os.path.dirname(os.__file__) + os.sep
# Third-party packages can live under the standard library's directory; they are user code to us.
_SITE_DIRS = tuple(path + os.sep for path in site.getsitepackages() + [site.getusersitepackages()])
# Libraries whose frames are never converted, even when called from a graph break.
_THIRD_PARTY_SKIP = {"_pytest", "pytest", "pluggy", "numpy", "tqdm", "tabulate", "pandas", "sklearn", "hypothesis",
                     "networkx", "IPython", "depyf", "triton", "sympy", "typing_extensions", "packaging"}
# torch.nn's modules are user-facing code: their forward frames are converted like the user's own.
_CONVERTIBLE_TORCH_DIR = os.path.join(_TORCH_DIR, "nn", "modules") + os.sep
_MODULE_BASE_FILE = torch.nn.modules.module.__file__


def skip_reason(code: types.CodeType, f_globals: Optional[Dict[str, Any]] = None) -> Optional[str]:
    """Why frames of `code` (run with globals `f_globals`) are never converted, or None for user code."""
    module = str(f_globals.get("__name__", "")) if f_globals is not None else ""
    if module.startswith("namedtuple_"):
        return "namedtuple internals"
    if module.split(".")[0] in _THIRD_PARTY_SKIP:
        return "a library that is not traced"
    filename = code.co_filename
    if filename.startswith(_CONVERTIBLE_TORCH_DIR):  # forward methods (and their resume functions) only
        is_forward = code.co_name == "forward" or code.co_name.endswith("_in_forward")
        return None if is_forward and filename != _MODULE_BASE_FILE else "library code"
    if filename.startswith((_PACKAGE_DIR, _TORCH_DIR)):
        return "library code"
    if filename.startswith(_STDLIB_DIR) and not filename.startswith(_SITE_DIRS):
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


def _may_use_tensors(frame: Any) -> bool:
    if any(_holds_tensors(v) for v in frame.f_locals.values()):
        return True
    names = frame.f_code.co_names
    return any(frame.f_globals.get(n) is torch or _holds_tensors(frame.f_globals.get(n), 0) for n in names)


def frame_skip_reason(frame: Any) -> Optional[str]:
    """Why the frame callback leaves `frame` (a `_C.FrameInfo`) unconverted, or None to convert it.
    Frames with no tensors in reach (arguments, or globals the code names) have nothing to trace."""
    reason = skip_reason(frame.f_code, frame.f_globals)
    if reason is None and not _may_use_tensors(frame):
        return "no tensors in reach"
    return reason


def is_user_function(fn: types.FunctionType) -> bool:
    return skip_reason(fn.__code__, fn.__globals__) is None


@functools.lru_cache(maxsize=1024)
def is_user_module(name: str) -> bool:
    """Whether the module imported as `name` is user code (a module not imported counts by its name)."""
    filename = getattr(sys.modules.get(name), "__file__", None) or "<string>"
    return skip_reason(compile("", filename, "exec"), {"__name__": name}) is None


def never_convert(code: types.CodeType) -> None:
    """Frames of `code` run as they are, also after `reset()` (marked in C)."""
    _C.skip_code(code)


def _never_convert_nested(code: types.CodeType) -> None:
    never_convert(code)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _never_convert_nested(const)


def never_convert_module(namespace: Dict[str, Any]) -> None:
    """Mark the functions and methods of one of minidynamo's own modules (and the functions nested in
    them) in C: they can run while a callback is set (context managers, gc callbacks, verify mode),
    and skip_reason would only say so after a call of the callback."""
    for value in list(namespace.values()):
        members = vars(value).values() if isinstance(value, type) else [value]
        for member in members:
            member = getattr(member, "fget", member)
            code = getattr(getattr(member, "__func__", member), "__code__", None)
            if isinstance(code, types.CodeType):
                _never_convert_nested(code)
