"""CPython 3.13's bytecode, where it differs from what `base` says all versions share."""
from __future__ import annotations

import dis
import operator
from typing import Any, List, Optional, Sequence

from bytecode import CellVar, FreeVar, Instr, Label
from bytecode.instr import Intrinsic1Op

from ..exc import unimplemented
from . import base

_CONVERSIONS = {1: str, 2: repr, 3: ascii}  # CONVERT_VALUE's argument
# Instructions that take an exact bool: where the translator left TO_BOOL out, generated code puts it back.
_TAKE_BOOL = frozenset({"POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "UNARY_NOT"})


def _first(arg: Any) -> Sequence[Any]:
    return (arg[0],)


def _second(arg: Any) -> Sequence[Any]:
    return (arg[1],)


class Bytecode313(base.BytecodeVersion):
    gone = frozenset({"PRECALL", "KW_NAMES", "JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP", "FORMAT_VALUE",
                      "LIST_TO_TUPLE", "UNARY_POSITIVE", "LOAD_CLASSDEREF",
                      *(f"POP_JUMP_{way}_IF_{cond}" for way in ("FORWARD", "BACKWARD")
                        for cond in ("TRUE", "FALSE", "NONE", "NOT_NONE"))})
    new = frozenset({"CALL_KW", "CALL_INTRINSIC_1", "CALL_INTRINSIC_2", "SET_FUNCTION_ATTRIBUTE", "EXIT_INIT_CHECK",
                     "LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST", "LOAD_FAST_CHECK",
                     "LOAD_FAST_AND_CLEAR", "LOAD_SUPER_ATTR", "LOAD_FROM_DICT_OR_DEREF", "LOAD_FROM_DICT_OR_GLOBALS",
                     "BINARY_SLICE", "STORE_SLICE", "RETURN_CONST", "END_FOR", "END_SEND", "CLEANUP_THROW", "TO_BOOL",
                     "POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE",
                     "FORMAT_SIMPLE", "FORMAT_WITH_SPEC", "CONVERT_VALUE"})
    # exception handling, __init__'s result check, class bodies and type parameters: not traced
    graph_breaks_on = frozenset({"CALL_INTRINSIC_2", "EXIT_INIT_CHECK", "CLEANUP_THROW", "LOAD_FROM_DICT_OR_DEREF",
                                 "LOAD_FROM_DICT_OR_GLOBALS"})
    terminators = base.BytecodeVersion.terminators | {"RETURN_CONST"}
    call_ops = frozenset({"CALL", "CALL_KW", "CALL_FUNCTION_EX"})
    break_pops = {
        **base.BytecodeVersion.break_pops,
        "CALL_KW": lambda i: i.arg + 3,  # with the tuple of keyword names on top
        "CALL_FUNCTION_EX": lambda i: 3 + (i.arg & 1),
        "BINARY_SUBSCR": base.fixed_pops(2),
        "BINARY_SLICE": base.fixed_pops(3),
        "STORE_SLICE": base.fixed_pops(4),
        # a method load pushes a NULL, which no local can hold: a break there resumes at it
        "LOAD_ATTR": lambda i: None if i.arg[0] else 1,
        "POP_JUMP_IF_TRUE": base.fixed_pops(1),
        "POP_JUMP_IF_FALSE": base.fixed_pops(1),
    }
    local_reads = {
        **base.BytecodeVersion.local_reads,
        **{name: lambda arg: (arg,) for name in ("LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR")},
        "LOAD_FAST_LOAD_FAST": tuple,
        "STORE_FAST_LOAD_FAST": _second,
    }
    local_writes = {**base.BytecodeVersion.local_writes, "STORE_FAST_STORE_FAST": tuple, "STORE_FAST_LOAD_FAST": _first}
    null_before_callable = False
    decompiled_by_depyf = False  # depyf 0.20 reads `dis` output, whose jump targets are labels from 3.13 on
    # two instructions in one, each with its own local (the bytecode package takes no cell in them)
    superinstructions = {"LOAD_FAST_LOAD_FAST": ("LOAD_FAST", "LOAD_FAST"),
                         "STORE_FAST_LOAD_FAST": ("STORE_FAST", "LOAD_FAST"),
                         "STORE_FAST_STORE_FAST": ("STORE_FAST", "STORE_FAST")}

    def is_conditional_jump(self, instr: Instr) -> bool:
        return instr.name in ("POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE")

    def call(self, nargs: int, kw_names: Sequence[str] = ()) -> List[Instr]:
        if kw_names:
            return [Instr("LOAD_CONST", tuple(kw_names)), Instr("CALL_KW", nargs)]
        return [Instr("CALL", nargs)]

    def load_attr(self, name: str) -> Instr:
        return Instr("LOAD_ATTR", (False, name))

    def load_closure(self, var: Any) -> Instr:
        return Instr("LOAD_FAST", var)  # LOAD_CLOSURE is a pseudo-instruction, assembled as this

    def make_function(self, flags: int) -> List[Instr]:
        return [Instr("MAKE_FUNCTION"), *(Instr("SET_FUNCTION_ATTRIBUTE", flag)
                                          for flag in base.FUNCTION_ATTRIBUTE_FLAGS if flags & flag)]

    def conditional_jump(self, instr: Instr, target: Label) -> List[Instr]:
        return [*self.resume_entry(instr), Instr(instr.name, target)]

    def resume_entry(self, instr: Instr) -> List[Instr]:
        # The translator keeps the value TO_BOOL or a casting COMPARE_OP would turn into a bool.
        return [Instr("TO_BOOL")] if instr.name in _TAKE_BOOL else []

    def replay(self, instr: Instr, kw_names: Optional[Sequence[str]]) -> List[Instr]:
        to_bool = [] if self.is_conditional_jump(instr) else self.resume_entry(instr)
        return [*to_bool, *super().replay(instr, kw_names)]

    def as_free_variables(self, instr: Instr, cellvars: Sequence[str]) -> List[Instr]:
        pair = self.superinstructions.get(instr.name)
        if pair is not None and any(isinstance(a, (CellVar, FreeVar)) or a in cellvars for a in instr.arg):
            return [part for name, arg in zip(pair, instr.arg)
                    for part in self.as_free_variables(Instr(name, arg, location=instr.location), cellvars)]
        if instr.opcode in dis.haslocal and isinstance(instr.arg, str) and instr.arg in cellvars:
            return [Instr(instr.name, FreeVar(instr.arg), location=instr.location)]
        return super().as_free_variables(instr, cellvars)

    def inline_caches(self, op: int) -> int:
        return dis._inline_cache_entries.get(dis.opname[op], 0)


BYTECODE = Bytecode313()


class Frame(base.Frame):
    def RETURN_CONST(self, inst: Instr) -> bool:
        self.push(self.constant(inst.arg))
        return self.RETURN_VALUE(inst)


class Calls(base.Calls):
    def CALL(self, inst: Instr) -> None:
        self.call_below(self.popn(inst.arg), ())

    def CALL_KW(self, inst: Instr) -> None:
        kw_names = self.pop().as_python_constant()
        self.call_below(self.popn(inst.arg), kw_names)

    def call_below(self, args: List[Any], kw_names: Sequence[str]) -> None:
        """Call what lies below `args`: a callable and a NULL, or a method and its object."""
        self_or_null, fn = self.pop(), self.pop()
        if not self.is_null(self_or_null):
            args = [self_or_null, *args]
        self.call_with_keywords(fn, args, kw_names)

    def CALL_FUNCTION_EX(self, inst: Instr) -> None:
        kwargs = self.pop() if inst.arg & 1 else None
        self.call_function_ex(kwargs)

    def call_function_ex(self, kwargs: Any) -> None:
        args = self.pop()
        self.pop()  # the NULL: the compiler loads no method for these calls
        self.push(self.call_unpacked(self.pop(), [], args, kwargs))

    def CALL_INTRINSIC_1(self, inst: Instr) -> None:
        if inst.arg == Intrinsic1Op.INTRINSIC_LIST_TO_TUPLE:
            self.push(self.build_tuple(self.pop().items))
        elif inst.arg == Intrinsic1Op.INTRINSIC_UNARY_POSITIVE:
            self.push(self.call_operator(operator.pos, self.pop()))
        elif inst.arg == Intrinsic1Op.INTRINSIC_STOPITERATION_ERROR:
            pass  # the handler around a generator's body: GeneratorVariable.next_item sees what leaves it
        else:
            unimplemented(f"the intrinsic {inst.arg.name}")

    def MAKE_FUNCTION(self, inst: Instr) -> None:
        self.push(self.make_function(self.pop().as_python_constant(), {}))

    def SET_FUNCTION_ATTRIBUTE(self, inst: Instr) -> None:
        fn, value = self.pop(), self.pop()
        self.set_function_attribute(fn, inst.arg, value)
        self.push(fn)


class LoadsAndStores(base.LoadsAndStores):
    def LOAD_GLOBAL(self, inst: Instr) -> None:
        push_null, name = inst.arg
        self.push(self.load_global(name))
        if push_null:
            self.push_null()

    def LOAD_ATTR(self, inst: Instr) -> None:
        self.load_attribute(self.pop(), *inst.arg)

    def load_attribute(self, obj: Any, as_method: bool, name: str) -> None:
        if as_method:
            self.push(self.load_method(obj, name))
            self.push_null()
        else:
            self.push(obj.var_getattr(self, name))

    def LOAD_SUPER_ATTR(self, inst: Instr) -> None:
        as_method, with_arguments, name = inst.arg
        obj, cls, global_super = self.pop(), self.pop(), self.pop()
        # super() with no arguments finds the class and object in the frame, as the builtin does here
        sup = self.call_function(global_super, [cls, obj] if with_arguments else [], {})
        self.load_attribute(sup, as_method, name)

    def LOAD_FAST(self, inst: Instr) -> None:
        self.push(self.load_fast(inst.arg))

    def load_fast(self, arg: Any) -> Any:
        """A local, or a cell object: LOAD_FAST reads the cell itself where 3.11 had LOAD_CLOSURE."""
        if isinstance(arg, (CellVar, FreeVar)):
            return self.cell(arg.name)
        return self.cell(arg) if arg in self.code.co_cellvars else self.load_local(arg)

    LOAD_FAST_CHECK = LOAD_FAST

    def LOAD_FAST_LOAD_FAST(self, inst: Instr) -> None:
        for name in inst.arg:
            self.push(self.load_fast(name))

    def LOAD_FAST_AND_CLEAR(self, inst: Instr) -> None:
        """An inlined comprehension saves the local its variable shadows (NULL where unbound)."""
        name = inst.arg
        self.push(self.load_local(name) if self.is_bound(name) else self.null())
        self.store_local(name, self.null())

    def STORE_FAST_STORE_FAST(self, inst: Instr) -> None:
        for name in inst.arg:
            self.store_local(name, self.pop())

    def STORE_FAST_LOAD_FAST(self, inst: Instr) -> None:
        self.store_local(inst.arg[0], self.pop())
        self.push(self.load_fast(inst.arg[1]))


class Operators(base.Operators):
    def TO_BOOL(self, inst: Instr) -> None:
        """Kept as it is: what takes the bool (a conditional jump, UNARY_NOT) asks for its truth; generated
        code puts TO_BOOL back before those (see Bytecode313.resume_entry)."""

    def BINARY_SLICE(self, inst: Instr) -> None:
        stop, start, obj = self.pop(), self.pop(), self.pop()
        self.push(self.call_operator(operator.getitem, obj, self.build_slice([start, stop])))

    def STORE_SLICE(self, inst: Instr) -> None:
        stop, start = self.pop(), self.pop()
        self.push(self.build_slice([start, stop]))
        self.STORE_SUBSCR(inst)

    def FORMAT_SIMPLE(self, inst: Instr) -> None:
        self.push(self.call_operator(format, self.pop(), self.constant("")))

    def FORMAT_WITH_SPEC(self, inst: Instr) -> None:
        spec, value = self.pop(), self.pop()
        self.push(self.call_operator(format, value, spec))

    def CONVERT_VALUE(self, inst: Instr) -> None:
        self.push(self.call_operator(_CONVERSIONS[int(inst.arg)], self.pop()))


class Jumps(base.Jumps):
    def POP_JUMP_IF_TRUE(self, inst: Instr) -> None:
        self.pop_jump_if(inst, True)

    def POP_JUMP_IF_FALSE(self, inst: Instr) -> None:
        self.pop_jump_if(inst, False)

    def POP_JUMP_IF_NONE(self, inst: Instr) -> None:
        self.pop_jump_if_none(inst, True)

    def POP_JUMP_IF_NOT_NONE(self, inst: Instr) -> None:
        self.pop_jump_if_none(inst, False)


class Iteration(base.Iteration):
    def FOR_ITER(self, inst: Instr) -> None:
        item = self.next_item(self.stack[-1])
        # Exhausted, the interpreter pops the iterator and skips the END_FOR at the target and what
        # follows it; to the same effect the translator pushes a value for END_FOR to pop there.
        self.push(self.constant(None) if item is None else item)
        if item is None:
            self.jump(inst)

    def END_FOR(self, inst: Instr) -> None:
        self.pop()

    def SEND(self, inst: Instr) -> None:
        sent = self.pop()
        item = self.yield_from_next(self.stack[-1], sent)
        if item is None:  # exhausted: the value of `yield from` goes on the iterator, END_SEND drops that
            self.push(self.yield_from_value(self.stack[-1]))
            self.jump(inst)
        else:
            self.push(item)  # for the YIELD_VALUE that follows

    def END_SEND(self, inst: Instr) -> None:
        value = self.pop()
        self.pop()
        self.push(value)


class VersionHandlers(Frame, Calls, LoadsAndStores, Operators, Jumps, Iteration, base.WithAndExceptions):
    """The translator's handlers of opcodes whose names or stack layouts are particular to some
    versions (a base class of the translator)."""

    stack: List[Any]
    kw_names: Optional[tuple]
