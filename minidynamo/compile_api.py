"""The torch.compile-style entry point: `minidynamo.compile(model_or_fn, ...)` and the module wrapper."""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple, Union

import torch

from . import eval_frame
from .backends import lookup_backend

_ORIG_PREFIX = "_orig_mod."


class OptimizedModule(torch.nn.Module):
    """Wraps a module so that calling it runs the original module's call under a callback.

    The original is `_orig_mod`. Parameters, buffers, state_dict (same keys as the original),
    `training` and attributes (read and written) are the original's, so the wrapper can stand in
    for it in a training loop. Hooks registered on the original fire inside the compiled call.
    Copied, pickled and `torch.save`d as the original module plus how it was compiled."""

    _OWN_ATTRIBUTES = frozenset({"_orig_mod", "_compiled_call", "_context", "training"})

    def __init__(self, mod: torch.nn.Module, context: "eval_frame._CallbackContext") -> None:
        super().__init__()
        self._orig_mod = mod
        self._context = context
        self._compiled_call = context(mod.__call__)

    def __reduce__(self) -> Tuple[type, Tuple[torch.nn.Module, "eval_frame._CallbackContext"]]:
        return (type(self), (self._orig_mod, self._context))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # nn.Module.__call__ again would only run the wrapper's own hooks: skip it when there are none.
        if self._forward_hooks or self._forward_pre_hooks or self._backward_hooks or self._backward_pre_hooks:
            return super().__call__(*args, **kwargs)
        return self._compiled_call(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._compiled_call(*args, **kwargs)

    @property
    def training(self) -> bool:
        return self._orig_mod.training

    @training.setter
    def training(self, mode: bool) -> None:
        # nn.Module.__init__ sets `training` before `_orig_mod` exists.
        if "_orig_mod" in self.__dict__.get("_modules", ()):
            self._orig_mod.training = mode

    def __getattr__(self, name: str) -> Any:
        # Looked up from __dict__: copy and pickle probe attributes before _modules exists.
        orig = self.__dict__.get("_modules", {}).get("_orig_mod")
        if orig is None:
            raise AttributeError(name)
        return orig if name == "_orig_mod" else getattr(orig, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._OWN_ATTRIBUTES:
            super().__setattr__(name, value)
        else:
            setattr(self._orig_mod, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._orig_mod, name)

    def named_parameters(self, *args: Any, **kwargs: Any) -> Iterator[Tuple[str, torch.nn.Parameter]]:
        return self._orig_mod.named_parameters(*args, **kwargs)

    def named_buffers(self, *args: Any, **kwargs: Any) -> Iterator[Tuple[str, torch.Tensor]]:
        return self._orig_mod.named_buffers(*args, **kwargs)

    def named_modules(self, *args: Any, **kwargs: Any) -> Iterator[Tuple[str, torch.nn.Module]]:
        return self._orig_mod.named_modules(*args, **kwargs)

    def state_dict(self, *args: Any, **kwargs: Any) -> Dict[str, Any]:
        return self._orig_mod.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        # Checkpoints saved from a torch.compile'd module carry the wrapper's prefix.
        if state_dict and all(key.startswith(_ORIG_PREFIX) for key in state_dict):
            state_dict = {key[len(_ORIG_PREFIX):]: value for key, value in state_dict.items()}
        return self._orig_mod.load_state_dict(state_dict, strict=strict, assign=assign)


# torch.compile's modes, as the backend options each one stands for (torch's option names).
MODE_OPTIONS: Dict[str, Dict[str, Any]] = {
    "default": {},
    "reduce-overhead": {"triton.cudagraphs": True},
    "max-autotune-no-cudagraphs": {"max_autotune": True, "coordinate_descent_tuning": True},
    "max-autotune": {"max_autotune": True, "triton.cudagraphs": True, "coordinate_descent_tuning": True},
}


def _backend_options(mode: Optional[str], options: Optional[Dict[str, Any]], compiler_fn: Callable) -> Dict[str, Any]:
    """The options `compiler_fn` gets: those of `mode`, or `options`, checked against the names the
    backend knows (`known_options`, where it declares them) now rather than at the first call."""
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be specified at the same time.")
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
    if mode is not None and mode not in MODE_OPTIONS:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: {', '.join(MODE_OPTIONS)}")
    chosen = dict(MODE_OPTIONS[mode]) if mode is not None else dict(options or {})
    known = getattr(compiler_fn, "known_options", None)
    for key in chosen if known is not None else ():
        if key not in known:
            raise RuntimeError(f"Unexpected optimization option {key}, known options are {sorted(known)}")
    return chosen


def _accepts_keyword(fn: Callable, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins and C callables without a signature
        return False


def compile(
    model: Optional[Callable] = None,
    *,
    backend: Union[str, Callable] = "eager",
    fullgraph: bool = False,
    dynamic: Optional[bool] = None,
    mode: Optional[str] = None,
    options: Optional[Dict[str, Any]] = None,
) -> Any:
    """Compile a function or an nn.Module, like `torch.compile`.

    A module comes back as an `OptimizedModule` (its `forward` compiled, everything else the
    original's); a function comes back compiled. Usable as `@compile` or `@compile(backend=...)`.
    `fullgraph=True` raises on anything that would break the graph. `dynamic` is passed to
    `optimize` when it supports it. `mode` ("default", "reduce-overhead", "max-autotune",
    "max-autotune-no-cudagraphs") stands for the options torch.compile gives it; options (from `mode`
    or `options`, not both) go to backends that take an `options` keyword.
    """
    compiler_fn = lookup_backend(backend)
    options = _backend_options(mode, options, compiler_fn)
    if model is None:
        return functools.partial(compile, backend=backend, fullgraph=fullgraph, dynamic=dynamic, options=options)
    if not callable(model):
        raise TypeError(f"compile() expects a function or an nn.Module, got {type(model).__name__}")
    if options and _accepts_keyword(compiler_fn, "options"):
        compiler_fn = functools.partial(compiler_fn, options=options)
    kwargs = {"dynamic": dynamic} if dynamic is not None and _accepts_keyword(eval_frame.optimize, "dynamic") else {}
    return eval_frame.optimize(compiler_fn, nopython=fullgraph, **kwargs)(model)
