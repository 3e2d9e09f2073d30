"""Functions and objects from the torch namespace."""
from __future__ import annotations

import os
import re
import sys
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch._dynamo.trace_rules
from torch.optim.optimizer import _use_grad_for_differentiable
import torch.fx

from ..exc import unimplemented
from ..frame_hook import disabled
from ..guards import Guard, GuardKind
from ..source import CallSource, GetItemSource, ModuleGlobalsSource
from .base import KnownObjectVariable, VariableTracker
from .constant import ConstantVariable, is_constant_value
from .foreach import MULTI_TENSOR_HANDLERS
from .lists import BaseListVariable
from .misc import GradModeVariable, NullContextVariable
from .named_tuple import NamedTupleVariable
from .nn_module import construct_module
from .numpy import NumpyNdarrayVariable, ndarray_as_tensor
from .sym import SymNodeVariable
from .tensor import TensorVariable


def _existing(*paths: str) -> set:
    found = set()
    for path in paths:
        value: Any = torch
        for part in path.split(".")[1:]:
            value = getattr(value, part, None)
        if value is not None:
            found.add(value)
    return found


# Calls answered while tracing from their arguments alone (from the guarded metadata of tensor
# arguments), or from facts of the process that cannot change while it runs.
_PURE_FUNCTIONS = _existing(
    "torch.is_tensor", "torch.is_storage", "torch.is_floating_point", "torch.is_complex", "torch.is_signed",
    "torch.is_conj", "torch.is_neg", "torch.is_inference", "torch.is_same_size", "torch.numel",
    "torch.promote_types", "torch.can_cast", "torch.result_type", "torch.broadcast_shapes", "torch.typename",
    "torch.cuda.is_available", "torch.cuda.device_count", "torch.is_autocast_available",
    "torch.backends.cudnn.is_available", "torch.backends.mkldnn.is_available",
) | _existing(  # whether another tracer (TorchScript, fx, make_fx, export) runs the code: never here
    "torch.jit.is_scripting", "torch.jit.is_tracing", "torch._C._get_tracing_state", "torch.fx._symbolic_trace.is_fx_tracing",
    "torch.nn.modules.activation._is_make_fx_tracing", "torch.compiler.is_exporting",
)
# Process-wide settings that the GLOBAL_STATE guard every entry gets (output_graph) checks: answered
# while tracing. (Not the autocast dtypes: torch's GlobalStateGuard does not compare them.)
_GLOBAL_STATE_READS = _existing(
    "torch.get_default_dtype", "torch.is_autocast_enabled", "torch.is_autocast_cpu_enabled",
    "torch.is_autocast_cache_enabled", "torch.are_deterministic_algorithms_enabled",
    "torch.is_deterministic_algorithms_warn_only_enabled", "torch.get_num_threads",
    "torch.is_inference_mode_enabled",
)
# Other settings, read without arguments: answered while tracing, and guarded by reading them again.
SETTINGS = {path: fn for path in (
    "torch.backends.mha.get_fastpath_enabled", "torch.get_num_interop_threads", "torch.autograd._profiler_enabled",
    "torch.is_anomaly_enabled", "torch.is_anomaly_check_nan_enabled",
    "torch.get_float32_matmul_precision", "torch.get_deterministic_debug_mode", "torch.is_warn_always_enabled",
    "torch.initial_seed", "torch.get_default_device",
    "torch._C._get_cudnn_enabled", "torch._C._get_mkldnn_enabled", "torch._C._get_privateuse1_backend_name",
    # what torch.backends.cuda.matmul.* and torch.backends.cudnn.* flags read
    "torch._C._get_cublas_allow_tf32", "torch._C._get_cublas_allow_fp16_reduced_precision_reduction",
    "torch._C._get_cublas_allow_bf16_reduced_precision_reduction", "torch._C._get_cublas_allow_fp16_accumulation",
    "torch._C._get_cudnn_allow_tf32", "torch._C._get_cudnn_benchmark", "torch._C._get_cudnn_deterministic",
    "torch._C._get_mkldnn_deterministic",
) for fn in _existing(path)}
SETTINGS["sys.getrecursionlimit"] = sys.getrecursionlimit
_SETTING_PATHS = {id(fn): path for path, fn in SETTINGS.items()}
_SETTINGS_SCOPE = "___settings"


def read_setting(tx, fn: Callable[[], Any]) -> VariableTracker:
    """`fn()` for a setting in SETTINGS, guarded by calling it again."""
    value = fn()
    tx.output.namespaces[_SETTINGS_SCOPE] = SETTINGS
    table = ModuleGlobalsSource(_SETTINGS_SCOPE, SETTINGS)
    tx.output.add_guard(Guard(CallSource(GetItemSource(table, _SETTING_PATHS[id(fn)])), GuardKind.EQUALS_MATCH, value))
    return ConstantVariable(value)


# Code asking "am I being compiled?" takes its compile-friendly path, as under torch.compile.
_IS_COMPILING = _existing(
    "torch.compiler.is_compiling", "torch.compiler.is_dynamo_compiling", "torch._dynamo.is_compiling",
    "torch._utils.is_compiling",
)
_NOT_IN_GRAPH = {
    torch._dynamo.graph_break: "torch._dynamo.graph_break()",
    torch.manual_seed: "seeding the random generator",
    torch.save: "torch.save",
    torch.load: "torch.load",
}

# The breaks torch.optim puts around an optimizer's update (so that aot_autograd sees a no-grad graph).
_USE_GRAD_CODE = next(c for c in _use_grad_for_differentiable.__code__.co_consts
                      if isinstance(c, types.CodeType) and c.co_name == "_use_grad")
_PROFILER_RANGES = _existing("torch.autograd.profiler.record_function")

# Functions that call back into user code under their own autograd rules (activation checkpointing
# reruns the function in backward, eagerly): the whole call runs in Python with no frame inside converted.
_RUN_UNCONVERTED = {id(f): f for f in _existing("torch.utils.checkpoint.checkpoint",
                                                 "torch.utils.checkpoint.checkpoint_sequential")}
_unconverted_wrappers: Dict[int, Any] = {}


def unconverted_wrapper(fn: Any) -> Any:
    """For a function in _RUN_UNCONVERTED, the minidynamo.disable wrapper generated code calls instead; else None."""
    if _RUN_UNCONVERTED.get(id(fn)) is not fn:
        return None
    if id(fn) not in _unconverted_wrappers:
        _unconverted_wrappers[id(fn)] = disabled(fn)
    return _unconverted_wrappers[id(fn)]


# Setters of process-wide state (default dtype, deterministic algorithms, autocast, seeds, threads, ...):
# a graph would not replay them in order with the Python around it, so they run in Python (graph break).
_GLOBAL_SETTER = re.compile(r"^_*(set_|use_|enable_|disable_|clear_|reset_)|^(manual_)?seed$|^autocast_(in|de)crement_nesting$")


def changes_global_state(fn: Any) -> bool:
    return not isinstance(fn, type) and bool(_GLOBAL_SETTER.match(getattr(fn, "__name__", "") or ""))


_FUNCTORCH_DIR = os.path.join(os.path.dirname(torch.__file__), "_functorch") + os.sep


def is_functorch_function(value: Any) -> bool:
    """A torch.func transform (vmap, grad, jacrev, functional_call, ...) or a function one of them
    made (whose name and module may be those of the function it wraps)."""
    code = getattr(value, "__code__", None)
    return isinstance(code, types.CodeType) and code.co_filename.startswith(_FUNCTORCH_DIR)


def _named_in_graph_code(fn: Any) -> bool:
    """Whether the graph's generated code, which calls torch functions by their qualified name,
    reaches `fn` by that name (a function made at run time under a torch name does not)."""
    try:
        name = torch.fx.node._get_qualified_name(fn)
    except Exception:  # noqa: BLE001 - fx cannot name it: it refers to the object itself
        return True
    if name.split(".")[0] != "torch":
        return True
    value: Any = torch
    for part in name.split(".")[1:]:
        value = getattr(value, part, None)
    return value is fn


class FunctorchFunctionVariable(VariableTracker):
    """A function a torch.func transform made (`vmap(f)`, `grad(f)`): called in Python, not traced.
    Its identity changes on every call, so the guard is on the transform's code instead."""

    def __init__(self, fn: Any, source=None) -> None:
        super().__init__(source)
        self.fn = fn

    def python_type(self) -> type:
        return type(self.fn)

    def describe(self) -> str:
        return f"function made by a torch.func transform ({getattr(self.fn, '__qualname__', '')})"

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        unimplemented(f"calling a {self.describe()}: function transforms run in Python")


def _fake_foreach(fn: Any, args: List[VariableTracker]) -> Optional[Callable[..., Any]]:
    """For a `torch._foreach_<op>` given a tensor as its scalar (which its fake kernel would read as a
    number: data-dependent), the same op applied tensor by tensor, for the results' metadata."""
    name = getattr(fn, "__name__", "")
    if not name.startswith("_foreach_") or not any(isinstance(a, TensorVariable) for a in args[1:]):
        return None
    op_name = name[len("_foreach_"):]
    in_place = op_name.endswith("_")
    op = getattr(torch.Tensor if in_place else torch, op_name, None)
    if op is None:
        return None

    def per_tensor(tensors: List[torch.Tensor], *rest: Any, **kwargs: Any) -> Optional[Tuple[torch.Tensor, ...]]:
        results = [op(t, *[r[i] if isinstance(r, (list, tuple)) else r for r in rest], **kwargs)
                   for i, t in enumerate(tensors)]
        return None if in_place else tuple(results)

    return per_tensor


def _is_structseq(value: Any) -> bool:
    """A C struct sequence type (torch.return_types.*): a tuple subclass with named fields."""
    return isinstance(value, type) and issubclass(value, tuple) and hasattr(value, "n_sequence_fields")


def is_allowed_in_graph(value: Any) -> bool:
    """Whether `torch.compiler.allow_in_graph(value)` asked for calls of `value` to be one opaque node
    of the graph instead of being traced into (the registry the decorator writes, read as it is)."""
    return id(value) in torch._dynamo.trace_rules._allowed_callable_ids


def _holds_tensor(value: VariableTracker) -> bool:
    if isinstance(value, BaseListVariable):
        return any(map(_holds_tensor, value.items))
    return isinstance(value, (TensorVariable, SymNodeVariable))


class TorchVariable(KnownObjectVariable):
    """A function, class or submodule of torch; calling a function records it in the graph."""

    def describe(self) -> str:
        return f"torch.{getattr(self.value, '__name__', self.value)}"

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        fn = self.value
        if fn in (torch.no_grad, torch.enable_grad) and not args:
            return GradModeVariable(fn is torch.enable_grad)
        if fn is torch.set_grad_enabled and len(args) == 1:
            return GradModeVariable.made_by_set_grad_enabled(tx, bool(args[0].as_python_constant()))
        if fn is torch.is_grad_enabled:  # the entry's GLOBAL_STATE guard fixes the mode the trace started in
            return ConstantVariable(torch.is_grad_enabled())
        if fn in _IS_COMPILING:
            return ConstantVariable(True)
        if fn is torch.jit.annotate and len(args) == 2 and not kwargs:  # a type hint for TorchScript
            return args[1]
        if len(args) == 1 and isinstance(args[0], NumpyNdarrayVariable) and not kwargs:
            converted = ndarray_as_tensor(tx, fn, args[0])
            if converted is not None:
                return converted
        if fn is torch._dynamo.graph_break and tx.code is _USE_GRAD_CODE:
            return ConstantVariable(None)  # the optimizer's own break, for aot's sake: one graph holds the update
        if fn in _NOT_IN_GRAPH:
            unimplemented(_NOT_IN_GRAPH[fn])
        if fn in _PROFILER_RANGES:  # profiler annotations do not change what runs
            return NullContextVariable()
        if changes_global_state(fn):
            unimplemented(f"torch.{fn.__name__}() changes global state")
        if fn is torch.Size or fn in (torch.device, torch.dtype, torch.finfo, torch.iinfo):
            return ConstantVariable(fn(*[a.as_python_constant() for a in args]))
        if fn in _GLOBAL_STATE_READS or fn in _PURE_FUNCTIONS:
            return self._evaluate(args, kwargs)
        if id(fn) in _SETTING_PATHS and not args and not kwargs:
            return read_setting(tx, fn)
        if isinstance(fn, type) and issubclass(fn, torch.nn.Module):
            return construct_module(tx, fn, args, kwargs)
        if _is_structseq(fn) and len(args) == 1 and not kwargs and args[0].has_unpack_var_sequence(tx):
            items = args[0].unpack_var_sequence(tx)
            if len(items) == fn.n_fields == fn.n_sequence_fields:  # torch.return_types.max((values, indices))
                return NamedTupleVariable(items, fn)
        if isinstance(fn, type):
            unimplemented(f"constructing {fn.__qualname__} inside a compiled region")
        if (getattr(fn, "__module__", None) or "").startswith("torch.nested"):
            unimplemented(f"torch.nested.{fn.__name__}() makes a nested tensor: nested tensors run eagerly")
        if is_functorch_function(fn):
            unimplemented(f"torch.func.{fn.__name__}: function transforms run in Python, they are not traced")
        if not _named_in_graph_code(fn):
            unimplemented(f"{self.describe()} is not the torch function of that name (made at run time)")
        if fn in MULTI_TENSOR_HANDLERS:
            handled = MULTI_TENSOR_HANDLERS[fn](tx, args, kwargs)
            if handled is not None:
                return handled
        result = tx.output.call_graph_op(tx, "call_function", fn, args, kwargs, _fake_foreach(fn, args))
        if isinstance(result, ConstantVariable) and result.value is not None and not any(
                map(_holds_tensor, [*args, *kwargs.values()])):
            # answered from Python values alone: a setting of the process nothing guards
            unimplemented(f"{self.describe()}() reads process state")
        return result

    def _evaluate(self, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        values = [a.example if isinstance(a, TensorVariable) else a.as_python_constant() for a in args]
        return ConstantVariable(self.value(*values, **{k: v.as_python_constant() for k, v in kwargs.items()}))

    def var_getattr(self, tx, name: str) -> VariableTracker:
        value = getattr(self.value, name)
        if is_constant_value(value):
            return ConstantVariable(value)
        return tx.wrap(value)
