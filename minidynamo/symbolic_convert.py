"""The bytecode translator: symbolic execution of bytecode over VariableTrackers.

One handler per opcode, named after it; the handlers of opcodes particular to this CPython version
come from `pyversion.VersionHandlers`. `InstructionTranslator` runs a whole frame and records how it
ends (a return, or a graph break: frame_codegen turns that into code); `InliningInstructionTranslator`
runs a called user function inside its caller's graph.
"""
from __future__ import annotations

import builtins
import inspect
import linecache
import operator
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from . import pyversion
from .bytecode_analysis import in_loop, live_locals, reads_own_frame
from .bytecode_transformation import Instr, Instructions, read_instructions
from .resume_execution import fresh_arguments, frame_name
from .exc import TracedException, Unsupported, UserFrame, unimplemented, unimplemented_frame
from .frame_codegen import BreakEnding, FrameEnding, ReturnEnding
from .global_state import GlobalState
from .guards import BuiltinRead, Guard, GuardKind
from .output_graph import OutputGraph
from .pattern_matching import PatternMatching
from .source import GetItemSource, GlobalsDictSource, GlobalSource, LocalSource, Source
from .variables import (
    BaseUserFunctionVariable,
    BoundMethodCall,
    BuiltinVariable,
    CellVariable,
    ExceptionVariable,
    GradModeVariable,
    ConstantVariable,
    ConstDictVariable,
    IteratorVariable,
    ListVariable,
    NestedUserFunctionVariable,
    NullVariable,
    PythonModuleVariable,
    SetVariable,
    TensorVariable,
    TupleVariable,
    UserDefinedClassVariable,
    VariableBuilder,
    VariableTracker,
    WithExitVariable,
    wrap_constant_result,
)
from .variables.constant import is_none
from .variables.functions import UserFunctionVariable, UserMethodVariable
from .variables.lists import GeneratorVariable, iterate
from .variables.sym import make_slice

_TRACING_NOTE = "while minidynamo traced:"
# The builtins as the interpreter started with them: one read is guarded by BUILTIN_MATCH alone;
# another object (rebound by the program, or a module's own builtins) is wrapped with its source.
_INTERPRETER_BUILTINS = dict(vars(builtins))
MAX_INLINE_DEPTH = 32
MAX_INSTRUCTIONS = 200_000
_FUNCTION_ATTRIBUTES = {0x01: "defaults", 0x02: "kwdefaults", 0x08: "closure"}  # by MAKE_FUNCTION's flag


def _unary(fn: Callable) -> Callable:
    def handler(self: "InstructionTranslatorBase", inst: Instr) -> None:
        self.push(self.call_operator(fn, self.pop()))

    return handler


class InstructionTranslatorBase(PatternMatching, pyversion.VersionHandlers):
    def __init__(
        self,
        code: types.CodeType,
        f_globals: Dict[str, Any],
        f_builtins: Dict[str, Any],
        symbolic_locals: Dict[str, VariableTracker],
        cells: Dict[str, CellVariable],
        output: OutputGraph,
        globals_source: Optional[Source],
    ) -> None:
        self.code = code
        self.instructions: Instructions = read_instructions(code)
        self.f_globals = f_globals
        self.f_builtins = f_builtins
        self.symbolic_locals = symbolic_locals
        self.cells = cells
        self.output = output
        output.translators += 1
        self.globals_source = globals_source
        self.stack: List[VariableTracker] = []
        self.instruction_pointer = 0
        self.current_index = 0
        self.current_instruction: Optional[Instr] = None
        self.kw_names: Optional[tuple] = None
        self.steps = 0
        # Whether this runs a generator function's frame, one yield at a time (see GeneratorVariable).
        self.is_generator = False
        # the exceptions this frame's handlers are handling now, innermost last (see enter_handler)
        self.exc_handling: List[ExceptionVariable] = []
        # the instruction that raised the exception a handler of this frame took, until the frame's
        # stack holds no exception again: a graph break in between goes there (see InstructionTranslator.run)
        self.exception_entry: Optional[int] = None

    # ---- the interpreter loop ----

    # the index of an instruction before which break_here decides whether to stop (-1: none)
    pending_break = -1
    marks_calls = False  # whether mark_call runs before each call instruction

    def run(self) -> None:
        running = self.output.running
        running.append(self)
        try:
            self.interpret()
        finally:
            running.pop()

    def interpret(self) -> None:
        instrs, names = self.instructions.instrs, self.instructions.names
        handlers = self.instructions.handler_tables.get(type(self))
        if handlers is None:
            handlers = self.instructions.handler_tables[type(self)] = [getattr(type(self), name, None) for name in names]
        while self.instruction_pointer < len(instrs):
            index = self.instruction_pointer
            if index == self.pending_break and self.break_here(index):
                return
            inst = instrs[index]
            self.current_instruction = inst
            self.current_index = index
            self.instruction_pointer = index + 1
            self.steps += 1
            if self.steps > MAX_INSTRUCTIONS:
                unimplemented("the function runs too many instructions to trace (an unbounded loop?)")
            handler = handlers[index]
            if handler is None:
                unimplemented(f"the bytecode instruction {names[index]}")
            if self.marks_calls and names[index] in pyversion.CALL_OPS:
                self.mark_call(index)
            try:
                if handler(self, inst):
                    return
            except TracedException as e:
                if not self.catch(e):
                    e.user_stack = e.user_stack or self.user_stack()
                    raise
            except Unsupported as e:
                if not e.user_stack:
                    e.user_stack = self.user_stack()
                raise
            except Exception as e:  # an internal error: say which line of the user's code was traced
                if not any(note.startswith(_TRACING_NOTE) for note in getattr(e, "__notes__", ())):
                    e.add_note("\n".join([_TRACING_NOTE, *map(str, self.user_stack())]))
                raise

    def break_here(self, index: int) -> bool:
        """Whether to stop tracing before instruction `index` (graph break); see InstructionTranslator."""
        return False

    def mark_call(self, index: int) -> None:
        """Called before the call instruction `index` runs (where marks_calls is set)."""

    def user_frame(self) -> UserFrame:
        lineno = getattr(self.current_instruction, "lineno", None) or self.code.co_firstlineno
        line = linecache.getline(self.code.co_filename, lineno).strip()
        return UserFrame(self.code.co_filename, lineno, frame_name(self.code), line)

    def user_stack(self) -> List[UserFrame]:
        return [self.user_frame()]

    def push(self, value: VariableTracker) -> None:
        assert isinstance(value, VariableTracker), value
        self.stack.append(value)

    def pop(self) -> VariableTracker:
        return self.stack.pop()

    def popn(self, n: int) -> List[VariableTracker]:
        if n == 0:
            return []
        values = self.stack[-n:]
        del self.stack[-n:]
        return values

    def jump(self, inst: Instr) -> None:
        self.instruction_pointer = self.instructions.jump_target(inst)

    def call_function(self, fn: VariableTracker, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        return fn.call_function(self, args, kwargs)

    def call_unpacked(self, fn: VariableTracker, leading: List[VariableTracker], args: VariableTracker,
                      kwargs: Optional[VariableTracker]) -> VariableTracker:
        """fn(*leading, *args, **kwargs), `args` a sequence and `kwargs` a mapping (or None)."""
        kwargs = ConstDictVariable({}) if kwargs is None else kwargs
        if not isinstance(kwargs, ConstDictVariable):
            unimplemented(f"** with {kwargs.describe()}")
        return self.call_function(fn, [*leading, *args.unpack_var_sequence(self)], dict(kwargs.items))

    def push_null(self) -> None:
        self.push(NullVariable())

    @staticmethod
    def is_null(value: VariableTracker) -> bool:
        return isinstance(value, NullVariable)

    @staticmethod
    def constant(value: Any) -> VariableTracker:
        return ConstantVariable(value)

    @staticmethod
    def null() -> VariableTracker:
        return NullVariable()

    @staticmethod
    def build_tuple(items: List[VariableTracker]) -> VariableTracker:
        return TupleVariable(items)

    @staticmethod
    def build_dict(items: Dict[Any, VariableTracker]) -> VariableTracker:
        return ConstDictVariable(items)

    @staticmethod
    def build_slice(parts: List[VariableTracker]) -> VariableTracker:
        return make_slice(parts)

    @staticmethod
    def builtin(value: Any) -> VariableTracker:
        """A builtin the bytecode loads without a name (AssertionError for `assert`)."""
        return BuiltinVariable(value)

    # ---- what trackers ask of the translator they are handed (variables/ imports nothing above it) ----

    def call_operator(self, fn: Callable, *args: VariableTracker) -> VariableTracker:
        """`fn(*args)` for a builtin or `operator` function, as the bytecode's operators run it."""
        return BuiltinVariable(fn).call_function(self, list(args), {})

    def wrap(self, value: Any, source: Optional[Source] = None, by_structure: bool = False) -> VariableTracker:
        """The tracker of a real value reached at `source` (None: no source), with the guards it needs;
        `by_structure`: a module there is a new object on each call (see NNModuleVariable)."""
        return VariableBuilder(self, source, by_structure)(value)

    def wrap_constant(self, value: Any) -> VariableTracker:
        """The tracker of a value computed from constants while tracing."""
        return wrap_constant_result(value)

    # ---- locals, globals, closures ----

    def load_local(self, name: str) -> VariableTracker:
        if name not in self.symbolic_locals:
            unimplemented(f"local variable '{name}' referenced before assignment")
        return self.symbolic_locals[name]

    def cell(self, name: str) -> CellVariable:
        if name not in self.cells:
            unimplemented(f"closure variable '{name}' is not available while tracing")
        return self.cells[name]

    def global_source(self, name: str) -> Optional[Source]:
        if self.globals_source is None:
            return GlobalSource(name)
        return GetItemSource(self.globals_source, name)

    def load_global(self, name: str) -> VariableTracker:
        pending = self.output.side_effects.pending_global(id(self.f_globals), name)
        if pending is not None:
            return pending
        if name in self.f_globals:
            return self.wrap(self.f_globals[name], self.global_source(name))
        builtins_ns = self.f_builtins if isinstance(self.f_builtins, dict) else vars(self.f_builtins)
        if name in builtins_ns:
            value = builtins_ns[name]
            globals_dict = self.globals_source or GlobalsDictSource()
            self.output.add_guard(Guard(globals_dict, GuardKind.BUILTIN_MATCH, BuiltinRead(name, builtins_ns, value)))
            if _INTERPRETER_BUILTINS.get(name, self) is value:  # what it is, the guard above says
                return self.wrap(value)
            return self.wrap(value, GetItemSource(self.output.namespace_source("B", builtins_ns), name))
        unimplemented(f"name '{name}' is not defined")

    def is_bound(self, name: str) -> bool:
        return name in self.symbolic_locals

    def store_local(self, name: str, value: VariableTracker) -> None:
        """Bind the local `name` to `value`; a NULL (what 3.13's comprehensions restore) unbinds it."""
        if self.is_null(value):
            self.symbolic_locals.pop(name, None)
        else:
            self.symbolic_locals[name] = value

    def DELETE_FAST(self, inst: Instr) -> None:
        self.load_local(inst.arg)
        del self.symbolic_locals[inst.arg]

    def LOAD_CONST(self, inst: Instr) -> None:
        self.push(ConstantVariable(inst.arg))

    def STORE_GLOBAL(self, inst: Instr) -> None:
        self.output.side_effects.store_global(id(self.f_globals), self.globals_source, inst.arg, self.pop())

    def make_cell(self, name: str) -> None:
        initial = self.symbolic_locals.pop(name, None) if name in self.code.co_varnames else None
        if initial is None and name in self.code.co_varnames:
            initial = self.initial_local(name)
        self.cells[name] = CellVariable(initial)

    def initial_local(self, name: str) -> Optional[VariableTracker]:
        return None

    def LOAD_DEREF(self, inst: Instr) -> None:
        name = _closure_name(inst.arg)
        self.push(self.cell(name).load(name))

    def STORE_DEREF(self, inst: Instr) -> None:
        name = _closure_name(inst.arg)
        self.cell(name).store(self, name, self.pop())

    # ---- attributes and items ----

    def load_method(self, obj: VariableTracker, name: str) -> VariableTracker:
        """`obj.name` looked up to be called right away."""
        if isinstance(obj, PythonModuleVariable):  # a module's function is its attribute (what a break calls)
            return obj.var_getattr(self, name)
        return BoundMethodCall(obj, name)

    def STORE_ATTR(self, inst: Instr) -> None:
        obj, value = self.pop(), self.pop()
        obj.store_attr(self, inst.arg, value)

    def DELETE_ATTR(self, inst: Instr) -> None:
        self.call_operator(delattr, self.pop(), ConstantVariable(inst.arg))

    def STORE_SUBSCR(self, inst: Instr) -> None:
        index, obj, value = self.pop(), self.pop(), self.pop()
        if isinstance(obj, TensorVariable):
            self.output.call_graph_op(self, "call_function", operator.setitem, [obj, index, value], {})
        else:
            obj.call_method(self, "__setitem__", [index, value], {})

    def DELETE_SUBSCR(self, inst: Instr) -> None:
        index, obj = self.pop(), self.pop()
        obj.call_method(self, "__delitem__", [index], {})

    # ---- operators ----

    def COMPARE_OP(self, inst: Instr) -> None:
        b, a = self.pop(), self.pop()
        self.push(self.call_operator(pyversion.compare_operator(inst.arg), a, b))

    def IS_OP(self, inst: Instr) -> None:
        b, a = self.pop(), self.pop()
        fn = operator.is_not if inst.arg else operator.is_
        self.push(self.call_operator(fn, a, b))

    def CONTAINS_OP(self, inst: Instr) -> None:
        container, item = self.pop(), self.pop()
        found = self.call_operator(operator.contains, container, item)
        if inst.arg:
            found = self.call_operator(operator.not_, found)
        self.push(found)

    UNARY_NEGATIVE = _unary(operator.neg)
    UNARY_INVERT = _unary(operator.invert)
    UNARY_NOT = _unary(operator.not_)

    # ---- building and unpacking ----

    def BUILD_TUPLE(self, inst: Instr) -> None:
        self.push(TupleVariable(self.popn(inst.arg)))

    def BUILD_LIST(self, inst: Instr) -> None:
        self.push(ListVariable(self.popn(inst.arg)))

    def BUILD_SET(self, inst: Instr) -> None:
        self.push(SetVariable(self.popn(inst.arg)))

    def BUILD_MAP(self, inst: Instr) -> None:
        flat = self.popn(2 * inst.arg)
        self.push(ConstDictVariable({flat[i].as_python_constant(): flat[i + 1] for i in range(0, len(flat), 2)}))

    def BUILD_SLICE(self, inst: Instr) -> None:
        self.push(self.build_slice(self.popn(inst.arg)))

    def BUILD_STRING(self, inst: Instr) -> None:
        self.push(ConstantVariable("".join(p.as_python_constant() for p in self.popn(inst.arg))))

    def LIST_APPEND(self, inst: Instr) -> None:
        value = self.pop()
        self.stack[-inst.arg].items.append(value)

    def LIST_EXTEND(self, inst: Instr) -> None:
        value = self.pop()
        self.stack[-inst.arg].items.extend(value.unpack_var_sequence(self))

    def MAP_ADD(self, inst: Instr) -> None:
        value, key = self.pop(), self.pop()
        self.stack[-inst.arg].items[key.as_python_constant()] = value

    def DICT_UPDATE(self, inst: Instr) -> None:
        value = self.pop()
        if not isinstance(value, ConstDictVariable):
            unimplemented(f"unpacking {value.describe()} as a mapping")
        self.stack[-inst.arg].items.update(value.items)

    DICT_MERGE = DICT_UPDATE

    def SET_ADD(self, inst: Instr) -> None:
        value = self.pop()
        self.stack[-inst.arg].call_method(self, "add", [value], {})

    def SET_UPDATE(self, inst: Instr) -> None:
        value = self.pop()
        self.stack[-inst.arg].call_method(self, "update", [value], {})

    def UNPACK_SEQUENCE(self, inst: Instr) -> None:
        items = self.pop().unpack_var_sequence(self)
        if len(items) != inst.arg:
            unimplemented(f"unpacking {len(items)} values into {inst.arg} names")
        self.stack.extend(reversed(items))

    def UNPACK_EX(self, inst: Instr) -> None:
        before, after = inst.arg & 0xFF, inst.arg >> 8
        items = self.pop().unpack_var_sequence(self)
        if len(items) < before + after:
            unimplemented("not enough values to unpack")
        middle = items[before : len(items) - after]
        self.stack.extend(reversed(items[len(items) - after :]))
        self.push(ListVariable(middle))
        self.stack.extend(reversed(items[:before]))

    # ---- stack shuffling ----

    def NOP(self, inst: Instr) -> None:
        pass

    def POP_TOP(self, inst: Instr) -> None:
        self.pop()

    # ---- calls and functions ----

    def make_function(self, code: types.CodeType, attributes: Dict[int, VariableTracker]) -> VariableTracker:
        """A function of `code` made here, with `attributes` by MAKE_FUNCTION's flag (see set_function_attribute)."""
        fn = NestedUserFunctionVariable(code, self.f_globals, None, None, None)
        for flag, value in attributes.items():
            self.set_function_attribute(fn, flag, value)
        return fn

    @staticmethod
    def set_function_attribute(fn: VariableTracker, flag: int, value: VariableTracker) -> None:
        """Give a function made here its defaults (flag 0x01), keyword defaults (0x02) or closure (0x08);
        annotations (0x04, 0x10) are not kept."""
        field = _FUNCTION_ATTRIBUTES.get(flag)
        if field is not None:
            setattr(fn, field, value)

    def output_globals_source(self, f_globals: Dict[str, Any], fn: VariableTracker) -> Optional[Source]:
        """How guards and generated code reach the globals of a function inlined from here."""
        if f_globals is self.f_globals:
            return self.globals_source
        if f_globals is self.root_globals():
            return None
        return self.output.namespace_source("G", f_globals)

    def root_globals(self) -> Dict[str, Any]:
        return self.f_globals

    def inline_user_function(
        self, fn: BaseUserFunctionVariable, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]
    ) -> VariableTracker:
        return InliningInstructionTranslator.inline(self, fn, args, kwargs)

    # ---- jumps and loops ----

    def JUMP_FORWARD(self, inst: Instr) -> None:
        self.jump(inst)

    def pop_jump_if(self, inst: Instr, truth: bool) -> None:
        if self.pop().truthy(self) is truth:
            self.jump(inst)

    def pop_jump_if_none(self, inst: Instr, when_none: bool) -> None:
        if is_none(self.pop()) is when_none:
            self.jump(inst)

    def jump_if_or_pop(self, inst: Instr, truth: bool) -> None:
        """Jump keeping the value on the stack if its truth is `truth`, else pop it."""
        if self.stack[-1].truthy(self) is truth:
            self.jump(inst)
        else:
            self.pop()

    def GET_ITER(self, inst: Instr) -> None:
        self.push(iterate(self, self.pop()))

    def next_item(self, iterator: VariableTracker) -> Optional[VariableTracker]:
        """The next item of `iterator`, None when it is exhausted."""
        if not isinstance(iterator, IteratorVariable):
            unimplemented(f"iterating over {iterator.describe()}")
        return iterator.next_item(self)

    # ---- with blocks, imports, errors ----

    @staticmethod
    def context_exit(context: VariableTracker) -> VariableTracker:
        """The bound __exit__ of a `with` block's context manager."""
        return WithExitVariable(context)

    def enter_context(self, context: VariableTracker) -> VariableTracker:
        """Enter a `with` block: what __enter__ returns."""
        return context.call_method(self, "__enter__", [], {})

    def IMPORT_NAME(self, inst: Instr) -> None:
        fromlist, level = self.pop().as_python_constant(), self.pop().as_python_constant()
        module = __import__(inst.arg, self.f_globals, None, fromlist, level)
        self.push(PythonModuleVariable(module))

    def IMPORT_FROM(self, inst: Instr) -> None:
        self.push(self.stack[-1].var_getattr(self, inst.arg))

    # ---- exceptions raised and caught in the traced code ----

    def catch(self, error: TracedException) -> bool:
        """The exception `error` raised by the instruction running now: where this frame's exception
        table gives that instruction a handler, go on there as CPython does (the stack cut to the
        handler's depth, the instruction's offset pushed where the entry says so, then the exception).
        False where no handler of this frame takes it."""
        exception = ExceptionVariable.of_error(self, error)
        if error.context_pending:  # the frame running where it was raised is the first to see it
            error.context_pending = False
            exception.chain_context(self.handled_exception())
        index = self.current_index
        handler, entry = self.instructions.handlers[index], self.instructions.handler_depths[index]
        if handler is None:
            return False
        depth, push_lasti = entry
        del self.stack[depth:]
        if push_lasti:
            self.push(ConstantVariable(index))
        self.push(exception)
        self.kw_names = None
        self.instruction_pointer = handler
        if self.exception_entry is None:
            self.exception_entry = index
        return True

    def handled_exception(self) -> Optional[ExceptionVariable]:
        """The exception being handled now (what sys.exception() returns), in this frame or a caller."""
        for translator in reversed(self.output.running):
            if translator.exc_handling:
                return translator.exc_handling[-1]
        return None

    def enter_handler(self, exception: VariableTracker) -> VariableTracker:
        """A handler starts handling `exception`: the exception handled before, kept on the stack."""
        previous = self.handled_exception()
        self.exc_handling.append(exception)
        return previous if previous is not None else ConstantVariable(None)

    def leave_handler(self) -> None:
        """The innermost handler of this frame is done: the exception handled before is again."""
        self.exc_handling.pop()
        if not self.exc_handling and not any(isinstance(v, ExceptionVariable) for v in self.stack):
            self.exception_entry = None

    @staticmethod
    def exception_matches(exception: VariableTracker, classes: VariableTracker) -> VariableTracker:
        """Whether an `except classes` clause takes `exception`."""
        match = classes.as_python_constant()
        flat = match if isinstance(match, tuple) else (match,)
        if not all(isinstance(c, type) and issubclass(c, BaseException) for c in flat):
            unimplemented(f"an except clause naming {classes.describe()} (Python raises TypeError)")
        return ConstantVariable(issubclass(exception.python_type(), match))

    def raise_exception(self, values: List[VariableTracker]) -> None:
        """`raise`, `raise exc` or `raise exc from cause` (RAISE_VARARGS's `values`)."""
        if not values:
            handled = self.handled_exception()
            if handled is None:
                unimplemented("a bare raise with no exception being handled (Python raises RuntimeError)")
            self.reraise(handled)
        exception = self.exception_instance(values[0])
        if len(values) == 2:
            cause = values[1] if is_none(values[1]) else self.exception_instance(values[1])
            exception.generic_setattr(self, "__cause__", cause)
        raise TracedException(exception.cls, _constant_args(exception), exception)

    def exception_instance(self, value: VariableTracker) -> ExceptionVariable:
        """What `raise value` raises: the exception, or a new instance of an exception class."""
        if isinstance(value, UserDefinedClassVariable):
            value = value.call_function(self, [], {})
        if not isinstance(value, ExceptionVariable):
            unimplemented(f"raising {value.describe()}")
        return value

    @staticmethod
    def reraise(exception: VariableTracker) -> None:
        """Raise `exception` again as it is (its context unchanged), as RERAISE and a bare raise do."""
        if not isinstance(exception, ExceptionVariable):
            unimplemented(f"re-raising {exception.describe()}")
        error = TracedException(exception.cls, _constant_args(exception), exception)
        error.context_pending = False
        raise error

    @staticmethod
    def exception_class(exception: VariableTracker) -> VariableTracker:
        """type(exception), as WITH_EXCEPT_START passes it to __exit__."""
        return UserDefinedClassVariable(exception.python_type())

    def start_generator(self) -> None:
        if not self.is_generator:
            unimplemented("a generator frame")

    def GET_YIELD_FROM_ITER(self, inst: Instr) -> None:
        self.push(iterate(self, self.pop()))

    def yield_from_next(self, iterator: VariableTracker, sent: VariableTracker) -> Optional[VariableTracker]:
        """The next item `yield from iterator` passes on, given the value `sent` into this generator
        (passed down to a generator, as its send()); None when `iterator` is exhausted."""
        if not self.is_generator:
            unimplemented("yield from outside an inlined generator")
        if is_none(sent):
            return self.next_item(iterator)
        if not isinstance(iterator, GeneratorVariable):
            unimplemented(f"sending a value on to {iterator.describe()} through yield from")
        return iterator.next_item(self, sent)

    @staticmethod
    def yield_from_value(iterator: VariableTracker) -> VariableTracker:
        """The value of `yield from iterator` once exhausted: what a generator it stands for returned."""
        returned = getattr(iterator, "returned", None)
        return returned if returned is not None else ConstantVariable(None)

    def YIELD_VALUE(self, inst: Instr) -> bool:
        if not self.is_generator:
            unimplemented("yield outside an inlined generator")
        self.yielded = self.pop()
        return True  # suspended here until the next item is asked for

    def LOAD_NAME(self, inst: Instr) -> None:
        unimplemented("module-level or class-body code")

    def RETURN_VALUE(self, inst: Instr) -> bool:
        raise NotImplementedError




class InstructionTranslator(InstructionTranslatorBase):
    """Translates a whole frame: locals come from the frame, RETURN_VALUE produces the new code.

    With `break_at` set (after a first pass found something unsupported there), tracing stops
    before that instruction and the generated code runs the graph so far, the instruction in
    plain Python, and a resume function holding the rest of the frame."""

    def __init__(self, frame: Any, output: OutputGraph, break_at: Optional[Tuple[int, Unsupported]] = None) -> None:
        code = frame.f_code
        super().__init__(code, frame.f_globals, frame.f_builtins, {}, {}, output, None)
        self.f_locals: Dict[str, Any] = dict(frame.f_locals)
        self.fresh, self.made = fresh_arguments(code)  # see ResumeSpec
        self.ending: Optional[FrameEnding] = None  # how the trace ended: a return, or a graph break
        self.break_at = break_at
        self.pending_break = break_at[0] if break_at is not None else -1
        self.current_break_index = -1
        # before the call instruction running now: (its index, the stack, kw_names, the locals,
        # the global state, output.progress()); see end_before_failed_call
        self.call_mark: Optional[Tuple[Any, ...]] = None
        closure = getattr(getattr(frame, "f_func", None), "__closure__", None) or ()
        for name, real_cell in zip(code.co_freevars, closure):  # an empty cell may be assigned later
            value = self.wrap(self.f_locals[name], LocalSource(name)) if name in self.f_locals else None
            self.cells[name] = CellVariable(value, writable=False, frame_name=name)
            output.real_cells[id(real_cell)] = (real_cell, self.cells[name])

    def run(self) -> None:
        if reads_own_frame(self.instructions):
            unimplemented_frame(f"{self.code.co_name} reads its own frame (locals(), vars(), sys._getframe(), ...)")
        try:
            super().run()
        except Unsupported as e:
            if e.break_index is None and not e.whole_frame:
                # in the frame's own handler code, the exception it handles is on the stack, which no
                # resume function rebuilds: the break goes before what raised it, which then runs as written
                e.break_index = self.current_index if self.exception_entry is None else self.exception_entry
            raise

    marks_calls = True

    def mark_call(self, index: int) -> None:
        self.call_mark = (index, list(self.stack), self.kw_names, dict(self.symbolic_locals), GlobalState.capture(),
                          self.output.progress(), len(self.output.guards))

    def end_before_failed_call(self, error: Unsupported) -> bool:
        """Where the frame's own call instruction raised `error` having recorded nothing (no op, guard,
        input, side effect, inlined call, change of global state or locals; guards it added are
        dropped: `.backward()`, a call of a disabled function), end the trace with a graph break
        before it, as a second trace up to there would (see ConvertFrame.trace_with_break). False,
        changing nothing, otherwise."""
        mark = self.call_mark
        if mark is None or mark[0] != error.break_index or self.break_at is not None:
            return False
        index, stack, kw_names, symbolic_locals, state, progress, guards = mark
        if (progress != self.output.progress() or state.differing(GlobalState.capture())
                or _holds_state_made_here(stack)
                or symbolic_locals.keys() != self.symbolic_locals.keys()
                or any(v is not self.symbolic_locals[k] for k, v in symbolic_locals.items())):
            return False
        self.output.drop_guards_after(guards)
        self.stack, self.kw_names, self.instruction_pointer = stack, kw_names, index
        self.break_at = (index, error)
        return self.break_here(index)

    def make_cell(self, name: str) -> None:
        super().make_cell(name)
        self.cells[name].frame_name = name

    def initial_local(self, name: str) -> Optional[VariableTracker]:
        if name in self.f_locals:
            return VariableBuilder(self, LocalSource(name), name in self.fresh, name in self.made)(self.f_locals[name])
        return None

    def load_local(self, name: str) -> VariableTracker:
        if name not in self.symbolic_locals and name in self.f_locals:
            self.symbolic_locals[name] = self.initial_local(name)
        return super().load_local(name)

    def is_bound(self, name: str) -> bool:
        return name in self.symbolic_locals or name in self.f_locals

    def store_local(self, name: str, value: VariableTracker) -> None:
        self.f_locals.pop(name, None)
        super().store_local(name, value)

    def RETURN_VALUE(self, inst: Instr) -> bool:
        self.end(ReturnEnding(self.pop()))
        return True

    def end(self, ending: FrameEnding) -> None:
        if any(generator.closes_observably() for generator in self.output.generators):
            unimplemented_frame("a generator left suspended in a try or with block (closing it runs code)")
        self.ending = ending
        self.output.finish(ending.live_values())

    # ---- graph breaks ----

    def break_here(self, index: int) -> bool:
        if self.break_at is None or self.break_at[0] != index:
            return False
        reason = self.break_at[1]
        self.break_at, self.pending_break = None, -1
        self.current_break_index = index
        self.output.break_reasons.append(reason)
        self.end(self.break_ending(index))
        return True

    def in_grad_mode_block(self, index: int) -> bool:
        """Whether the only handler around `index` is the cleanup of one grad-mode `with` block,
        which generated code can stand in for (see frame_codegen)."""
        instrs, handlers = self.instructions.instrs, self.instructions.handlers
        handler = handlers[index]
        exits = [v for v in self.stack if isinstance(v, WithExitVariable)]
        if len(exits) != 1 or not isinstance(exits[0].context, GradModeVariable):
            return False
        if not pyversion.is_with_cleanup(instrs, handler):
            return False
        cleanup = handlers[handler]
        return cleanup is not None and handlers[cleanup] is None

    def break_ending(self, index: int) -> BreakEnding:
        """What generated code needs at a break before instruction `index`: the instruction runs there
        on its inputs and resume functions continue after it, or one resume function continues
        eagerly from the instruction itself (inside a loop or a try block)."""
        inst = self.instructions.instrs[index]
        stack = list(self.stack)
        npop = pyversion.break_pops(inst)
        runs_here = (npop is not None and not in_loop(self.instructions, index)
                     and (self.instructions.handlers[index] is None or self.in_grad_mode_block(index)))
        if not runs_here:
            start = pyversion.call_start(self.instructions.instrs, index)
            return self.break_ending_at(stack, [], None, [(start, True)])
        kept, inputs = stack[: len(stack) - npop], stack[len(stack) - npop :]
        if pyversion.is_conditional_jump(inst):
            return self.break_ending_at(kept, inputs, inst, [(index + 1, False), (self.instructions.jump_target(inst), False)])
        return self.break_ending_at(kept, inputs, inst, [(index + 1, False)])

    def break_ending_at(self, kept: List[VariableTracker], inputs: List[VariableTracker], inst: Optional[Instr],
                        targets: List[Tuple[int, bool]]) -> BreakEnding:
        live = live_locals(self.instructions)
        self.store_frame_cells()
        passed = {t: self.passed_locals(live[t]) for t, _ in targets}
        return BreakEnding(self.instructions, self.f_globals, kept, inputs, inst, targets, passed,
                           torch.is_grad_enabled(), self.grad_mode_restore(inst), self.kw_names)

    def grad_mode_restore(self, inst: Optional[Instr]) -> Optional[bool]:
        """The grad mode to restore if `inst`, run inside a grad-mode block, raises."""
        if inst is None or self.instructions.handlers[self.current_break_index] is None:
            return None
        exits = [v for v in self.stack if isinstance(v, WithExitVariable)]
        return exits[0].context.previous

    def store_frame_cells(self) -> None:
        """The frame's own cells are handed to the resume function: what the trace wrote to them
        (or read as their initial value) is written to the real cells first."""
        for name in self.code.co_cellvars:
            cell = self.cells.get(name)
            if cell is not None and cell.writable and cell.contents is not None:
                self.output.side_effects.store_cell(cell, name, None)

    def passed_locals(self, live: frozenset) -> List[Tuple[str, Optional[VariableTracker]]]:
        """Locals handed to a resume function: (name, tracker), or (name, None) for an argument never
        read while tracing, which is passed straight from its slot."""
        passed: List[Tuple[str, Optional[VariableTracker]]] = []
        if "__class__" in self.code.co_freevars and self.code.co_argcount:
            live = live | {self.code.co_varnames[0]}  # zero-argument super() reads it
        for name in self.code.co_varnames:
            if name in self.code.co_cellvars:
                continue  # shared with the resume function as a cell (see store_frame_cells)
            if name in live and name in self.symbolic_locals:
                passed.append((name, self.symbolic_locals[name]))
            elif name in live and name in self.f_locals:
                passed.append((name, None))
        return passed


def _constant_args(exception: ExceptionVariable) -> tuple:
    """The args of an exception, where all are constants (for the message of a graph break)."""
    items = exception.args.items
    return tuple(v.as_python_constant() for v in items) if all(v.is_python_constant() for v in items) else ()


def _closure_name(arg: Any) -> str:
    """The name of a cell or free variable: a CellVar or FreeVar, or (3.14 reads a cell that shares an
    argument's slot so) the name itself."""
    return arg if isinstance(arg, str) else arg.name


def _holds_state_made_here(values: List[VariableTracker]) -> bool:
    """Whether `values` reach an iterator, a list, a dict or an object made while tracing: a call
    given them may have advanced or changed it part way, which no record of the trace shows."""
    seen, todo = set(), list(values)
    while todo:
        value = todo.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, IteratorVariable) or value.has_identity and (
                value.source is None or isinstance(value, (ListVariable, SetVariable, ConstDictVariable))):
            return True
        todo.extend(value.subvalues())
    return False


def _builtins_of(fn: VariableTracker, f_globals: Dict[str, Any], current: Dict[str, Any]) -> Dict[str, Any]:
    """The builtins a called function reads: those it was made with, or (made while tracing) what
    CPython takes when making it: its globals' `__builtins__` (a module's dict), else the current ones."""
    real = getattr(fn, "fn", None)
    if isinstance(real, types.FunctionType):
        return real.__builtins__
    found = f_globals.get("__builtins__", current)
    return vars(found) if isinstance(found, types.ModuleType) else found


class InliningInstructionTranslator(InstructionTranslatorBase):
    """Runs a called user function inside the caller's graph and returns its symbolic result."""

    def __init__(self, parent: InstructionTranslatorBase, code: types.CodeType, f_globals: Dict[str, Any],
                 f_builtins: Dict[str, Any], symbolic_locals: Dict[str, VariableTracker], cells: Dict[str, CellVariable],
                 globals_source: Optional[Source], depth: int) -> None:
        super().__init__(code, f_globals, f_builtins, symbolic_locals, cells, parent.output, globals_source)
        self.parent = parent
        self._root_globals = parent.root_globals()
        self.depth = depth
        self.return_value: Optional[VariableTracker] = None
        self.yielded: Optional[VariableTracker] = None  # what a generator's frame yielded where it stopped

    @staticmethod
    def inline(parent: InstructionTranslatorBase, fn: BaseUserFunctionVariable, args, kwargs) -> VariableTracker:
        depth = getattr(parent, "depth", 0) + 1
        if depth > MAX_INLINE_DEPTH:
            unimplemented("calls nested too deeply to inline (recursion?)")
        code = fn.get_code()
        f_globals = fn.get_globals()
        bound = fn.bind(parent, args, kwargs)
        cells = fn.closure_cells(parent)
        tracer = InliningInstructionTranslator(parent, code, f_globals, _builtins_of(fn, f_globals, parent.f_builtins),
                                               bound, cells, parent.output_globals_source(f_globals, fn), depth)
        if code.co_flags & inspect.CO_GENERATOR:
            tracer.is_generator = True
            maker = UserFunctionVariable(fn.fn) if isinstance(fn, UserMethodVariable) else fn  # args hold self
            generator = GeneratorVariable(tracer, maker, args, kwargs)
            parent.output.generators.append(generator)
            return generator
        tracer.run()
        if tracer.return_value is None:
            unimplemented(f"{code.co_name} did not return")
        return tracer.return_value

    def resume_generator(self, sent: Optional[VariableTracker] = None) -> Optional[VariableTracker]:
        """Run this generator's frame on to its next yield, `sent` (None by default) being what the yield
        it stopped at evaluates to: what it yields next, None once it returned."""
        if self.yielded is not None:
            self.push(sent or ConstantVariable(None))
        self.yielded = None
        self.run()
        return self.yielded

    def user_stack(self) -> List[UserFrame]:
        return [*self.parent.user_stack(), self.user_frame()]

    def root_globals(self) -> Dict[str, Any]:
        return self._root_globals

    def RETURN_VALUE(self, inst: Instr) -> bool:
        self.return_value = self.pop()
        return True
