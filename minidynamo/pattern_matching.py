"""The translator's handlers of `match` statements: MATCH_SEQUENCE, MATCH_MAPPING, MATCH_KEYS, MATCH_CLASS, GET_LEN."""
from __future__ import annotations

from typing import Any, List, Optional

from bytecode import Instr

from .exc import AttributeMissing, unimplemented
from .variables.base import VariableTracker
from .variables.builtin import BuiltinVariable
from .variables.constant import ConstantVariable
from .variables.lists import TupleVariable

_SEQUENCE_FLAG = 1 << 5  # Py_TPFLAGS_SEQUENCE: what `case [a, b]` matches (not str, bytes, bytearray)
_MAPPING_FLAG = 1 << 6  # Py_TPFLAGS_MAPPING: what `case {"k": v}` matches
# Builtin classes whose one positional sub-pattern matches the subject itself (`case int(n)`).
_MATCH_SELF = (bool, bytearray, bytes, dict, float, frozenset, int, list, set, str, tuple)


class PatternMatching:
    """Mixed into the translator; each handler follows its case in CPython's ceval (match_keys,
    match_class)."""

    stack: List[Any]

    def MATCH_SEQUENCE(self, inst: Instr) -> None:
        self.push(ConstantVariable(bool(self.stack[-1].python_type().__flags__ & _SEQUENCE_FLAG)))

    def MATCH_MAPPING(self, inst: Instr) -> None:
        self.push(ConstantVariable(bool(self.stack[-1].python_type().__flags__ & _MAPPING_FLAG)))

    def GET_LEN(self, inst: Instr) -> None:
        self.push(BuiltinVariable(len).call_function(self, [self.stack[-1]], {}))

    def MATCH_KEYS(self, inst: Instr) -> None:
        keys, subject = self.stack[-1], self.stack[-2]
        values = []
        for key in keys.unpack_var_sequence(self):
            if not subject.call_method(self, "__contains__", [key], {}).truthy(self):
                self.push(ConstantVariable(None))
                return
            values.append(subject.call_method(self, "__getitem__", [key], {}))
        self.push(TupleVariable(values))

    def MATCH_CLASS(self, inst: Instr) -> None:
        names, cls, subject = self.pop(), self.pop(), self.pop()
        if not BuiltinVariable(isinstance).call_function(self, [subject, cls], {}).truthy(self):
            self.push(ConstantVariable(None))
            return
        attributes = _positional_names(self, cls, inst.arg) + list(names.as_python_constant())
        if attributes and attributes[0] is None:  # `case int(n)`: the subject itself, then keywords
            found = [subject] + [_attribute(self, subject, n) for n in attributes[1:]]
        else:
            found = [_attribute(self, subject, n) for n in attributes]
        self.push(ConstantVariable(None) if any(f is None for f in found) else TupleVariable(found))


def _positional_names(tx, cls: VariableTracker, count: int) -> List[Optional[str]]:
    """The attribute names `count` positional sub-patterns read (`__match_args__`); [None] where
    the one sub-pattern matches the subject itself."""
    if count == 0:
        return []
    klass = cls.as_python_constant()
    if klass in _MATCH_SELF:  # builtin classes: nothing to guard, they cannot change
        match_args = getattr(klass, "__match_args__", None)
        if match_args is None and count == 1:
            return [None]
    else:
        try:
            match_args = cls.var_getattr(tx, "__match_args__").as_python_constant()
        except AttributeMissing:
            match_args = None
    if not isinstance(match_args, tuple) or count > len(match_args):
        unimplemented(f"a class pattern of {getattr(klass, '__qualname__', klass)} that Python rejects")
    return list(match_args[:count])


def _attribute(tx, subject: VariableTracker, name: str) -> Optional[VariableTracker]:
    """`getattr(subject, name)`, or None where it raises AttributeError (the pattern fails)."""
    try:
        return subject.var_getattr(tx, name)
    except AttributeMissing:
        return None
