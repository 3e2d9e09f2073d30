"""Guards: the assumptions a compiled entry relies on, one rule per kind (text, check, failure reason).

A guard is a (source, kind) pair with the value it expects. Each kind has one `KindRule` below that
says how the guard reads as Python (for reports), why a value fails it (for recompile reasons), how
it becomes C `GuardCheck`s of the entry's guard set (see guard_set.py) or, failing that, a Python
check, and which guards it counts as duplicates. Adding a kind is adding one rule.
"""
from __future__ import annotations

import abc
import collections
import enum
import functools
import json
import math
import types
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch._C._dynamo.guards import GlobalStateGuard

from . import _C
from .source import Source

if TYPE_CHECKING:
    from .guard_set import GuardSetBuilder


class GuardKind(enum.Enum):
    TYPE_MATCH = "TYPE_MATCH"
    ID_MATCH = "ID_MATCH"
    EQUALS_MATCH = "EQUALS_MATCH"  # same type and value, element by element; floats bit for bit
    TENSOR_MATCH = "TENSOR_MATCH"
    LIST_LENGTH = "LIST_LENGTH"
    DICT_KEYS = "DICT_KEYS"
    DICT_CONTAINS = "DICT_CONTAINS"  # value: (key, present): `(key in d) == present`
    HASATTR = "HASATTR"  # value: (attribute name, present): `hasattr(obj, name) == present`
    NN_MODULE = "NN_MODULE"
    GRAD_MODE = "GRAD_MODE"
    GLOBAL_STATE = "GLOBAL_STATE"  # source None; value: an EntryState captured when the trace began
    ALIAS_OF = "ALIAS_OF"  # value: the source of the tensor or container this one must be
    DISTINCT_FROM = "DISTINCT_FROM"  # value: the source of a container this one must not be
    SHAPE_ENV = "SHAPE_ENV"  # value: Python expressions over L and G relating symbolic sizes
    BUILTIN_MATCH = "BUILTIN_MATCH"  # source: a globals dict; value: a BuiltinRead
    # a Python function of the same code over the same globals, whichever object; value: (code, the
    # source of its globals dict)
    FUNCTION_MATCH = "FUNCTION_MATCH"

    @property
    def rule(self) -> "KindRule":
        return self._rule  # set by @rule below: read for every guard made, a dict lookup would hash the enum


@dataclass
class Guard:
    source: Optional[Source]
    kind: GuardKind
    value: Any = None
    dynamic_dims: Tuple[int, ...] = ()  # TENSOR_MATCH: dims whose size is symbolic (not checked)
    rendered: Optional[List[str]] = field(default=None, repr=False, compare=False)  # see code_list

    @property
    def name(self) -> str:
        return self.source.name() if self.source is not None else ""

    @property
    def code_list(self) -> List[str]:
        """The guard as readable Python conditions over L (locals) and G (globals): rendered when
        first asked (reports ask; compiling does not)."""
        if self.rendered is None:
            self.rendered = self.kind.rule.render(self)
        return self.rendered

    @property
    def create_fn_name(self) -> str:
        return self.kind.value

    @property
    def dedupe_key(self) -> Tuple:
        """Guards with the same key say the same thing: an entry keeps the first."""
        return self.kind.rule.dedupe_key(self)

    def sort_key(self) -> Tuple[int, str, str]:
        depth = self.source.depth() if self.source is not None else -1
        return (depth, self.name, self.kind._value_)  # `.value` is a descriptor call, read per guard

    def __str__(self) -> str:
        return f"{self.name or '<global state>'}: {self.kind.value}  ({'; '.join(self.code_list)})"


@dataclass(frozen=True)
class BuiltinRead:
    """A builtin the trace read: `name` is not a global and `namespace` (a builtins dict) holds `obj`."""

    name: str
    namespace: Dict[str, Any] = field(repr=False, compare=False)
    obj: Any = field(compare=False)


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


# Process state outside torch's GlobalStateGuard that changes what a traced frame does:
# (name in reasons, function reading it).
_EXTRA_STATE: Tuple[Tuple[str, Callable[[], Any]], ...] = (
    ("torch function modes", torch._C._len_torch_function_stack),
    ("torch dispatch modes", torch._C._len_torch_dispatch_stack),
    ("inference mode", torch.is_inference_mode_enabled),
)


@dataclass(frozen=True)
class EntryState:
    """The global torch state a frame was entered with, as its GLOBAL_STATE guard checks it (the state
    itself, captured and restored, is global_state.GlobalState): torch's GlobalStateGuard (grad mode,
    autocast per device, default dtype, deterministic algorithms, torch function enabled, ...)
    plus the mode stacks and inference mode."""

    torch_guard: Any
    extra: Tuple[Any, ...]

    @staticmethod
    def capture() -> "EntryState":
        return EntryState(GlobalStateGuard(), tuple(read() for _, read in _EXTRA_STATE))

    def fields(self) -> Dict[str, Any]:
        return json.loads(self.torch_guard.__getstate__())

    def changes(self) -> List[str]:
        """What differs now, in words ('deterministic_algorithms (expected False, got True)')."""
        now = EntryState.capture()
        changed = []
        if not self.torch_guard.check():
            then_fields, now_fields = self.fields(), now.fields()
            changed = [_change(k, then_fields[k], now_fields.get(k)) for k in then_fields
                       if then_fields[k] != now_fields.get(k)] or [self.torch_guard.reason().strip()]
        changed += [_change(name, then, got) for (name, _), then, got in zip(_EXTRA_STATE, self.extra, now.extra)
                    if then != got]
        return changed


def _change(name: str, expected: Any, got: Any) -> str:
    if isinstance(expected, (dict, list)):
        return name
    return f"{name} (expected {expected}, got {got})"


def capture_global_state() -> EntryState:
    """The value of a GLOBAL_STATE guard: call it when the trace begins."""
    return EntryState.capture()


def expected_object(guard: Guard) -> Any:
    value = guard.value
    return value() if isinstance(value, weakref.ref) else value


def detach_value(guard: Guard) -> Guard:
    """The guard as stored with an entry: no strong references to tensors, identified objects or
    types, so that they can die (and their entry with them), and no live mutable containers."""
    value = guard.kind.rule.detach(guard.value)
    if value is guard.value:  # nothing to let go of: the guard itself serves
        return guard
    return Guard(guard.source, guard.kind, value, guard.dynamic_dims, guard.rendered)


def _weak(value: Any) -> Any:
    try:
        return weakref.ref(value)
    except TypeError:
        return value


@dataclass
class CheckFunction:
    """The guard check of one cache entry: `fn` is what the hook calls."""

    fn: Callable[..., bool]
    guards: List[Guard]
    namespaces: Dict[str, Dict[str, Any]]

    @functools.cached_property
    def source_code(self) -> str:
        """The guards as one readable Python function (for reports)."""
        return render_source(self.guards)

    def __call__(self, f_locals: Dict[str, Any], f_globals: Optional[Dict[str, Any]] = None) -> bool:
        return bool(self.fn(f_locals) if f_globals is None else self.fn(f_locals, f_globals))

    def failure_reason(self, f_locals: Dict[str, Any], f_globals: Dict[str, Any]) -> Optional[str]:
        return failure_reason(self.guards, f_locals, f_globals, self.namespaces)


# ---- rendering helpers ----


def _literal(value: Any) -> Optional[str]:
    """Source text that evaluates to `value`, for constants whose repr round-trips."""
    if type(value) in (int, bool, str, bytes, type(None)):
        return repr(value)
    if type(value) is float and math.isfinite(value):
        return repr(value)
    return None


def _type_name(cls: Any) -> str:
    return getattr(cls, "__qualname__", repr(cls))


def _type_mismatch(name: str, expected: type, value: Any) -> str:
    return f"{name} type mismatch: expected {_type_name(expected)}, got {_type_name(type(value))}"


class NotExpressible(Exception):
    """A guard the C guard set cannot check (its source has no accessor): it is checked in Python."""


# ---- one rule per kind ----


class KindRule(abc.ABC):
    """Everything about one guard kind."""

    kind: GuardKind

    @abc.abstractmethod
    def render(self, guard: Guard) -> List[str]:
        """The guard as readable Python conditions over L (locals) and G (globals)."""

    @abc.abstractmethod
    def reason(self, guard: Guard, value: Any, scope: Dict[str, Any]) -> Optional[str]:
        """Why `value` (read at the guard's source) fails the guard, or None; `scope` resolves
        other sources. Also the Python check of guards the C guard set cannot express."""

    @abc.abstractmethod
    def lower(self, guard: Guard, b: "GuardSetBuilder") -> None:
        """Add the guard's checks to the C guard set being built (raise NotExpressible to leave it
        to Python)."""

    def dedupe_key(self, guard: Guard) -> Tuple:
        return (guard.name, guard.kind)

    def detach(self, value: Any) -> Any:
        return value

    def python_terms(self, guard: Guard, index: int) -> List[str]:
        """Conditions of the Python check (see guard_set._python_check); ___guards[index] is it."""
        return [f"___reason(___guards[{index}], {guard.name or 'None'}, {{}}) is None"]


RULES: Dict[GuardKind, KindRule] = {}


def rule(kind: GuardKind) -> Callable[[type], type]:
    def register(cls: type) -> type:
        assert kind not in RULES, f"two rules for {kind}"
        RULES[kind] = kind._rule = cls()
        RULES[kind].kind = kind
        return cls

    return register


@rule(GuardKind.TYPE_MATCH)
class TypeMatch(KindRule):
    def render(self, guard: Guard) -> List[str]:
        return [f"type({guard.name}) is {_type_name(expected_object(guard))}"]

    def reason(self, guard: Guard, value: Any, scope: Dict[str, Any]) -> Optional[str]:
        expected = expected_object(guard)
        if type(value) is not expected:
            return _type_mismatch(guard.name, expected, value)
        return None

    def lower(self, guard: Guard, b: "GuardSetBuilder") -> None:
        b.item(b.weak_check(guard.name, _C.CHK_TYPE, guard.value), b.accessor(guard.source))

    def detach(self, value: Any) -> Any:
        return _weak(value)  # a class defined next to the function holds its globals


class _Identity(KindRule):
    def render(self, guard: Guard) -> List[str]:
        if isinstance(guard.value, weakref.ref) and guard.value() is None:  # rendered after its entry died
            return [f"{guard.name} is <an object that has since died>"]
        value = expected_object(guard)
        return [f"{guard.name} is <{_type_name(type(value))} object at {id(value):#x}>"]

    def reason(self, guard: Guard, value: Any, scope: Dict[str, Any]) -> Optional[str]:
        return None if value is expected_object(guard) else f"{guard.name} is not the object seen when compiling"

    def lower(self, guard: Guard, b: "GuardSetBuilder") -> None:
        b.item(b.weak_check(guard.name, _C.CHK_ID, guard.value), b.accessor(guard.source))

    def detach(self, value: Any) -> Any:
        return _weak(value)


@rule(GuardKind.ID_MATCH)
class IdMatch(_Identity):
    pass


@rule(GuardKind.NN_MODULE)
class NNModuleMatch(_Identity):
    pass


@rule(GuardKind.EQUALS_MATCH)
class EqualsMatch(KindRule):
    def render(self, guard: Guard) -> List[str]:
        value = guard.value
        return [f"type({guard.name}) is {_type_name(type(value))}", f"{guard.name} == {_literal(value) or repr(value)}"]

    def reason(self, guard: Guard, value: Any, scope: Dict[str, Any]) -> Optional[str]:
        expected = guard.value
        if type(value) is not type(expected):
            return _type_mismatch(guard.name, type(expected), value)
        if not _C.strict_equal(value, expected):
            return f"{guard.name} value mismatch: expected {expected!r}, got {value!r}"
        return None

    def lower(self, guard: Guard, b: "GuardSetBuilder") -> None:
        value = self.detach(guard.value)
        key = (guard.name, "eq", type(value), value)
        b.item(b.check(key, _C.CHK_EQUALS, value, same=lambda known: _C.strict_equal(known.expected, value)),
               b.accessor(guard.source))

    def detach(self, value: Any) -> Any:
        return set(value) if type(value) is set else value  # the user's set may change later


@rule(GuardKind.LIST_LENGTH)
class ListLength(KindRule):
    def render(self, guard: Guard) -> List[str]:
        value = guard.value
        return [f"type({guard.name}) is {_type_name(type(value))}", f"len({guard.name}) == {len(value)}"]

    def reason(self, guard: Guard, value: Any, scope: Dict[str, Any]) -> Optional[str]:
        expected = guard.value
        if type(value) is not type(expected):
            return _type_mismatch(guard.name, type(expected), value)
        if len(value) != len(expected):
            return f"len({guard.name}) mismatch: expected {len(expected)}, got {len(value)}"
        return None

    def lower(self, guard: Guard, b: "GuardSetBuilder") -> None:
        value = guard.value
        key = (guard.name, "len", type(value), len(value))
        b.item(b.check(key, _C.CHK_LEN, type(value), length=len(value)), b.accessor(guard.source))

    def detach(self, value: Any) -> Any:  # the type and length seen when compiling, not the items
        if isinstance(value, dict):  # an OrderedDict (nn.Module hooks, Sequential's _modules after a del)
            return type(value).fromkeys(range(len(value)))
        return type(value)([None] * len(value))


@rule(GuardKind.DICT_KEYS)
class DictKeys(KindRule):
    def render(self, guard: Guard) -> List[str]:
        return [f"type({guard.name}) is dict", f"list({guard.name}.keys()) == {list(guard.value.keys())!r}"]

    def reason(self, guard: Guard, value: Any, scope: Dict[str, Any]) -> Optional[str]:
        expected = list(guard.value)
        if type(value) is not dict or list(value) != expected:
            got = list(value) if isinstance(value, dict) else value
            return f"{guard.name} keys mismatch: expected {expected!r}, got {got!r}"
        return None

    def lower(self, guard: Guard, b: "GuardSetBuilder") -> None:
        keys = tuple(guard.value)
        b.item(b.check((guard.name, "keys", keys), _C.CHK_DICT_KEYS, keys), b.accessor(guard.source))

    def detach(self, value: Any) -> Any:
        return dict.fromkeys(value)  # the keys, not the user's dict (nor its values)


@rule(GuardKind.DICT_CONTAINS)
class DictContains(KindRule):
    def render(self, guard: Guard) -> List[str]:
        key, present = guard.value
        return [f"({key!r} in {guard.name}) is {present}"]

    def reason(self, guard: Guard, value: Any, scope: Dict[str, Any]) -> Optional[str]:
        key, present = guard.value
        try:
            found = key in value
        except Exception as e:
            return f"{guard.name} cannot be searched for {key!r}: {type(e).__name__}"
        if found != present:
            return f"{guard.name} {'no longer has' if present else 'now has'} key {key!r}"
        return None

    def lower(self, guard: Guard, b: "GuardSetBuilder") -> None:
        key, present = guard.value
        check = b.check((guard.name, "in", type(key), key, present), _C.CHK_CONTAINS, key, expected2=bool(present))
        b.item(check, b.accessor(guard.source))

    def dedupe_key(self, guard: Guard) -> Tuple:  # equal keys of one type find the same dict entry
        return (guard.name, guard.kind, type(guard.value[0]), guard.value[0])


@rule(GuardKind.HASATTR)
class HasAttr(KindRule):
    def render(self, guard: Guard) -> List[str]:
        attr, present = guard.value
        return [f"hasattr({guard.name}, {attr!r}) is {present}"]

    def reason(self, guard: Guard, value: Any, scope: Dict[str, Any]) -> Optional[str]:
        attr, present = guard.value
        try:
            found = hasattr(value, attr)
        except Exception as e:
            return f"reading {guard.name}.{attr} raised {type(e).__name__}"
        if found != present:
            return f"{guard.name} {'no longer has' if present else 'now has'} attribute {attr!r}"
        return None

    def lower(self, guard: Guard, b: "GuardSetBuilder") -> None:
        attr, present = guard.value
        check = b.check((guard.name, "hasattr", attr, present), _C.CHK_HASATTR, attr, expected2=bool(present))
        b.item(check, b.accessor(guard.source))

    def dedupe_key(self, guard: Guard) -> Tuple:
        return (guard.name, guard.kind, guard.value[0])


@rule(GuardKind.TENSOR_MATCH)
class TensorMatch(KindRule):
    def render(self, guard: Guard) -> List[str]:
        value = guard.value
        spec = value if isinstance(value, TensorSpec) else TensorSpec.of(value)
        sizes = ", ".join("?" if i in guard.dynamic_dims else str(s) for i, s in enumerate(spec.sizes))
        strides = "?" if guard.dynamic_dims else str(spec.strides)
        return [f"{guard.name}: {spec.dtype}, {spec.device}, requires_grad={spec.requires_grad}, "
                f"size ({sizes}), stride {strides}"]

    def reason(self, guard: Guard, value: Any, scope: Dict[str, Any]) -> Optional[str]:
        return tensor_mismatch(guard.name, guard.value, value, guard.dynamic_dims)

    def lower(self, guard: Guard, b: "GuardSetBuilder") -> None:
        b.add_tensor(guard)

    def detach(self, value: Any) -> Any:
        return TensorSpec.of(value) if isinstance(value, torch.Tensor) else value


class _SameObjectAs(KindRule):
    """The value at the guard's source is (`same`) or is not the value at another source."""

    same: bool
    c_check: int

    def render(self, guard: Guard) -> List[str]:
        return [f"{guard.name} {'is' if self.same else 'is not'} {guard.value.name()}"]

    def reason(self, guard: Guard, value: Any, scope: Dict[str, Any]) -> Optional[str]:
        other = guard.value.name()
        if (value is eval(other, scope)) == self.same:
            return None
        if self.same:
            return f"{guard.name} is no longer the same tensor as {other}"
        return f"{guard.name} is now the same object as {other}"

    def dedupe_key(self, guard: Guard) -> Tuple:
        return (guard.name, guard.kind, guard.value.name())

    def lower(self, guard: Guard, b: "GuardSetBuilder") -> None:
        check = b.check((guard.name, guard.kind.value, guard.value.name()), self.c_check, None)
        b.item(check, b.accessor(guard.source), b.accessor(guard.value))

    def python_terms(self, guard: Guard, index: int) -> List[str]:  # evaluates the other source too
        return [f"___reason(___guards[{index}], {guard.name}, {{**___namespaces, 'L': L, 'G': G}}) is None"]


@rule(GuardKind.ALIAS_OF)
class AliasOf(_SameObjectAs):
    same, c_check = True, _C.CHK_ALIAS


@rule(GuardKind.DISTINCT_FROM)
class DistinctFrom(_SameObjectAs):
    same, c_check = False, _C.CHK_DISTINCT


@rule(GuardKind.GRAD_MODE)
class GradMode(KindRule):
    def render(self, guard: Guard) -> List[str]:
        return [f"torch.is_grad_enabled() is {guard.value!r}"]

    def reason(self, guard: Guard, value: Any, scope: Dict[str, Any]) -> Optional[str]:
        return _grad_mode_reason(guard.value)

    def lower(self, guard: Guard, b: "GuardSetBuilder") -> None:
        b.item(b.check(("", "grad", guard.value), _C.CHK_CALL, torch.is_grad_enabled, expected2=guard.value))


def _grad_mode_reason(expected: bool) -> Optional[str]:
    if torch.is_grad_enabled() is not expected:
        return f"grad mode mismatch: expected {expected}, got {torch.is_grad_enabled()}"
    return None


@rule(GuardKind.GLOBAL_STATE)
class GlobalStateMatch(KindRule):
    def render(self, guard: Guard) -> List[str]:
        state: EntryState = guard.value
        fields = {k: v for k, v in state.fields().items() if not isinstance(v, (dict, list))}
        extra = ", ".join(f"{name}={v}" for (name, _), v in zip(_EXTRA_STATE, state.extra))
        return [f"global state is {', '.join(f'{k}={v}' for k, v in fields.items())}, autocast as when compiling, "
                f"{extra}"]

    def reason(self, guard: Guard, value: Any, scope: Dict[str, Any]) -> Optional[str]:
        state: EntryState = guard.value
        grad = _grad_mode_reason(bool(state.fields()["grad_mode"]))
        if grad is not None:
            return grad
        changes = state.changes()
        return f"global state changed: {'; '.join(changes)}" if changes else None

    def lower(self, guard: Guard, b: "GuardSetBuilder") -> None:
        state: EntryState = guard.value
        torch_state = state.torch_guard.__getstate__()
        b.item(b.check(("", "global state", torch_state), _C.CHK_CALL, state.torch_guard.check, expected2=True))
        for (name, read), expected in zip(_EXTRA_STATE, state.extra):
            b.item(b.check(("", name, expected), _C.CHK_CALL, read, expected2=expected))


@rule(GuardKind.BUILTIN_MATCH)
class BuiltinMatch(KindRule):
    def render(self, guard: Guard) -> List[str]:
        read: BuiltinRead = guard.value
        return [f"{read.name!r} not in {guard.name}", f"builtins[{read.name!r}] is <{_type_name(type(read.obj))} object>"]

    def reason(self, guard: Guard, value: Any, scope: Dict[str, Any]) -> Optional[str]:
        read: BuiltinRead = guard.value
        if read.name in value:
            return f"{guard.name} now has a global {read.name!r}, which shadows the builtin"
        if read.namespace.get(read.name) is not read.obj:
            return f"builtin {read.name!r} was rebound"
        return None

    def lower(self, guard: Guard, b: "GuardSetBuilder") -> None:
        read: BuiltinRead = guard.value
        b.builtin_read(guard.source, read.namespace, read.name, read.obj)

    def dedupe_key(self, guard: Guard) -> Tuple:
        return (guard.name, guard.kind, guard.value.name)


@rule(GuardKind.FUNCTION_MATCH)
class FunctionMatch(KindRule):
    def render(self, guard: Guard) -> List[str]:
        code, globals_source = guard.value
        code = code() if isinstance(code, weakref.ref) else code
        name = getattr(code, "co_qualname", "<code that has since died>")
        return [f"type({guard.name}) is function", f"{guard.name}.__code__ is <code {name}>",
                f"{guard.name}.__globals__ is {globals_source.name()}"]

    def reason(self, guard: Guard, value: Any, scope: Dict[str, Any]) -> Optional[str]:
        code, globals_source = guard.value
        code = code() if isinstance(code, weakref.ref) else code
        if type(value) is not types.FunctionType:
            return _type_mismatch(guard.name, types.FunctionType, value)
        if value.__code__ is not code:
            return f"{guard.name} is a function of other code ({value.__code__.co_qualname})"
        if value.__globals__ is not eval(globals_source.name(), scope):
            return f"{guard.name} is a function over other globals"
        return None

    def lower(self, guard: Guard, b: "GuardSetBuilder") -> None:
        code, globals_source = guard.value
        check = b.weak_check(guard.name, _C.CHK_FUNCTION, code, globals_source.name())
        b.item(check, b.accessor(guard.source), b.accessor(globals_source))

    def detach(self, value: Any) -> Any:
        return (_weak(value[0]), value[1])

    def python_terms(self, guard: Guard, index: int) -> List[str]:  # evaluates the globals' source too
        return [f"___reason(___guards[{index}], {guard.name}, {{**___namespaces, 'L': L, 'G': G}}) is None"]


@rule(GuardKind.SHAPE_ENV)
class ShapeEnv(KindRule):
    def render(self, guard: Guard) -> List[str]:
        return list(guard.value)

    def reason(self, guard: Guard, value: Any, scope: Dict[str, Any]) -> Optional[str]:
        for expr in guard.value:
            try:
                holds = eval(expr, scope)
            except Exception:
                holds = False
            if not holds:
                return f"shape guard failed: {expr}"
        return None

    def lower(self, guard: Guard, b: "GuardSetBuilder") -> None:
        raise NotExpressible("shape relations are Python expressions")

    def python_terms(self, guard: Guard, index: int) -> List[str]:
        return [f"({expr})" for expr in guard.value]


assert set(RULES) == set(GuardKind), f"guard kinds without a rule: {set(GuardKind) - set(RULES)}"


# ---- the whole entry ----


def reason_for(guard: Guard, value: Any, scope: Dict[str, Any]) -> Optional[str]:
    """Why `value` (read at the guard's source) fails `guard`, or None; `scope` resolves other sources."""
    return guard.kind.rule.reason(guard, value, scope)


def render_source(guards: Sequence[Guard]) -> str:
    lines = [line for guard in guards for line in guard.code_list]
    tensors = [g.name for g in guards if g.kind is GuardKind.TENSOR_MATCH]
    if len(tensors) > 1:
        lines.append(f"tensors {', '.join(tensors)} are distinct objects")
    body = "\n    and ".join(lines) or "True"
    return f"def check(L):\n    return ({body})\n"


def guard_scope(namespaces: Dict[str, Dict[str, Any]], **names: Any) -> Dict[str, Any]:
    """What guard expressions are evaluated in: the module namespaces they read, the modules their
    source names spell out (`types.MappingProxyType.keys(...)`), and `names` (L, G...)."""
    return {**namespaces, "torch": torch, "types": types, "collections": collections, **names}


def failure_reason(guards: Sequence[Guard], f_locals: Dict[str, Any], f_globals: Dict[str, Any],
                   namespaces: Dict[str, Dict[str, Any]]) -> Optional[str]:
    """The first guard that fails on these locals, in words; None if all pass."""
    scope = guard_scope(namespaces, L=f_locals, G=f_globals)
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
