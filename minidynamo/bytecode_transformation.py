"""Reading code objects into instructions and assembling new ones.

The `bytecode` package does the hard part of assembly (jump offsets, EXTENDED_ARG, inline
caches, the exception table, the line table and the stack size). Here we flatten its abstract
form into a list the translator can index, and build code objects shaped like an original.
"""
from __future__ import annotations

import functools
import inspect
import types
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import bytecode
from bytecode import Bytecode, CellVar, FreeVar, Instr, Label, SetLineno, TryBegin, TryEnd

from . import pyversion
from .exc import unimplemented

Element = Union[Instr, Label, TryBegin, TryEnd, SetLineno]


@dataclass
class Instructions:
    """A code object's instructions, flattened: jumps point at indexes."""

    code: types.CodeType
    bytecode: Bytecode
    instrs: List[Instr]
    offsets: List[int]  # the original byte offset of each instruction
    label_index: Dict[int, int]  # id(Label) -> index of the instruction it marks
    handlers: List[Optional[int]]  # index of the exception handler covering each instruction
    # of the exception-table entry covering each instruction: the stack depth its handler keeps, and
    # whether the raising instruction's offset is pushed below the exception
    handler_depths: List[Optional[Tuple[int, bool]]]
    positions: List[int]  # index of each instruction in `bytecode`
    names: List[str]  # each instruction's opcode name (the translator's handler), read once here
    # per translator class: its handler function for each instruction (None: no handler), made on first run
    handler_tables: Dict[type, List[Optional[Callable]]] = field(default_factory=dict)

    def jump_target(self, instr: Instr) -> int:
        return self.label_index[id(instr.arg)]


class CodeCache:
    """Values kept per code object, by identity: equal code objects of two files (3.11's code
    equality ignores the file name) get one each. An entry goes when its code object dies."""

    def __init__(self) -> None:
        self._entries: Dict[int, Tuple["weakref.ref[types.CodeType]", Any]] = {}

    def get(self, code: types.CodeType, make: Callable[[], Any]) -> Any:
        entry = self._entries.get(id(code))
        if entry is not None and entry[0]() is code:
            return entry[1]
        value = make()
        self._entries[id(code)] = (weakref.ref(code, functools.partial(self._forget, id(code))), value)
        return value

    def _forget(self, key: int, ref: "weakref.ref[types.CodeType]") -> None:
        entry = self._entries.get(key)
        if entry is not None and entry[0] is ref:
            del self._entries[key]


_read_cache = CodeCache()


# 3.14: a function made from code with this flag takes co_consts[0] as its docstring (it reads the
# slot unchecked); generated code keeps no docstring there.
_HAS_DOCSTRING = getattr(inspect, "CO_HAS_DOCSTRING", 0)


def read_instructions(code: types.CodeType) -> Instructions:
    """The instructions of `code`, cached: translators only read them."""
    return _read_cache.get(code, lambda: _read(code))


def _read(code: types.CodeType) -> Instructions:
    abstract = Bytecode.from_code(code, conserve_exception_block_stackdepth=True)  # see resume_execution._build
    instrs: List[Instr] = []
    label_index: Dict[int, int] = {}
    pending: List[Label] = []
    try_blocks: List[Optional[TryBegin]] = []
    positions: List[int] = []
    current_try: Optional[TryBegin] = None
    for position, element in enumerate(abstract):
        if isinstance(element, Label):
            pending.append(element)
        elif isinstance(element, TryBegin):
            current_try = element
        elif isinstance(element, TryEnd):
            current_try = None
        elif isinstance(element, Instr):
            for label in pending:
                label_index[id(label)] = len(instrs)
            pending.clear()
            instrs.append(element)
            positions.append(position)
            try_blocks.append(current_try)
    for label in pending:
        label_index[id(label)] = len(instrs)
    offsets = pyversion.instruction_offsets(code)
    if len(offsets) != len(instrs):
        offsets = list(range(len(instrs)))
    handlers = [label_index[id(block.target)] if block is not None else None for block in try_blocks]
    depths = [(block.stack_depth, block.push_lasti) if block is not None else None for block in try_blocks]
    return Instructions(code, abstract, instrs, offsets, label_index, handlers, depths, positions,
                        [i.name for i in instrs])


def closure_var(code: types.CodeType, name: str) -> Optional[Union[CellVar, FreeVar]]:
    """The bytecode-package argument for a cell or free variable `name`, or None for a plain local."""
    if name in code.co_cellvars:
        return CellVar(name)
    if name in code.co_freevars:
        return FreeVar(name)
    return None


def assemble(
    elements: Sequence[Element],
    like: types.CodeType,
    name: Optional[str] = None,
    qualname: Optional[str] = None,
    argnames: Optional[Sequence[str]] = None,
    argcount: Optional[int] = None,
    kwonlyargcount: Optional[int] = None,
    flags: Optional[int] = None,
    freevars: Optional[Sequence[str]] = None,
    cellvars: Optional[Sequence[str]] = None,
    stacksize: Optional[int] = None,
) -> types.CodeType:
    """A new code object running `elements`, with the signature and names of `like` unless overridden.
    With `stacksize` given, the stack size is that and each exception-table entry keeps the depth its
    TryBegin carries (a resume function's body runs at the depths of the original code); otherwise
    both are computed."""
    fields: Dict[str, Any] = dict(
        argcount=like.co_argcount if argcount is None else argcount,
        posonlyargcount=like.co_posonlyargcount if argcount is None else 0,
        kwonlyargcount=like.co_kwonlyargcount if kwonlyargcount is None else kwonlyargcount,
        flags=(like.co_flags if flags is None else flags) & ~_HAS_DOCSTRING, name=name or like.co_name,
        qualname=qualname or name or like.co_qualname, filename=like.co_filename, first_lineno=like.co_firstlineno)
    n_params = fields["argcount"] + fields["kwonlyargcount"] + bool(fields["flags"] & 0x04) + bool(fields["flags"] & 0x08)
    names = dict(argnames=list(argnames) if argnames is not None else list(like.co_varnames[:n_params]),
                 cellvars=list(like.co_cellvars if cellvars is None else cellvars),
                 freevars=list(like.co_freevars if freevars is None else freevars))
    if all(isinstance(e, Instr) and pyversion.is_straight_line(e) for e in elements):  # most frames' code
        code = pyversion.straight_line_code(elements, **names, **fields)
    else:
        out = Bytecode(list(elements))
        for field_name, value in {**fields, **names}.items():
            setattr(out, field_name, value)
        code = out.to_code(stacksize=stacksize, compute_exception_stack_depths=stacksize is None)
    error = pyversion.stack_depth_error(code)
    if error is not None:  # never run it: the interpreter trusts these depths, a wrong one corrupts memory
        unimplemented(f"the generated code of {code.co_qualname} is invalid: {error}")
    return code


def is_jump(instr: Instr) -> bool:
    return isinstance(instr.arg, Label)


__all__ = [
    "CellVar",
    "Element",
    "FreeVar",
    "Instructions",
    "Instr",
    "Label",
    "assemble",
    "bytecode",
    "closure_var",
    "is_jump",
    "read_instructions",
]
