"""Small trackers: the NULL marker, closure cells, Python modules, grad-mode contexts, bound methods."""
from __future__ import annotations

import builtins
import functools
import math
import operator
import sys
import types
from typing import Any, List, Optional

import torch

from ..exc import ForbiddenCallable, unimplemented
from ..guards import Guard, GuardKind
from ..source import AttrSource, CallSource, CellContentsSource, GetItemSource, ModuleGlobalsSource
from .base import BoundMethodCall, VariableTracker  # noqa: F401 - BoundMethodCall: still importable from here
from .constant import ConstantVariable


class NullVariable(VariableTracker):
    """The NULL a call finds below a callable that is not a bound method."""

    def describe(self) -> str:
        return "NULL"

    def reconstruct(self, codegen) -> None:
        codegen.push_null()


class CellVariable(VariableTracker):
    """A closure cell holding a tracker (None: empty). Cells made by the traced code are writable;
    a real cell of an existing function is not, since writes to it would have to be replayed."""

    def __init__(
        self,
        contents: Optional[VariableTracker] = None,
        writable: bool = True,
        frame_name: Optional[str] = None,
        cell_source=None,
    ) -> None:
        super().__init__()
        self.contents = contents
        self.writable = writable
        # How generated code reaches the real cell: by name in the compiled frame (its own cell or
        # free variable), or through the cell object of an inlined function's closure.
        self.frame_name = frame_name
        self.cell_source = cell_source

    # a cell made by an inlined call is built once by generated code: closures sharing it share one cell
    has_identity = True

    def describe(self) -> str:
        return "closure cell"

    def python_type(self) -> type:
        return types.CellType

    def load(self, name: str) -> VariableTracker:
        """LOAD_DEREF: the contents, or a break where eager raises on an empty cell."""
        if self.contents is None:
            unimplemented(f"free variable '{name}' referenced before assignment")
        return self.contents

    def store(self, tx, name: str, value: VariableTracker) -> None:
        """STORE_DEREF: a real cell's write is replayed after the graph (its final contents)."""
        if not self.writable:
            if self.frame_name is None and self.cell_source is None:
                unimplemented(f"assigning the variable '{name}' of an enclosing function (nonlocal)")
            tx.output.side_effects.store_cell(self, self.frame_name, self.cell_source)
        self.contents = value

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name == "cell_contents":
            if self.contents is None:
                unimplemented("reading the contents of an empty cell (ValueError)")
            return self.contents
        return super().var_getattr(tx, name)

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        if name == "cell_contents":
            self.store(tx, name, value)
        else:
            super().store_attr(tx, name, value)

    def reconstruct(self, codegen) -> None:
        """The cell object: the frame's own, a real one read at its source, or a new one, built empty
        (see write_contents)."""
        if self.frame_name is not None:
            codegen.load_closure(self.frame_name)
        elif self.cell_source is not None:
            self.cell_source.reconstruct(codegen)
        elif self.writable:
            codegen.load_function(types.CellType)
            codegen.call(0)
        else:
            unimplemented("rebuilding a closure cell that has no source")

    def write_contents(self, codegen) -> None:
        """Generated code putting what the trace left in a cell it made (the frame's, or an inlined
        call's) into the real cell; written before functions closing over it are built, one closing over
        itself included."""
        if not self.writable or self.contents is None:
            return
        codegen.reconstruct(self.contents)
        if self.frame_name is not None:
            codegen.store_local(self.frame_name)
        else:
            codegen.reconstruct(self)
            codegen.append("STORE_ATTR", "cell_contents")

    def subvalues(self) -> List[VariableTracker]:
        return [self.contents] if self.contents is not None else []


def real_cell_variable(tx, cell: types.CellType, source) -> CellVariable:
    """The one tracker of an existing cell in this trace: every function closing over it, and the cell
    object itself, share it, so what one writes the others read. `source` reaches the cell object."""
    known = tx.output.real_cells.get(id(cell))
    if known is not None:
        return known[1]
    try:
        contents = tx.wrap(cell.cell_contents, source and CellContentsSource(source))
    except ValueError:  # empty: reading it breaks the trace, as eager raises there
        contents = None
    variable = CellVariable(contents, writable=False, cell_source=source)
    tx.output.real_cells[id(cell)] = (cell, variable)
    return variable


_MODULES_SCOPE = "___sys_modules"
_STABLE_MODULES = (builtins, math, operator, functools)


def is_torch_object(value: Any) -> bool:
    module = getattr(value, "__module__", None) or ""
    if isinstance(value, types.ModuleType):
        module = value.__name__
    if not _is_torch_name(module):
        return False
    # `__module__` is only the `__name__` of the globals a function was made in (exec can make any
    # namespace claim to be torch); a Python function is torch's if it runs in a torch module's globals.
    if not isinstance(value, types.FunctionType):
        return True
    globals_ = value.__globals__
    name = globals_.get("__name__")
    return isinstance(name, str) and _is_torch_name(name) and getattr(sys.modules.get(name), "__dict__", None) is globals_


def _is_torch_name(module: str) -> bool:
    return module == "torch" or module.startswith("torch.")


def is_stable_module(module: types.ModuleType) -> bool:
    """Modules whose attributes we assume nobody rebinds (no guards on reads from them)."""
    return module in _STABLE_MODULES or is_torch_object(module) or getattr(module, "__file__", "") is None


class PythonModuleVariable(VariableTracker):
    def __init__(self, module: types.ModuleType, source=None) -> None:
        super().__init__(source)
        self.module = module

    def python_type(self) -> type:
        return types.ModuleType

    def describe(self) -> str:
        return f"module {self.module.__name__}"

    def as_python_constant(self) -> Any:
        return self.module

    def real_object(self) -> Any:
        return self.module

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if not hasattr(self.module, name):
            unimplemented(f"module {self.module.__name__} has no attribute {name}")
        value = getattr(self.module, name)
        if not is_stable_module(self.module) and self.source is not None:
            return tx.wrap(value, AttrSource(self.source, name))
        if (type(value) in (bool, int, float, str) and is_torch_object(self.module)
                and sys.modules.get(self.module.__name__) is self.module):
            # a setting such as torch.backends.mkldnn.enabled, which users change between calls
            tx.output.namespaces[_MODULES_SCOPE] = sys.modules
            modules = ModuleGlobalsSource(_MODULES_SCOPE, sys.modules)
            return tx.wrap(value, AttrSource(GetItemSource(modules, self.module.__name__), name))
        return tx.wrap(value)


def grad_mode_object(cls: type, mode: bool, prev: Optional[bool]) -> Any:
    """A torch.no_grad / enable_grad / set_grad_enabled object in a given state, made without
    switching the grad mode (set_grad_enabled's constructor would)."""
    obj = cls.__new__(cls)
    if cls is torch.set_grad_enabled:
        obj.mode = mode
    if prev is not None:
        obj.prev = prev
    return obj


class GradModeVariable(VariableTracker):
    """torch.no_grad() / enable_grad() / set_grad_enabled(mode) as a context manager.

    Entering and leaving record `torch._C._set_grad_enabled` in the graph, and switch the real
    grad mode while tracing so that the fake tensors see what eager would. `previous` is the mode
    __exit__ goes back to: set by each __enter__ for no_grad and enable_grad, when made for
    set_grad_enabled (its constructor switches the mode)."""

    def __init__(self, mode: bool, source=None, cls: Optional[type] = None, previous: Optional[bool] = None) -> None:
        super().__init__(source)
        self.mode = mode
        self.cls = cls or (torch.enable_grad if mode else torch.no_grad)
        self.previous = previous

    @classmethod
    def from_object(cls, tx, value: Any, source) -> "GradModeVariable":
        """A grad-mode object that already exists (an argument, a global, made before a break)."""
        def guard(kind, attr=None, expected=None) -> None:
            if source is not None:
                tx.output.add_guard(Guard(AttrSource(source, attr) if attr else source, kind, expected))

        guard(GuardKind.TYPE_MATCH, expected=type(value))
        if type(value) is torch.set_grad_enabled:
            guard(GuardKind.EQUALS_MATCH, "mode", value.mode)
            guard(GuardKind.EQUALS_MATCH, "prev", value.prev)
            return cls(bool(value.mode), source, torch.set_grad_enabled, value.prev)
        return cls(type(value) is torch.enable_grad, source, type(value))

    @classmethod
    def made_by_set_grad_enabled(cls, tx, mode: bool) -> "GradModeVariable":
        context = cls(mode, None, torch.set_grad_enabled, torch.is_grad_enabled())
        context.set_mode(tx, mode)
        return context

    def describe(self) -> str:
        return f"grad mode context ({self.mode})"

    def python_type(self) -> type:
        return self.cls

    def set_mode(self, tx, mode: bool) -> None:
        tx.output.create_node("call_function", torch._C._set_grad_enabled, (mode,), {})
        torch._C._set_grad_enabled(mode)

    def enter(self, tx) -> VariableTracker:
        if self.cls is not torch.set_grad_enabled:
            self.previous = torch.is_grad_enabled()
            if self.source is not None:  # eager's __enter__ stores it on the object
                tx.output.side_effects.store_attr(self, self, "prev", ConstantVariable(self.previous))
        self.set_mode(tx, self.mode)
        return ConstantVariable(None)

    def exit(self, tx) -> VariableTracker:
        if self.previous is None:
            unimplemented("leaving a grad mode block that was never entered")
        self.set_mode(tx, self.previous)
        return ConstantVariable(None)

    def call_function(self, tx, args: List[VariableTracker], kwargs) -> VariableTracker:
        """`@torch.no_grad()` applied to a function in the frame: calls of it run in that mode."""
        get_code = getattr(args[0], "get_code", None) if len(args) == 1 and not kwargs else None
        if get_code is None or get_code().co_flags & _GENERATOR_FLAGS:
            return super().call_function(tx, args, kwargs)
        if self.cls is torch.set_grad_enabled:  # its __call__ undoes what its constructor switched
            self.set_mode(tx, self.previous)
        return GradModeFunction(self, args[0])

    def call_method(self, tx, name: str, args, kwargs) -> VariableTracker:
        if name == "__enter__":
            return self.enter(tx)
        if name == "__exit__":
            return self.exit(tx)
        if name == "clone" and not args and not kwargs:  # a new object of the same kind, not entered
            if self.cls is torch.set_grad_enabled:  # whose constructor switches the mode
                return GradModeVariable.made_by_set_grad_enabled(tx, self.mode)
            return GradModeVariable(self.mode, None, self.cls)
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, codegen) -> None:
        if self.source is not None:
            self.source.reconstruct(codegen)
            return
        codegen.load_function(grad_mode_object)
        codegen.load_const(self.cls)
        codegen.load_const(self.mode)
        codegen.load_const(self.previous)
        codegen.call(3)


_GENERATOR_FLAGS = 0x20 | 0x80 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR: wrapped otherwise


class GradModeFunction(VariableTracker):
    """A function decorated in the frame by a grad-mode object: each call enters a fresh copy of the
    object (the decorator's `clone`), calls the function, and leaves it."""

    def __init__(self, context: GradModeVariable, fn: VariableTracker) -> None:
        super().__init__()
        self.context = context
        self.fn = fn

    def describe(self) -> str:
        return f"{self.fn.describe()} decorated by {self.context.describe()}"

    def python_type(self) -> type:
        return types.FunctionType

    def subvalues(self) -> List[VariableTracker]:
        return [self.context, self.fn]

    def call_function(self, tx, args: List[VariableTracker], kwargs) -> VariableTracker:
        context = self.context.call_method(tx, "clone", [], {})
        context.enter(tx)
        result = self.fn.call_function(tx, args, kwargs)
        context.exit(tx)
        return result

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name in ("__name__", "__qualname__", "__module__", "__doc__", "__wrapped__"):  # functools.wraps
            return self.fn if name == "__wrapped__" else self.fn.var_getattr(tx, name)
        return super().var_getattr(tx, name)

    def reconstruct(self, codegen) -> None:
        codegen.load_function(decorated_with_grad_mode)
        codegen.load_const(self.context.cls)
        codegen.load_const(self.context.mode)
        codegen.reconstruct(self.fn)
        codegen.call(3)


def decorated_with_grad_mode(cls: type, mode: bool, fn: Any) -> Any:
    """`fn` decorated by a `cls` object in `mode`, the grad mode left as it is (set_grad_enabled's
    __call__ goes back to the mode its object was made in: the current one here)."""
    return grad_mode_object(cls, mode, torch.is_grad_enabled())(fn)


class NullContextVariable(VariableTracker):
    """A context manager whose entering and leaving change nothing the trace sees (profiler ranges)."""

    def describe(self) -> str:
        return "context manager without effect"

    def call_method(self, tx, name: str, args, kwargs) -> VariableTracker:
        if name in ("__enter__", "__exit__"):
            return ConstantVariable(None)
        return super().call_method(tx, name, args, kwargs)


class WithExitVariable(VariableTracker):
    """The bound __exit__ that entering a `with` block leaves on the stack."""

    def __init__(self, context: VariableTracker) -> None:
        super().__init__()
        self.context = context

    def describe(self) -> str:
        return "__exit__ of a with block"

    def call_function(self, tx, args, kwargs) -> VariableTracker:
        return self.context.call_method(tx, "__exit__", args, kwargs)

    def reconstruct(self, codegen) -> None:
        """A grad-mode block continued in a resume function: its __exit__ restores the mode."""
        if not isinstance(self.context, GradModeVariable) or self.context.previous is None:
            unimplemented(f"continuing a with block of {self.context.describe()} after a graph break")
        codegen.load_const(RestoreGradMode(self.context.previous))


class RestoreGradMode:
    """Stands for the __exit__ of a grad-mode block that a graph break split: sets the mode back."""

    def __init__(self, mode: bool) -> None:
        self.mode = mode

    def __call__(self, *exc_info: Any) -> None:
        torch._C._set_grad_enabled(self.mode)


class DisabledFunctionVariable(VariableTracker):
    """A function wrapped in minidynamo.disable() or torch.compiler.disable(): always called in plain Python."""

    def __init__(self, fn: Any, source=None) -> None:
        super().__init__(source)
        self.fn = fn

    def describe(self) -> str:
        return f"{getattr(self.fn, '__qualname__', 'function')} (compiling disabled by a disable() wrapper)"

    def real_object(self) -> Any:
        return self.fn

    def call_function(self, tx, args, kwargs) -> VariableTracker:
        unimplemented(f"a call to {self.describe()}")


class ForbiddenCallableVariable(VariableTracker):
    """A function torch.compile refuses to trace (see dynamic_shapes.REFUSED_IN_TRACE): calling it
    stops the call with torch's error."""

    def __init__(self, fn: Any, source=None) -> None:
        super().__init__(source)
        self.fn = fn

    def real_object(self) -> Any:
        return self.fn

    def call_function(self, tx, args, kwargs) -> VariableTracker:
        raise ForbiddenCallable(self.fn, tx.user_stack())


class WeakRefVariable(VariableTracker):
    """A weakref.ref: calling it gives its referent, guarded by repeating the call."""

    def __init__(self, ref: Any, source=None) -> None:
        super().__init__(source)
        self.ref = ref

    def describe(self) -> str:
        return "weak reference"

    def real_object(self) -> Any:
        return self.ref

    def call_function(self, tx, args, kwargs) -> VariableTracker:
        if args or kwargs or self.source is None:
            unimplemented("calling a weak reference")
        return tx.wrap(self.ref(), CallSource(self.source))
