"""Resume functions: the rest of a frame after a graph break, as a function of its own.

A resume function is the original code with a new entry: it takes the values that were on the
stack and the live locals as arguments, and the frame's cells as its closure, pushes the stack
back and jumps to where execution continues. It is called from the generated code and converted by the hook like any function.
"""
from __future__ import annotations

import inspect
import re
import types
import weakref
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Tuple

from . import pyversion
from .bytecode_transformation import CodeCache, Instr, Instructions, Label, assemble
from .exc import unimplemented

_cache = CodeCache()  # code -> {ResumeSpec: resume code}
_fresh: "weakref.WeakKeyDictionary[types.CodeType, ResumeSpec]" = weakref.WeakKeyDictionary()


def stack_prefix(code: types.CodeType) -> str:
    """A prefix for stack-value variables that no local of `code` starts with (resume functions of
    resume functions already have such locals)."""
    depth = 0
    while any(name.startswith(f"___stack{depth}_") for name in code.co_varnames):
        depth += 1
    return f"___stack{depth}_"


@dataclass(frozen=True)
class ResumeSpec:
    target: int  # index of the instruction to continue at
    stack_nulls: Tuple[bool, ...]  # one per stack slot: NULL slots are pushed again, not passed
    local_names: Tuple[str, ...]  # locals passed, then the stack values
    prefix: str  # of the stack-value parameters; see stack_prefix
    # parameters holding an object that is new on every call (one the frame made, or the result of the
    # instruction run at the break): the resume function guards them by type and structure, not identity
    fresh: FrozenSet[str] = frozenset()
    made: FrozenSet[str] = frozenset()  # those of `fresh` that the frame's own code made (functions too)

    def stack_argnames(self) -> List[str]:
        return [f"{self.prefix}{i}" for i, null in enumerate(self.stack_nulls) if not null]


def resume_code(instructions: Instructions, spec: ResumeSpec) -> types.CodeType:
    per_code: Dict[ResumeSpec, types.CodeType] = _cache.get(instructions.code, dict)
    if spec not in per_code:
        try:
            per_code[spec] = _build(instructions, spec)
            _fresh[per_code[spec]] = spec
        except RuntimeError as e:  # the bytecode package cannot lay out this entry (stack depths)
            unimplemented(f"a resume function at offset {instructions.offsets[spec.target]}: {e}")
    return per_code[spec]


def fresh_arguments(code: types.CodeType) -> Tuple[FrozenSet[str], FrozenSet[str]]:
    """The parameters of a resume function that hold objects new on each call, and those of them the
    frame made (see ResumeSpec); empty for other code."""
    spec = _fresh.get(code)
    return (spec.fresh, spec.made) if spec is not None else (frozenset(), frozenset())


def _build(instructions: Instructions, spec: ResumeSpec) -> types.CodeType:
    code = instructions.code
    target_label = Label()
    # The frame's cells are shared, not copied: functions made before the break close over them,
    # so a later rebinding (in the rest of the frame or through `nonlocal`) must reach them.
    freevars = list(code.co_freevars) + list(code.co_cellvars)
    entry: List = pyversion.closure_prologue(len(freevars))
    for i, null in enumerate(spec.stack_nulls):
        entry.append(pyversion.push_null() if null else Instr("LOAD_FAST", f"{spec.prefix}{i}"))
    entry.extend(pyversion.resume_entry(instructions.instrs[spec.target]))
    entry.append(Instr("JUMP_FORWARD", target_label))

    target_position = instructions.positions[spec.target]
    body = []
    for position, element in enumerate(instructions.bytecode):
        if position == target_position:
            body.append(target_label)
        if isinstance(element, Instr) and pyversion.is_prologue(element) and position < instructions.positions[_first_real(instructions)]:
            continue
        body.extend(pyversion.as_free_variables(element, code.co_cellvars) if isinstance(element, Instr) else [element])
    # locals first: zero-argument super() reads the first parameter of the frame
    argnames = list(spec.local_names) + spec.stack_argnames()
    flags = code.co_flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    # the frame keeps its function's name (tracebacks, sys._getframe, logging's funcName show it, as
    # in eager); reports tell resume functions apart by their qualified name
    qualname = f"__resume_at_{instructions.offsets[spec.target]}_in_{code.co_name}"
    # Every instruction of the body runs at the stack depth it has in `code` (the entry pushes the
    # stack the target had), so the original stack size and handler depths hold. Computed, they would
    # be wrong when the target is inside a try block: the bytecode package's analysis does not see
    # the block's handler from a jump into its middle, and leaves the handler's depth unset (32768)
    # and the stack size too small for it, which crashes the interpreter when the handler runs.
    return assemble(entry + body, like=code, name=code.co_name, qualname=qualname, argnames=argnames,
                    argcount=len(argnames), kwonlyargcount=0, flags=flags, freevars=freevars, cellvars=(),
                    stacksize=code.co_stacksize)


def is_resume_function(code: types.CodeType) -> bool:
    return code.co_qualname.startswith("__resume_at_")


def frame_name(code: types.CodeType) -> str:
    """The name reports give a frame: a resume function's `__resume_at_<offset>_in_<fn>`, else its name."""
    return code.co_qualname if is_resume_function(code) else code.co_name


def _first_real(instructions: Instructions) -> int:
    for i, instr in enumerate(instructions.instrs):
        if not pyversion.is_prologue(instr):
            return i
    return len(instructions.instrs) - 1
