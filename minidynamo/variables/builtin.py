"""Builtins and `operator` functions: folded on constants, recorded in the graph on tensors."""
from __future__ import annotations

import abc
import builtins
import collections
import copy
import functools
import inspect
import math
import operator
import sys
import types
from typing import Any, Callable, Dict, List, Tuple

import torch

from ..exc import TracedException, ends_in_attribute_error, python_error, raise_folded, unimplemented, unimplemented_frame
from ..guards import Guard, GuardKind
from ..module_lookup import getattr_static
from ..source import AttrSource
from .base import VariableTracker, guard_identity
from .constant import PURE_METHOD_TYPES, ConstantVariable, is_constant_value, is_none, same_constant
from .dicts import ConstDictVariable, DictClassMethod, construct_mapping
from .exceptions import ExceptionVariable
from .functions import BaseUserFunctionVariable, PartialVariable, UserMethodVariable
from .lists import (BaseListVariable, EnumerateVariable, FilterVariable, IteratorVariable, ListVariable, MapVariable,
                    ReversedListIterator, SetVariable, TupleVariable, UnboundContainerMethod, ZipVariable, iterate,
                    snapshot_iterator, sort_items)
from .named_tuple import NamedTupleVariable
from .nn_module import NNModuleVariable
from .numpy import NumpyNdarrayVariable, numpy_call
from .object_protocol import OBJECT_PROTOCOL, fake_id
from .stdlib import STDLIB_FUNCTIONS
from .sym import SymNodeVariable, make_slice
from .tensor import TensorVariable
from .torch import read_setting
from .user_defined import (ConstructedObjectVariable, NewObjectVariable, SuperVariable, UserDefinedClassVariable,
                           UserDefinedObjectVariable, lookup_class_attribute, user_iterator)

# Functions that may be evaluated on constant arguments while tracing.
_FOLDABLE = {
    abs, all, any, bool, chr, divmod, float, format, hash, int, len, max, min, ord, pow, repr, round, str, sum,
    bin, hex, oct, callable, tuple, frozenset, sorted, sys.intern,
    *[getattr(math, name) for name in dir(math) if callable(getattr(math, name))],
    *[getattr(operator, name) for name in dir(operator) if not name.startswith("_") and callable(getattr(operator, name))],
}
# Functions that the graph records when a tensor is among the arguments.
_GRAPHABLE = {
    abs, pow, divmod, *[getattr(operator, n) for n in (
        "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and_", "or_", "xor", "lshift",
        "rshift", "neg", "pos", "invert", "lt", "le", "eq", "ne", "gt", "ge", "iadd", "isub", "imul",
        "itruediv", "ifloordiv", "imod", "ipow", "imatmul", "iand", "ior", "ixor", "ilshift", "irshift",
        "getitem", "not_", "abs", "index")],
}
# Builtins on symbolic sizes, recorded as their torch counterparts.
_SYM_FUNCTIONS = {max: torch.sym_max, min: torch.sym_min, int: torch.sym_int, float: torch.sym_float}
_SEQUENCE_OPS = {operator.add, operator.iadd, operator.mul, operator.imul, operator.getitem, operator.contains,
                 operator.eq, operator.ne, operator.or_, operator.ior, operator.iand, operator.isub, operator.ixor}
# `a op= b` on a set changes `a` itself (a global or argument set keeps its identity).
_SET_IN_PLACE = {operator.ior: "update", operator.iand: "intersection_update", operator.isub: "difference_update",
                 operator.ixor: "symmetric_difference_update"}
# `a op= b` on an immutable `a` (numbers, strings, tuples) has no in-place form: Python runs `a op b`.
_IN_PLACE_TO_BINARY = {getattr(operator, f"i{n.rstrip('_')}"): getattr(operator, n) for n in (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and_", "or_", "xor", "lshift", "rshift",
    "concat")}
# operator functions that change their first argument: never folded on a copy of a container.
_MUTATING = {operator.setitem, operator.delitem, operator.iconcat,
             *[getattr(operator, n) for n in dir(operator) if n.startswith("i") and n[1:] in dir(operator)]}


_BUILTIN_METHOD_TYPES = (types.MethodDescriptorType, types.WrapperDescriptorType)


class BuiltinVariable(VariableTracker):
    def __init__(self, fn: Callable, source=None) -> None:
        super().__init__(source)
        self.fn = fn

    def python_type(self) -> type:
        return type(self.fn)

    def describe(self) -> str:
        return f"builtin {getattr(self.fn, '__name__', self.fn)}"

    def as_python_constant(self) -> Any:
        return self.fn

    def real_object(self) -> Any:
        return self.fn

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if self.fn is dict and callable(getattr(dict, name, None)):
            return DictClassMethod(dict, name)
        if self.fn in (list, tuple, set) and isinstance(getattr_static(self.fn, name, None), _BUILTIN_METHOD_TYPES):
            return UnboundContainerMethod(self.fn, name)
        # attributes of builtin functions and types cannot be reassigned: read without a guard
        value = getattr(self.fn, name, None)
        if value is not None and (is_stdlib(value) or name in ("__name__", "__qualname__", "__module__")):
            return tx.wrap(value)
        if value is not None and _is_pure_method(value):
            return BuiltinVariable(value)
        return super().var_getattr(tx, name)

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        if self.fn is sys._getframe:  # may walk up to the converted frame, whose locals are not the user's
            unimplemented_frame("sys._getframe() in a function called from the frame")
        if self.fn is object.__init__:
            return ConstantVariable(None)
        if self.fn in _IN_PLACE_TO_BINARY and len(args) == 2 and _is_immutable(args[0]):
            return BuiltinVariable(_IN_PLACE_TO_BINARY[self.fn]).call_function(tx, args, kwargs)
        if self.fn in _GRAPHABLE and any(isinstance(a, NumpyNdarrayVariable) for a in args) and not kwargs:
            return numpy_call(tx, self.fn, args, {})
        if self.fn in OBJECT_PROTOCOL and not kwargs:
            return OBJECT_PROTOCOL[self.fn](tx, *args)
        if self.fn is object.__setattr__ and len(args) == 3:
            args[0].generic_setattr(tx, args[1].as_python_constant(), args[2])
            return ConstantVariable(None)
        if self.fn is tuple.__new__ and len(args) == 2 and not kwargs and hasattr(args[0].as_python_constant(), "_fields"):
            return NamedTupleVariable(args[1].unpack_var_sequence(tx), args[0].as_python_constant())  # _make
        if self.fn is functools.partial and args:
            return PartialVariable(args[0], list(args[1:]), dict(kwargs))
        if is_stdlib(self.fn):
            handler = STDLIB_FUNCTIONS[self.fn]
            if not _binds(handler, args, kwargs):  # Python raises the TypeError when the frame runs
                unimplemented(f"{self.describe()} with arguments it does not take here")
            return handler(tx, *args, **kwargs)
        if _is_sym_arithmetic(self.fn, args, kwargs):
            return tx.output.call_graph_op(tx, "call_function", _SYM_FUNCTIONS.get(self.fn, self.fn), args, {})
        handler = getattr(self, f"_call_{getattr(self.fn, '__name__', '')}", None)
        if handler is not None and getattr(builtins, self.fn.__name__, None) is self.fn:
            if not _binds(handler, args, kwargs):  # Python raises the TypeError when the frame runs
                unimplemented(f"{self.fn.__name__}() with arguments it does not take here")
            result = handler(tx, *args, **kwargs)
            if result is not None:
                return result
        if self.fn in (operator.eq, operator.ne) and len(args) == 2 and _python_eq(args[0]) is not None:
            result = self._user_equality(tx, *args)
            if result is not None:
                return result
        if self.fn in _BINARY_DUNDERS and len(args) == 2 and not kwargs:
            result = _user_binary_op(tx, self.fn, *args)
            if result is not None:
                return result
        if self.fn in _UNARY_DUNDERS and len(args) == 1 and not kwargs and _python_eq(args[0], _UNARY_DUNDERS[self.fn]):
            return args[0].call_method(tx, _UNARY_DUNDERS[self.fn], [], {})  # `-obj`: its class's __neg__
        if self.fn in _GRAPHABLE and any(isinstance(a, TensorVariable) for a in args) and not kwargs \
                and not (args and args[0].keyed_by_tensors):
            return tx.output.call_graph_op(tx, "call_function", self.fn, args, {})
        if self.fn in _SEQUENCE_OPS and len(args) == 2:
            result = self._sequence_op(tx, *args)
            if result is not None:
                return result
        if self.fn in (operator.is_, operator.is_not) and len(args) == 2:  # never on copies made to fold
            same = self._identity(tx, *args)
            if same is None:
                unimplemented(f"'is' between {args[0].describe()} and {args[1].describe()}")
            return same
        if self.fn is sys.getrecursionlimit and not args and not kwargs:
            return read_setting(tx, self.fn)
        if self._foldable(args, kwargs):
            try:
                value = self.fn(*[a.as_python_constant() for a in args], **{k: v.as_python_constant() for k, v in kwargs.items()})
            except Exception as e:  # noqa: BLE001 - what eager raises there, caught or not by the user's code
                raise_folded(e, self.describe())
            return same_constant(value, args) or tx.wrap_constant(value)
        return self._call_on_values(tx, args)

    def _foldable(self, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> bool:
        """Whether the call is evaluated now: a pure function of constants (never a mutating operator
        on a copy of a container)."""
        return ((self.fn in _FOLDABLE or self.fn is sys.getdefaultencoding or _is_pure_method(self.fn))
                and all(a.is_python_constant() for a in [*args, *kwargs.values()])
                and not (self.fn in _MUTATING and any(a.has_identity for a in args)))

    def _call_on_values(self, tx, args: List[VariableTracker]) -> VariableTracker:
        """operator functions on values that are not constants: through the values' own methods."""
        if self.fn is operator.getitem and len(args) == 2:
            return args[0].call_method(tx, "__getitem__", [args[1]], {})
        if self.fn in (operator.setitem, operator.delitem):
            name = "__setitem__" if self.fn is operator.setitem else "__delitem__"
            return args[0].call_method(tx, name, list(args[1:]), {})
        if self.fn is operator.contains and len(args) == 2:
            return args[0].call_method(tx, "__contains__", [args[1]], {})
        if self.fn in (operator.eq, operator.ne) and len(args) == 2:
            result = self._user_equality(tx, *args)
            if result is not None:
                return result
            same = self._identity(tx, *args)
            if same is not None and (same.as_python_constant() is (self.fn is operator.eq) or _eq_is_identity(*args)):
                return same
        if self.fn is operator.not_ and len(args) == 1:
            return ConstantVariable(not args[0].truthy(tx))
        if self.fn is operator.truth and len(args) == 1:
            return ConstantVariable(args[0].truthy(tx))
        unimplemented(f"calling {self.describe()} with arguments ({', '.join(a.describe() for a in args)})")

    # ---- sequences ----

    def _sequence_op(self, tx, a: VariableTracker, b: VariableTracker):
        fn = self.fn
        if fn in (operator.add, operator.iadd):  # `() + t`, `(1,) + t`: a constant tuple is a tuple
            a, b = _tuple_of_constants(a, b), _tuple_of_constants(b, a)
        if fn in (operator.add, operator.iadd) and isinstance(a, BaseListVariable) and isinstance(b, BaseListVariable):
            if fn is operator.iadd and isinstance(a, ListVariable):
                a.call_method(tx, "extend", [b], {})
                return a
            if a.python_cls is b.python_cls:
                return type(a)(a.items + b.items) if type(a) in (ListVariable, TupleVariable) else TupleVariable(a.items + b.items)
        if fn is operator.imul and isinstance(a, ListVariable) and b.is_python_constant():
            a.call_method(tx, "__setitem__", [ConstantVariable(slice(None)), ListVariable(a.items * b.as_python_constant())], {})
            return a
        if fn in (operator.mul, operator.imul) and isinstance(a, BaseListVariable) and b.is_python_constant():
            if type(a) is TupleVariable and b.as_python_constant() == 1:  # the tuple itself, as in CPython
                return a
            return type(a)(a.items * b.as_python_constant()) if type(a) in (ListVariable, TupleVariable) else None
        if fn in (operator.or_, operator.ior) and isinstance(a, ConstDictVariable) and isinstance(b, ConstDictVariable):
            if fn is operator.ior:
                a.call_method(tx, "update", [b], {})
                return a
            return ConstDictVariable({**a.items, **b.items})
        if fn in _SET_IN_PLACE and isinstance(a, SetVariable) and isinstance(b, SetVariable):
            a.call_method(tx, _SET_IN_PLACE[fn], [b], {})
            return a
        if fn is operator.getitem and isinstance(a, (BaseListVariable, ConstDictVariable)):
            return a.call_method(tx, "__getitem__", [b], {})
        if fn in (operator.eq, operator.ne) and (_has_sym_items(a) or _has_sym_items(b)):
            return self._compare_sequences(tx, a, b)
        if fn is operator.contains and isinstance(a, (BaseListVariable, ConstDictVariable)):
            return self._contains(tx, a, b)
        return None

    def _user_equality(self, tx, a: VariableTracker, b: VariableTracker):
        """`a == b` (or !=) through the __eq__ (__ne__) that `a`'s class defines in Python (dataclasses'
        among them); None when it returns NotImplemented."""
        method = "__ne__" if self.fn is operator.ne and _python_eq(a, "__ne__") is not None else "__eq__"
        result = a.call_method(tx, method, [b], {})
        if result.is_python_constant() and result.as_python_constant() is NotImplemented:
            return None
        if self.fn is operator.ne and method == "__eq__":
            return ConstantVariable(not result.truthy(tx))
        return result

    def _compare_sequences(self, tx, a: VariableTracker, b: VariableTracker):
        """`a == b` (or !=) item by item, for sizes with symbolic items; guards on each comparison made."""
        if not b.has_unpack_var_sequence(tx) or issubclass(a.python_type(), tuple) != issubclass(b.python_type(), tuple):
            return ConstantVariable(self.fn is operator.ne)
        xs, ys = a.unpack_var_sequence(tx), b.unpack_var_sequence(tx)
        eq = BuiltinVariable(operator.eq)
        same = len(xs) == len(ys) and all(eq.call_function(tx, [x, y], {}).truthy(tx) for x, y in zip(xs, ys))
        return ConstantVariable(same == (self.fn is operator.eq))

    def _contains(self, tx, container: VariableTracker, item: VariableTracker):
        if isinstance(container, ConstDictVariable):
            return ConstantVariable(item.as_python_constant() in container.items)
        for element in container.items:
            same = self._identity(tx, element, item)
            if same is not None and same.as_python_constant():
                return ConstantVariable(True)
            if same is not None and _eq_is_identity(element, item):
                continue
            if not (element.is_python_constant() and item.is_python_constant()):
                unimplemented("'in' over a sequence holding non-constant values")
            if element.as_python_constant() == item.as_python_constant():
                return ConstantVariable(True)
        return ConstantVariable(False)

    def _user_equality(self, tx, a: VariableTracker, b: VariableTracker):
        """`a == b` / `a != b` through the Python __eq__ / __ne__ of a user object's class, the
        other operand's first when its class is a subclass (Python's order); None when every
        method answers NotImplemented (identity decides) or none is a Python function."""
        pairs = [(a, b), (b, a)]
        if _user_class(b) is not None and _user_class(a) is not None and _user_class(b) is not _user_class(a) \
                and issubclass(_user_class(b), _user_class(a)):
            pairs.reverse()
        for first, second in pairs:
            cls = _user_class(first)
            if cls is None:
                continue
            name, negate = ("__eq__", False) if self.fn is operator.eq else ("__ne__", False)
            if name == "__ne__" and getattr_static(cls, "__ne__") is object.__ne__:
                name, negate = "__eq__", True  # object.__ne__ inverts __eq__
            if not isinstance(getattr_static(cls, name), types.FunctionType):
                continue
            result = lookup_class_attribute(tx, first, cls, name, None, implicit=True).call_function(tx, [second], {})
            if result.is_python_constant() and result.as_python_constant() is NotImplemented:
                continue
            return ConstantVariable(not result.truthy(tx)) if negate else result
        return None

    def _identity(self, tx, a: VariableTracker, b: VariableTracker):
        """`a is b` when it can be decided while tracing."""
        negate = self.fn in (operator.is_not, operator.ne)
        is_op = self.fn in (operator.is_, operator.is_not)
        if a is b:
            return ConstantVariable(not negate)
        if is_op and _callers_object(a) and _callers_object(b):
            same = tx.output.source_value(a.source) is tx.output.source_value(b.source)
            tx.output.add_guard(Guard(a.source, GuardKind.ALIAS_OF if same else GuardKind.DISTINCT_FROM, b.source))
            return ConstantVariable(same != negate)
        # the constant of a container is a copy: its identity is not the container's
        if a.is_python_constant() and b.is_python_constant() and not (is_op and (a.has_identity or b.has_identity)):
            x, y = a.as_python_constant(), b.as_python_constant()
            same = x is y if is_op else x == y
            return ConstantVariable(same != negate)
        if isinstance(a, TensorVariable) and isinstance(b, TensorVariable):
            return ConstantVariable((a.node is b.node) != negate) if is_op else None
        if any(v.has_identity and v.source is None for v in (a, b)):  # made while tracing: only its tracker is it
            return ConstantVariable(negate)
        real_a, real_b = _identity_of(a), _identity_of(b)
        if real_a is not None and real_b is not None:
            guard_identity(tx, a)
            guard_identity(tx, b)
            return ConstantVariable((real_a is real_b) != negate)
        if (a.is_python_constant() and a.as_python_constant() is None) or (b.is_python_constant() and b.as_python_constant() is None):
            return ConstantVariable(negate)
        return None

    # ---- builtins with their own rules ----

    def _call_len(self, tx, obj: VariableTracker):
        if isinstance(obj, TensorVariable) and obj.example.dim() > 0:
            return obj.size_variable(tx, 0)
        if isinstance(obj, TensorVariable):
            return ConstantVariable(len(obj.example))
        if isinstance(obj, (BaseListVariable, ConstDictVariable)):
            return ConstantVariable(len(obj.items))
        if isinstance(obj, IteratorVariable):
            unimplemented(f"len() of a {obj.describe()} (Python raises)")
        if obj.is_python_constant():
            return ConstantVariable(len(obj.unpack_var_sequence(tx)))
        return obj.call_method(tx, "__len__", [], {})

    def _call_isinstance(self, tx, obj: VariableTracker, classes: VariableTracker):
        cls_value = classes.as_python_constant()
        flat = _flat_classes(cls_value)
        legacy = [c for c in flat if type(c) is _LEGACY_TENSOR_TYPE]
        if legacy and isinstance(obj, TensorVariable):  # its dtype, device and layout are guarded
            if any(_legacy_type_matches(obj.example, c) for c in legacy):
                return ConstantVariable(True)
            cls_value = tuple(c for c in flat if type(c) is not _LEGACY_TENSOR_TYPE)
        check = getattr_static(type(cls_value), "__instancecheck__", None)
        if isinstance(check, types.FunctionType) and check not in _TYPE_INSTANCECHECKS:  # a metaclass's own
            return self._python_instancecheck(tx, obj, classes, check)
        if any(type(c).__instancecheck__ not in _TYPE_INSTANCECHECKS for c in _flat_classes(cls_value)):
            unimplemented("isinstance() with a class whose metaclass decides membership by the instance")
        python_type = obj.python_type()
        return ConstantVariable(issubclass(python_type, cls_value))

    @staticmethod
    def _python_instancecheck(tx, obj: VariableTracker, cls: VariableTracker, check: types.FunctionType):
        """`isinstance(obj, cls)` where cls's metaclass defines __instancecheck__ in Python: CPython's
        exact-type answer first, then the method traced and its result's truth."""
        if obj.python_type() is cls.as_python_constant():
            return ConstantVariable(True)
        source = cls.source and AttrSource(AttrSource(cls.source, "__class__"), "__instancecheck__")
        result = tx.wrap(check, source).call_function(tx, [cls, obj], {})
        if not result.is_python_constant():
            unimplemented("a metaclass's __instancecheck__ answered with other than a constant")
        return ConstantVariable(bool(result.as_python_constant()))

    def _call_issubclass(self, tx, cls: VariableTracker, classes: VariableTracker):
        return ConstantVariable(issubclass(cls.as_python_constant(), classes.as_python_constant()))

    def _call_type(self, tx, obj: VariableTracker):
        # the class of an existing object is reached through it, so that what is read from it is guarded
        source = AttrSource(obj.source, "__class__") if obj.source is not None and obj.real_object() is not None else None
        return UserDefinedClassVariable(obj.python_type(), source)

    def _call_range(self, tx, *args: VariableTracker):
        bounds = [a.exact_value() for a in args]
        return ConstantVariable(range(*bounds))

    def _call_iter(self, tx, obj: VariableTracker):
        return iterate(tx, obj)

    def _call_next(self, tx, iterator: VariableTracker, *default: VariableTracker):
        if not isinstance(iterator, IteratorVariable):
            iterator = user_iterator(tx, iterator)
        if iterator is None:
            unimplemented("next() on a non-iterator")
        item = iterator.next_item(tx)
        if item is None:
            if default:
                return default[0]
            python_error(StopIteration)
        return item

    def _call_zip(self, tx, *iterables: VariableTracker, strict: VariableTracker = ConstantVariable(False)):
        return ZipVariable([iterate(tx, it) for it in iterables], bool(strict.as_python_constant()))

    def _call_enumerate(self, tx, iterable: VariableTracker, start: VariableTracker = ConstantVariable(0)):
        return EnumerateVariable(iterate(tx, iterable), start.as_python_constant())

    def _call_reversed(self, tx, seq: VariableTracker):
        if isinstance(seq, ListVariable):
            return ReversedListIterator(seq)
        return snapshot_iterator(tx, seq, list(reversed(seq.unpack_var_sequence(tx))), reversed)

    def _call_set(self, tx, *args: VariableTracker):
        return SetVariable(args[0].unpack_var_sequence(tx) if args else [])

    def _call_list(self, tx, *args: VariableTracker):
        return ListVariable(args[0].unpack_var_sequence(tx) if args else [])

    def _call_tuple(self, tx, *args: VariableTracker):
        first = args[0] if args else None
        if type(first) is TupleVariable or (isinstance(first, ConstantVariable) and type(first.value) is tuple):
            return first  # CPython gives back an exact tuple itself
        if args and args[0].is_python_constant() and is_constant_value(tuple(args[0].as_python_constant())):
            return ConstantVariable(tuple(args[0].as_python_constant()))
        return TupleVariable(args[0].unpack_var_sequence(tx) if args else [])

    def _call_dict(self, tx, /, *args: VariableTracker, **kwargs: VariableTracker):
        return construct_mapping(tx, dict, list(args), kwargs)

    def _call_sorted(self, tx, seq: VariableTracker, key: VariableTracker = None, reverse: VariableTracker = None):
        return ListVariable(sort_items(tx, seq.unpack_var_sequence(tx), key, reverse))

    def _call_slice(self, tx, *args: VariableTracker):
        return make_slice(list(args))

    def _call_map(self, tx, fn: VariableTracker, *iterables: VariableTracker):
        return MapVariable(fn, [iterate(tx, it) for it in iterables])

    def _call_filter(self, tx, fn: VariableTracker, iterable: VariableTracker):
        return FilterVariable(fn, iterate(tx, iterable))

    def _call_sum(self, tx, seq: VariableTracker, start: VariableTracker = None):
        if seq.is_python_constant() and (start is None or start.is_python_constant()):
            return None
        total = start or ConstantVariable(0)
        add = BuiltinVariable(operator.add)
        for item in seq.unpack_var_sequence(tx):
            total = add.call_function(tx, [total, item], {})
        return total

    def _reduce_min_max(self, tx, args: List[VariableTracker], key: VariableTracker = None,
                        default: VariableTracker = None):
        if len(args) == 1:
            args = args[0].unpack_var_sequence(tx)
            if not args and default is not None:
                return default
        if not args:
            unimplemented(f"{self.fn.__name__}() of an empty sequence")
        if key is not None and not is_none(key):
            keys = [key.call_function(tx, [a], {}).as_python_constant() for a in args]
            best = self.fn(range(len(args)), key=keys.__getitem__)
            return args[best]
        if all(a.is_python_constant() for a in args):
            return ConstantVariable(self.fn(*[a.as_python_constant() for a in args]))
        pick = torch.maximum if self.fn is max else torch.minimum
        if len(args) == 2 and all(isinstance(a, TensorVariable) for a in args):
            return tx.output.call_graph_op(tx, "call_function", pick, args, {})
        unimplemented(f"{self.fn.__name__}() over tensors and Python values")

    def _call_max(self, tx, *args: VariableTracker, key: VariableTracker = None, default: VariableTracker = None):
        return self._reduce_min_max(tx, list(args), key, default)

    def _call_min(self, tx, *args: VariableTracker, key: VariableTracker = None, default: VariableTracker = None):
        return self._reduce_min_max(tx, list(args), key, default)

    def _call_getattr(self, tx, obj: VariableTracker, name: VariableTracker, *default: VariableTracker):
        attr = name.as_python_constant()
        if default and _lookup_is_traced(obj):
            try:
                return obj.var_getattr(tx, attr)
            except TracedException as error:
                if not issubclass(error.exc_type, AttributeError):
                    raise
                return default[0]
        if default:
            if not _has_attr(tx, obj, attr):
                return default[0]
        return obj.var_getattr(tx, attr)

    def _call_hasattr(self, tx, obj: VariableTracker, name: VariableTracker):
        return ConstantVariable(_has_attr(tx, obj, name.as_python_constant()))

    def _call_setattr(self, tx, obj: VariableTracker, name: VariableTracker, value: VariableTracker):
        if not isinstance(obj, (UserDefinedObjectVariable, NewObjectVariable)):
            return None
        obj.store_attr(tx, name.as_python_constant(), value)
        return ConstantVariable(None)

    def _call_vars(self, tx, *obj: VariableTracker):
        if len(obj) != 1 or not isinstance(obj[0], (UserDefinedObjectVariable, NewObjectVariable)):
            return None
        return obj[0].var_getattr(tx, "__dict__")

    def _call_delattr(self, tx, obj: VariableTracker, name: VariableTracker):
        if not isinstance(obj, (UserDefinedObjectVariable, NewObjectVariable)):
            return None
        cls = obj.python_type()
        delete = getattr_static(cls, "__delattr__")
        if isinstance(delete, types.FunctionType):
            method = lookup_class_attribute(tx, obj, cls, "__delattr__", None, implicit=True)
            return method.call_function(tx, [name], {})
        if delete is not object.__delattr__:
            return None
        obj.generic_delattr(tx, name.as_python_constant())
        return ConstantVariable(None)

    def _call_bool(self, tx, *args: VariableTracker):
        return ConstantVariable(args[0].truthy(tx) if args else False)

    def _call_super(self, tx, *args: VariableTracker):
        if args:
            return SuperVariable(args[0].as_python_constant(), args[1])
        cls = tx.cell("__class__").contents.as_python_constant()
        first = tx.code.co_varnames[0]
        obj = tx.cell(first).contents if first in tx.cells else tx.load_local(first)
        return SuperVariable(cls, obj)

    def _call_all(self, tx, iterable: VariableTracker):
        return ConstantVariable(all(item.truthy(tx) for item in iterable.unpack_var_sequence(tx)))

    def _call_any(self, tx, iterable: VariableTracker):
        return ConstantVariable(any(item.truthy(tx) for item in iterable.unpack_var_sequence(tx)))

    def _call_callable(self, tx, obj: VariableTracker):
        identity = _identity_of(obj)
        if identity is not None:
            return ConstantVariable(callable(identity))
        if obj.is_python_constant():
            return ConstantVariable(callable(obj.as_python_constant()))
        if isinstance(obj, (BaseUserFunctionVariable, UserMethodVariable, PartialVariable, BuiltinVariable)):
            return ConstantVariable(True)
        return ConstantVariable(any("__call__" in vars(klass) for klass in obj.python_type().__mro__))

    def _call_print(self, tx, *args, **kwargs):
        unimplemented("print() is a side effect outside the graph")

    def _call_str(self, tx, *args: VariableTracker):
        return _text_of(tx, args[0], "__str__") if len(args) == 1 else None

    def _call_repr(self, tx, obj: VariableTracker):
        return _text_of(tx, obj, "__repr__")

    def _call_ascii(self, tx, obj: VariableTracker):
        text = _text_of(tx, obj, "__repr__")
        return ConstantVariable(ascii(text.as_python_constant())[1:-1]) if text is not None else None

    def _call_format(self, tx, value: VariableTracker, spec: VariableTracker = ConstantVariable("")):
        if value.is_python_constant() or not spec.is_python_constant():
            return None
        if getattr_static(value.python_type(), "__format__", None) is object.__format__:
            return _text_of(tx, value, "__str__") if spec.as_python_constant() == "" else None  # what object's does
        return _text_of(tx, value, "__format__", spec)

    def _call_id(self, tx, obj: VariableTracker):
        identity = _identity_of(obj)
        if identity is not None:
            guard_identity(tx, obj)
            return ConstantVariable(id(identity))
        if obj.source is None or isinstance(obj, ConstantVariable) or _ids_stay_in_trace(tx):
            return fake_id(tx, obj)
        # an object of the caller's (a tensor, a container): its id may meet ints from outside the
        # trace (arguments, globals, sets of ids), so it is the real one, for that object only
        identity = tx.output.source_value(obj.source)
        tx.output.add_guard(Guard(obj.source, GuardKind.ID_MATCH, identity))
        return ConstantVariable(id(identity))


def _callers_object(value: VariableTracker) -> bool:
    """Whether `value` is an object of the caller's whose identity is its own: a container, or a
    constant that other equal values need not be (a tuple, a string; not None or a small int)."""
    return value.source is not None and (value.has_identity or (isinstance(value, ConstantVariable)
                                                                and value.reads_source()))


def _ids_stay_in_trace(tx) -> bool:
    """Whether ids taken in this frame meet only other ids taken in the trace: copy.deepcopy's, keys
    of a memo made while tracing (a memo passed in may hold the caller's ids). From 3.12 on deepcopy
    takes the id before it makes the memo, while `memo` is still None."""
    memo = tx.symbolic_locals.get("memo") if tx.f_globals is copy.__dict__ else None
    return (isinstance(memo, ConstDictVariable) and memo.source is None) or (memo is not None and is_none(memo))


def _text_of(tx, obj: VariableTracker, name: str, *args: VariableTracker):
    """str(obj), repr(obj) or format(obj, spec) (`name`) for a user object whose class defines it in
    Python: the method is traced; None for other values (constants fold, the rest is not traced)."""
    if obj.is_python_constant() or not isinstance(obj, (UserDefinedObjectVariable, NewObjectVariable)):
        return None
    cls = obj.python_type()
    if isinstance(obj, ExceptionVariable) and not isinstance(getattr_static(cls, name), types.FunctionType):
        return obj.text(tx, name) if name != "__format__" else None
    if name == "__str__" and getattr_static(cls, "__str__") is object.__str__:
        name = "__repr__"  # object.__str__ calls repr()
    if not isinstance(getattr_static(cls, name), types.FunctionType):
        return None
    text = lookup_class_attribute(tx, obj, cls, name, None, implicit=True).call_function(tx, list(args), {})
    if not (text.is_python_constant() and isinstance(text.as_python_constant(), str)):
        unimplemented(f"{cls.__qualname__}.{name} returning other than a constant string")
    return text


def _binds(handler: Callable, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> bool:
    """Whether a handler (a method taking self and tx, or a function taking tx) takes these arguments."""
    leading = 2 if hasattr(handler, "__func__") else 1
    return _takes(getattr(handler, "__func__", handler), leading + len(args), tuple(kwargs))


@functools.lru_cache(maxsize=None)
def _takes(function: Callable, n_positional: int, keywords: Tuple[str, ...]) -> bool:
    """Whether `function` binds this many positional arguments and these keywords: binding looks at
    nothing else, so the answer is kept."""
    try:
        inspect.signature(function).bind(*[None] * n_positional, **dict.fromkeys(keywords))
    except TypeError:
        return False
    return True


def _is_pure_method(fn: Any) -> bool:
    """A method of an immutable builtin type (`str.upper`, `int.from_bytes`): folded on constants."""
    if fn is str.maketrans or fn is bytes.maketrans:
        return True
    owner = getattr(fn, "__objclass__", None)
    if owner is None and isinstance(fn, types.BuiltinMethodType):
        owner = getattr(fn, "__self__", None)
        if type(owner) in PURE_METHOD_TYPES:  # a method bound to an immutable value: "{}".format
            return True
    return isinstance(owner, type) and owner in PURE_METHOD_TYPES


def is_stdlib(fn: Any) -> bool:
    try:
        return fn in STDLIB_FUNCTIONS
    except TypeError:  # unhashable
        return False


def _is_immutable(value: VariableTracker) -> bool:
    """Whether `value` is of a type with no in-place operators (`x op= y` rebinds x to `x op y`)."""
    return (isinstance(value, (ConstantVariable, SymNodeVariable)) or type(value) is TupleVariable
            or isinstance(value, NumpyNdarrayVariable) and value.scalar)


def _tuple_of_constants(value: VariableTracker, other: VariableTracker) -> VariableTracker:
    """`value` as a tuple tracker where it is a constant tuple meeting a tuple tracker in `+`."""
    if isinstance(other, TupleVariable) and value.is_python_constant() and type(value.as_python_constant()) is tuple:
        return TupleVariable([ConstantVariable(v) for v in value.as_python_constant()])
    return value


def _has_sym_items(value: VariableTracker) -> bool:
    return isinstance(value, BaseListVariable) and any(isinstance(item, SymNodeVariable) for item in value.items)


_BINARY_NAMES = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor", "lshift",
                 "rshift")
# operator function -> (its in-place method or None, its method, its reflected method)
_BINARY_DUNDERS = {
    **{getattr(operator, n + "_" if n in ("and", "or") else n): (None, f"__{n}__", f"__r{n}__") for n in _BINARY_NAMES},
    **{getattr(operator, f"i{n}"): (f"__i{n}__", f"__{n}__", f"__r{n}__") for n in _BINARY_NAMES},
}


_UNARY_DUNDERS = {operator.neg: "__neg__", operator.pos: "__pos__", operator.invert: "__invert__", abs: "__abs__"}


def _user_binary_op(tx, fn: Callable, a: VariableTracker, b: VariableTracker) -> Optional[VariableTracker]:
    """`a op b` through the methods user classes write in Python (`a.__iadd__` when in place, then
    `a.__add__`, then `b.__radd__`, the reflected one first when `b`'s class is a subclass of `a`'s
    overriding it), or None when neither operand has one."""
    in_place, method, reflected = _BINARY_DUNDERS[fn]
    binary = [(a, method, b), (b, reflected, a)]
    b_reflected = _python_eq(b, reflected)
    if b_reflected is not None and b_reflected is not _python_eq(a, reflected) and \
            b.python_type() is not a.python_type() and issubclass(b.python_type(), a.python_type()):
        binary.reverse()
    attempts = ([(a, in_place, b)] if in_place else []) + binary
    if all(_python_eq(obj, name) is None for obj, name, _ in attempts):
        return None
    for obj, name, other in attempts:
        if _python_eq(obj, name) is not None:
            result = obj.call_method(tx, name, [other], {})
            if not (result.is_python_constant() and result.as_python_constant() is NotImplemented):
                return result
    unimplemented(f"{method} and {reflected} return NotImplemented here")


def _python_eq(value: VariableTracker, name: str = "__eq__"):
    """The `name` method written in Python of a user object's class, or None."""
    if not isinstance(value, (NewObjectVariable, UserDefinedObjectVariable)):
        return None
    method = getattr_static(value.python_type(), name, None)
    return method if isinstance(method, types.FunctionType) else None


def _is_sym_arithmetic(fn: Callable, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> bool:
    """Arithmetic or a comparison on symbolic sizes and constants (recorded in the graph)."""
    return (not kwargs and any(isinstance(a, SymNodeVariable) for a in args)
            and all(isinstance(a, (SymNodeVariable, ConstantVariable)) for a in args)
            and (fn in _GRAPHABLE or fn in _SYM_FUNCTIONS))


def _identity_of(vt: VariableTracker):
    """The real object behind a tracker that stands for one specific existing object, else None."""
    return vt.real_object()


# Metaclass instance checks that answer from the instance's type alone (ABCMeta's from its
# registry and subclass hooks; Parameter's from the type its tensor guard checks).
_TYPE_INSTANCECHECKS = (type.__instancecheck__, abc.ABCMeta.__instancecheck__,
                        type(torch.nn.Parameter).__instancecheck__)


# torch.FloatTensor and the other legacy tensor types: their metaclass checks a tensor's dtype and device kind
_LEGACY_TENSOR_TYPE = type(torch.FloatTensor)


def _legacy_type_matches(example: torch.Tensor, cls: Any) -> bool:
    """`isinstance(t, cls)` for a legacy tensor type, as tensortype's check answers it: the same dtype,
    on a CPU (or CUDA) device as the type says, dense or sparse as the type says."""
    device = example.device.type
    layout = torch.sparse_coo if cls.is_sparse else torch.strided  # CSR, mkldnn...: another dispatch key
    return (example.dtype == cls.dtype and device in ("cpu", "cuda") and (device == "cuda") == cls.is_cuda
            and example.layout == layout)


def _flat_classes(classes: Any) -> List[Any]:
    """The classes of isinstance's second argument, nested tuples and unions (`int | None`) flattened."""
    if isinstance(classes, types.UnionType):
        classes = classes.__args__
    return [c for item in classes for c in _flat_classes(item)] if isinstance(classes, tuple) else [classes]


def _user_class(value: VariableTracker):
    """The class of a user object tracker (whose special methods are traced), else None."""
    return value.python_type() if isinstance(value, (UserDefinedObjectVariable, NewObjectVariable)) else None


def _eq_is_identity(a: VariableTracker, b: VariableTracker) -> bool:
    """Whether `a == b` means `a is b`: two existing objects (or one and None) whose types keep
    object's equality."""
    return all((v.real_object() is not None and type(v.real_object()).__eq__ is object.__eq__) or is_none(v)
               for v in (a, b))


def _lookup_is_traced(obj: VariableTracker) -> bool:
    """Whether reading an attribute of `obj` traces Python's lookup (the class's __getattribute__,
    descriptors, __getattr__): hasattr and getattr with a default then ask that lookup, and catch
    the AttributeError it ends in, so that no user code runs while tracing, nor in the guards."""
    return isinstance(obj, (NewObjectVariable, UserDefinedObjectVariable))


def _has_attr(tx, obj: VariableTracker, name: str) -> bool:
    if _lookup_is_traced(obj):
        return not ends_in_attribute_error(lambda: obj.var_getattr(tx, name))
    if isinstance(obj, TensorVariable):
        return obj.has_attribute(tx, name)
    identity = _identity_of(obj)
    if identity is not None and tx.output.side_effects.pending_attr(identity, name) is not None:
        return True
    if isinstance(obj, NNModuleVariable):
        return obj.has_attribute(tx, name)
    if identity is not None:
        present = hasattr(identity, name)
        if obj.source is not None:
            tx.output.add_guard(Guard(obj.source, GuardKind.HASATTR, (name, present)))
        return present
    return _has_attr_of_traced_value(tx, obj, name)


_MISSING = object()
# Descriptors implemented in C whose __get__ runs no user code and cannot fail on an instance of
# the builtin type that defines them.
_BUILTIN_DESCRIPTORS = (types.MemberDescriptorType, types.GetSetDescriptorType, types.MethodDescriptorType,
                        types.WrapperDescriptorType, types.BuiltinFunctionType, types.ClassMethodDescriptorType,
                        types.FunctionType, staticmethod, classmethod, type(collections.namedtuple("_T", "a").a))
# Builtin types whose attribute lookup is not Python's generic one (it delegates or looks elsewhere).
_SPECIAL_GETATTRIBUTE = (types.MethodType, types.ModuleType, type, super, types.GenericAlias)


def _has_attr_of_traced_value(tx, obj: VariableTracker, name: str) -> bool:
    """hasattr on a value with no real object behind it, answered as Python's lookup would: the
    attributes its tracker records, then its type's; where that lookup would run user code
    (properties, descriptors, __getattr__) the attribute is read through the tracker instead."""
    cls = obj.python_type()
    lookup_owner = next(base for base in cls.__mro__ if "__getattribute__" in vars(base))
    generic = lookup_owner.__module__ in ("builtins", "functools", "collections") and lookup_owner not in _SPECIAL_GETATTRIBUTE
    if not generic or getattr_static(cls, "__getattr__", None) is not None:
        unimplemented(f"hasattr on a {cls.__qualname__} object with its own attribute lookup")
    if isinstance(obj, NewObjectVariable) and name in obj.attrs:
        return True
    static = getattr_static(cls, name, _MISSING)
    if static is _MISSING:
        if cls.__dictoffset__ and not _instance_dict_known(obj):
            unimplemented(f"hasattr on a {cls.__qualname__} object whose instance attributes are not tracked")
        return False
    builtin_owner = next(base for base in cls.__mro__ if name in vars(base)).__module__ in ("builtins", "functools")
    if isinstance(static, _BUILTIN_DESCRIPTORS) and (builtin_owner or not isinstance(static, types.MemberDescriptorType)):
        return True
    if hasattr(type(static), "__get__"):  # a property or another descriptor: its getter decides
        obj.var_getattr(tx, name)
    return True


def _instance_dict_known(obj: VariableTracker) -> bool:
    """Whether every instance attribute of `obj` is known while tracing: objects built in the frame
    by traced code (their attribute stores are tracked; other trackers reject them)."""
    return isinstance(obj, NewObjectVariable) or (obj.source is None and not isinstance(obj, ConstructedObjectVariable))
