"""Which code minidynamo converts and which it leaves to run as it is: the one place that decides.

`frame_skip_reason` answers the frame callback on a cache miss; `skip_reason` answers for a code
object (also asked by verify mode for what counts as user code). The C core only keeps the marks
this module sets, so that a skipped code object costs one flag test per call: `never_convert`
(and the callback returning None, until `reset()`). Frames C cannot convert at all (generators,
resumed frames) it tells by their state alone (csrc/frame_py311.c).
"""
from __future__ import annotations

import functools
import inspect
import os
import site
import sys
import types
from typing import Any, Callable, Dict, Optional

import numpy as np
import torch
import torch._dynamo.convert_frame
import torch._dynamo.eval_frame
import torch._dynamo.external_utils

from . import _C
from .module_lookup import instance_dict_of

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
# Code made by exec/compile() (`<string>`, torch.fx's `<eval_with_key>.N`, doctest, notebooks) is the
# user's; these pseudo-files are the standard library's frozen modules and numpy's dispatch shims.
_GENERATED_LIBRARY_CODE = ("<frozen ", "<__array_function__ internals>")


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
    if filename.startswith(_GENERATED_LIBRARY_CODE):
        return "library code"
    return None


def _holds_tensors(value: Any, depth: int = 1) -> bool:
    """Asked of the frame's values by their types and instance dicts only: no code of theirs runs."""
    if issubclass(type(value), (torch.Tensor, torch.nn.Module, torch.optim.Optimizer, np.ndarray)):  # arrays are traced as tensors
        return True
    if depth > 0 and type(value) in (list, tuple, dict):
        items = value.values() if type(value) is dict else value
        return any(_holds_tensors(v, depth - 1) for v in items)
    return depth > 0 and any(_holds_tensors(v, 0) for v in (instance_dict_of(value) or {}).values())


def _may_use_tensors(frame: Any) -> bool:
    if any(_holds_tensors(v) for v in frame.f_locals.values()):
        return True
    names = frame.f_code.co_names
    return any(_is_torch_api(frame.f_globals.get(n)) or _holds_tensors(frame.f_globals.get(n), 0) for n in names)


def _is_torch_api(value: Any) -> bool:
    """torch, a module of it, or a function or class from it (`from torch import ones`, `nn`, `F`)."""
    if isinstance(value, types.ModuleType):
        return value.__name__.split(".")[0] == "torch"
    return str(getattr(value, "__module__", None)).split(".")[0] == "torch"


def _nested_code(outer: Callable, name: str) -> Optional[types.CodeType]:
    return next((c for c in outer.__code__.co_consts if isinstance(c, types.CodeType) and c.co_name == name), None)


# The wrappers torch.compiler.disable / torch._dynamo.disable put around a function: what runs under
# `_fn` (recursive, the default) or straight inside the non-recursive wrapper is left alone, as torch does.
_TORCH_DISABLE_CODE = _nested_code(torch._dynamo.eval_frame.DisableContext.__call__, "_fn")
_TORCH_NONRECURSIVE_DISABLE_CODE = _nested_code(torch._dynamo.external_utils.get_nonrecursive_disable_wrapper,
                                                "nonrecursive_disable_wrapper")
# torch.compile's compiler: the frames it runs (its own, made by exec) are left to it
_TORCH_COMPILE_CODE = inspect.unwrap(torch._dynamo.convert_frame._compile).__code__


def _disabled_by_torch(caller: Any) -> bool:
    if caller is not None and caller.f_code is _TORCH_NONRECURSIVE_DISABLE_CODE:
        return True
    while caller is not None:
        if caller.f_code is _TORCH_DISABLE_CODE or caller.f_code is _TORCH_COMPILE_CODE:
            return True
        caller = caller.f_back
    return False


def frame_skip_reason(frame: Any, caller: Optional[types.FrameType] = None) -> Optional[str]:
    """Why the frame callback leaves `frame` (a `_C.FrameInfo`, called from Python frame `caller`)
    unconverted, or None to convert it. Frames with no tensors in reach (arguments, or globals the
    code names: tensors, modules, torch's functions that make tensors) have nothing to trace."""
    reason = skip_reason(frame.f_code, frame.f_globals)
    if reason is None and not _may_use_tensors(frame):
        return "no tensors in reach"
    if reason is None and _disabled_by_torch(caller):
        return "run under torch.compiler.disable or by torch.compile's compiler"
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
