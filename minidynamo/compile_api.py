"""The torch.compile-style entry point: `minidynamo.compile(model_or_fn, ...)` and the module wrapper."""
from __future__ import annotations

import functools
import inspect
import types
import weakref
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Mapping, Optional, Tuple, Union

import torch

from . import eval_frame
from .regions import compile_blocks_in_place
from .backends import lookup_backend

_ORIG_PREFIX = "_orig_mod."


class OptimizedModule(torch.nn.Module):
    """Wraps a module so that calling it runs the original module's call under a callback.

    The original is `_orig_mod`. Parameters, buffers, state_dict (same keys as the original),
    `training` and attributes (read and written) are the original's, so the wrapper can stand in
    for it in a training loop. Hooks registered on the original fire inside the compiled call.
    What the original's class defines beyond nn.Module (`len`, iteration, indexing, `in`, `bool`,
    operators, overridden methods) is the original's too: each wrapper is an instance of a subclass
    made for the original's class (`_wrapper_class`). Copied, pickled and `torch.save`d as the
    original module plus how it was compiled."""

    _OWN_ATTRIBUTES = frozenset({"_orig_mod", "_compiled_call", "_context", "training"})

    def __new__(cls, mod: torch.nn.Module, context: "eval_frame._CallbackContext") -> "OptimizedModule":
        return super().__new__(_wrapper_class(type(mod)) if cls is OptimizedModule else cls)

    def __init__(self, mod: torch.nn.Module, context: "eval_frame._CallbackContext") -> None:
        super().__init__()
        self._orig_mod = mod
        self._context = context
        self._compiled_call = context(mod.__call__)

    def __reduce__(self) -> Tuple[type, Tuple[torch.nn.Module, "eval_frame._CallbackContext"]]:
        return (OptimizedModule, (self._orig_mod, self._context))

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

    def __dir__(self) -> List[str]:
        names = self._orig_mod.__dir__()
        return names + sorted(set(super().__dir__()) - set(names))

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


# Names the wrapper keeps as its own whatever the original's class defines: how Python builds,
# copies, pickles, hashes, shows and frees the wrapper object itself, descriptor behaviour, and the
# wrapper's tree (nn.Module's recursions, `_apply` and `train`, reach the original as its one child).
_OBJECT_PLUMBING: FrozenSet[str] = frozenset({
    "children", "named_children",
    "__class__", "__dict__", "__weakref__", "__slots__", "__module__", "__qualname__", "__doc__", "__annotations__",
    "__new__", "__init__", "__init_subclass__", "__subclasshook__", "__class_getitem__", "__getattribute__",
    "__del__", "__hash__", "__sizeof__", "__repr__", "extra_repr", "_get_name", "__reduce_ex__", "__getstate__",
    "__setstate__", "__getnewargs__", "__getnewargs_ex__", "__copy__", "__deepcopy__", "__get__", "__set__",
    "__delete__", "__set_name__", "__orig_bases__", "__parameters__", "__abstractmethods__", "_abc_impl",
})


def _forwarded_method(name: str) -> Callable:
    """A method of the wrapper's class running the original's method `name`: a special method (Python
    looks those up on the type, never through __getattr__) or an nn.Module method the original's
    class overrides. One that returns the original itself (`__iadd__`, `train()`) returns the wrapper."""

    def forwarded(self: OptimizedModule, *args: Any, **kwargs: Any) -> Any:
        orig = self._modules["_orig_mod"]
        result = getattr(orig, name)(*args, **kwargs)
        return self if result is orig else result

    forwarded.__name__ = forwarded.__qualname__ = name
    return forwarded


class _Forwarded:
    """An attribute other than a method (a property, a class attribute) that the original's class
    defines and the wrapper's class would hide: read from the original."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, wrapper: Optional[OptimizedModule], owner: Optional[type] = None) -> Any:
        return self if wrapper is None else getattr(wrapper._modules["_orig_mod"], self.name)


_WRAPPER_CLASSES: "weakref.WeakKeyDictionary[type, type]" = weakref.WeakKeyDictionary()


def _wrapper_class(module_cls: type) -> type:
    """The OptimizedModule subclass for modules of `module_cls`, made once per class."""
    made = _WRAPPER_CLASSES.get(module_cls)
    if made is None:
        made = _WRAPPER_CLASSES[module_cls] = type("OptimizedModule", (OptimizedModule,), {
            "__module__": __name__, "__qualname__": OptimizedModule.__qualname__, "__hash__": OptimizedModule.__hash__,
            **{name: _forwarded_method(name) if isinstance(inspect.getattr_static(module_cls, name), types.FunctionType)
               else _Forwarded(name) for name in _forwarded_names(module_cls)}})
    return made


def _forwarded_names(module_cls: type) -> List[str]:
    """What `module_cls` defines beyond nn.Module that a lookup on the wrapper would not reach through
    __getattr__: special methods, and attributes of nn.Module (or of the wrapper) it overrides."""
    own = set(OptimizedModule.__dict__) | _OBJECT_PLUMBING
    names = {name for klass in module_cls.__mro__ if klass not in (torch.nn.Module, object) for name in vars(klass)}
    dunder = lambda name: name.startswith("__") and name.endswith("__")  # noqa: E731
    return sorted(name for name in names - own if (dunder(name) or hasattr(OptimizedModule, name))
                  and getattr(module_cls, name, None) is not getattr(torch.nn.Module, name, None))


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


# Live backends bound to options, by (id of the backend, options): the same options give the same
# backend object, so their compiles share cache entries (see eval_frame._shared_callback).
_BOUND: "weakref.WeakValueDictionary[Tuple[int, FrozenSet[Tuple[str, type, Any]]], Callable]" = \
    weakref.WeakValueDictionary()


def _with_options(compiler_fn: Callable, options: Dict[str, Any]) -> Callable:
    """`compiler_fn` with `options` bound, the same object for the same backend and options."""
    try:
        key = (id(compiler_fn), frozenset((name, type(value), value) for name, value in options.items()))
        bound = _BOUND.get(key)
    except TypeError:  # an option value that cannot be hashed: not shared
        return functools.partial(compiler_fn, options=options)
    if bound is None:
        bound = _BOUND[key] = functools.partial(compiler_fn, options=dict(options))
    return bound


def compile(
    model: Optional[Callable] = None,
    *,
    backend: Union[str, Callable] = "eager",
    fullgraph: bool = False,
    dynamic: Optional[bool] = None,
    mode: Optional[str] = None,
    options: Optional[Dict[str, Any]] = None,
    regions: Optional[str] = None,
) -> Any:
    """Compile a function or an nn.Module, like `torch.compile`.

    A module comes back as an `OptimizedModule` (its `forward` compiled, everything else the
    original's); a function comes back compiled. Usable as `@compile` or `@compile(backend=...)`.
    `fullgraph=True` raises on anything that would break the graph. `dynamic` is passed to
    `optimize` when it supports it. `mode` ("default", "reduce-overhead", "max-autotune",
    "max-autotune-no-cudagraphs") stands for the options torch.compile gives it; options (from `mode`
    or `options`, not both) go to backends that take an `options` keyword.

    `regions="auto"` compiles only the model's repeated blocks (the layers in its ModuleLists and
    Sequentials), in place, and returns the model itself; the rest runs eagerly. Blocks of one class
    share their compiled code: the first call costs about one block's compile. A model without
    repeated blocks is compiled whole.
    """
    compiler_fn = lookup_backend(backend)
    options = _backend_options(mode, options, compiler_fn)
    if regions not in (None, "auto"):
        raise ValueError(f"regions must be None or 'auto', got {regions!r}")
    if model is None:
        return functools.partial(compile, backend=backend, fullgraph=fullgraph, dynamic=dynamic, options=options,
                                 regions=regions)
    if not callable(model):
        raise TypeError(f"compile() expects a function or an nn.Module, got {type(model).__name__}")
    if options and _accepts_keyword(compiler_fn, "options"):
        compiler_fn = _with_options(compiler_fn, options)
    kwargs = {"dynamic": dynamic} if dynamic is not None and _accepts_keyword(eval_frame.optimize, "dynamic") else {}
    context = eval_frame.optimize(compiler_fn, nopython=fullgraph, **kwargs)
    if regions == "auto":
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"regions='auto' compiles the repeated blocks of an nn.Module, got {type(model).__name__}")
        if compile_blocks_in_place(model, context):
            return model
    return context(model)
