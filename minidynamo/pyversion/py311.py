"""CPython 3.11's bytecode, where it differs from what `base` says all versions share."""
from __future__ import annotations

import opcode as opcode_module
import operator
from typing import Any, List, Optional, Sequence

from bytecode import Instr, Label

from . import base

_FORMAT_CONVERSIONS = {0: None, 1: str, 2: repr, 3: ascii}
# Generated code only jumps forward: a backward conditional jump is replayed as its forward twin.
_FORWARD_JUMP = {"POP_JUMP_BACKWARD_IF_TRUE": "POP_JUMP_FORWARD_IF_TRUE",
                 "POP_JUMP_BACKWARD_IF_FALSE": "POP_JUMP_FORWARD_IF_FALSE"}
_CALL_PREFIX_OPS = frozenset({"KW_NAMES", "PRECALL"})


class Bytecode311(base.BytecodeVersion):
    attribute_loads = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
    generator_entry_depth = 1  # RETURN_GENERATOR pushes nothing here, the POP_TOP after it pops
    break_pops = {
        **base.BytecodeVersion.break_pops,
        "CALL_FUNCTION_EX": lambda i: 3 + (i.arg & 1),
        **{name: base.fixed_pops(2) for name in ("BINARY_SUBSCR",)},
        **{name: base.fixed_pops(1) for name in ("LOAD_ATTR", "UNARY_POSITIVE")},
        **{f"POP_JUMP_{way}_IF_{truth}": base.fixed_pops(1)
           for way in ("FORWARD", "BACKWARD") for truth in ("TRUE", "FALSE")},
    }

    def immediate_call_nargs(self, instrs: Sequence[Instr], index: int) -> Optional[int]:
        following = instrs[index + 1] if index + 1 < len(instrs) else None
        return following.arg if following is not None and following.name == "PRECALL" else None

    def call_start(self, instrs: Sequence[Instr], index: int) -> int:
        while index > 0 and instrs[index - 1].name in _CALL_PREFIX_OPS:
            index -= 1
        return index

    def is_conditional_jump(self, instr: Instr) -> bool:
        return instr.name.startswith("POP_JUMP")

    def call(self, nargs: int, kw_names: Sequence[str] = ()) -> List[Instr]:
        prefix = [Instr("KW_NAMES", tuple(kw_names))] if kw_names else []
        return [*prefix, Instr("PRECALL", nargs), Instr("CALL", nargs)]

    def load_attr(self, name: str) -> Instr:
        return Instr("LOAD_ATTR", name)

    def load_closure(self, var: Any) -> Instr:
        return Instr("LOAD_CLOSURE", var)

    def make_function(self, flags: int) -> List[Instr]:
        return [Instr("MAKE_FUNCTION", flags)]

    def conditional_jump(self, instr: Instr, target: Label) -> List[Instr]:
        return [Instr(_FORWARD_JUMP.get(instr.name, instr.name), target)]

    def replay(self, instr: Instr, kw_names: Optional[Sequence[str]]) -> List[Instr]:
        if instr.name == "CALL":
            return self.call(instr.arg, kw_names or ())
        return super().replay(instr, kw_names)

    def inline_caches(self, op: int) -> int:
        return opcode_module._inline_cache_entries[op]


BYTECODE = Bytecode311()


class Calls(base.Calls):
    def PRECALL(self, inst: Instr) -> None:
        pass

    def KW_NAMES(self, inst: Instr) -> None:
        self.kw_names = inst.arg

    def CALL(self, inst: Instr) -> None:
        args = self.popn(inst.arg)
        fn, below = self.pop(), self.pop()
        if not self.is_null(below):  # a method and its object
            fn, args = below, [fn, *args]
        kw_names, self.kw_names = self.kw_names or (), None
        self.call_with_keywords(fn, args, kw_names)

    def CALL_FUNCTION_EX(self, inst: Instr) -> None:
        kwargs = self.pop() if inst.arg & 1 else None
        args, fn, below = self.pop(), self.pop(), self.pop()
        if self.is_null(below):
            self.push(self.call_unpacked(fn, [], args, kwargs))
        else:  # a method and its object
            self.push(self.call_unpacked(below, [fn], args, kwargs))

    def MAKE_FUNCTION(self, inst: Instr) -> None:
        code = self.pop()
        attributes = {flag: self.pop() for flag in base.FUNCTION_ATTRIBUTE_FLAGS if inst.arg & flag}
        self.push(self.make_function(code.as_python_constant(), attributes))


class LoadsAndStores(base.LoadsAndStores):
    def LOAD_GLOBAL(self, inst: Instr) -> None:
        push_null, name = inst.arg
        if push_null:
            self.push_null()
        self.push(self.load_global(name))

    def LOAD_ATTR(self, inst: Instr) -> None:
        self.push(self.pop().var_getattr(self, inst.arg))

    def LOAD_METHOD(self, inst: Instr) -> None:
        obj = self.pop()
        self.push_null()
        self.push(self.load_method(obj, inst.arg))

    def LOAD_CLOSURE(self, inst: Instr) -> None:
        self.push(self.cell(inst.arg.name))


class Operators(base.Operators):
    def UNARY_POSITIVE(self, inst: Instr) -> None:
        self.push(self.call_operator(operator.pos, self.pop()))

    def LIST_TO_TUPLE(self, inst: Instr) -> None:
        self.push(self.build_tuple(self.pop().items))

    def FORMAT_VALUE(self, inst: Instr) -> None:
        spec = self.pop() if inst.arg & 0x04 else self.constant("")
        value = self.pop()
        convert = _FORMAT_CONVERSIONS[inst.arg & 0x03]
        if convert is not None:
            value = self.call_operator(convert, value)
        self.push(self.call_operator(format, value, spec))


class Jumps(base.Jumps):
    def POP_JUMP_FORWARD_IF_TRUE(self, inst: Instr) -> None:
        self.pop_jump_if(inst, True)

    def POP_JUMP_FORWARD_IF_FALSE(self, inst: Instr) -> None:
        self.pop_jump_if(inst, False)

    def POP_JUMP_FORWARD_IF_NONE(self, inst: Instr) -> None:
        self.pop_jump_if_none(inst, True)

    def POP_JUMP_FORWARD_IF_NOT_NONE(self, inst: Instr) -> None:
        self.pop_jump_if_none(inst, False)

    POP_JUMP_BACKWARD_IF_TRUE = POP_JUMP_FORWARD_IF_TRUE
    POP_JUMP_BACKWARD_IF_FALSE = POP_JUMP_FORWARD_IF_FALSE
    POP_JUMP_BACKWARD_IF_NONE = POP_JUMP_FORWARD_IF_NONE
    POP_JUMP_BACKWARD_IF_NOT_NONE = POP_JUMP_FORWARD_IF_NOT_NONE

    def JUMP_IF_TRUE_OR_POP(self, inst: Instr) -> None:
        self.jump_if_or_pop(inst, True)

    def JUMP_IF_FALSE_OR_POP(self, inst: Instr) -> None:
        self.jump_if_or_pop(inst, False)


class Iteration(base.Iteration):
    def FOR_ITER(self, inst: Instr) -> None:
        item = self.next_item(self.stack[-1])
        if item is None:  # exhausted: the iterator is popped and the loop left
            self.pop()
            self.jump(inst)
        else:
            self.push(item)

    def SEND(self, inst: Instr) -> None:
        sent = self.pop()
        item = self.yield_from_next(self.stack[-1], sent)
        if item is None:  # exhausted: the iterator is replaced by the value of `yield from`
            self.push(self.yield_from_value(self.pop()))
            self.jump(inst)
        else:
            self.push(item)  # for the YIELD_VALUE that follows


class VersionHandlers(base.Frame, Calls, LoadsAndStores, Operators, Jumps, Iteration, base.WithAndExceptions):
    """The translator's handlers of opcodes whose names or stack layouts are particular to some
    versions (a base class of the translator)."""

    stack: List[Any]
    kw_names: Optional[tuple]
