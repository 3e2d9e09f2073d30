"""Everything minidynamo knows about CPython 3.11 bytecode: opcode tables, emit helpers, handlers.

The rest of the package reads and writes bytecode through these names only; a later CPython gets
a sibling module (py312.py) defining the same names, picked in `__init__.py`, as the C frame layer
is `csrc/frame_py311.c` beside its siblings. Instructions are the `bytecode` package's `Instr`.
"""
from __future__ import annotations

import dis
import opcode as opcode_module
import operator
import types
from typing import Any, Callable, Dict, List, Optional, Sequence

from bytecode import BinaryOp, CellVar, Compare, Instr, Label
from bytecode.instr import const_key

# ---- opcode tables ----

BINARY_OPS: Dict[int, Callable] = {
    BinaryOp.ADD: operator.add, BinaryOp.AND: operator.and_, BinaryOp.FLOOR_DIVIDE: operator.floordiv,
    BinaryOp.LSHIFT: operator.lshift, BinaryOp.MATRIX_MULTIPLY: operator.matmul, BinaryOp.MULTIPLY: operator.mul,
    BinaryOp.REMAINDER: operator.mod, BinaryOp.OR: operator.or_, BinaryOp.POWER: operator.pow,
    BinaryOp.RSHIFT: operator.rshift, BinaryOp.SUBTRACT: operator.sub, BinaryOp.TRUE_DIVIDE: operator.truediv,
    BinaryOp.XOR: operator.xor, BinaryOp.INPLACE_ADD: operator.iadd, BinaryOp.INPLACE_AND: operator.iand,
    BinaryOp.INPLACE_FLOOR_DIVIDE: operator.ifloordiv, BinaryOp.INPLACE_LSHIFT: operator.ilshift,
    BinaryOp.INPLACE_MATRIX_MULTIPLY: operator.imatmul, BinaryOp.INPLACE_MULTIPLY: operator.imul,
    BinaryOp.INPLACE_REMAINDER: operator.imod, BinaryOp.INPLACE_OR: operator.ior,
    BinaryOp.INPLACE_POWER: operator.ipow, BinaryOp.INPLACE_RSHIFT: operator.irshift,
    BinaryOp.INPLACE_SUBTRACT: operator.isub, BinaryOp.INPLACE_TRUE_DIVIDE: operator.itruediv,
    BinaryOp.INPLACE_XOR: operator.ixor,
}
COMPARE_OPS: Dict[int, Callable] = {
    Compare.LT: operator.lt, Compare.LE: operator.le, Compare.EQ: operator.eq,
    Compare.NE: operator.ne, Compare.GT: operator.gt, Compare.GE: operator.ge,
}
# Instructions after which control never reaches the next one.
TERMINATORS = frozenset({"RETURN_VALUE", "RAISE_VARARGS", "RERAISE", "JUMP_FORWARD", "JUMP_BACKWARD",
                         "JUMP_BACKWARD_NO_INTERRUPT"})
_PROLOGUE_OPS = frozenset({"MAKE_CELL", "COPY_FREE_VARS", "RESUME"})
_ATTRIBUTE_LOADS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_CALL_PREFIX_OPS = frozenset({"KW_NAMES", "PRECALL"})
CALL_OPS = frozenset({"CALL", "CALL_FUNCTION_EX"})  # the instructions that make a call
# Instructions a graph break can run in the generated code: how many stack values each consumes.
_BREAK_POPS: Dict[str, Callable[[Instr], int]] = {
    "CALL": lambda i: i.arg + 2,
    "CALL_FUNCTION_EX": lambda i: 3 + (i.arg & 1),
    **{name: (lambda i: 2) for name in ("BINARY_SUBSCR", "BINARY_OP", "COMPARE_OP", "CONTAINS_OP", "IS_OP",
                                        "STORE_ATTR", "DELETE_SUBSCR")},
    **{name: (lambda i: 1) for name in ("LOAD_ATTR", "GET_ITER", "UNARY_NEGATIVE", "UNARY_POSITIVE",
                                        "UNARY_INVERT", "UNARY_NOT", "UNPACK_SEQUENCE", "DELETE_ATTR")},
    "STORE_SUBSCR": lambda i: 3,
    "POP_JUMP_FORWARD_IF_TRUE": lambda i: 1, "POP_JUMP_FORWARD_IF_FALSE": lambda i: 1,
    "POP_JUMP_BACKWARD_IF_TRUE": lambda i: 1, "POP_JUMP_BACKWARD_IF_FALSE": lambda i: 1,
}
# Generated code only jumps forward: a backward conditional jump is replayed as its forward twin.
_FORWARD_JUMP = {"POP_JUMP_BACKWARD_IF_TRUE": "POP_JUMP_FORWARD_IF_TRUE",
                 "POP_JUMP_BACKWARD_IF_FALSE": "POP_JUMP_FORWARD_IF_FALSE"}


# ---- reading instructions ----

def instruction_offsets(code: types.CodeType) -> List[int]:
    """The byte offset of each instruction of `code`, inline caches and EXTENDED_ARG left out (as the
    `bytecode` package lists them)."""
    return [i.offset for i in dis.get_instructions(code) if i.opname not in ("CACHE", "EXTENDED_ARG")]


def is_prologue(instr: Instr) -> bool:
    """Whether `instr` belongs to the frame set-up every function body starts with."""
    return instr.name in _PROLOGUE_OPS


def global_name(instr: Instr) -> Optional[str]:
    """The name a global load reads, or None for other instructions."""
    return instr.arg[1] if instr.name == "LOAD_GLOBAL" else None


def attribute_name(instr: Instr) -> Optional[str]:
    """The name an attribute (or method) load reads, or None for other instructions."""
    return instr.arg if instr.name in _ATTRIBUTE_LOADS else None


def immediate_call_nargs(instrs: Sequence[Instr], index: int) -> Optional[int]:
    """The positional argument count when the value `instrs[index]` pushes is called right away."""
    following = instrs[index + 1] if index + 1 < len(instrs) else None
    return following.arg if following is not None and following.name == "PRECALL" else None


def call_start(instrs: Sequence[Instr], index: int) -> int:
    """The first instruction of the call sequence ending at the call at `index`."""
    while index > 0 and instrs[index - 1].name in _CALL_PREFIX_OPS:
        index -= 1
    return index


def is_conditional_jump(instr: Instr) -> bool:
    """A jump that pops its condition (a branch a graph break splits into two resume calls)."""
    return instr.name.startswith("POP_JUMP")


def is_with_cleanup(instrs: Sequence[Instr], index: int) -> bool:
    """Whether the handler at `index` is the exception cleanup of a `with` block."""
    return instrs[index].name == "PUSH_EXC_INFO" and instrs[index + 1].name == "WITH_EXCEPT_START"


def break_pops(instr: Instr) -> Optional[int]:
    """How many stack values `instr` consumes, when a graph break can run it in generated code."""
    pops = _BREAK_POPS.get(instr.name)
    return None if pops is None else pops(instr)


# ---- emitting instructions ----

def frame_prologue(code: types.CodeType) -> List[Instr]:
    """The set-up every function body of `code`'s shape starts with: cells made, free variables
    copied in, then the resume point."""
    prologue = [Instr("MAKE_CELL", CellVar(name)) for name in code.co_cellvars]
    if code.co_freevars:
        prologue.append(Instr("COPY_FREE_VARS", len(code.co_freevars)))
    prologue.append(Instr("RESUME", 0))
    return prologue


def closure_prologue(n_freevars: int) -> List[Instr]:
    """The set-up of a function whose cells all come in as `n_freevars` free variables."""
    return [Instr("COPY_FREE_VARS", n_freevars), Instr("RESUME", 0)] if n_freevars else [Instr("RESUME", 0)]


def push_null() -> Instr:
    """The NULL a call expects below a callable that is not a bound method."""
    return Instr("PUSH_NULL")


def call(nargs: int, kw_names: Sequence[str] = ()) -> List[Instr]:
    """Call the callable below `nargs` arguments (the last `len(kw_names)` of them by keyword)."""
    prefix = [Instr("KW_NAMES", tuple(kw_names))] if kw_names else []
    return [*prefix, Instr("PRECALL", nargs), Instr("CALL", nargs)]


def load_global(name: str) -> Instr:
    return Instr("LOAD_GLOBAL", (False, name))


def load_attr(name: str) -> Instr:
    return Instr("LOAD_ATTR", name)


def dup_top() -> Instr:
    return Instr("COPY", 1)


def forward_jump(instr: Instr, target: Label) -> Instr:
    """The conditional jump `instr` as a forward jump to `target`."""
    return Instr(_FORWARD_JUMP.get(instr.name, instr.name), target)


def replay(instr: Instr, kw_names: Optional[Sequence[str]]) -> List[Instr]:
    """`instr`, traced with pending keyword names `kw_names`, emitted again to run in plain Python on
    its inputs (already pushed). A conditional jump emits nothing here: see `forward_jump`."""
    if is_conditional_jump(instr):
        return []
    if instr.name == "CALL":
        return call(instr.arg, kw_names or ())
    return [Instr(instr.name, instr.arg) if instr.require_arg() else Instr(instr.name)]


def values_left(instr: Instr, n_inputs: int) -> int:
    """How many values `replay(instr)` leaves on the stack, run on `n_inputs` values."""
    if is_conditional_jump(instr):
        return 0
    if instr.name == "CALL":
        return 1
    oparg = (instr.arg if isinstance(instr.arg, int) else 0) if instr.require_arg() else None
    return n_inputs + dis.stack_effect(instr.opcode, oparg, jump=False)


# ---- checking assembled code ----

_GENERATOR_FLAGS = 0x20 | 0x80 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR
_TERMINATOR_OPS = frozenset(dis.opmap[name] for name in TERMINATORS)
_HAS_JREL = frozenset(dis.hasjrel)


def stack_depth_error(code: types.CodeType) -> Optional[str]:
    """What makes `code` unsafe to run, or None: every instruction must be reached with one stack
    depth, never below zero nor above `co_stacksize`, and every exception-table entry must keep at
    most the depth its instructions run at (the interpreter pushes the exception on the kept stack
    without checking; a wrong depth or stack size corrupts memory). The walk of the compiler's
    stackdepth() in Python/compile.c."""
    instrs = {offset: (op, arg) for offset, op, arg in dis._unpack_opargs(code.co_code)}
    order = sorted(instrs)
    following = dict(zip(order, order[1:]))
    handler = {}
    for entry in dis._parse_exception_table(code):
        handler.update((offset, entry) for offset in range(entry.start, entry.end, 2))
    depths: Dict[int, int] = {}
    pending = [(0, 1 if code.co_flags & _GENERATOR_FLAGS else 0)] if order else []
    while pending:
        offset, depth = pending.pop()
        if offset not in instrs:
            return f"a jump or handler to offset {offset}, which starts no instruction"
        if offset in depths:
            if depths[offset] != depth:
                return f"offset {offset} reached with stack depths {depths[offset]} and {depth}"
            continue
        if not 0 <= depth <= code.co_stacksize:
            return f"stack depth {depth} at offset {offset} (stack size {code.co_stacksize})"
        depths[offset] = depth
        op, arg = instrs[offset]
        entry = handler.get(offset)
        if entry is not None:
            if entry.depth > depth:
                return f"the handler at {entry.target} keeps {entry.depth} values, offset {offset} has {depth}"
            pending.append((entry.target, entry.depth + 1 + entry.lasti))
        if op in _HAS_JUMP:
            pending.append((_jump_target(offset, op, arg), depth + dis.stack_effect(op, arg, jump=True)))
        if op not in _TERMINATOR_OPS:
            if offset not in following:
                return f"execution runs past the last instruction at offset {offset}"
            pending.append((following[offset], depth + dis.stack_effect(op, arg, jump=False)))
    return None


def _jump_target(offset: int, op: int, arg: int) -> int:
    if op in _HAS_JREL:
        return offset + 2 + 2 * (-arg if dis._is_backward_jump(op) else arg)
    return 2 * arg


# ---- assembling straight-line code ----

_HAS_CONST, _HAS_NAME, _HAS_LOCAL, _HAS_FREE = (frozenset(t) for t in (dis.hasconst, dis.hasname, dis.haslocal,
                                                                        dis.hasfree))
_HAS_JUMP = frozenset(dis.hasjrel + dis.hasjabs)
_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]
_NO_COLUMNS = 13  # a line table entry giving only a line (Objects/locations.md)


def is_straight_line(instr: Instr) -> bool:
    """Whether `straight_line_code` can assemble `instr`: no jump, no line or position of its own."""
    return instr.opcode not in _HAS_JUMP and instr.location is None


def straight_line_code(instrs: Sequence[Instr], argnames: Sequence[str], cellvars: Sequence[str],
                       freevars: Sequence[str], **fields: Any) -> types.CodeType:
    """The code object running `instrs` (each `is_straight_line`): what the `bytecode` package
    assembles, without its control-flow analysis, which code with no jumps, exception table or
    line changes does not need. Every instruction is on `first_lineno`. `fields`: argcount,
    posonlyargcount, kwonlyargcount, flags, filename, name, qualname, first_lineno."""
    consts: Dict[Any, int] = {}  # the bytecode package's key of a value (equal constants share one) -> index
    const_values: List[Any] = []
    names: Dict[str, int] = {}
    varnames: Dict[str, int] = {name: i for i, name in enumerate(argnames)}
    for instr in instrs:  # every local first: cell indexes come after them
        if instr.opcode in _HAS_LOCAL:
            varnames.setdefault(instr.arg, len(varnames))
    cell_index: Dict[str, int] = {}  # a cell shares the slot of a local of its name, else comes after them
    for name in cellvars:
        cell_index[name] = varnames[name] if name in varnames else len(varnames) + sum(
            c not in varnames for c in cell_index)
    free_offset = len(varnames) + sum(name not in varnames for name in cellvars)
    code = bytearray()
    depth = max_depth = 0
    for instr in instrs:
        op, arg = instr.opcode, instr.arg
        if op in _HAS_CONST:
            key = const_key(arg)
            if key not in consts:
                consts[key] = len(const_values)
                const_values.append(arg)
            oparg = consts[key]
        elif op in _HAS_LOCAL:
            oparg = varnames[arg]
        elif op in _HAS_NAME and isinstance(arg, tuple):  # LOAD_GLOBAL: (push a NULL first, name)
            oparg = (names.setdefault(arg[1], len(names)) << 1) | arg[0]
        elif op in _HAS_NAME:
            oparg = names.setdefault(arg, len(names))
        elif op in _HAS_FREE:
            oparg = cell_index[arg.name] if isinstance(arg, CellVar) else free_offset + list(freevars).index(arg.name)
        else:
            oparg = int(arg) if op >= dis.HAVE_ARGUMENT else 0
        for shift in (24, 16, 8):
            if oparg >> shift:
                code += bytes((_EXTENDED_ARG, (oparg >> shift) & 0xFF))
        code += bytes((op, oparg & 0xFF)) + bytes(2 * _inline_caches(op))
        depth += dis.stack_effect(op, oparg if op >= dis.HAVE_ARGUMENT else None, jump=False)
        max_depth = max(max_depth, depth)
    return types.CodeType(
        fields["argcount"], fields["posonlyargcount"], fields["kwonlyargcount"], len(varnames), max_depth,
        fields["flags"], bytes(code), tuple(const_values), tuple(names), tuple(varnames), fields["filename"],
        fields["name"], fields["qualname"], fields["first_lineno"], _one_line_table(len(code) // 2), b"",
        tuple(freevars), tuple(cellvars))


def _inline_caches(op: int) -> int:
    return opcode_module._inline_cache_entries[op]


def _one_line_table(n_units: int) -> bytes:
    """A line table putting `n_units` code units on the code's first line (entries cover 8 at most)."""
    full, rest = divmod(n_units, 8)
    entry = lambda size: bytes((0x80 | (_NO_COLUMNS << 3) | (size - 1), 0))  # noqa: E731 - line delta 0
    return entry(8) * full + (entry(rest) if rest else b"")


# ---- translator handlers ----

class VersionHandlers:
    """The translator's handlers of opcodes whose names or stack layouts are 3.11's (a base class of
    the translator). They only move values on the stack and call the translator's version-neutral
    steps: push_null, is_null, constant, build_tuple, call_operator, call_function, call_unpacked,
    make_cell, load_global, load_method, enter_context, next_item, start_generator, yield_from_next,
    yield_from_value, jump, pop_jump_if, pop_jump_if_none, jump_if_or_pop."""

    stack: List[Any]
    kw_names: Optional[tuple]

    def RESUME(self, inst: Instr) -> None:
        pass

    PRECALL = COPY_FREE_VARS = RESUME  # free variables are read from the frame's closure when loaded

    def MAKE_CELL(self, inst: Instr) -> None:
        self.make_cell(inst.arg.name)

    def LOAD_GLOBAL(self, inst: Instr) -> None:
        push_null, name = inst.arg
        if push_null:
            self.push_null()
        self.push(self.load_global(name))

    def LOAD_METHOD(self, inst: Instr) -> None:
        obj = self.pop()
        self.push_null()
        self.push(self.load_method(obj, inst.arg))

    def BINARY_OP(self, inst: Instr) -> None:
        b, a = self.pop(), self.pop()
        self.push(self.call_operator(BINARY_OPS[inst.arg], a, b))

    def UNARY_POSITIVE(self, inst: Instr) -> None:
        self.push(self.call_operator(operator.pos, self.pop()))

    def LIST_TO_TUPLE(self, inst: Instr) -> None:
        self.push(self.build_tuple(self.pop().items))

    def COPY(self, inst: Instr) -> None:
        self.push(self.stack[-inst.arg])

    def SWAP(self, inst: Instr) -> None:
        self.stack[-1], self.stack[-inst.arg] = self.stack[-inst.arg], self.stack[-1]

    def PUSH_NULL(self, inst: Instr) -> None:
        self.push_null()

    def KW_NAMES(self, inst: Instr) -> None:
        self.kw_names = inst.arg

    def CALL(self, inst: Instr) -> None:
        args = self.popn(inst.arg)
        fn, below = self.pop(), self.pop()
        if not self.is_null(below):  # a method and its object
            fn, args = below, [fn, *args]
        kw_names, self.kw_names = self.kw_names or (), None
        positional = args[: len(args) - len(kw_names)]
        kwargs = dict(zip(kw_names, args[len(positional) :]))
        self.push(self.call_function(fn, positional, kwargs))

    def CALL_FUNCTION_EX(self, inst: Instr) -> None:
        kwargs = self.pop() if inst.arg & 1 else None
        args, fn, below = self.pop(), self.pop(), self.pop()
        if self.is_null(below):
            self.push(self.call_unpacked(fn, [], args, kwargs))
        else:  # a method and its object
            self.push(self.call_unpacked(below, [fn], args, kwargs))

    def JUMP_BACKWARD(self, inst: Instr) -> None:
        self.jump(inst)

    JUMP_BACKWARD_NO_INTERRUPT = JUMP_BACKWARD

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

    def FOR_ITER(self, inst: Instr) -> None:
        item = self.next_item(self.stack[-1])
        if item is None:  # exhausted: the iterator is popped and the loop left
            self.pop()
            self.jump(inst)
        else:
            self.push(item)

    def BEFORE_WITH(self, inst: Instr) -> None:
        exit_fn, entered = self.enter_context(self.pop())
        self.push(exit_fn)
        self.push(entered)

    def SEND(self, inst: Instr) -> None:
        self.pop()  # the value sent in: None, as send() is not traced
        item = self.yield_from_next(self.stack[-1])
        if item is None:  # exhausted: the iterator is replaced by the value of `yield from`
            self.push(self.yield_from_value(self.pop()))
            self.jump(inst)
        else:
            self.push(item)  # for the YIELD_VALUE that follows

    def RETURN_GENERATOR(self, inst: Instr) -> None:
        self.start_generator()
        self.push(self.constant(None))  # popped right away by the POP_TOP that follows


__all__ = [
    "BINARY_OPS",
    "CALL_OPS",
    "COMPARE_OPS",
    "TERMINATORS",
    "VersionHandlers",
    "attribute_name",
    "break_pops",
    "call",
    "call_start",
    "closure_prologue",
    "dup_top",
    "forward_jump",
    "frame_prologue",
    "global_name",
    "immediate_call_nargs",
    "instruction_offsets",
    "is_conditional_jump",
    "is_prologue",
    "is_straight_line",
    "is_with_cleanup",
    "load_attr",
    "load_global",
    "push_null",
    "replay",
    "stack_depth_error",
    "straight_line_code",
    "values_left",
]
