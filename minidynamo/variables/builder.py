"""VariableBuilder: wraps a real value found at a source into a tracker, adding the guards it needs."""
from __future__ import annotations

import collections
import enum
import functools
import operator
import types
import weakref
from typing import Any, Optional

import numpy as np
import torch

from ..dynamic_shapes import REFUSED_IN_TRACE
from ..exc import unimplemented, unimplemented_frame
from ..frame_hook import is_disabled
from ..guards import Guard, GuardKind
from ..polyfills import SUBSTITUTES
from ..source import (AttrSource, GetItemSource, GlobalsDictSource, IterationOrderSource, LocalSource, MethodCallSource,
                      Source)
from .autograd_function import AutogradFunctionClassVariable, is_custom_autograd_function
from .base import UnboundMethodCall, VariableTracker
from .builtin import BuiltinVariable, is_stdlib
from .constant import ConstantVariable, is_constant_value
from .dicts import ConstDictVariable
from .exceptions import ExceptionClassVariable, is_traced_exception_class
from .functions import CachedFunctionVariable, PartialVariable, UserFunctionVariable, UserMethodVariable
from .higher_order import (CheckpointVariable, ControlFlowOpVariable, FunctionalCallVariable, FunctionTransformVariable,
                           is_function_transform)
from .lists import ListVariable, SetVariable, TupleVariable
from .misc import (BoundMethodCall, DisabledFunctionVariable, ForbiddenCallableVariable, GradModeVariable,
                   PythonModuleVariable, RestoreGradMode, WeakRefVariable, WithExitVariable, is_torch_object,
                   real_cell_variable)
from .named_tuple import NamedTupleVariable
from .nn_module import NNModuleVariable, shares_entries
from .numpy import (NumpyFunctionVariable, NumpyNdarrayVariable, NumpyTensorSource, is_numpy_callable,
                    is_traceable_ndarray)
from .optimizer import OptimizerVariable, is_optimizer
from .torch import (FunctorchFunctionVariable, TorchVariable, is_allowed_in_graph, is_functorch_function,
                    unconverted_wrapper)
from .user_defined import OBJECT_METHODS, UserDefinedClassVariable, UserDefinedObjectVariable, has_python_getattribute

# Builtin classes that behave like functions when called while tracing.
_BUILTIN_TYPES = (int, float, bool, str, list, tuple, dict, set, frozenset, range, zip, enumerate, reversed,
                  type, slice, map, filter, super)


# Containers whose trackers stand for the object itself: reached twice, they are one tracker.
_TRACKED_CONTAINERS = (list, dict, set, collections.OrderedDict, collections.defaultdict)

# Pure-Python torch classes whose construction and methods are traced like the user's own classes.
_TRACED_TORCH_CLASSES = ("torch.distributions.", "torch.utils._pytree")
# torch modules whose Python functions are traced into like the user's own (they call torch's ops).
_TRACED_TORCH_FUNCTIONS = ("torch.optim.", "torch.utils._pytree", "torch.utils._foreach_utils", "torch.nn.utils.clip_grad",
                           "torch.nn.modules.utils")

# Trackers that keep no state of their own (what changes on their objects is in the side effects).
_STATELESS_TRACKERS = frozenset((ConstantVariable, UserDefinedClassVariable, UserDefinedObjectVariable,
                                 UserFunctionVariable, PythonModuleVariable, BuiltinVariable, TorchVariable))

_GRAD_MODE_TYPES = (torch.no_grad, torch.enable_grad, torch.set_grad_enabled)

# torch's context-manager objects (inference_mode(), autocast(...), ...) are values, not functions to put
# in a graph: guarded by type, and by what the trace reads of them, like the user's objects.
_CONTEXT_MANAGER_OBJECTS = (torch.utils._contextlib._DecoratorContextManager, torch.amp.autocast_mode.autocast)


class VariableBuilder:
    def __init__(self, tx, source: Optional[Source], by_structure: bool = False, made_by_frame: bool = False) -> None:
        self.tx = tx
        self.source = source
        self.by_structure = by_structure  # a module here is a new object on each call
        self.made_by_frame = made_by_frame  # so is a function here, made by the frame over its own cells

    def guard(self, kind: GuardKind, value: Any) -> None:
        if self.source is not None:
            self.tx.output.add_guard(Guard(self.source, kind, value))

    def guard_iteration_order(self, value: Any) -> None:
        """Equal sets can iterate in different orders (their hash tables' histories differ): where the
        trace may iterate one, its order is guarded too."""
        if type(value) in (set, frozenset) and len(value) > 1 and self.source is not None:
            self.tx.output.add_guard(Guard(IterationOrderSource(self.source), GuardKind.EQUALS_MATCH, tuple(value)))

    def __call__(self, value: Any) -> VariableTracker:
        if (type(value) in _TRACKED_CONTAINERS or self._module_by_structure(value)) and self.source is not None:
            known = self.tx.output.tracked_containers.get(id(value))
            if known is not None:  # the same container reached again: the trace relies on it staying so
                if known[1].source is not None and known[1].source.name() != self.source.name():
                    self.tx.output.add_guard(Guard(self.source, GuardKind.ALIAS_OF, known[1].source))
                return known[1]
            variable = self.wrap(value)
            self.tx.output.tracked_containers[id(value)] = (value, variable)
            return variable
        return self._wrap_once(value)

    def _wrap_once(self, value: Any) -> VariableTracker:
        """The tracker of `value`, reused when the trace reaches the same object at the same source
        again and the tracker holds no state: wrapping it again would make an equal tracker and add
        the same guards, which the entry already has."""
        key = (self.source.name() if self.source is not None else None, id(value), self.by_structure,
               self.made_by_frame)
        known = self.tx.output.wrapped.get(key)
        if known is not None and known[0] is value:
            return known[1]
        tracker = self.wrap(value)
        if type(tracker) in _STATELESS_TRACKERS:
            self.tx.output.wrapped[key] = (value, tracker)
        return tracker

    def _module_by_structure(self, value: Any) -> bool:
        """A module guarded by its type and what the trace reads of it, not by its identity."""
        return isinstance(value, torch.nn.Module) and (
            self.by_structure or (self.source is not None and shares_entries(value)))

    def wrap(self, value: Any) -> VariableTracker:
        # every probe below (isinstance reading `__class__` included) would run that lookup
        if not _attribute_lookup_in_python(type(value)):
            for wrap_kind in (self._wrap_data, self._wrap_torch_and_numpy, self._wrap_python_object):
                tracker = wrap_kind(value)
                if tracker is not None:
                    return tracker
        self.guard(GuardKind.TYPE_MATCH, type(value))
        if is_optimizer(value):
            return OptimizerVariable(value, self.source)
        return UserDefinedObjectVariable(value, self.source)

    def _wrap_data(self, value: Any) -> Optional[VariableTracker]:
        """Tensors, constants, modules and containers; None for other values."""
        tx, source = self.tx, self.source
        if isinstance(value, torch.Tensor):
            if source is None:
                unimplemented("a tensor reached from a value without a source")
            if value.is_nested:
                unimplemented_frame(f"{source.name()} is a nested tensor (torch.nested): nested tensors run eagerly")
            return tx.output.add_graph_input(tx, source, value)
        if type(value) in (int, float) and isinstance(source, LocalSource):
            symbolic = tx.output.add_scalar_input(tx, source, value)
            if symbolic is not None:
                return symbolic
        if is_constant_value(value):
            self.guard(GuardKind.EQUALS_MATCH, value)
            self.guard_iteration_order(value)
            return ConstantVariable(value, source)
        if isinstance(value, torch.nn.Module):
            if self._module_by_structure(value):  # each fact read of it is guarded where it is read
                self.guard(GuardKind.TYPE_MATCH, type(value))
                return NNModuleVariable(value, source, by_structure=self.by_structure)
            self.guard(GuardKind.NN_MODULE, value)
            return NNModuleVariable(value, source)
        if type(value) in (list, tuple):
            self.guard(GuardKind.LIST_LENGTH, value)
            items = [VariableBuilder(tx, source and GetItemSource(source, i), self.by_structure, self.made_by_frame)(v)
                     for i, v in enumerate(value)]
            return (ListVariable if type(value) is list else TupleVariable)(items, source)
        if isinstance(value, tuple) and hasattr(type(value), "_fields"):
            self.guard(GuardKind.TYPE_MATCH, type(value))
            items = [VariableBuilder(tx, source and GetItemSource(source, i))(v) for i, v in enumerate(value)]
            return NamedTupleVariable(items, type(value), source)
        if type(value) is set and all(is_constant_value(v) for v in value):
            self.guard(GuardKind.EQUALS_MATCH, set(value))  # a copy: the set itself may change later
            self.guard_iteration_order(value)
            real = value.copy()
            if tuple(real) != tuple(value):
                unimplemented("a set whose copy iterates in another order")
            return SetVariable([], source, real)
        if isinstance(value, functools.partial):
            self.guard(GuardKind.TYPE_MATCH, type(value))
            if source is not None:  # another partial of the same function may bind more arguments
                tx.output.add_guard(Guard(AttrSource(source, "args"), GuardKind.LIST_LENGTH, value.args))
                tx.output.add_guard(Guard(AttrSource(source, "keywords"), GuardKind.DICT_KEYS, value.keywords))
            func = VariableBuilder(tx, source and AttrSource(source, "func"))(value.func)
            args = [VariableBuilder(tx, source and GetItemSource(AttrSource(source, "args"), i))(v)
                    for i, v in enumerate(value.args)]
            kwargs = {k: VariableBuilder(tx, source and GetItemSource(AttrSource(source, "keywords"), k))(v)
                      for k, v in value.keywords.items()}
            return PartialVariable(func, args, kwargs)
        if is_stdlib(value):
            self.guard(GuardKind.ID_MATCH, value)
            return BuiltinVariable(value, source)
        if type(value) is dict and all(is_constant_value(k) for k in value):
            self.guard(GuardKind.DICT_KEYS, value)
            items = {k: VariableBuilder(tx, source and GetItemSource(source, k), self.by_structure, self.made_by_frame)(v)
                     for k, v in value.items()}
            return ConstDictVariable(items, dict, source)
        if type(value) in (collections.OrderedDict, collections.defaultdict) and all(is_constant_value(k) for k in value):
            return self.wrap_mapping(value)
        return None

    def _wrap_torch_and_numpy(self, value: Any) -> Optional[VariableTracker]:
        """Python modules, torch's and NumPy's callables and objects, grad-mode objects, disabled functions."""
        tx, source = self.tx, self.source
        if isinstance(value, types.ModuleType):
            self.guard(GuardKind.ID_MATCH, value)
            return PythonModuleVariable(value, source)
        if id(value) in REFUSED_IN_TRACE:
            self.guard(GuardKind.ID_MATCH, value)
            return ForbiddenCallableVariable(value, source)
        if value is torch.func.functional_call:
            self.guard(GuardKind.ID_MATCH, value)
            return FunctionalCallVariable()  # no source: a fallback calls its unconverted wrapper
        if is_function_transform(value):
            self.guard(GuardKind.ID_MATCH, value)
            return FunctionTransformVariable(value, source)
        if value is torch.cond or value is torch.while_loop:
            self.guard(GuardKind.ID_MATCH, value)
            return ControlFlowOpVariable(value, source)
        if isinstance(value, types.FunctionType) and is_functorch_function(value):
            VariableBuilder(tx, source and AttrSource(source, "__code__")).guard(GuardKind.ID_MATCH, value.__code__)
            return FunctorchFunctionVariable(value, source)
        if type(value) in _GRAD_MODE_TYPES:
            return GradModeVariable.from_object(tx, value, source)
        if isinstance(value, types.MethodType) and type(value.__self__) in _GRAD_MODE_TYPES and value.__name__ == "clone":
            # what a function decorated with @torch.no_grad() enters on each call
            return BoundMethodCall(VariableBuilder(tx, source and AttrSource(source, "__self__"))(value.__self__), "clone")
        if unconverted_wrapper(value) is not None:
            self.guard(GuardKind.ID_MATCH, value)
            if value is torch.utils.checkpoint.checkpoint:
                return CheckpointVariable(unconverted_wrapper(value))
            return DisabledFunctionVariable(unconverted_wrapper(value))  # no source: the wrapper is rebuilt
        if is_disabled(value):
            if hasattr(value, "_torchdynamo_orig_callable") and source is not None:
                # torch.compiler.disable(f) made in the frame is a new wrapper on each call: what it runs is the guard
                for attr in ("__code__", "_torchdynamo_orig_callable"):
                    VariableBuilder(tx, AttrSource(source, attr)).guard(GuardKind.ID_MATCH, getattr(value, attr))
            else:
                self.guard(GuardKind.ID_MATCH, value)
            return DisabledFunctionVariable(value, source)
        if isinstance(value, types.BuiltinMethodType) and _bound_to_tracked_object(value):
            return self._wrap_bound_builtin(value)
        if is_traceable_ndarray(value) and source is not None:
            self.guard(GuardKind.TYPE_MATCH, type(value))
            return NumpyNdarrayVariable(tx.output.add_graph_input(tx, NumpyTensorSource(source), torch.as_tensor(value)),
                                        source)
        if is_numpy_callable(value):
            self.guard(GuardKind.ID_MATCH, value)
            return NumpyFunctionVariable(value, source)
        if is_allowed_in_graph(value) or (
                is_torch_object(value) and callable(value) and not isinstance(value, _CONTEXT_MANAGER_OBJECTS)
                and not _traced_like_user_code(value)):
            self.guard(GuardKind.ID_MATCH, value)
            return TorchVariable(value, source)
        return None

    def _wrap_python_object(self, value: Any) -> Optional[VariableTracker]:
        """Functions, methods, builtins, classes and enum members."""
        tx, source = self.tx, self.source
        if isinstance(value, types.FunctionType):
            if value in SUBSTITUTES:  # the function is the guard; its stand-in is what the trace runs
                self.guard(GuardKind.ID_MATCH, value)
                return UserFunctionVariable(SUBSTITUTES[value])
            if source is not None:
                return self._wrap_function_by_structure(value)
            return UserFunctionVariable(value, source)
        if isinstance(value, types.CellType):  # the one tracker of this cell, which functions closing over it share
            self.guard(GuardKind.ID_MATCH, value)
            return real_cell_variable(tx, value, source)
        if isinstance(value, functools._lru_cache_wrapper) and isinstance(value.__wrapped__, types.FunctionType):
            self.guard(GuardKind.ID_MATCH, value)
            return CachedFunctionVariable(value, source)
        if isinstance(value, RestoreGradMode):
            VariableBuilder(tx, source and AttrSource(source, "mode"))(value.mode)
            context = GradModeVariable(not value.mode)
            context.previous = value.mode
            return WithExitVariable(context)
        if type(value) is weakref.ref:
            self.guard(GuardKind.TYPE_MATCH, type(value))
            return WeakRefVariable(value, source)
        if isinstance(value, types.MethodType) and isinstance(value.__func__, types.FunctionType):
            owner = VariableBuilder(tx, source and AttrSource(source, "__self__"))(value.__self__)
            func_source = source and AttrSource(source, "__func__")
            if func_source is not None:
                tx.output.add_guard(Guard(func_source, GuardKind.ID_MATCH, value.__func__))
            return UserMethodVariable(value.__func__, owner, func_source)
        if any(value is f for f in (*OBJECT_METHODS, functools.partial)):
            return BuiltinVariable(value)
        if isinstance(value, types.MethodDescriptorType) and value.__objclass__ in (list, set, dict):
            self.guard(GuardKind.ID_MATCH, value)
            return UnboundMethodCall(value.__objclass__, value.__name__, source)
        if isinstance(value, types.BuiltinFunctionType) or (isinstance(value, type) and value in _BUILTIN_TYPES):
            self.guard(GuardKind.ID_MATCH, value)
            return BuiltinVariable(value, source)
        if is_custom_autograd_function(value):
            self.guard(GuardKind.ID_MATCH, value)
            return AutogradFunctionClassVariable(value, source)
        if isinstance(value, type):
            self.guard(GuardKind.ID_MATCH, value)
            if is_traced_exception_class(value):
                return ExceptionClassVariable(value, source)
            return UserDefinedClassVariable(value, source)
        if isinstance(value, enum.Enum):  # a member's identity is its meaning: what `is`, `==`, `.value` answer
            self.guard(GuardKind.ID_MATCH, value)
            return UserDefinedObjectVariable(value, source)
        return None

    def _wrap_bound_builtin(self, value: types.BuiltinMethodType) -> VariableTracker:
        """`obj.name` of a tensor or container, bound anew on each lookup: the object it is bound to
        and the method's name are what the trace reads of it, not which bound method object it is."""
        tx, source = self.tx, self.source
        self.guard(GuardKind.TYPE_MATCH, type(value))
        if source is not None:
            tx.output.add_guard(Guard(AttrSource(source, "__name__"), GuardKind.EQUALS_MATCH, value.__name__))
        owner = VariableBuilder(tx, source and AttrSource(source, "__self__"))(value.__self__)
        return BoundMethodCall(owner, value.__name__)

    def _wrap_function_by_structure(self, value: types.FunctionType) -> VariableTracker:
        """A function guarded by its code and globals, not its identity (a lambda or a bound method's
        function is often a new object on each call): calling it guards the defaults and closure
        contents it reads. Where the trace relies on which object it is, its identity is guarded then;
        one the frame made itself is another object on each call, and has none to rely on."""
        tx, source = self.tx, self.source
        root_globals = tx.output.f_globals
        globals_source = (GlobalsDictSource() if value.__globals__ is root_globals
                          else tx.output.namespace_source("G", value.__globals__))
        self.guard(GuardKind.FUNCTION_MATCH, (value.__code__, globals_source))
        identity = None if self.made_by_frame else functools.partial(self.guard, GuardKind.ID_MATCH, value)
        return UserFunctionVariable(value, source, by_structure=True, guard_identity=identity)

    def wrap_mapping(self, value: dict) -> VariableTracker:
        """An OrderedDict or defaultdict: its type, its keys in order (and its default factory) guarded."""
        tx, source = self.tx, self.source
        self.guard(GuardKind.TYPE_MATCH, type(value))
        owner = collections.OrderedDict if type(value) is collections.OrderedDict else dict
        if source is not None:
            tx.output.add_guard(Guard(MethodCallSource(source, owner, "keys", ()), GuardKind.EQUALS_MATCH, list(value)))
        factory = None
        if type(value) is collections.defaultdict:
            factory = VariableBuilder(tx, source and AttrSource(source, "default_factory"))(value.default_factory)
        items = {k: VariableBuilder(tx, source and GetItemSource(source, k))(v) for k, v in value.items()}
        return ConstDictVariable(items, type(value), source, factory)


def _attribute_lookup_in_python(cls: type) -> bool:
    """An object (not a tensor, not a module) whose class reads its attributes with a Python
    __getattribute__: a user object to the trace, found without asking it anything."""
    return has_python_getattribute(cls) and not issubclass(cls, (torch.Tensor, torch.nn.Module))


def _bound_to_tracked_object(method: types.BuiltinMethodType) -> bool:
    """Whether a builtin method is bound to an object the trace follows itself (a tensor, a list,
    dict or set), not to a module (`math.sqrt.__self__` is `math`)."""
    owner = getattr(method, "__self__", None)
    return isinstance(owner, torch.Tensor) or type(owner) in (list, dict, set)


def _traced_like_user_code(value: Any) -> bool:
    """A torch callable traced through like the user's own code: a module's method, a class of
    torch.distributions."""
    if isinstance(value, types.MethodType):
        return isinstance(value.__self__, torch.nn.Module)
    if isinstance(value, types.FunctionType):
        return value.__module__.startswith(_TRACED_TORCH_FUNCTIONS)
    return isinstance(value, type) and value.__module__.startswith(_TRACED_TORCH_CLASSES)


def wrap_constant_result(value: Any) -> VariableTracker:
    """A tracker for the result of evaluating a pure function on constants."""
    if is_constant_value(value):
        return ConstantVariable(value)
    if type(value) is list:
        return ListVariable([wrap_constant_result(v) for v in value])
    if type(value) is tuple:
        return TupleVariable([wrap_constant_result(v) for v in value])
    if type(value) is dict:
        return ConstDictVariable({k: wrap_constant_result(v) for k, v in value.items()})
    if type(value) is set:
        return SetVariable([], real=value)
    if type(value) is types.MappingProxyType:
        return ConstDictVariable({k: wrap_constant_result(v) for k, v in value.items()})
    if isinstance(value, enum.Enum):  # a member: its identity is its meaning
        return UserDefinedObjectVariable(value)
    unimplemented(f"a {type(value).__name__} computed from constants")
