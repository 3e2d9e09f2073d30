"""User functions, methods and functions made by the traced code; calling one inlines it."""
from __future__ import annotations

import collections.abc
import functools
import inspect
import types
from typing import Any, Callable, Dict, List, Optional

import torch

from ..exc import unimplemented
from ..frame_hook import is_disabled
from ..guards import Guard, GuardKind
from ..source import AttrSource, ContainsSource, DefaultsSource, GetItemSource
from .base import VariableTracker, guard_identity
from .constant import ConstantVariable, is_none
from .dicts import ConstDictVariable
from .lists import TupleVariable
from .misc import real_cell_variable

CO_VARARGS, CO_VARKEYWORDS = inspect.CO_VARARGS, inspect.CO_VARKEYWORDS
CO_ASYNC = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
# Pure library functions of existing objects (already guarded by identity): evaluated, not inlined.
_EVALUATED_ON_REAL_OBJECTS = {inspect.signature, inspect.isclass, inspect.isfunction, inspect.ismethod}
# nn.Module's own attribute lookup and assignment, called by a module class's __getattr__/__setattr__:
# the module's tracker answers them (see NNModuleVariable.call_module_method).
_MODULE_METHODS_ANSWERED = (torch.nn.Module.__getattr__, torch.nn.Module.__setattr__)
# Library modules whose functions do I/O or touch process state: called, never inlined.
_SIDE_EFFECT_MODULES = ("logging", "warnings", "threading", "io", "os", "subprocess", "pdb", "traceback")
_SIDE_EFFECT_PACKAGES = tuple(m + "." for m in _SIDE_EFFECT_MODULES)


def bind_arguments(
    code: types.CodeType,
    args: List[VariableTracker],
    kwargs: Dict[str, VariableTracker],
    defaults: List[VariableTracker],
    kwdefaults: Dict[str, VariableTracker],
) -> Dict[str, VariableTracker]:
    """Python's argument binding, over trackers. Mismatches are reported as unsupported, so the
    frame runs in eager Python and raises the real TypeError."""
    names = code.co_varnames
    n_pos, n_kwonly = code.co_argcount, code.co_kwonlyargcount
    positional, kwonly = names[:n_pos], names[n_pos : n_pos + n_kwonly]
    index = n_pos + n_kwonly
    varargs = names[index] if code.co_flags & CO_VARARGS else None
    varkw = names[index + bool(varargs)] if code.co_flags & CO_VARKEYWORDS else None

    bound: Dict[str, VariableTracker] = dict(zip(positional, args))
    if len(args) > n_pos:
        if varargs is None:
            unimplemented(f"{code.co_name}() got too many positional arguments")
        bound[varargs] = TupleVariable(list(args[n_pos:]))
    elif varargs is not None:
        bound[varargs] = TupleVariable([])
    extra_kwargs: Dict[str, VariableTracker] = {}
    for name, value in kwargs.items():
        if name in positional[code.co_posonlyargcount :] or name in kwonly:
            if name in bound:
                unimplemented(f"{code.co_name}() got multiple values for argument '{name}'")
            bound[name] = value
        elif varkw is not None:
            extra_kwargs[name] = value
        else:
            unimplemented(f"{code.co_name}() got an unexpected keyword argument '{name}'")
    if varkw is not None:
        bound[varkw] = ConstDictVariable(extra_kwargs)
    first_default = n_pos - len(defaults)
    for i, name in enumerate(positional):
        if name not in bound and i >= first_default:
            bound[name] = defaults[i - first_default]
    for name in kwonly:
        if name not in bound and name in kwdefaults:
            bound[name] = kwdefaults[name]
    missing = [n for n in (*positional, *kwonly) if n not in bound]
    if missing:
        unimplemented(f"{code.co_name}() missing arguments: {', '.join(missing)}")
    return bound


def _mapping_get(tx, mapping: VariableTracker, key: VariableTracker, default: Optional[VariableTracker] = None):
    """collections.abc.Mapping.get without its try/except: membership first, then the item."""
    if mapping.call_method(tx, "__contains__", [key], {}).truthy(tx):
        return mapping.call_method(tx, "__getitem__", [key], {})
    return default if default is not None else ConstantVariable(None)


def _mapping_contains(tx, mapping: VariableTracker, key: VariableTracker) -> VariableTracker:
    """collections.abc.Mapping.__contains__ catches KeyError: asked of the real mapping instead,
    and guarded by repeating the question."""
    real = mapping.real_object()
    if real is None or mapping.source is None or not key.is_python_constant():
        unimplemented(f"'in' on {mapping.describe()}")
    value = key.as_python_constant()
    return tx.wrap(value in real, ContainsSource(mapping.source, value))


class BaseUserFunctionVariable(VariableTracker):
    def get_code(self) -> types.CodeType:
        raise NotImplementedError

    def get_globals(self) -> Dict[str, Any]:
        raise NotImplementedError

    def bind(self, tx, args, kwargs) -> Dict[str, VariableTracker]:
        raise NotImplementedError

    def closure_cells(self, tx) -> Dict[str, VariableTracker]:
        """Free variable name -> the CellVariable the function's code reads and writes."""
        return {}

    def python_type(self) -> type:
        return types.FunctionType

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        if getattr(self, "fn", None) is collections.abc.Mapping.get and not kwargs:
            return _mapping_get(tx, *args)
        if getattr(self, "fn", None) is collections.abc.Mapping.__contains__ and not kwargs:
            return _mapping_contains(tx, *args)
        if getattr(self, "fn", None) in _EVALUATED_ON_REAL_OBJECTS and not kwargs:
            if not all(a.identity_known() for a in args if isinstance(a, UserFunctionVariable)):
                unimplemented(f"{self.fn.__name__}() of a function that is a new object on each call")
            reals = [a.real_value() if a.real_value() is not None else a for a in args]
            if all(not isinstance(r, VariableTracker) for r in reals):
                for arg in args:  # the answer is about these very objects (a module is guarded by type)
                    guard_identity(tx, arg)
                return tx.wrap_constant(self.fn(*reals))
        if is_disabled(getattr(self, "fn", None)):  # a method wrapped by torch.compiler.disable
            unimplemented(f"a call to {self.get_code().co_qualname} (compiling disabled by a disable() wrapper)")
        answer = getattr(args[0], "call_module_method", None) if args else None
        if answer is not None and getattr(self, "fn", None) in _MODULE_METHODS_ANSWERED:
            result = answer(tx, self.fn, args[1:])
            if result is not None:
                return result
        if self.get_code().co_flags & CO_ASYNC:
            unimplemented(f"calling coroutine function {self.get_code().co_name}")
        module = self.get_globals().get("__name__", "")
        if module in _SIDE_EFFECT_MODULES or module.startswith(_SIDE_EFFECT_PACKAGES):
            unimplemented(f"a call to {module}.{self.get_code().co_name} (output and global state stay in Python)")
        return tx.inline_user_function(self, args, kwargs)


class UserFunctionVariable(BaseUserFunctionVariable):
    """A function. `by_structure`: guarded by its code and globals (and, when called, the defaults
    and closure contents read), not by identity; `guard_identity` adds the identity guard where the
    trace relies on which object it is (None: a new object on each call, made by the frame)."""

    def __init__(self, fn: types.FunctionType, source=None, by_structure: bool = False,
                 guard_identity: Optional[Callable[[], None]] = None) -> None:
        super().__init__(source)
        self.fn = fn
        self.by_structure = by_structure
        self.guard_identity = guard_identity

    @property
    def new_each_call(self) -> bool:
        """Made by the frame: which object it is cannot be relied on."""
        return self.by_structure and self.guard_identity is None

    def identity_known(self) -> bool:
        """Whether the trace may rely on which object the function is, guarding it if need be."""
        if self.by_structure and self.guard_identity is not None:
            self.guard_identity()
        return not self.new_each_call

    def is_python_constant(self) -> bool:  # asking guards nothing: using the constant does
        return not self.new_each_call

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        if getattr(self.fn, "_dynamo_marked_constant", False):
            return _call_marked_constant(tx, self.fn, args, kwargs)
        return super().call_function(tx, args, kwargs)

    def describe(self) -> str:
        return f"function {self.fn.__qualname__}"

    def as_python_constant(self) -> Any:
        if not self.identity_known():
            unimplemented(f"{self.describe()} is a new object on each call")
        return self.fn

    def real_object(self) -> Any:
        return self.fn

    def get_code(self) -> types.CodeType:
        return self.fn.__code__

    def get_globals(self) -> Dict[str, Any]:
        return self.fn.__globals__

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name in ("__code__", "__name__", "__qualname__", "__module__", "__doc__", "__defaults__", "__kwdefaults__",
                    "__wrapped__", "__dict__", "__globals__") or name in getattr(self.fn, "__dict__", {}):
            return self._wrap_real(tx, getattr(self.fn, name), self.source and AttrSource(self.source, name))
        if name == "__get__" and self.identity_known():
            return FunctionGetVariable(self)
        if name == "__closure__":  # fixed for the life of the function, which is guarded
            cells = list(self.closure_cells(tx).values())
            return TupleVariable(cells) if cells else ConstantVariable(None)
        return super().var_getattr(tx, name)

    def _wrap_real(self, tx, value: Any, source) -> VariableTracker:
        return tx.wrap(value, source if self.source is not None else None)

    def bind(self, tx, args, kwargs) -> Dict[str, VariableTracker]:
        if self.source is not None:
            self._guard_signature(tx)
        defaults = [
            self._wrap_real(tx, v, self.source and DefaultsSource(self.source, i))
            for i, v in enumerate(self.fn.__defaults__ or ())
        ]
        kwdefaults = {
            k: self._wrap_real(tx, v, self.source and DefaultsSource(self.source, k, kwonly=True))
            for k, v in (self.fn.__kwdefaults__ or {}).items()
        }
        return bind_arguments(self.fn.__code__, args, kwargs, defaults, kwdefaults)

    def _guard_signature(self, tx) -> None:
        """Inlining reads the function's code and how its defaults line up with its parameters:
        a swapped `__code__` or a new number of defaults must not reuse the trace."""
        if not self.by_structure:  # FUNCTION_MATCH checks the code
            tx.output.add_guard(Guard(AttrSource(self.source, "__code__"), GuardKind.ID_MATCH, self.fn.__code__))
        if self.fn.__defaults__:
            tx.output.add_guard(Guard(AttrSource(self.source, "__defaults__"), GuardKind.LIST_LENGTH,
                                      self.fn.__defaults__))

    def closure_cells(self, tx) -> Dict[str, VariableTracker]:
        cells: Dict[str, VariableTracker] = {}
        for i, (name, cell) in enumerate(zip(self.fn.__code__.co_freevars, self.fn.__closure__ or ())):
            cell_source = self.source and GetItemSource(AttrSource(self.source, "__closure__"), i)
            cells[name] = real_cell_variable(tx, cell, cell_source)
        return cells


def _call_marked_constant(tx, fn: types.FunctionType, args: List[VariableTracker],
                          kwargs: Dict[str, VariableTracker]) -> VariableTracker:
    """A function marked as returning the same constant for the life of the process
    (torch._dynamo.assume_constant_result): called while tracing, its result is that constant."""
    if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
        unimplemented(f"{fn.__qualname__}, marked constant, called with non-constant arguments")
    try:
        value = fn(*[a.as_python_constant() for a in args], **{k: v.as_python_constant() for k, v in kwargs.items()})
    except Exception as e:  # noqa: BLE001 - raised again by the real call
        unimplemented(f"{fn.__qualname__}, marked constant, raises {type(e).__name__}")
    return tx.wrap_constant(value)


class CachedFunctionVariable(VariableTracker):
    """A function wrapped by functools.lru_cache / functools.cache: a call runs the wrapped function
    (traced like any other; the cache only saves work), the wrapper itself is what it stands for."""

    def __init__(self, wrapper: Any, source=None) -> None:
        super().__init__(source)
        self.wrapper = wrapper

    def describe(self) -> str:
        return f"cached function {self.wrapper.__wrapped__.__qualname__}"

    def python_type(self) -> type:
        return type(self.wrapper)

    def real_object(self) -> Any:
        return self.wrapper

    def as_python_constant(self) -> Any:
        return self.wrapper

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        wrapped = tx.wrap(self.wrapper.__wrapped__, self.source and AttrSource(self.source, "__wrapped__"))
        return wrapped.call_function(tx, args, kwargs)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name in ("__wrapped__", "__name__", "__qualname__", "__module__", "__doc__"):
            return tx.wrap(getattr(self.wrapper, name), self.source and AttrSource(self.source, name))
        return super().var_getattr(tx, name)


class FunctionGetVariable(VariableTracker):
    """`fn.__get__`: called with an object, it binds `fn` to it as a method."""

    def __init__(self, fn: UserFunctionVariable) -> None:
        super().__init__()
        self.fn = fn

    def describe(self) -> str:
        return f"{self.fn.describe()}.__get__"

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        if kwargs or len(args) not in (1, 2) or is_none(args[0]):
            unimplemented(f"{self.describe()} called with unusual arguments")
        return UserMethodVariable(self.fn.fn, args[0], self.fn.source)


class UserMethodVariable(UserFunctionVariable):
    """A function bound to a tracked object: the object is passed as the first argument."""

    def __init__(self, fn: types.FunctionType, obj: VariableTracker, source=None) -> None:
        super().__init__(fn, source)
        self.obj = obj

    def describe(self) -> str:
        return f"method {self.fn.__qualname__}"

    def python_type(self) -> type:
        return types.MethodType

    def real_object(self) -> Any:
        return None  # each attribute access makes a new bound method

    def real_value(self) -> Any:
        owner = self.obj.real_object()
        return types.MethodType(self.fn, owner) if owner is not None else None

    def subvalues(self) -> List[VariableTracker]:
        return [self.obj]

    def as_python_constant(self) -> Any:
        unimplemented(f"{self.describe()} is not a Python constant")

    def reconstruct(self, codegen) -> None:
        codegen.load_function(types.MethodType)
        codegen.load_const(self.fn)
        codegen.reconstruct(self.obj)
        codegen.call(2)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name == "__func__":
            return UserFunctionVariable(self.fn)
        if name == "__self__":
            return self.obj
        return super().var_getattr(tx, name)

    def call_function(self, tx, args, kwargs) -> VariableTracker:
        return super().call_function(tx, [self.obj, *args], kwargs)


class NestedUserFunctionVariable(BaseUserFunctionVariable):
    """A function created by MAKE_FUNCTION in the traced code (lambdas, nested defs, comprehensions)."""

    def __init__(
        self,
        code: types.CodeType,
        f_globals: Dict[str, Any],
        defaults: Optional[VariableTracker],
        kwdefaults: Optional[VariableTracker],
        closure: Optional[VariableTracker],
    ) -> None:
        super().__init__()
        self.code = code
        self.f_globals = f_globals
        self.defaults = defaults
        self.kwdefaults = kwdefaults
        self.closure = closure
        self.wrapped: Optional[VariableTracker] = None  # set by functools.wraps(wrapped)

    has_identity = True  # stored in two places, it is one function in both

    def describe(self) -> str:
        return f"function {self.code.co_qualname}"

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if self.wrapped is not None and name in ("__module__", "__name__", "__qualname__", "__doc__"):
            return self.wrapped.var_getattr(tx, name)
        if self.wrapped is not None and name == "__wrapped__":
            return self.wrapped
        own = {"__name__": self.code.co_name, "__qualname__": self.code.co_qualname, "__code__": self.code,
               "__module__": self.f_globals.get("__name__"),
               "__doc__": self.code.co_consts[0] if self.code.co_consts and isinstance(self.code.co_consts[0], str) else None}
        if name in own:
            return ConstantVariable(own[name])
        if name == "__closure__":
            return self.closure if self.closure is not None else ConstantVariable(None)
        return super().var_getattr(tx, name)

    def get_code(self) -> types.CodeType:
        return self.code

    def get_globals(self) -> Dict[str, Any]:
        return self.f_globals

    def bind(self, tx, args, kwargs) -> Dict[str, VariableTracker]:
        defaults = self.defaults.unpack_var_sequence(tx) if self.defaults is not None else []
        kwdefaults = {}
        if self.kwdefaults is not None:
            kwdefaults = {k.as_python_constant(): self.kwdefaults.call_method(tx, "__getitem__", [k], {})
                          for k in self.kwdefaults.unpack_var_sequence(tx)}
        return bind_arguments(self.code, args, kwargs, defaults, kwdefaults)

    def subvalues(self) -> List[VariableTracker]:
        return [v for v in (self.defaults, self.kwdefaults, self.wrapped, self.closure) if v is not None]

    def closure_cells(self, tx) -> Dict[str, VariableTracker]:
        if self.closure is None:
            return {}
        cells = self.closure.unpack_var_sequence(tx)
        return dict(zip(self.code.co_freevars, cells))

    def reconstruct(self, codegen) -> None:
        """MAKE_FUNCTION in the generated code over its cells (see CellVariable.reconstruct). A function
        given names by functools.wraps gets them again from functools.update_wrapper."""
        if self.wrapped is not None:
            codegen.load_function(functools.update_wrapper)
        self._make_function(codegen)
        if self.wrapped is not None:
            codegen.reconstruct(self.wrapped)
            codegen.call(2)

    def _make_function(self, codegen) -> None:
        flags = 0
        if self.defaults is not None:
            codegen.reconstruct(self.defaults)
            flags |= 0x01
        if self.kwdefaults is not None:
            codegen.reconstruct(self.kwdefaults)
            flags |= 0x02
        if self.closure is not None:
            codegen.reconstruct(self.closure)
            flags |= 0x08
        codegen.load_const(self.code)
        codegen.make_function(flags)


class PartialVariable(VariableTracker):
    """functools.partial(fn, *args, **kwargs): calling it calls `fn` with the stored arguments first."""

    def __init__(self, func: VariableTracker, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> None:
        super().__init__()
        self.func = func
        self.args = args
        self.kwargs = kwargs

    has_identity = True

    def describe(self) -> str:
        return f"partial({self.func.describe()})"

    def python_type(self) -> type:
        return functools.partial

    def reconstruct(self, codegen) -> None:
        codegen.load_function(functools.partial)
        for value in (self.func, *self.args, *self.kwargs.values()):
            codegen.reconstruct(value)
        codegen.call(1 + len(self.args) + len(self.kwargs), kw_names=tuple(self.kwargs))

    def subvalues(self) -> List[VariableTracker]:
        return [self.func, *self.args, *self.kwargs.values()]

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name == "func":
            return self.func
        if name == "args":
            return TupleVariable(list(self.args))
        if name == "keywords":
            return ConstDictVariable(dict(self.kwargs))
        return super().var_getattr(tx, name)

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        return self.func.call_function(tx, [*self.args, *args], {**self.kwargs, **kwargs})
