"""Guards: the assumptions a compiled entry relies on, the check function built from them, and
why a check failed.

A guard is a (source, kind) pair with the value it expects. The guards of one entry become a
C `GuardSet` (see guard_set.py) that the hook evaluates on the frame's local slots; the same
guards are rendered as Python source for reports, and explain why an entry stopped matching.
"""
from __future__ import annotations

import enum
import math
import types
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .source import Source


class GuardKind(enum.Enum):
    TYPE_MATCH = "TYPE_MATCH"
    ID_MATCH = "ID_MATCH"
    EQUALS_MATCH = "EQUALS_MATCH"
    TENSOR_MATCH = "TENSOR_MATCH"
    LIST_LENGTH = "LIST_LENGTH"
    DICT_KEYS = "DICT_KEYS"
    NN_MODULE = "NN_MODULE"
    GRAD_MODE = "GRAD_MODE"
    ALIAS_OF = "ALIAS_OF"  # value: the source of the tensor this one must be
    SHAPE_ENV = "SHAPE_ENV"  # value: Python expressions over L and G relating symbolic sizes


@dataclass
class Guard:
    source: Optional[Source]
    kind: GuardKind
    value: Any = None
    code_list: List[str] = field(default_factory=list)
    dynamic_dims: Tuple[int, ...] = ()  # TENSOR_MATCH: dims whose size is symbolic (not checked)

    @property
    def name(self) -> str:
        return self.source.name() if self.source is not None else ""

    @property
    def create_fn_name(self) -> str:
        return self.kind.value

    def sort_key(self) -> Tuple[int, str, str]:
        depth = self.source.depth() if self.source is not None else -1
        return (depth, self.name, self.kind.value)

    def __str__(self) -> str:
        return f"{self.name or '<global state>'}: {self.kind.value}  ({'; '.join(self.code_list)})"


@dataclass(frozen=True)
class TensorSpec:
    """What a tensor guard expects, kept instead of the tensor itself."""

    dtype: torch.dtype
    device: torch.device
    requires_grad: bool
    sizes: Tuple[int, ...]
    strides: Tuple[int, ...]
    dispatch_keys: Any

    @staticmethod
    def of(tensor: torch.Tensor) -> "TensorSpec":
        return TensorSpec(tensor.dtype, tensor.device, tensor.requires_grad, tuple(tensor.size()),
                          tuple(tensor.stride()), torch._C._dispatch_keys(tensor))


def detach_value(guard: Guard) -> Guard:
    """The guard as stored with an entry: no strong references to tensors or identified objects,
    so that they can die (and their entry with them)."""
    value = guard.value
    if guard.kind is GuardKind.TENSOR_MATCH and isinstance(value, torch.Tensor):
        value = TensorSpec.of(value)
    elif guard.kind in (GuardKind.ID_MATCH, GuardKind.NN_MODULE):
        try:
            value = weakref.ref(value)
        except TypeError:
            pass
    return Guard(guard.source, guard.kind, value, list(guard.code_list), guard.dynamic_dims)


def expected_object(guard: Guard) -> Any:
    value = guard.value
    return value() if isinstance(value, weakref.ref) else value


@dataclass
class CheckFunction:
    """The guard check of one cache entry: `fn` is what the hook calls."""

    fn: Callable[[Dict[str, Any]], bool]
    guards: List[Guard]
    source_code: str
    namespaces: Dict[str, Dict[str, Any]]

    def __call__(self, f_locals: Dict[str, Any]) -> bool:
        return bool(self.fn(f_locals))

    def failure_reason(self, f_locals: Dict[str, Any], f_globals: Dict[str, Any]) -> Optional[str]:
        return failure_reason(self.guards, f_locals, f_globals, self.namespaces)


# ---- rendering as Python ----


def _literal(value: Any) -> Optional[str]:
    """Source text that evaluates to `value`, for constants whose repr round-trips."""
    if type(value) in (int, bool, str, bytes, type(None)):
        return repr(value)
    if type(value) is float and math.isfinite(value):
        return repr(value)
    return None


def _type_name(cls: type) -> str:
    return getattr(cls, "__qualname__", repr(cls))


def code_for(guard: Guard) -> List[str]:
    """The guard as readable Python conditions over L (locals) and G (globals)."""
    ref, kind, value = guard.name, guard.kind, guard.value
    if kind is GuardKind.TYPE_MATCH:
        return [f"type({ref}) is {_type_name(value)}"]
    if kind in (GuardKind.ID_MATCH, GuardKind.NN_MODULE):
        return [f"{ref} is <{_type_name(type(value))} object at {id(value):#x}>"]
    if kind is GuardKind.EQUALS_MATCH:
        return [f"type({ref}) is {_type_name(type(value))}", f"{ref} == {_literal(value) or repr(value)}"]
    if kind is GuardKind.LIST_LENGTH:
        return [f"type({ref}) is {_type_name(type(value))}", f"len({ref}) == {len(value)}"]
    if kind is GuardKind.DICT_KEYS:
        return [f"type({ref}) is dict", f"list({ref}.keys()) == {list(value.keys())!r}"]
    if kind is GuardKind.TENSOR_MATCH:
        spec = value if isinstance(value, TensorSpec) else TensorSpec.of(value)
        sizes = ", ".join("?" if i in guard.dynamic_dims else str(s) for i, s in enumerate(spec.sizes))
        strides = "?" if guard.dynamic_dims else str(spec.strides)
        return [f"{ref}: {spec.dtype}, {spec.device}, requires_grad={spec.requires_grad}, "
                f"size ({sizes}), stride {strides}"]
    if kind is GuardKind.ALIAS_OF:
        return [f"{ref} is {value.name()}"]
    if kind is GuardKind.GRAD_MODE:
        return [f"torch.is_grad_enabled() is {value!r}"]
    if kind is GuardKind.SHAPE_ENV:
        return list(value)
    raise AssertionError(kind)


def render_source(guards: Sequence[Guard]) -> str:
    lines = [line for guard in guards for line in guard.code_list]
    tensors = [g.name for g in guards if g.kind is GuardKind.TENSOR_MATCH]
    if len(tensors) > 1:
        lines.append(f"tensors {', '.join(tensors)} are distinct objects")
    body = "\n    and ".join(lines) or "True"
    return f"def check(L):\n    return ({body})\n"


# ---- why a guard fails ----


def failure_reason(guards: Sequence[Guard], f_locals: Dict[str, Any], f_globals: Dict[str, Any],
                   namespaces: Dict[str, Dict[str, Any]]) -> Optional[str]:
    """The first guard that fails on these locals, in words; None if all pass."""
    scope = {**namespaces, "L": f_locals, "G": f_globals, "torch": torch, "types": types}
    tensors: List[Tuple[str, Any]] = []
    # in the order the C guard set checks them: shape relations last
    for guard in sorted(guards, key=lambda g: g.kind is GuardKind.SHAPE_ENV):
        try:
            value = eval(guard.name, scope) if guard.source is not None else None
        except Exception:
            return f"{guard.name} is missing"
        reason = reason_for(guard, value, scope)
        if reason is not None:
            return reason
        if guard.kind is GuardKind.TENSOR_MATCH:
            tensors.append((guard.name, value))
    for i, (name_a, a) in enumerate(tensors):
        for name_b, b in tensors[i + 1 :]:
            if a is b:
                return f"{name_a} and {name_b} are now the same tensor"
    return None


def reason_for(guard: Guard, value: Any, scope: Dict[str, Any]) -> Optional[str]:
    """Why `value` (read at the guard's source) fails `guard`, or None; `scope` resolves other sources."""
    name, kind = guard.name, guard.kind
    expected = expected_object(guard)
    if kind is GuardKind.TYPE_MATCH and type(value) is not expected:
        return f"{name} type mismatch: expected {_type_name(expected)}, got {_type_name(type(value))}"
    if kind in (GuardKind.ID_MATCH, GuardKind.NN_MODULE) and value is not expected:
        return f"{name} is not the object seen when compiling"
    if kind in (GuardKind.EQUALS_MATCH, GuardKind.LIST_LENGTH) and type(value) is not type(expected):
        return f"{name} type mismatch: expected {_type_name(type(expected))}, got {_type_name(type(value))}"
    if kind is GuardKind.EQUALS_MATCH and value != expected:
        return f"{name} value mismatch: expected {expected!r}, got {value!r}"
    if kind is GuardKind.LIST_LENGTH and len(value) != len(expected):
        return f"len({name}) mismatch: expected {len(expected)}, got {len(value)}"
    if kind is GuardKind.DICT_KEYS and (type(value) is not dict or list(value) != list(expected)):
        return f"{name} keys mismatch: expected {list(expected)!r}, got {list(value) if isinstance(value, dict) else value!r}"
    if kind is GuardKind.TENSOR_MATCH:
        return tensor_mismatch(name, expected, value, guard.dynamic_dims)
    if kind is GuardKind.ALIAS_OF and value is not eval(expected.name(), scope):
        return f"{name} is no longer the same tensor as {expected.name()}"
    if kind is GuardKind.GRAD_MODE and torch.is_grad_enabled() is not expected:
        return f"grad mode mismatch: expected {expected}, got {torch.is_grad_enabled()}"
    if kind is GuardKind.SHAPE_ENV:
        for expr in expected:
            try:
                holds = eval(expr, scope)
            except Exception:
                holds = False
            if not holds:
                return f"shape guard failed: {expr}"
    return None


def tensor_mismatch(name: str, spec: Any, value: Any, dynamic_dims: Tuple[int, ...] = ()) -> Optional[str]:
    """Why `value` does not match a tensor guard's expectations (a TensorSpec or a tensor)."""
    if isinstance(spec, torch.Tensor):
        spec = TensorSpec.of(spec)
    if not isinstance(value, torch.Tensor):
        return f"{name} is not a tensor (got {_type_name(type(value))})"
    if value.dtype != spec.dtype:
        return f"{name} dtype mismatch: expected {spec.dtype}, got {value.dtype}"
    if value.device != spec.device:
        return f"{name} device mismatch: expected {spec.device}, got {value.device}"
    if value.requires_grad != spec.requires_grad:
        return f"{name} requires_grad mismatch: expected {spec.requires_grad}, got {value.requires_grad}"
    if value.dim() != len(spec.sizes):
        return f"{name} rank mismatch: expected {len(spec.sizes)}, got {value.dim()}"
    for dim, (want, got) in enumerate(zip(spec.sizes, value.size())):
        if dim not in dynamic_dims and want != got:
            return f"{name} size mismatch at dim {dim}: expected {want}, got {got}"
    if not dynamic_dims:
        for dim, (want, got) in enumerate(zip(spec.strides, value.stride())):
            if want != got:
                return f"{name} stride mismatch at dim {dim}: expected {want}, got {got}"
    if torch._C._dispatch_keys(value) != spec.dispatch_keys:
        return f"{name} dispatch key set mismatch: expected {spec.dispatch_keys}, got {torch._C._dispatch_keys(value)}"
    return None
