"""Backend registry: a backend is any `(gm: fx.GraphModule, example_inputs) -> callable`.

This is torch.compile's contract, so a backend written for torch.compile works unchanged.
Built-in backends live in sibling modules and are imported only when first looked up, so that
importing minidynamo never imports g++ wrappers or triton.
"""
from __future__ import annotations

import functools
import importlib
from typing import Callable, Dict, List, Optional, Union

CompilerFn = Callable[..., Callable]

_BACKENDS: Dict[str, CompilerFn] = {}
# name -> module that registers it when imported
_LAZY_BACKENDS: Dict[str, str] = {
    "eager": "minidynamo.backends.eager",
    "aot_eager": "minidynamo.backends.eager",
    "inductor": "minidynamo.backends.inductor",
    "cpp": "minidynamo.backends.cpp",
    "triton": "minidynamo.backends.triton",
}


def register_backend(
    compiler_fn: Optional[CompilerFn] = None, name: Optional[str] = None
) -> Union[CompilerFn, Callable[[CompilerFn], CompilerFn]]:
    """Register `compiler_fn` under `name` (default: its __name__). Usable as a decorator."""
    if compiler_fn is None:
        return lambda fn: register_backend(fn, name)  # type: ignore[return-value]
    key = name or compiler_fn.__name__
    if key in _BACKENDS and _BACKENDS[key] is not compiler_fn:
        raise ValueError(f"duplicate backend name: {key}")
    _BACKENDS[key] = compiler_fn
    return compiler_fn


def lookup_backend(backend: Union[str, CompilerFn]) -> CompilerFn:
    """Return the compiler function for a backend name, or `backend` itself if it is callable."""
    if callable(backend):
        return backend
    if backend not in _BACKENDS and backend in _LAZY_BACKENDS:
        importlib.import_module(_LAZY_BACKENDS[backend])
    if backend in _BACKENDS:
        return _BACKENDS[backend]
    torch_backends = _torch_backend_names()
    if backend not in torch_backends:
        raise KeyError(f"unknown backend {backend!r}; known: {', '.join(list_backends())}, "
                       f"and torch's: {', '.join(sorted(torch_backends))}")
    from torch._dynamo.backends.registry import lookup_backend as torch_lookup_backend

    return torch_lookup_backend(backend)  # the same contract: (gm, example_inputs) -> callable


def _torch_backend_names() -> List[str]:
    """The names torch.compile takes (`torch._dynamo.list_backends`, debug ones included), imported
    only when a name is not one of ours."""
    from torch._dynamo.backends.registry import list_backends as torch_list_backends

    return torch_list_backends(exclude_tags=())


def list_backends() -> List[str]:
    return sorted(set(_BACKENDS) | set(_LAZY_BACKENDS))


def backend_name(compiler_fn: CompilerFn) -> str:
    """The name a backend is known by in messages (through `functools.partial(fn, options=...)`)."""
    while isinstance(compiler_fn, functools.partial):
        compiler_fn = compiler_fn.func
    return getattr(compiler_fn, "__name__", None) or repr(compiler_fn)
