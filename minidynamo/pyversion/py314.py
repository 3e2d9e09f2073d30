"""CPython 3.14's bytecode, where it differs from 3.13's."""
from __future__ import annotations

import builtins
import operator
from typing import Any, List

from bytecode import BinaryOp, Instr
from bytecode.instr import CommonConstant, SpecialMethod

from ..exc import unimplemented
from . import base, py313

_COMMON_CONSTANTS = {CommonConstant.ASSERTION_ERROR: AssertionError,
                     CommonConstant.NOT_IMPLEMENTED_ERROR: NotImplementedError,
                     CommonConstant.BUILTIN_TUPLE: builtins.tuple, CommonConstant.BUILTIN_ALL: builtins.all,
                     CommonConstant.BUILTIN_ANY: builtins.any}


class Bytecode314(py313.Bytecode313):
    gone = frozenset({"BEFORE_WITH", "BEFORE_ASYNC_WITH", "BINARY_SUBSCR", "RETURN_CONST", "LOAD_METHOD",
                      "LOAD_ASSERTION_ERROR", "BUILD_CONST_KEY_MAP"})
    # JUMP_IF_TRUE/FALSE are pseudo-instructions: assembled as COPY, TO_BOOL and a POP_JUMP_IF
    new = frozenset({"LOAD_SPECIAL", "LOAD_FAST_BORROW", "LOAD_FAST_BORROW_LOAD_FAST_BORROW", "LOAD_SMALL_INT",
                     "LOAD_COMMON_CONSTANT", "POP_ITER", "NOT_TAKEN", "JUMP_IF_TRUE", "JUMP_IF_FALSE",
                     "BUILD_TEMPLATE", "BUILD_INTERPOLATION"})
    graph_breaks_on = py313.Bytecode313.graph_breaks_on | {"BUILD_TEMPLATE", "BUILD_INTERPOLATION", "JUMP_IF_TRUE",
                                                            "JUMP_IF_FALSE"}
    terminators = py313.Bytecode313.terminators - {"RETURN_CONST"}
    break_pops = {**py313.Bytecode313.break_pops, "CALL_FUNCTION_EX": base.fixed_pops(4)}
    del break_pops["BINARY_SUBSCR"]
    local_reads = {**py313.Bytecode313.local_reads, "LOAD_FAST_BORROW": lambda arg: (arg,),
                   "LOAD_FAST_BORROW_LOAD_FAST_BORROW": tuple}
    superinstructions = {**py313.Bytecode313.superinstructions,
                         "LOAD_FAST_BORROW_LOAD_FAST_BORROW": ("LOAD_FAST_BORROW", "LOAD_FAST_BORROW")}

    def subscript(self) -> List[Instr]:
        return [Instr("BINARY_OP", BinaryOp.SUBSCR)]


BYTECODE = Bytecode314()


class Calls(py313.Calls):
    def CALL_FUNCTION_EX(self, inst: Instr) -> None:
        kwargs = self.pop()  # NULL where there are none
        self.call_function_ex(None if self.is_null(kwargs) else kwargs)


class LoadsAndStores(py313.LoadsAndStores):
    LOAD_FAST_BORROW = py313.LoadsAndStores.LOAD_FAST
    LOAD_FAST_BORROW_LOAD_FAST_BORROW = py313.LoadsAndStores.LOAD_FAST_LOAD_FAST

    def LOAD_SMALL_INT(self, inst: Instr) -> None:
        self.push(self.constant(inst.arg))

    def LOAD_COMMON_CONSTANT(self, inst: Instr) -> None:
        self.push(self.builtin(_COMMON_CONSTANTS[inst.arg]))


class Operators(py313.Operators):
    binary_ops = {**base.BINARY_OPS, BinaryOp.SUBSCR: operator.getitem}


class Jumps(py313.Jumps):
    def NOT_TAKEN(self, inst: Instr) -> None:
        pass


class Iteration(py313.Iteration):
    def POP_ITER(self, inst: Instr) -> None:
        self.pop()


class WithAndExceptions(base.WithAndExceptions):
    exit_depth = 5  # __exit__ lies below the NULL that LOAD_SPECIAL pushed beside it

    def LOAD_SPECIAL(self, inst: Instr) -> None:
        """How a `with` block starts: its __exit__, then its __enter__ called, each beside a NULL."""
        context = self.pop()
        if inst.arg == SpecialMethod.EXIT:
            self.push(self.context_exit(context))
        elif inst.arg == SpecialMethod.ENTER:
            self.push(self.load_method(context, "__enter__"))
        else:
            unimplemented("an async with block")
        self.push_null()


class VersionHandlers(py313.Frame, Calls, LoadsAndStores, Operators, Jumps, Iteration, WithAndExceptions):
    """The translator's handlers of opcodes whose names or stack layouts are particular to some
    versions (a base class of the translator)."""

    stack: List[Any]
