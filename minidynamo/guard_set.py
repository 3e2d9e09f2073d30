"""Builds the C GuardSet of a cache entry from its guards.

Sources become accessors (a local slot, a global, an attribute or item of another accessor);
each guard's kind rule (guards.py) turns it into GuardChecks on accessors. Checks are shared between
the entries of one code object, so a guard common to several entries passes once per lookup. Tensor
properties go to one TensorGuards call; shape-env relations and unreachable sources to a small
Python fallback. The set holds no strong reference to the frame's globals (see csrc/guards.c).
"""
from __future__ import annotations

import types
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch._C._dynamo.guards import TensorGuards

from . import _C
from .guards import CheckFunction, Guard, GuardKind, NotExpressible, detach_value, guard_scope, reason_for
from .module_lookup import class_attribute, module_item_source
from .source import (AttrSource, CellContentsSource, DefaultsSource, GetItemSource, GlobalsDictSource, GlobalSource,
                     KeyedBySourceItemSource, LocalSource, ModuleGlobalsSource, Source, read_value)

# per code object: check key -> (GuardCheck, GuardSets using it)
_shared: "weakref.WeakKeyDictionary[types.CodeType, Dict[Tuple, Any]]" = weakref.WeakKeyDictionary()
# per code object: how many of its entries were dropped because an object an identity guard named
# died, and the latest such guard's source; cleared by reset()
dropped_entries: "weakref.WeakKeyDictionary[types.CodeType, Tuple[int, str]]" = weakref.WeakKeyDictionary()


def local_slots(code: types.CodeType) -> Dict[str, int]:
    """Index of each local, cell and free variable in the frame's `localsplus` array (CPython 3.11)."""
    names = list(code.co_varnames)
    names += [c for c in code.co_cellvars if c not in code.co_varnames]
    names += list(code.co_freevars)
    return {name: i for i, name in enumerate(names)}


_OBJECT_CLASS = object.__dict__["__class__"]
_HEAPTYPE = 1 << 9


def _reads_instance_dict(cls: type) -> bool:
    """Whether `x.__dict__` of a `cls` instance is the dict generic attribute lookup reads: a Python
    class whose `__dict__` is the descriptor `class` statements create."""
    descriptor = class_attribute(cls, "__dict__")
    return bool(cls.__flags__ & _HEAPTYPE) and isinstance(descriptor, types.GetSetDescriptorType) \
        and bool(getattr(descriptor, "__objclass__", object).__flags__ & _HEAPTYPE)


def _spec_key(spec: Tuple[int, int, Any, int]) -> Any:
    """What makes two accessors the same: kind, parent and key (a constant by identity)."""
    kind, parent, key, _ = spec
    if kind == _C.ACC_CONST:
        return (kind, id(key))
    if isinstance(key, torch.Tensor):  # a tensor's == is not a bool
        return (kind, parent, id(key))
    try:
        hash(key)
    except TypeError:
        return (kind, parent, id(key))
    return (kind, parent, type(key), key)


def _static_dims(values: Sequence[int], dynamic: Sequence[int]) -> List[Optional[int]]:
    """Per-dimension expectations for TensorGuards: None leaves a symbolic dimension unchecked."""
    return [None if i in dynamic else v for i, v in enumerate(values)]


class GuardSetBuilder:
    def __init__(self, code: types.CodeType, f_locals: Dict[str, Any], f_globals: Dict[str, Any],
                 namespaces: Dict[str, Dict[str, Any]]) -> None:
        self.code = code
        self.slots = local_slots(code)
        self.scope = guard_scope(namespaces, L=f_locals, G=f_globals)
        self.namespaces = namespaces
        self.accessors: List[Tuple[int, int, Any, int]] = []
        self.accessor_index: Dict[str, int] = {}
        self.spec_index: Dict[Any, int] = {}
        self.items: List[Tuple[Any, int, int]] = []
        self.shared = _shared.setdefault(code, {})
        self.weak_checks: List[Any] = []
        self.tensors: List[Guard] = []
        self.values: Dict[str, Any] = {}  # what each source read so far names, by name
        # (globals source, builtins dict source) -> {builtin name: the object read}
        self.builtins: Dict[Tuple[Source, Source], Dict[str, Any]] = {}

    def value_of(self, source: Source) -> Any:
        return read_value(source, self.scope, self.values)

    def accessor(self, source: Source) -> int:
        """The index of the accessor reaching `source`; sources that reach the same value the same
        way (the class of two instances of one class, then its attributes) share one accessor."""
        name = source.name()
        if name not in self.accessor_index:
            spec = self._accessor_spec(source)
            key = _spec_key(spec)
            if key not in self.spec_index:
                self.accessors.append(spec)
                self.spec_index[key] = len(self.accessors) - 1
            self.accessor_index[name] = self.spec_index[key]
        return self.accessor_index[name]

    def _accessor_spec(self, source: Source) -> Tuple[int, int, Any, int]:
        if isinstance(source, AttrSource) and source.member in ("__class__", "__dict__"):
            spec = self._instance_spec(source)
            if spec is not None:
                return spec
        if isinstance(source, LocalSource):
            return (_C.ACC_LOCAL, -1, source.local_name, self.slots[source.local_name])
        if isinstance(source, GlobalSource):
            return (_C.ACC_GLOBAL, -1, source.global_name, 0)
        if isinstance(source, ModuleGlobalsSource):
            return (_C.ACC_CONST, -1, source.namespace, 0)
        if isinstance(source, GlobalsDictSource):
            return (_C.ACC_GLOBALS, -1, None, 0)
        if isinstance(source, (AttrSource, GetItemSource)):
            entry = module_item_source(self.value_of(source.base), source)
            if entry is not None:  # an item of the dict Python reads it from, not a getattr through the class
                return (_C.ACC_ITEM, self.accessor(entry.base), entry.index, 0)
        if isinstance(source, AttrSource):
            return (_C.ACC_ATTR, self.accessor(source.base), source.member, 0)
        if isinstance(source, CellContentsSource):
            return (_C.ACC_ATTR, self.accessor(source.base), "cell_contents", 0)
        if isinstance(source, DefaultsSource):
            table = AttrSource(source.base, "__kwdefaults__" if source.kwonly else "__defaults__")
            return (_C.ACC_ITEM, self.accessor(table), source.index, 0)
        if isinstance(source, GetItemSource):
            return (_C.ACC_ITEM, self.accessor(source.base), source.index, 0)
        if isinstance(source, KeyedBySourceItemSource):  # the key object is guarded by identity
            return (_C.ACC_ITEM, self.accessor(source.base), self.value_of(source.key), 0)
        raise NotExpressible(type(source).__name__)

    def _instance_spec(self, source: AttrSource) -> Optional[Tuple[int, int, Any, int]]:
        """`x.__class__` as the class itself, once `type(x)` is checked (Python looks attributes up on
        `type(x)`), and `x.__dict__` as the instance dict read directly; None where a class overrides
        what these names mean."""
        cls = type(self.value_of(source.base))
        if source.member == "__class__":
            if class_attribute(cls, "__class__") is not _OBJECT_CLASS:
                return None
            self.item(self.weak_check(f"type({source.base.name()})", _C.CHK_TYPE, cls), self.accessor(source.base))
            return (_C.ACC_CONST, -1, cls, 0)
        if not _reads_instance_dict(cls):
            return None
        return (_C.ACC_DICT, self.accessor(source.base), "__dict__", 0)

    def check(self, key: Tuple, kind: int, expected: Any, same: Optional[Callable[[Any], bool]] = None,
              **kwargs: Any) -> Any:
        """The GuardCheck for `key`, shared with earlier entries of the same code; `same(check)` says
        whether a shared check found under an equal key really expects this value."""
        try:
            known = self.shared.get(key)
        except TypeError:  # unhashable expected value: not shared
            return _C.GuardCheck(kind, expected, **kwargs)
        if known is not None and (same is None or same(known)):
            return known
        check = _C.GuardCheck(kind, expected, **kwargs)
        if known is None:
            self.shared[key] = check
        return check

    def item(self, check: Any, acc: int = -1, acc2: int = -1) -> None:
        """Check `check` on the values of accessors `acc` (and `acc2`) on every lookup."""
        self.items.append((check, acc, acc2))

    def builtin_read(self, globals_source: Source, builtins_dict: Dict[str, Any], name: str, obj: Any) -> None:
        """A builtin the trace read through these globals: all those of one globals and builtins
        dict pair become one check (see `_builtin_checks`)."""
        builtins_source = ModuleGlobalsSource(f"___builtins_{id(builtins_dict):x}", builtins_dict)
        self.builtins.setdefault((globals_source, builtins_source), {})[name] = obj

    def _builtin_checks(self) -> None:
        """One check per globals and builtins dict pair: unchanged dicts (their version tags) pass at
        once; after a write to either, each name is looked up again."""
        for (globals_source, builtins_source), reads in self.builtins.items():
            names, objects = tuple(reads), tuple(reads.values())
            key = ("builtins", globals_source.name(), builtins_source.name(), names, tuple(map(id, objects)))
            check = self.check(key, _C.CHK_BUILTINS, names, expected2=objects)  # holds the objects: ids stay theirs
            self.item(check, self.accessor(globals_source), self.accessor(builtins_source))

    def add_tensor(self, guard: Guard) -> None:
        self.accessor(guard.source)
        self.tensors.append(guard)

    def weak_check(self, name: str, kind: int, value: Any, other: str = "") -> Any:
        """An identity (or type) check that holds its object weakly: the entry dies with it. `other`:
        the source of the second value the check compares (checks are shared only when it is the same)."""
        key = (name, kind, id(value), other)
        known = self.shared.get(key)
        if known is not None:
            target = known.expected() if isinstance(known.expected, weakref.ref) else known.expected
            if target is value:
                return known
            del self.shared[key]  # an earlier object that lived at the same address has died
        try:
            ref = weakref.ref(value, self._died_callback(name))
        except TypeError:
            return self.check(key, kind, value)
        return self.check(key, kind, ref, weak=True)

    def _died_callback(self, name: str) -> Any:
        """When an identified object dies, entries guarding on it are dropped at once (and counted,
        with the guard, in `dropped_entries`)."""
        code_ref = weakref.ref(self.code)
        users: "weakref.WeakSet" = weakref.WeakSet()
        self.weak_checks.append(users)
        drop_invalid_entries = _C.drop_invalid_entries  # still reachable during interpreter shutdown

        def died(_: Any) -> None:
            dropped = 0
            for guard_set in list(users):
                dropped += guard_set.valid
                guard_set.valid = False
            code = code_ref()
            if code is not None:
                drop_invalid_entries(code)
                if dropped:
                    count, _ = dropped_entries.get(code, (0, ""))
                    dropped_entries[code] = (count + dropped, name)

        return died

    def build(self, guards: Sequence[Guard]) -> CheckFunction:
        ordered = sorted(guards, key=Guard.sort_key)
        in_python: List[Guard] = []  # guards on sources the C accessors cannot reach, and shape relations
        for guard in ordered:
            try:
                guard.kind.rule.lower(guard, self)
            except NotExpressible:
                in_python.append(guard)
        self._builtin_checks()
        tensor_check, tensor_accessors = self._tensor_check()
        fallback = _python_check([detach_value(g) for g in in_python], self.namespaces) if in_python else None
        guard_set = _C.GuardSet(self.accessors, self.items, tensor_check, tensor_accessors, fallback)
        for users in self.weak_checks:
            users.add(guard_set)
        check = CheckFunction(guard_set, [detach_value(g) for g in ordered], self.namespaces)
        guard_set.check_function = check  # for recompile reasons; dies with the entry
        return check

    def _tensor_check(self) -> Tuple[Optional[Callable], List[int]]:
        """One TensorGuards call for every tensor guard, and the accessors of its arguments."""
        if not self.tensors:
            return None, []
        values = [self.value_of(g.source) for g in self.tensors]
        check = TensorGuards(
            *values,
            dynamic_dims_sizes=[_static_dims(t.size(), g.dynamic_dims) for t, g in zip(values, self.tensors)],
            # strides of a tensor with a symbolic size are symbolic expressions: left unchecked
            dynamic_dims_strides=[_static_dims(t.stride(), range(t.dim()) if g.dynamic_dims else ())
                                  for t, g in zip(values, self.tensors)],
        ).check
        return check, [self.accessor(g.source) for g in self.tensors]


def build_check_function(code: types.CodeType, guards: Sequence[Guard], f_locals: Dict[str, Any],
                         f_globals: Dict[str, Any], namespaces: Dict[str, Dict[str, Any]]) -> CheckFunction:
    """The check of a new cache entry: a C GuardSet (with a Python fallback for rare guards)."""
    return GuardSetBuilder(code, f_locals, f_globals, namespaces).build(guards)


def _python_check(guards: List[Guard], namespaces: Dict[str, Dict[str, Any]]) -> Callable[..., bool]:
    """One Python function, compiled once, for the guards the C guard set leaves to Python, called
    with the frame's locals and globals: each kind's rule says how it reads there."""
    scope = guard_scope(namespaces, ___reason=reason_for, ___guards=guards, ___namespaces=namespaces)
    terms = [term for i, guard in enumerate(guards) for term in guard.kind.rule.python_terms(guard, i)]
    source = ("def ___check(L, G):\n    try:\n        return (" + "\n            and ".join(terms or ["True"])
              + ")\n    except Exception:\n        return False\n")
    exec(compile(source, "<minidynamo python guards>", "exec"), scope)
    return scope["___check"]
