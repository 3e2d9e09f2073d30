"""What the bytecode layers of all supported CPythons share: operator tables, checks, assembly, handlers."""
from __future__ import annotations

import dis
import operator
import types
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple

from bytecode import BinaryOp, CellVar, Compare, FreeVar, Instr, Label
from bytecode.instr import const_key

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
# by the comparison's low four bits: 3.13 adds a cast-to-bool flag above them (Compare.LT_CAST)
COMPARE_OPS: Dict[int, Callable] = {
    Compare.LT: operator.lt, Compare.LE: operator.le, Compare.EQ: operator.eq,
    Compare.NE: operator.ne, Compare.GT: operator.gt, Compare.GE: operator.ge,
}
_GENERATOR_FLAGS = 0x20 | 0x80 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR
_NO_COLUMNS = 13  # a line table entry giving only a line (Objects/locations.md)
FUNCTION_ATTRIBUTE_FLAGS = (0x08, 0x04, 0x02, 0x01)  # closure, annotations, kwdefaults, defaults
_HAS_CONST, _HAS_NAME, _HAS_LOCAL, _HAS_FREE = (frozenset(t) for t in (dis.hasconst, dis.hasname, dis.haslocal,
                                                                        dis.hasfree))
_HAS_JUMP = frozenset(dis.hasjrel + dis.hasjabs)
_HAS_JREL = frozenset(dis.hasjrel)
_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]


def fixed_pops(n: int) -> Callable[[Instr], int]:
    """A `break_pops` entry: the instruction consumes `n` values whatever its argument."""
    return lambda instr: n


class BytecodeVersion:
    """The bytecode knowledge of one CPython: its opcode tables (names), how to read its instructions
    and how to emit them. A version subclasses its predecessor (or this class) and overrides only what
    changed; `pyversion` exposes the running version's methods as module functions."""

    # opcode names gone since the previous supported version, and new in this one (tests compare them
    # with `opcode.opmap`); new ones the translator has no handler for must be listed in `graph_breaks_on`
    gone: FrozenSet[str] = frozenset()
    new: FrozenSet[str] = frozenset()
    graph_breaks_on: FrozenSet[str] = frozenset()
    # instructions after which control never reaches the next one
    terminators: FrozenSet[str] = frozenset({"RETURN_VALUE", "RAISE_VARARGS", "RERAISE", "JUMP_FORWARD",
                                             "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT"})
    call_ops: FrozenSet[str] = frozenset({"CALL", "CALL_FUNCTION_EX"})  # the instructions that make a call
    prologue_ops: FrozenSet[str] = frozenset({"MAKE_CELL", "COPY_FREE_VARS", "RESUME"})
    attribute_loads: FrozenSet[str] = frozenset({"LOAD_ATTR"})
    # Instructions a graph break can run in the generated code: how many stack values each consumes
    # (None: it cannot run there).
    break_pops: Dict[str, Callable[[Instr], Optional[int]]] = {
        "CALL": lambda i: i.arg + 2,
        **{name: fixed_pops(2) for name in ("BINARY_OP", "COMPARE_OP", "CONTAINS_OP", "IS_OP", "STORE_ATTR",
                                        "DELETE_SUBSCR")},
        **{name: fixed_pops(1) for name in ("GET_ITER", "UNARY_NEGATIVE", "UNARY_INVERT", "UNARY_NOT",
                                        "UNPACK_SEQUENCE", "DELETE_ATTR")},
        "STORE_SUBSCR": fixed_pops(3),
    }
    # local-variable instructions: which of their names they read, which they write (in that order)
    local_reads: Dict[str, Callable[[Any], Sequence[Any]]] = {"LOAD_FAST": lambda arg: (arg,),
                                                              "DELETE_FAST": lambda arg: (arg,)}
    local_writes: Dict[str, Callable[[Any], Sequence[Any]]] = {"STORE_FAST": lambda arg: (arg,)}
    null_before_callable = True  # where a call wants the NULL beside a callable that is not a bound method
    generator_entry_depth = 0  # the stack depth a generator's code starts at (RETURN_GENERATOR pushes)
    decompiled_by_depyf = True  # explain shows depyf's source for this bytecode, a `dis` listing otherwise

    # ---- reading instructions ----

    def instruction_offsets(self, code: types.CodeType) -> List[int]:
        """The byte offset of each instruction of `code`, inline caches and EXTENDED_ARG left out (as the
        `bytecode` package lists them)."""
        return [i.offset for i in dis.get_instructions(code) if i.opname not in ("CACHE", "EXTENDED_ARG")]

    def is_prologue(self, instr: Instr) -> bool:
        """Whether `instr` belongs to the frame set-up every function body starts with."""
        return instr.name in self.prologue_ops

    def global_name(self, instr: Instr) -> Optional[str]:
        """The name a global load reads, or None for other instructions."""
        return instr.arg[1] if instr.name == "LOAD_GLOBAL" else None

    def attribute_name(self, instr: Instr) -> Optional[str]:
        """The name an attribute (or method) load reads, or None for other instructions."""
        if instr.name not in self.attribute_loads:
            return None
        return instr.arg[-1] if isinstance(instr.arg, tuple) else instr.arg

    def immediate_call_nargs(self, instrs: Sequence[Instr], index: int) -> Optional[int]:
        """The positional argument count when the value `instrs[index]` pushes is called right away."""
        following = instrs[index + 1] if index + 1 < len(instrs) else None
        return following.arg if following is not None and following.name == "CALL" else None

    def call_start(self, instrs: Sequence[Instr], index: int) -> int:
        """The first instruction of the call sequence ending at the call at `index`."""
        return index

    def is_conditional_jump(self, instr: Instr) -> bool:
        """A jump that pops its condition (a branch a graph break splits into two resume calls)."""
        return instr.name.startswith("POP_JUMP_")

    def is_with_cleanup(self, instrs: Sequence[Instr], index: int) -> bool:
        """Whether the handler at `index` is the exception cleanup of a `with` block."""
        return instrs[index].name == "PUSH_EXC_INFO" and instrs[index + 1].name == "WITH_EXCEPT_START"

    def closing_runs_code(self, instrs: Sequence[Instr], handlers: Sequence[Optional[int]], index: int) -> bool:
        """Whether closing a generator suspended at `index` runs code of its frame: a handler covers it
        that the compiler did not add for itself. From 3.12 on it wraps a generator's body in one that
        turns StopIteration into RuntimeError and a `yield from` in CLEANUP_THROW; both pass
        GeneratorExit on."""
        handler = handlers[index]
        while handler is not None and (instrs[handler].name == "CLEANUP_THROW"
                                       or getattr(instrs[handler].arg, "name", None) == "INTRINSIC_STOPITERATION_ERROR"):
            handler = handlers[handler]
        return handler is not None

    def breaking_pops(self, instr: Instr) -> Optional[int]:
        """How many stack values `instr` consumes, when a graph break can run it in generated code."""
        pops = self.break_pops.get(instr.name)
        return None if pops is None else pops(instr)

    def locals_read(self, instr: Instr) -> Sequence[Any]:
        """The local names `instr` reads (a cell's name where it reads the cell object itself)."""
        reads = self.local_reads.get(instr.name)
        return () if reads is None else reads(instr.arg)

    def locals_written(self, instr: Instr) -> Sequence[Any]:
        """The local names `instr` writes, before it reads any (see locals_read)."""
        writes = self.local_writes.get(instr.name)
        return () if writes is None else writes(instr.arg)

    def compare_operator(self, arg: Any) -> Callable:
        return COMPARE_OPS[int(arg) & 0xF]

    # ---- emitting instructions ----

    def frame_prologue(self, code: types.CodeType) -> List[Instr]:
        """The set-up every function body of `code`'s shape starts with: cells made, free variables
        copied in, then the resume point."""
        prologue = [Instr("MAKE_CELL", CellVar(name)) for name in code.co_cellvars]
        if code.co_freevars:
            prologue.append(Instr("COPY_FREE_VARS", len(code.co_freevars)))
        prologue.append(Instr("RESUME", 0))
        return prologue

    def closure_prologue(self, n_freevars: int) -> List[Instr]:
        """The set-up of a function whose cells all come in as `n_freevars` free variables."""
        return [Instr("COPY_FREE_VARS", n_freevars), Instr("RESUME", 0)] if n_freevars else [Instr("RESUME", 0)]

    def push_null(self) -> Instr:
        """The NULL a call expects beside a callable that is not a bound method."""
        return Instr("PUSH_NULL")

    def call(self, nargs: int, kw_names: Sequence[str] = ()) -> List[Instr]:
        """Call the callable below `nargs` arguments (the last `len(kw_names)` of them by keyword)."""
        raise NotImplementedError

    def load_global(self, name: str) -> Instr:
        return Instr("LOAD_GLOBAL", (False, name))

    def load_attr(self, name: str) -> Instr:
        raise NotImplementedError

    def load_closure(self, var: Any) -> Instr:
        """Push the cell object `var` (a CellVar or FreeVar), to build a closure."""
        raise NotImplementedError

    def make_function(self, flags: int) -> List[Instr]:
        """Make a function of the code on top, with what `flags` says lies below it (MAKE_FUNCTION's
        flags of 3.11: 0x01 defaults, 0x02 kwdefaults, 0x04 annotations, 0x08 closure)."""
        raise NotImplementedError

    def subscript(self) -> List[Instr]:
        """`container[index]` of the two values on top."""
        return [Instr("BINARY_SUBSCR")]

    def dup_top(self) -> Instr:
        return Instr("COPY", 1)

    def conditional_jump(self, instr: Instr, target: Label) -> List[Instr]:
        """The conditional jump `instr` as a forward jump to `target`, its condition on top."""
        return [Instr(instr.name, target)]

    def resume_entry(self, instr: Instr) -> List[Instr]:
        """What a resume function that continues at `instr` runs on the stack it restored first."""
        return []

    def replay(self, instr: Instr, kw_names: Optional[Sequence[str]]) -> List[Instr]:
        """`instr`, traced with pending keyword names `kw_names`, emitted again to run in plain Python on
        its inputs (already pushed). A conditional jump emits nothing here: see `conditional_jump`."""
        if self.is_conditional_jump(instr):
            return []
        return [Instr(instr.name, instr.arg) if instr.require_arg() else Instr(instr.name)]

    def values_left(self, instr: Instr, n_inputs: int) -> int:
        """How many values `replay(instr)` leaves on the stack, run on `n_inputs` values."""
        if self.is_conditional_jump(instr):
            return 0
        if instr.name in self.call_ops:
            return 1
        oparg = (instr.arg if isinstance(instr.arg, int) else 0) if instr.require_arg() else None
        return n_inputs + dis.stack_effect(instr.opcode, oparg, jump=False)

    def as_free_variables(self, instr: Instr, cellvars: Sequence[str]) -> List[Instr]:
        """`instr` of a frame, in a function that has the frame's cells `cellvars` as free variables."""
        if isinstance(instr.arg, CellVar):
            return [Instr(instr.name, FreeVar(instr.arg.name), location=instr.location)]
        return [instr]

    # ---- checking assembled code ----

    def inline_caches(self, op: int) -> int:
        """How many inline cache entries follow opcode `op`."""
        raise NotImplementedError

    def stack_depth_error(self, code: types.CodeType) -> Optional[str]:
        """What makes `code` unsafe to run, or None: every instruction must be reached with one stack
        depth, never below zero nor above `co_stacksize`, and every exception-table entry must keep at
        most the depth its instructions run at (the interpreter pushes the exception on the kept stack
        without checking; a wrong depth or stack size corrupts memory). The walk of the compiler's
        stackdepth() in Python/compile.c (flowgraph.c)."""
        instrs = {offset: (op, arg) for offset, op, arg in self._unpack(code)}
        order = sorted(instrs)
        following = dict(zip(order, order[1:]))
        handler = {}
        for entry in dis._parse_exception_table(code):
            handler.update((offset, entry) for offset in range(entry.start, entry.end, 2))
        terminators = frozenset(dis.opmap[name] for name in self.terminators)
        depths: Dict[int, int] = {}
        pending = [(0, self.generator_entry_depth if code.co_flags & _GENERATOR_FLAGS else 0)] if order else []
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
                pending.append((self._jump_target(offset, op, arg), depth + dis.stack_effect(op, arg, jump=True)))
            if op not in terminators:
                if offset not in following:
                    return f"execution runs past the last instruction at offset {offset}"
                pending.append((following[offset], depth + dis.stack_effect(op, arg, jump=False)))
        return None

    def _unpack(self, code: types.CodeType) -> Iterator[Tuple[int, int, Optional[int]]]:
        """(offset, opcode, argument or None) of each instruction of `code`, inline caches skipped."""
        raw, extended, caches = code.co_code, 0, 0
        for offset in range(0, len(raw), 2):
            if caches:
                caches -= 1
                continue
            op, arg = raw[offset], raw[offset + 1] | extended
            extended = arg << 8 if op == _EXTENDED_ARG else 0
            caches = self.inline_caches(op)
            yield offset, op, arg if op >= dis.HAVE_ARGUMENT else None

    def _jump_target(self, offset: int, op: int, arg: int) -> int:
        if op in _HAS_JREL:  # relative to the instruction after the jump and its caches
            return offset + 2 + 2 * self.inline_caches(op) + 2 * (-arg if "BACKWARD" in dis.opname[op] else arg)
        return 2 * arg

    # ---- assembling straight-line code ----

    def is_straight_line(self, instr: Instr) -> bool:
        """Whether `straight_line_code` can assemble `instr`: no jump, no line or position of its own,
        an argument that is one value (no pair of locals, no comparison with flags)."""
        return (instr.opcode not in _HAS_JUMP and instr.location is None and instr.opcode not in dis.hascompare
                and not (instr.opcode in _HAS_LOCAL and isinstance(instr.arg, tuple)))

    def straight_line_code(self, instrs: Sequence[Instr], argnames: Sequence[str], cellvars: Sequence[str],
                           freevars: Sequence[str], **fields: Any) -> types.CodeType:
        """The code object running `instrs` (each `is_straight_line`): what the `bytecode` package
        assembles, without its control-flow analysis, which code with no jumps, exception table or
        line changes does not need. Every instruction is on `first_lineno`. `fields`: argcount,
        posonlyargcount, kwonlyargcount, flags, filename, name, qualname, first_lineno."""
        layout = _SlotLayout(instrs, argnames, cellvars, freevars)
        consts: Dict[Any, int] = {}  # the bytecode package's key of a value (equal constants share one) -> index
        const_values: List[Any] = []
        names: Dict[str, int] = {}
        code = bytearray()
        depth = max_depth = 0
        for instr in instrs:
            op, arg = instr.opcode, instr.arg
            if op in _HAS_CONST:
                oparg = consts.setdefault(const_key(arg), len(const_values))
                if oparg == len(const_values):
                    const_values.append(arg)
            elif isinstance(arg, (CellVar, FreeVar)) or (op in _HAS_LOCAL and arg in layout.cells):
                oparg = layout.closure_slot(arg)
            elif op in _HAS_LOCAL:
                oparg = layout.varnames[arg]
            elif op in _HAS_NAME and isinstance(arg, tuple):  # LOAD_GLOBAL, LOAD_ATTR: (a flag bit, name)
                oparg = (names.setdefault(arg[1], len(names)) << 1) | arg[0]
            elif op in _HAS_NAME:
                oparg = names.setdefault(arg, len(names))
            else:
                oparg = int(arg) if op >= dis.HAVE_ARGUMENT else 0
            for shift in (24, 16, 8):
                if oparg >> shift:
                    code += bytes((_EXTENDED_ARG, (oparg >> shift) & 0xFF))
            code += bytes((op, oparg & 0xFF)) + bytes(2 * self.inline_caches(op))
            depth += dis.stack_effect(op, oparg if op >= dis.HAVE_ARGUMENT else None, jump=False)
            max_depth = max(max_depth, depth)
        return types.CodeType(
            fields["argcount"], fields["posonlyargcount"], fields["kwonlyargcount"], len(layout.varnames), max_depth,
            fields["flags"], bytes(code), tuple(const_values), tuple(names), tuple(layout.varnames),
            fields["filename"], fields["name"], fields["qualname"], fields["first_lineno"],
            _one_line_table(len(code) // 2), b"", tuple(freevars), tuple(cellvars))


class _SlotLayout:
    """The local slots of straight-line code: arguments, then the other locals in order of first
    use, then cells not shared with a local, then free variables (CPython's localsplus)."""

    def __init__(self, instrs: Sequence[Instr], argnames: Sequence[str], cellvars: Sequence[str],
                 freevars: Sequence[str]) -> None:
        self.cells = frozenset(cellvars) | frozenset(freevars)
        self.varnames: Dict[str, int] = {name: i for i, name in enumerate(argnames)}
        for instr in instrs:  # every local first: cell indexes come after them
            if instr.opcode in _HAS_LOCAL and isinstance(instr.arg, str) and instr.arg not in self.cells:
                self.varnames.setdefault(instr.arg, len(self.varnames))
        self.cell_index: Dict[str, int] = {}  # a cell shares the slot of a local of its name, else comes after them
        for name in cellvars:
            self.cell_index[name] = self.varnames[name] if name in self.varnames else len(self.varnames) + sum(
                c not in self.varnames for c in self.cell_index)
        self.free_offset = len(self.varnames) + sum(name not in self.varnames for name in cellvars)
        self.freevars = list(freevars)

    def closure_slot(self, var: Any) -> int:
        name = var if isinstance(var, str) else var.name
        if isinstance(var, FreeVar) or name not in self.cell_index:
            return self.free_offset + self.freevars.index(name)
        return self.cell_index[name]


def _one_line_table(n_units: int) -> bytes:
    """A line table putting `n_units` code units on the code's first line (entries cover 8 at most)."""
    full, rest = divmod(n_units, 8)
    entry = lambda size: bytes((0x80 | (_NO_COLUMNS << 3) | (size - 1), 0))  # noqa: E731 - line delta 0
    return entry(8) * full + (entry(rest) if rest else b"")


# ---- translator handlers shared by every version, by family ----
# They only move values on the stack and call the translator's version-neutral steps: push, pop,
# popn, stack, push_null, null, is_null, constant, builtin, build_tuple, build_dict, build_slice,
# call_operator, call_function, call_unpacked, make_function, set_function_attribute, load_local,
# store_local, is_bound, cell, make_cell, load_global, load_method, context_exit, enter_context,
# next_item, start_generator, yield_from_next, yield_from_value, jump, pop_jump_if, pop_jump_if_none,
# jump_if_or_pop, STORE_SUBSCR, RETURN_VALUE, enter_handler, leave_handler, exception_matches,
# raise_exception, reraise and exception_class. A handler of an opcode a later
# version dropped stays here while an earlier supported version has it: that version never dispatches it.


class Frame:
    def RESUME(self, inst: Instr) -> None:
        pass

    COPY_FREE_VARS = RESUME  # free variables are read from the frame's closure when loaded

    def MAKE_CELL(self, inst: Instr) -> None:
        self.make_cell(inst.arg.name)

    def RETURN_GENERATOR(self, inst: Instr) -> None:
        self.start_generator()
        self.push(self.constant(None))  # popped right away by the POP_TOP that follows


class Calls:
    def PUSH_NULL(self, inst: Instr) -> None:
        self.push_null()

    def call_with_keywords(self, fn: Any, args: List[Any], kw_names: Sequence[str]) -> None:
        """Push `fn(*args)`, the last `len(kw_names)` of `args` passed by those names."""
        positional = args[: len(args) - len(kw_names)]
        kwargs = dict(zip(kw_names, args[len(positional):]))
        self.push(self.call_function(fn, positional, kwargs))


class LoadsAndStores:
    def LOAD_FAST(self, inst: Instr) -> None:
        self.push(self.load_local(inst.arg))

    def STORE_FAST(self, inst: Instr) -> None:
        self.store_local(inst.arg, self.pop())

    def LOAD_ASSERTION_ERROR(self, inst: Instr) -> None:  # 3.11, 3.13
        self.push(self.builtin(AssertionError))

    def COPY(self, inst: Instr) -> None:
        self.push(self.stack[-inst.arg])

    def SWAP(self, inst: Instr) -> None:
        self.stack[-1], self.stack[-inst.arg] = self.stack[-inst.arg], self.stack[-1]


class Operators:
    binary_ops = BINARY_OPS

    def BINARY_OP(self, inst: Instr) -> None:
        b, a = self.pop(), self.pop()
        self.push(self.call_operator(self.binary_ops[inst.arg], a, b))

    def BINARY_SUBSCR(self, inst: Instr) -> None:  # 3.11, 3.13
        index, obj = self.pop(), self.pop()
        self.push(self.call_operator(operator.getitem, obj, index))

    def BUILD_CONST_KEY_MAP(self, inst: Instr) -> None:  # 3.11, 3.13
        keys = self.pop().as_python_constant()
        self.push(self.build_dict(dict(zip(keys, self.popn(inst.arg)))))


class Jumps:
    def JUMP_BACKWARD(self, inst: Instr) -> None:
        self.jump(inst)

    JUMP_BACKWARD_NO_INTERRUPT = JUMP_BACKWARD


class Iteration:
    pass


class WithAndExceptions:
    def BEFORE_WITH(self, inst: Instr) -> None:  # 3.11, 3.13
        context = self.pop()
        self.push(self.context_exit(context))
        self.push(self.enter_context(context))

    def PUSH_EXC_INFO(self, inst: Instr) -> None:
        exception = self.pop()
        self.push(self.enter_handler(exception))
        self.push(exception)

    def POP_EXCEPT(self, inst: Instr) -> None:
        self.pop()  # the exception handled before, which the translator keeps too
        self.leave_handler()

    def CHECK_EXC_MATCH(self, inst: Instr) -> None:
        classes = self.pop()
        self.push(self.exception_matches(self.stack[-1], classes))

    def RAISE_VARARGS(self, inst: Instr) -> None:
        self.raise_exception(self.popn(inst.arg))

    def RERAISE(self, inst: Instr) -> None:
        self.reraise(self.pop())

    exit_depth = 4  # where WITH_EXCEPT_START finds __exit__: below the offset, the previous and the raised exception

    def WITH_EXCEPT_START(self, inst: Instr) -> None:
        exception = self.stack[-1]
        args = [self.exception_class(exception), exception, self.constant(None)]
        self.push(self.call_function(self.stack[-self.exit_depth], args, {}))
