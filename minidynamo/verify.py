"""Verify mode: every compiled call is also run eagerly on copies of its inputs, and the two compared."""
from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import dis
import enum
import functools
import io
import logging
import math
import os
import re
import random
import socket
import sys
import threading
import types
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple

import torch

from . import _C, config
from .counters import entries_installed
from .global_state import GlobalState
from .skip_policy import is_user_function, is_user_module, never_convert_module

log = logging.getLogger("minidynamo.verify")
_MISSING = object()
_thread = threading.local()  # .eager: inside an eager reference run on this thread
# "verified": calls compared with eager; "unverified": calls whose inputs could not be copied
counts: "collections.Counter[str]" = collections.Counter()


class VerifyError(AssertionError):
    """A compiled call did not do what the same call run eagerly did.

    `function` is "name (file:line)" of the called function, `path` the differing value (e.g.
    "return value[1]", "argument 'x'", "global 'state' of module m", "global state: grad mode"),
    `expected` / `got` the eager and compiled descriptions, `frames` the converted frames that ran
    during the compiled call (their entry's guards and graphs)."""

    def __init__(self, function: str, path: str, expected: str, got: str, detail: str, frames: str) -> None:
        self.function, self.path, self.expected, self.got, self.frames = function, path, expected, got, frames
        lines = [f"compiled call of {function} differs from eager at {path}: {detail}",
                 f"  eager:    {expected}", f"  compiled: {got}", frames]
        super().__init__("\n".join(line for line in lines if line))


class _Mismatch(Exception):
    def __init__(self, path: str, detail: str, expected: Any, got: Any) -> None:
        super().__init__(detail)
        self.path, self.detail, self.expected, self.got = path, detail, expected, got


# ---- state the call can reach by name ----


class _Slot:
    """A place holding a value the code reaches by name: read, rebound, emptied."""

    def __init__(self, label: str, get: Callable[[], Any], put: Callable[[Any], None]) -> None:
        self.label, self.get, self.put = label, get, put


def _global_slot(namespace: Dict[str, Any], name: str) -> _Slot:
    def put(value: Any) -> None:
        if value is _MISSING:
            namespace.pop(name, None)
        else:
            namespace[name] = value

    return _Slot(f"global {namespace.get('__name__', '?')}.{name}",
                 lambda: namespace.get(name, _MISSING), put)


def _class_slot(cls: type, name: str) -> _Slot:
    def put(value: Any) -> None:
        if value is _MISSING:
            if name in vars(cls):
                delattr(cls, name)
        else:
            setattr(cls, name, value)

    return _Slot(f"class attribute {cls.__qualname__}.{name}", lambda: vars(cls).get(name, _MISSING), put)


def _cell_slot(cell: types.CellType, label: str) -> _Slot:
    def get() -> Any:
        try:
            return cell.cell_contents
        except ValueError:
            return _MISSING

    def put(value: Any) -> None:
        if value is _MISSING:
            with contextlib.suppress(AttributeError, NameError):
                del cell.cell_contents
        else:
            cell.cell_contents = value

    return _Slot(label, get, put)


@functools.lru_cache(maxsize=4096)
def _global_names(code: types.CodeType) -> Tuple[FrozenSet[str], FrozenSet[str]]:
    """(names the code and its nested functions may read as globals or attributes, names they store
    or delete as globals)."""
    names, stored = set(code.co_names), set()
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("STORE_GLOBAL", "DELETE_GLOBAL"):
            stored.add(instruction.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            inner_names, inner_stored = _global_names(const)
            names |= inner_names
            stored |= inner_stored
    return frozenset(names), frozenset(stored)


_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: builtin and extension types


def _is_user_class(cls: type) -> bool:
    """Classes whose attributes user code may rebind: defined in user code, not enums."""
    return not cls.__flags__ & _IMMUTABLE_TYPE and not issubclass(cls, enum.Enum) and is_user_module(cls.__module__)


_HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")


def _callees(value: Any) -> List[Any]:
    """The functions and classes a value stands for, to scan next (a module: its classes and hooks)."""
    if isinstance(value, types.MethodType):
        owner = value.__self__
        return [value.__func__, *(_callees(owner) if isinstance(owner, torch.nn.Module) else [type(owner)])]
    if isinstance(value, torch.nn.Module):
        modules = list(value.modules())
        return [type(m) for m in modules] + [hook for m in modules for name in _HOOK_DICTS
                                             for hook in getattr(m, name, {}).values()]
    if isinstance(value, (staticmethod, classmethod)):
        return [value.__func__]
    if isinstance(value, property):
        return [value.fget, value.fset]
    if isinstance(value, (types.FunctionType, type)):
        return [value]
    return []


def reachable_slots(fn: Any, args: Sequence[Any], kwargs: Dict[str, Any], limit: int = 500) -> List[_Slot]:
    """The globals, closure cells and class attributes that `fn` and the user functions and classes
    it names (transitively) can read or rebind."""
    todo = _callees(fn) + [c for a in (*args, *kwargs.values()) for c in _callees(a) or [type(a)]]
    seen: set = set()
    slots: Dict[Tuple[int, str], _Slot] = {}
    while todo and len(seen) < limit:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, type):
            if not _is_user_class(item):
                continue
            for name, value in list(vars(item).items()):
                if callable(value) or isinstance(value, (staticmethod, classmethod, property)):
                    todo.extend(_callees(value))
                elif not name.startswith("__"):
                    slots.setdefault((id(item), name), _class_slot(item, name))
            continue
        if not isinstance(item, types.FunctionType) or not is_user_function(item):
            continue
        namespace = item.__globals__
        names, stored = _global_names(item.__code__)
        for name in names:
            if name in namespace or name in stored:
                slots.setdefault((id(namespace), name), _global_slot(namespace, name))
                todo.extend(_callees(namespace.get(name)))
        for name, cell in zip(item.__code__.co_freevars, item.__closure__ or ()):
            slot = _cell_slot(cell, f"closure variable '{name}' of {item.__qualname__}")
            slots.setdefault((id(cell), ""), slot)
            todo.extend(_callees(slot.get()))
    return list(slots.values())


# ---- copies ----

_ATOMIC_KINDS = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type, types.CodeType)


def _walk(value: Any, seen: set, depth: int = 0) -> Iterator[Any]:
    """Objects reachable through containers and instance dicts (for the copy's tensor pre-pass)."""
    if id(value) in seen or depth > 50 or isinstance(value, _ATOMIC_KINDS):
        return
    seen.add(id(value))
    yield value
    if isinstance(value, torch.Tensor):
        return
    if isinstance(value, (list, tuple, set, frozenset)):
        children = list(value)
    elif isinstance(value, dict):
        children = [*value.keys(), *value.values()]
    else:
        children = list(getattr(value, "__dict__", {}).values())
    for child in children:
        yield from _walk(child, seen, depth + 1)


# Sentinels that code dataclasses generate compares by identity (`if b is _HAS_DEFAULT_FACTORY`,
# with the sentinel in both the defaults and a closure cell): copies keep the originals.
_SENTINELS = tuple(getattr(dataclasses, name) for name in ("MISSING", "_HAS_DEFAULT_FACTORY", "KW_ONLY")
                   if hasattr(dataclasses, name))


def deep_copy(value: Any, memo: Dict[Any, Any]) -> Any:
    """copy.deepcopy with a shared memo; tensors that are results of autograd (which deepcopy
    refuses) are copied detached, keeping requires_grad."""
    keep = memo.setdefault(id(memo), [])
    for sentinel in _SENTINELS:
        memo.setdefault(id(sentinel), sentinel)
    for item in _walk(value, set()):
        if isinstance(item, torch.Tensor) and item.grad_fn is not None and id(item) not in memo:
            memo[id(item)] = _copy_autograd_result(item, memo)
            keep.append(item)
    result = copy.deepcopy(value, memo)
    for original in list(keep):  # Parameter's deepcopy leaves .grad behind
        if isinstance(original, torch.Tensor) and original.is_leaf and original.grad is not None:
            twin = memo.get(id(original))
            if isinstance(twin, torch.Tensor) and twin.grad is None:
                twin.grad = copy.deepcopy(original.grad, memo)
    return result


def _copy_autograd_result(tensor: torch.Tensor, memo: Dict[Any, Any]) -> torch.Tensor:
    """A copy that is again not a leaf (in-place ops allowed as on the original); a view of a leaf
    stays a view of the copied leaf (in-place ops refused with the same error)."""
    with torch.enable_grad():
        base = tensor._base
        if base is not None and base.grad_fn is None:
            return copy.deepcopy(base, memo).as_strided(tensor.size(), tensor.stride(), tensor.storage_offset())
        return copy.deepcopy(tensor.detach(), memo).requires_grad_(True).clone()


def originals_of_copies(memo: Dict[Any, Any]) -> Dict[int, Any]:
    """id(copy) -> original, for every object the copies made anew."""
    by_id = {id(original): original for original in memo.get(id(memo), ())}
    return {id(c): by_id[k] for k, c in memo.items() if isinstance(k, int) and k in by_id and c is not by_id[k]}


def attributes_lost_in_copying(memo: Dict[Any, Any]) -> Dict[int, Dict[str, Any]]:
    """id(copy) -> {name: value} of the original's attributes its copy lacks (a `__getstate__`
    may leave some out, as torch's optimizers do), taken before either run."""
    by_id = {id(original): original for original in memo.get(id(memo), ())}
    lost: Dict[int, Dict[str, Any]] = {}
    for key, twin in memo.items():
        original = by_id.get(key) if isinstance(key, int) else None
        if original is None or twin is original or not hasattr(twin, "__dict__") \
                or not hasattr(original, "__dict__"):
            continue
        missing = {n: v for n, v in vars(original).items() if n not in vars(twin)}
        if missing:
            lost[id(twin)] = missing
    return lost


# ---- global state and random number generators ----


def rng_state() -> Dict[str, Any]:
    state: Dict[str, Any] = {"torch": torch.get_rng_state(), "random": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["torch.cuda"] = torch.cuda.get_rng_state_all()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        state["numpy"] = numpy.random.get_state()
    return state


def set_rng_state(state: Dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["random"])
    if "torch.cuda" in state:
        torch.cuda.set_rng_state_all(state["torch.cuda"])
    if "numpy" in state:
        sys.modules["numpy"].random.set_state(state["numpy"])


def _rng_differs(eager: Dict[str, Any], compiled: Dict[str, Any]) -> Optional[str]:
    for name in eager:
        a, b = eager[name], compiled.get(name)
        if name.startswith("torch"):
            same = all(torch.equal(x, y) for x, y in zip(a if isinstance(a, list) else [a],
                                                          b if isinstance(b, list) else [b]))
        elif name == "numpy":
            same = a[0] == b[0] and bool((a[1] == b[1]).all()) and a[2:] == b[2:]
        else:
            same = a == b
        if not same:
            return name
    return None


# ---- comparing eager with compiled ----


def describe(value: Any, limit: int = 160) -> str:
    if isinstance(value, torch.Tensor):
        head = f"{type(value).__name__}(shape={tuple(value.shape)}, dtype={value.dtype}"
        head += f", device={value.device}" if value.device.type != "cpu" else ""
        head += ", requires_grad=True" if value.requires_grad else ""
        if value.layout == torch.strided and value.device.type != "meta" and value.numel():
            flat = value.detach().reshape(-1)[:6].tolist()
            head += f", values={flat}{'...' if value.numel() > 6 else ''}"
        return head + ")"
    if value is _MISSING:
        return "<not set>"
    try:
        text = repr(value)
    except Exception as e:  # a repr that fails is still a value to name
        text = f"<{type(value).__name__} object (repr raised {type(e).__name__})>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


_VALUE_KINDS = (int, float, complex, str, bytes, bool, type(None), tuple, frozenset, range, slice, torch.dtype,
                torch.device, torch.Size, torch.layout, torch.memory_format, type(Ellipsis), type(NotImplemented))


def _has_identity(value: Any) -> bool:
    """Values whose identity is observable (mutable containers, tensors, objects), not plain values."""
    return not isinstance(value, _VALUE_KINDS) and (isinstance(value, types.FunctionType)
                                                    or not isinstance(value, _ATOMIC_KINDS))


def _float_same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


class Comparer:
    """Walks an eager result and a compiled result together. `originals` maps id(eager copy) to
    the real object it was copied from: where eager has the copy, compiled must have the original."""

    def __init__(self, originals: Dict[int, Any], exact: bool,
                 lost: Optional[Dict[int, Dict[str, Any]]] = None) -> None:
        self.originals = originals
        self.lost = lost or {}
        self.original_ids = {id(o) for o in originals.values()}
        self.exact = exact
        self.pairs: Dict[int, Tuple[Any, str]] = {}  # id(eager object) -> (compiled object, first path)
        self.storages: Dict[int, Tuple[int, str]] = {}  # eager data_ptr -> (compiled data_ptr, path)

    def compare(self, e: Any, c: Any, path: str) -> None:
        if e is c:
            return
        if _has_identity(e) and not self._same_identity(e, c, path):
            return  # seen before: contents already compared
        if type(e) is not type(c):
            raise _Mismatch(path, f"type {type(c).__qualname__} instead of {type(e).__qualname__}", e, c)
        if isinstance(e, torch.Tensor):
            self._tensor(e, c, path)
        elif type(e) is int:
            seen = self.pairs.get(e)  # an id() of an object: the id of its counterpart
            if e != c and (seen is None or id(seen[0]) != c):
                raise _Mismatch(path, "int values differ", e, c)
        elif isinstance(e, float):
            if not _float_same(e, c):
                raise _Mismatch(path, "float values differ", e, c)
        elif isinstance(e, complex):
            if not (_float_same(e.real, c.real) and _float_same(e.imag, c.imag)):
                raise _Mismatch(path, "complex values differ", e, c)
        elif isinstance(e, (list, tuple)):
            self._sequence(e, c, path)
        elif isinstance(e, dict):
            self._dict(e, c, path)
        elif isinstance(e, (set, frozenset)):
            if len(e) != len(c) or (all(not _has_identity(v) for v in e) and e != c):
                raise _Mismatch(path, "set contents differ", e, c)
        elif isinstance(e, types.FunctionType):
            self._function(e, c, path)
        elif isinstance(e, types.CellType):
            self.compare(_cell_slot(e, "").get(), _cell_slot(c, "").get(), f"{path}.cell_contents")
        elif _is_numpy_float(e):
            self._numpy_float(e, c, path)
        else:
            self._other(e, c, path)

    def _numpy_float(self, e: Any, c: Any, path: str) -> None:
        """numpy floats compare with tolerance: compiled numpy code runs torch's kernels, not numpy's."""
        numpy = sys.modules["numpy"]
        e_arr, c_arr = numpy.asarray(e), numpy.asarray(c)
        if e_arr.dtype != c_arr.dtype or e_arr.shape != c_arr.shape:
            raise _Mismatch(path, f"dtype {c_arr.dtype} shape {c_arr.shape} instead of {e_arr.dtype} {e_arr.shape}", e, c)
        detail = tensor_difference(torch.from_numpy(e_arr.copy()), torch.from_numpy(c_arr.copy()), exact=False)
        if detail is not None:
            raise _Mismatch(path, detail, e, c)

    def _same_identity(self, e: Any, c: Any, path: str) -> bool:
        """Checks that `c` is the object eager's `e` stands for; False when already compared."""
        seen = self.pairs.get(id(e))
        if seen is not None:
            if seen[0] is not c:
                raise _Mismatch(path, f"eager has the same object here as at {seen[1]}, compiled does not", e, c)
            return False
        original = self.originals.get(id(e))
        if original is not None and c is not original:
            raise _Mismatch(path, "eager has the object that existed before the call, compiled a different one", e, c)
        if original is None and id(c) in self.original_ids:
            raise _Mismatch(path, "eager has a new object, compiled one that existed before the call", e, c)
        self.pairs[id(e)] = (c, path)
        return True

    def _sequence(self, e: Sequence[Any], c: Sequence[Any], path: str) -> None:
        if len(e) != len(c):
            raise _Mismatch(path, f"length {len(c)} instead of {len(e)}", e, c)
        for i, (a, b) in enumerate(zip(e, c)):
            self.compare(a, b, f"{path}[{i}]")

    def _dict(self, e: Dict[Any, Any], c: Dict[Any, Any], path: str) -> None:
        self._sequence(list(e.keys()), list(c.keys()), f"{path}.keys()")
        for (key, a), b in zip(e.items(), c.values()):
            self.compare(a, b, f"{path}[{describe(key, 40)}]")
        factory = getattr(e, "default_factory", None)
        if factory is not None or getattr(c, "default_factory", None) is not None:
            self.compare(factory, c.default_factory, f"{path}.default_factory")

    def _function(self, e: types.FunctionType, c: types.FunctionType, path: str) -> None:
        if e.__code__.co_code != c.__code__.co_code or e.__qualname__ != c.__qualname__:
            raise _Mismatch(path, "a different function", e, c)
        self.compare(e.__defaults__, c.__defaults__, f"{path}.__defaults__")
        self.compare(e.__kwdefaults__, c.__kwdefaults__, f"{path}.__kwdefaults__")
        self.compare(e.__closure__, c.__closure__, f"{path}.__closure__")

    def _other(self, e: Any, c: Any, path: str) -> None:
        if isinstance(e, torch.nn.Module) or hasattr(e, "__dict__"):
            self._attributes(e, c, path)
            return
        slots = [s for k in type(e).__mro__ for s in getattr(k, "__slots__", ()) if s not in ("__dict__", "__weakref__")]
        for name in slots:
            self.compare(getattr(e, name, _MISSING), getattr(c, name, _MISSING), f"{path}.{name}")
        if slots or type(e).__eq__ is object.__eq__:
            return
        try:
            same = e == c
            same = bool(same.all()) if hasattr(same, "all") else bool(same)
        except Exception:  # values that cannot be compared are not compared
            return
        if not same:
            raise _Mismatch(path, "values differ", e, c)

    def _attributes(self, e: Any, c: Any, path: str) -> None:
        e_vars, c_vars = vars(e), vars(c)
        lost = self.lost.get(id(e), {})
        # an attribute the copy never had, which the compiled run left as it was, is no difference
        unchanged = {n for n in set(c_vars) - set(e_vars) if n in lost and c_vars[n] is lost[n]}
        missing = sorted(set(e_vars) - set(c_vars)) + sorted(set(c_vars) - set(e_vars) - unchanged)
        if missing:
            raise _Mismatch(path, f"attribute {missing[0]!r} set in only one run", sorted(e_vars), sorted(c_vars))
        for name in e_vars:
            self.compare(e_vars[name], c_vars[name], f"{path}.{name}")

    def _tensor(self, e: torch.Tensor, c: torch.Tensor, path: str) -> None:
        for what in ("dtype", "shape", "device", "layout", "requires_grad"):
            if getattr(e, what) != getattr(c, what):
                raise _Mismatch(path, f"{what} {getattr(c, what)} instead of {getattr(e, what)}", e, c)
        if e.layout == torch.strided and e.device.type != "meta":
            self._storage(e, c, path)
            if self.exact and e.numel() > 1 and (e.stride() != c.stride() or e.storage_offset() != c.storage_offset()):
                raise _Mismatch(path, f"stride {c.stride()} offset {c.storage_offset()} instead of "
                                      f"{e.stride()} offset {e.storage_offset()}", e, c)
            detail = tensor_difference(e.detach(), c.detach(), self.exact)
            if detail is not None:
                raise _Mismatch(path, detail, e, c)
        if e.is_leaf and c.is_leaf and (e.grad is not None or c.grad is not None):
            self.compare(e.grad, c.grad, f"{path}.grad")

    def _storage(self, e: torch.Tensor, c: torch.Tensor, path: str) -> None:
        """Tensors that share memory in eager share it in the compiled run, and only those."""
        if e.numel() == 0:
            return
        e_ptr, c_ptr = e.untyped_storage().data_ptr(), c.untyped_storage().data_ptr()
        seen = self.storages.get(e_ptr)
        if seen is None:
            self.storages[e_ptr] = (c_ptr, path)
        elif seen[0] != c_ptr:
            raise _Mismatch(path, f"eager shares memory with {seen[1]}, compiled does not", e, c)


def _is_numpy_float(value: Any) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, (numpy.ndarray, numpy.floating)) and \
        value.dtype.kind == "f" and value.dtype.isnative


def tensor_difference(e: torch.Tensor, c: torch.Tensor, exact: bool) -> Optional[str]:
    """Why two tensors of the same dtype and shape differ in value, or None."""
    if e.numel() == 0 or e.is_quantized:
        return None
    if e.is_complex():
        e, c = torch.view_as_real(e.resolve_conj()), torch.view_as_real(c.resolve_conj())
    if e.dtype == torch.bool or not (e.is_floating_point()):
        same = e == c
    elif exact:
        same = ((e == c) & (e.signbit() == c.signbit())) | (e.isnan() & c.isnan())
    else:
        rtol, atol = config.verify_rtol, config.verify_atol
        if rtol is None or atol is None:
            default_rtol, default_atol = torch.testing._comparison.default_tolerances(e)
            rtol, atol = rtol if rtol is not None else default_rtol, atol if atol is not None else default_atol
        same = torch.isclose(e, c, rtol=rtol, atol=atol, equal_nan=True)
    if bool(same.all()):
        return None
    bad = (~same).nonzero()[0].tolist()
    diff = (e.double() - c.double()).abs().nan_to_num(nan=math.inf) if e.dtype != torch.bool else (e != c).double()
    return (f"{int((~same).sum())} of {same.numel()} elements differ, max abs diff {diff.max().item():.6g}, "
            f"first at index {tuple(bad)}: {e[tuple(bad)].item()!r} vs {c[tuple(bad)].item()!r}"
            + ("" if not exact else " (compared bitwise)"))


# ---- which converted frames ran ----

_converted_codes: "weakref.WeakSet[types.CodeType]" = weakref.WeakSet()


def _remember(record: Any) -> None:
    if record.check is not None:
        # kept on the entry's guard set (a collectable cycle), so it dies with the entry
        record.check.fn.frame_record = record
        _converted_codes.add(record.code)


def _enable(profiler: Any) -> bool:
    """From CPython 3.12 on a profiler holds sys.monitoring's profiler tool, which sys.getprofile()
    does not show: enabling a second one (a verified call inside another) raises."""
    try:
        profiler.enable(subcalls=False, builtins=False)
    except ValueError:
        return False
    return True


@contextlib.contextmanager
def codes_run(into: Dict[int, types.CodeType]) -> Iterator[None]:
    """Collects the code objects of the frames run inside, by id (some codes hold unhashable
    constants), when no other profiler is set."""
    import _lsprof

    profiler = _lsprof.Profiler()
    if sys.getprofile() is not None or not _enable(profiler):
        yield
        return
    try:
        yield
    finally:
        profiler.disable()
        into.update((id(entry.code), entry.code) for entry in profiler.getstats()
                    if isinstance(entry.code, types.CodeType))


def _where(code: types.CodeType) -> str:
    return f"'{code.co_qualname}' ({code.co_filename}:{code.co_firstlineno})"


def describe_entries(ran: Dict[int, types.CodeType]) -> str:
    """The cache entries whose code ran: frame, guards and graphs of each."""
    lines = []
    for code in list(_converted_codes):
        entries = _C.get_cache_entries(code)
        for index, (check_fn, entry_code, _) in enumerate(entries):
            if id(entry_code) not in ran:
                continue
            lines.append(f"converted frame {_where(code)}, cache entry {index + 1} of {len(entries)}:")
            record = getattr(check_fn, "frame_record", None)
            if record is None:
                continue
            lines.append("  guards:")
            lines.extend(f"    {guard}" for guard in record.check.guards)
            for number, graph in enumerate(record.graphs):
                lines.append(f"  graph {number}:")
                lines.extend(f"    {line}" for line in graph.code.strip().splitlines())
    if not lines:
        return "no converted frame ran during the compiled call"
    return "\n".join(["converted frames that ran during the compiled call:", *lines])


# ---- state outside Python objects ----

# Audit events (see sys.addaudithook) that change state outside Python objects; `open` counts when
# it opens for writing
_OUTSIDE_EVENTS = frozenset({
    "os.putenv", "os.unsetenv", "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.truncate", "os.chmod",
    "os.chown", "os.link", "os.symlink", "os.utime", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
    "os.fork", "os.kill", "os.killpg", "subprocess.Popen", "socket.connect", "socket.bind", "socket.sendto",
    "socket.sendmsg", "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.copytree", "shutil.move",
    "shutil.rmtree", "shutil.chown", "shutil.make_archive", "shutil.unpack_archive",
})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_HANDLE_KINDS = (io.IOBase, socket.socket)  # objects whose methods write outside Python objects
_warned_outside: "weakref.WeakSet[types.CodeType]" = weakref.WeakSet()


class _OutsideEffect(BaseException):
    """Raised in the eager reference run where it would change state outside Python objects (a
    file, the environment, a socket, a process): copies cannot isolate that state, so it must
    happen once, in the compiled run. A BaseException: the user's `except Exception` lets it by."""


def _changes_outside(event: str, args: tuple) -> bool:
    if event == "open":
        path, mode, flags = args
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & _WRITE_FLAGS)
        return writes and not str(path).endswith(".pyc")  # an import's byte-code cache
    return event in _OUTSIDE_EVENTS


def _refuse_outside_effects(event: str, args: tuple) -> None:
    """The audit hook: aborts an effect outside Python objects in an eager reference run."""
    if getattr(_thread, "eager", False) and _changes_outside(event, args):
        raise _OutsideEffect(f"{event}{args!r}")


def _outside_handle(copies: List[Any], slots: List[_Slot]) -> Optional[str]:
    """A file or socket the code reaches by name that both runs would share (it cannot be copied)."""
    for slot, copied in zip(slots, copies):
        value = slot.get()
        if copied is value:
            handle = next((v for v in _walk(value, set()) if isinstance(v, _HANDLE_KINDS)), None)
            if handle is not None:
                return f"{slot.label} is {describe(handle)}"
    return None


def _run_unverified(fn: Callable, args: tuple, kwargs: dict, callback: Any, effect: str) -> Any:
    """The call run once, compiled: it changes state outside Python objects (`effect`), which the
    eager reference run would change a second time."""
    counts["unverified"] += 1
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is None or code not in _warned_outside:
        if code is not None:
            _warned_outside.add(code)
        log.warning("verify: %s changes state outside Python objects (%s), which cannot be copied: its "
                    "calls run once, compiled, unverified", _where_called(fn), effect)
    return run_with_callback(fn, args, kwargs, callback)


# ---- the two runs ----


@dataclass
class Outcome:
    result: Any = None
    exc: Optional[BaseException] = None
    stdout: str = ""
    compiled_frames: int = 0
    state: Optional[GlobalState] = None  # after the call
    callback_restored: bool = True  # the eval-frame callback is the one set around the call
    rng: Dict[str, Any] = field(default_factory=dict)
    slots: List[Any] = field(default_factory=list)

    def run(self, fn: Callable, args: tuple, kwargs: dict, callback: Any) -> None:
        """Call `fn` with `callback` set (only around the call: nothing else is converted); an
        Exception is kept as the outcome."""
        previous = _C.set_eval_frame(callback)
        try:
            self.result = fn(*args, **kwargs)
        except Exception as e:  # compared with the other run's
            self.exc = e
        finally:
            self.callback_restored = _C.set_eval_frame(previous) is callback
            self.state = GlobalState.capture()


@contextlib.contextmanager
def _silenced(stdout: io.StringIO) -> Iterator[None]:
    """The eager reference run's output (kept in `stdout`), warnings and log records go nowhere."""
    disabled = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings(record=True), contextlib.redirect_stdout(stdout), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("always")
            yield
    finally:
        logging.disable(disabled)


def run_eager(fn: Callable, args: tuple, kwargs: dict, slots: List[_Slot], copies: List[Any]) -> Outcome:
    """Run unconverted, with `copies` bound in the slots; the slots are put back afterwards."""
    saved = [slot.get() for slot in slots]
    outcome = Outcome()
    stdout = io.StringIO()
    _thread.eager = True
    try:
        for slot, value, new in zip(slots, saved, copies):
            if new is not value:
                slot.put(new)
        with _silenced(stdout):
            outcome.run(fn, args, kwargs, None)
    finally:
        _thread.eager = False
        outcome.stdout = stdout.getvalue()
        outcome.slots = [slot.get() for slot in slots]
        for slot, value in zip(slots, saved):
            if slot.get() is not value:
                slot.put(value)
    return outcome


def run_compiled(fn: Callable, args: tuple, kwargs: dict, callback: Any, ran: Dict[int, types.CodeType]) -> Outcome:
    """Run with `callback` set, collecting the codes run into `ran`; printed output is passed on. A
    compiled graph that raised (its frame then re-ran eagerly) counts as the call raising, unless
    the call raised anyway: a graph raising where eager returns is a bug that re-running hides."""
    outcome = Outcome()
    stdout = io.StringIO()
    compiles = entries_installed()
    graph_errors: List[BaseException] = []
    previous_hook = _C.set_rerun_hook(graph_errors.append)
    try:
        with codes_run(ran), contextlib.redirect_stdout(stdout):
            outcome.run(fn, args, kwargs, callback)
    finally:
        _C.set_rerun_hook(previous_hook)
        outcome.compiled_frames = entries_installed() - compiles
        outcome.stdout = stdout.getvalue()
        sys.stdout.write(outcome.stdout)
    if graph_errors and outcome.exc is None:
        outcome.exc = graph_errors[0]
    return outcome


# ---- one verified call ----


def _passes_through(exc: BaseException) -> bool:
    """minidynamo's own errors (fullgraph breaks, backend failures, a nested VerifyError)."""
    from .exc import BackendCompilerFailed, Unsupported

    return isinstance(exc, (Unsupported, BackendCompilerFailed, VerifyError))


def positional_names(fn: Callable) -> List[str]:
    """Names of `fn`'s positional parameters, to name arguments in reports."""
    try:
        import inspect

        return [p.name for p in inspect.signature(fn).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return []


def _argument_paths(names: List[str], args: tuple, kwargs: dict) -> List[str]:
    paths = [f"argument '{names[i]}'" if i < len(names) else f"argument {i}" for i in range(len(args))]
    return paths + [f"argument '{name}'" for name in kwargs]


def _message(exc: BaseException) -> str:
    """The exception's message, object addresses left out (eager's objects are copies)."""
    return re.sub(r"0x[0-9a-fA-F]+", "0x...", str(exc))


def _compare_call(comparer: Comparer, eager: Outcome, compiled: Outcome, call_copy: tuple, call: tuple,
                  slots: List[_Slot], names: List[str]) -> None:
    if (eager.exc is None) != (compiled.exc is None):
        raise _Mismatch("the call", "one run raised, the other returned",
                        eager.exc if eager.exc is not None else eager.result,
                        compiled.exc if compiled.exc is not None else compiled.result)
    if eager.exc is not None:
        if type(eager.exc) is not type(compiled.exc) or _message(eager.exc) != _message(compiled.exc):
            raise _Mismatch("the raised exception", "a different exception", eager.exc, compiled.exc)
    else:
        comparer.compare(eager.result, compiled.result, "return value")
    e_fn, e_args, e_kwargs = call_copy
    fn, args, kwargs = call
    paths = _argument_paths(names, args, kwargs)
    for path, a, b in zip(paths, [*e_args, *e_kwargs.values()], [*args, *kwargs.values()]):
        comparer.compare(a, b, path)
    if isinstance(fn, types.MethodType):
        comparer.compare(e_fn.__self__, fn.__self__, "self")
    for slot, a, b in zip(slots, eager.slots, compiled.slots):
        comparer.compare(a, b, slot.label)
    if eager.callback_restored != compiled.callback_restored:
        raise _Mismatch("global state: eval-frame callback restored", "the compiled call left it differently",
                        eager.callback_restored, compiled.callback_restored)
    for name, value, got in eager.state.differing(compiled.state):
        raise _Mismatch(f"global state: {name}", "the compiled call left it differently", value, got)
    rng = _rng_differs(eager.rng, compiled.rng)
    if rng is not None:
        raise _Mismatch(f"random number generator state ({rng})", "the compiled call drew different random numbers",
                        "state after eager", "another state")
    if eager.stdout != compiled.stdout and not compiled.compiled_frames:  # compiling may print (backends)
        raise _Mismatch("printed output", "different output", eager.stdout, compiled.stdout)


def _copy_slot(value: Any, memo: Dict[Any, Any]) -> Any:
    if isinstance(value, _ATOMIC_KINDS):
        return value
    try:
        return deep_copy(value, memo)
    except Exception:  # not copyable: both runs see the one object
        return value


def _where_called(fn: Callable) -> str:
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.nn.Module):  # module.__call__: its forward is what the user wrote
        fn = type(owner).forward
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return _where(code) if code is not None else repr(fn)


def verify_call(verified: "Verified", args: tuple, kwargs: dict, callback: Any) -> Any:
    """Run the function eagerly on copies, then compiled (with `callback`) on the real inputs;
    compare. Called with no callback set; returns or raises what the compiled call did.

    Turned on with `minidynamo.config.verify = True` or `MINIDYNAMO_VERIFY=1` for the functions and
    modules compiled while it is on (`optimize(...)(fn)`, `compile(...)`). Each call then

    1. deep-copies the callable, its arguments and the state the code can reach by name (the globals
       and closure cells of the user functions it refers to, transitively, and the class attributes of
       user classes among them), in one copy so that aliasing between them is kept;
    2. runs the original code eagerly on the copies (no conversion, the copies bound in place of the
       globals and cells, output, warnings and logging silenced) from the RNG and global state the call
       started with;
    3. restores that RNG and global state and runs the compiled call on the real objects;
    4. compares the return values or raised exceptions, every argument and reached global, cell and
       class attribute afterwards (contents, identities, which tensors share memory), printed output,
       the global torch state (grad mode, autocast, default dtype, dispatch modes, ...) and the RNG
       states, and raises `VerifyError` on the first difference. The process is left as the compiled
       call left it.

    Tensors compare bitwise (NaN equal to NaN) for backends that run the graph with torch's kernels;
    other backends compare with `config.verify_rtol` / `config.verify_atol` (torch.testing's defaults
    for the dtype when None), as numpy floats always do (compiled numpy code runs torch's kernels).
    State the copies cannot isolate (objects reached only through attributes
    of modules or other libraries) is seen by both runs. State outside Python objects is never
    changed twice: an eager run about to write a file, change the environment, use a socket or
    start a process is aborted (an audit hook), as is a call reaching an open file or socket by
    name, and the call runs once, compiled, unverified (`_run_unverified`).
    """
    fn = verified.fn
    slots = reachable_slots(fn, args, kwargs)
    memo: Dict[Any, Any] = {}
    try:
        call_copy = deep_copy((fn, args, kwargs), memo)
    except Exception as e:  # the inputs cannot be copied: the call runs unverified
        log.debug("verify: cannot copy the inputs of %s (%s); this call is not verified", _where_called(fn), e)
        counts["unverified"] += 1
        return run_with_callback(fn, args, kwargs, callback)
    copies = [_copy_slot(slot.get(), memo) for slot in slots]
    handle = _outside_handle(copies, slots)
    if handle is not None:
        return _run_unverified(fn, args, kwargs, callback, handle)
    lost = attributes_lost_in_copying(memo)
    state, rng = GlobalState.capture(), rng_state()
    try:
        eager = run_eager(*call_copy, slots, copies)
    except _OutsideEffect as effect:
        return _run_unverified(fn, args, kwargs, callback, str(effect))
    finally:
        eager_rng = rng_state()
        state.restore()
        set_rng_state(rng)
    eager.rng = eager_rng
    ran: Dict[int, types.CodeType] = {}
    compiled = run_compiled(fn, args, kwargs, callback, ran)
    compiled.rng, compiled.slots = rng_state(), [slot.get() for slot in slots]
    if compiled.exc is not None and _passes_through(compiled.exc):
        raise compiled.exc
    counts["verified"] += 1
    try:
        _compare_call(Comparer(originals_of_copies(memo), verified.exact, lost), eager, compiled, call_copy,
                      (fn, args, kwargs), slots, verified.names)
    except _Mismatch as m:
        raise VerifyError(_where_called(fn), m.path, describe(m.expected), describe(m.got), m.detail,
                          describe_entries(ran)) from compiled.exc
    if compiled.exc is not None:
        raise compiled.exc
    return compiled.result


def run_with_callback(fn: Callable, args: tuple, kwargs: dict, callback: Any) -> Any:
    previous = _C.set_eval_frame(callback)
    try:
        return fn(*args, **kwargs)
    finally:
        _C.set_eval_frame(previous)


def _runs_torch_kernels(callback: Any) -> bool:
    """Backends whose graphs run op by op with torch's kernels: results must be bitwise equal."""
    from .backends import lookup_backend
    from .testing import CompileCounter

    compiler_fn = getattr(callback, "compiler_fn", None)
    return compiler_fn is lookup_backend("eager") or isinstance(compiler_fn, CompileCounter)


@functools.lru_cache(maxsize=None)
def _install_audit_hook() -> None:
    """Once per process (audit hooks cannot be removed): it acts only inside eager reference runs."""
    sys.addaudithook(_refuse_outside_effects)


class Verified:
    """What a compiling wrapper calls in verify mode: `fn`, checked against eager on every call."""

    def __init__(self, fn: Callable, callback: Any) -> None:
        from .convert_frame import compile_listeners

        _install_audit_hook()
        self.fn = fn
        self.exact = _runs_torch_kernels(callback)
        self.names = positional_names(fn)
        if _remember not in compile_listeners:
            compile_listeners.append(_remember)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        callback = _C.set_eval_frame(None)  # set by the wrapper; the checking itself is not converted
        try:
            if getattr(_thread, "eager", False):  # called from another verified call's eager run
                return self.fn(*args, **kwargs)
            return verify_call(self, args, kwargs, callback)
        finally:
            _C.set_eval_frame(callback)


# Library frames: never converted, even when a callback is set around them.
never_convert_module(globals())
