"""Guards: the assumptions a compiled entry relies on, and the check function built from them.

A guard is a (source, kind) pair with the value it expects. All guards of an entry become one
Python function `check_fn(L)` over the frame's locals `L` (globals are bound as `G`); the
tensor guards of an entry are checked together by one C++ `TensorGuards` call.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch._C._dynamo.guards import TensorGuards

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


# Constants whose equality is exact and cheap enough to guard on by value.
CONSTANT_TYPES = (int, float, bool, str, type(None), bytes, complex, torch.dtype, torch.device)


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


@dataclass
class CheckFunction:
    """The compiled guard check of one cache entry."""

    fn: Callable[[Dict[str, Any]], bool]
    guards: List[Guard]
    source_code: str

    def __call__(self, f_locals: Dict[str, Any]) -> bool:
        return self.fn(f_locals)


def _literal(value: Any) -> Optional[str]:
    """Source text that evaluates to `value`, for constants whose repr round-trips."""
    if type(value) in (int, bool, str, bytes, type(None)):
        return repr(value)
    if type(value) is float and math.isfinite(value):
        return repr(value)
    return None


def _static_dims(values: Sequence[int], dynamic: Tuple[int, ...]) -> List[Optional[int]]:
    """Per-dimension expectations for TensorGuards: None leaves a symbolic dimension unchecked."""
    return [None if i in dynamic else v for i, v in enumerate(values)]


class CheckFunctionBuilder:
    """Turns guards into the source of one check function, and compiles it."""

    def __init__(self, f_globals: Dict[str, Any], namespaces: Dict[str, Dict[str, Any]]) -> None:
        self.scope: Dict[str, Any] = {**namespaces, "G": f_globals, "___is_grad_enabled": torch.is_grad_enabled}
        self.tensor_sources: List[str] = []
        self.tensor_values: List[torch.Tensor] = []
        self.tensor_dynamic_dims: List[Tuple[int, ...]] = []

    def bind(self, value: Any) -> str:
        name = f"___v{len(self.scope)}"
        self.scope[name] = value
        return name

    def code_for(self, guard: Guard) -> List[str]:
        ref = guard.name
        kind, value = guard.kind, guard.value
        if kind is GuardKind.TYPE_MATCH:
            return [f"type({ref}) is {self.bind(value)}"]
        if kind in (GuardKind.ID_MATCH, GuardKind.NN_MODULE):
            return [f"{ref} is {self.bind(value)}"]
        if kind is GuardKind.EQUALS_MATCH:
            literal = _literal(value) or self.bind(value)
            return [f"type({ref}) is {self.bind(type(value))}", f"{ref} == {literal}"]
        if kind is GuardKind.LIST_LENGTH:
            return [f"type({ref}) is {self.bind(type(value))}", f"len({ref}) == {len(value)}"]
        if kind is GuardKind.DICT_KEYS:
            return [f"type({ref}) is {self.bind(type(value))}", f"list({ref}.keys()) == {list(value.keys())!r}"]
        if kind is GuardKind.TENSOR_MATCH:
            self.tensor_sources.append(ref)
            self.tensor_values.append(value)
            self.tensor_dynamic_dims.append(guard.dynamic_dims)
            return [f"{ref}: dtype, device, requires_grad, sizes and strides as traced"]
        if kind is GuardKind.ALIAS_OF:
            return [f"{ref} is {value.name()}"]
        if kind is GuardKind.GRAD_MODE:
            return [f"___is_grad_enabled() is {value!r}"]
        if kind is GuardKind.SHAPE_ENV:
            return list(value)
        raise AssertionError(kind)

    def build(self, guards: Sequence[Guard]) -> CheckFunction:
        ordered = sorted(guards, key=Guard.sort_key)
        checks: List[str] = []
        for guard in ordered:
            guard.code_list = self.code_for(guard)
            if guard.kind is not GuardKind.TENSOR_MATCH:
                checks.extend(guard.code_list)
        if self.tensor_values:
            tensor_guards = TensorGuards(
                *self.tensor_values,
                dynamic_dims_sizes=[_static_dims(t.size(), d) for t, d in zip(self.tensor_values, self.tensor_dynamic_dims)],
                # strides of a tensor with a symbolic size are symbolic expressions: left unchecked
                dynamic_dims_strides=[_static_dims(t.stride(), tuple(range(t.dim())) if d else ())
                                      for t, d in zip(self.tensor_values, self.tensor_dynamic_dims)],
            )
            checks.append(f"{self.bind(tensor_guards)}.check({', '.join(self.tensor_sources)})")
            if len(self.tensor_sources) > 1:  # inputs traced as distinct tensors must stay distinct
                ids = ", ".join(f"id({ref})" for ref in self.tensor_sources)
                checks.append(f"len({{{ids}}}) == {len(self.tensor_sources)}")
        body = "\n        and ".join(checks) or "True"
        source_code = (
            "def ___check(L):\n"
            "    try:\n"
            f"        return ({body})\n"
            "    except Exception:\n"
            "        return False\n"
        )
        scope = dict(self.scope)
        exec(compile(source_code, "<minidynamo guards>", "exec"), scope)
        return CheckFunction(scope["___check"], ordered, source_code)


def build_check_function(
    guards: Sequence[Guard], f_globals: Dict[str, Any], namespaces: Dict[str, Dict[str, Any]]
) -> CheckFunction:
    """`namespaces` binds the names of ModuleGlobalsSource scopes used by the guards."""
    return CheckFunctionBuilder(f_globals, namespaces).build(guards)
