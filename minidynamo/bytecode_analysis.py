"""Dataflow facts about a flattened instruction list: liveness of locals, loops, frame introspection."""
from __future__ import annotations

from typing import FrozenSet, List, Set

from . import pyversion
from .bytecode_transformation import Instructions, is_jump


def successors(instructions: Instructions, index: int, exceptional: bool = True) -> List[int]:
    """The instructions control can go to after `index`; `exceptional`: the handler covering it too."""
    instr = instructions.instrs[index]
    result = []
    if instr.name not in pyversion.TERMINATORS:
        result.append(index + 1)
    if is_jump(instr):
        result.append(instructions.jump_target(instr))
    handler = instructions.handlers[index]
    if handler is not None and exceptional:
        result.append(handler)
    return [i for i in result if i < len(instructions.instrs)]


def live_locals(instructions: Instructions) -> List[FrozenSet[str]]:
    """For each instruction, the plain locals that may be read before being written from there."""
    instrs = instructions.instrs
    n = len(instrs)
    live: List[Set[str]] = [set() for _ in range(n + 1)]
    changed = True
    while changed:
        changed = False
        for i in reversed(range(n)):
            out: Set[str] = set()
            for j in successors(instructions, i):
                out |= live[j]
            reads = {name for name in pyversion.locals_read(instrs[i]) if isinstance(name, str)}
            out = (out | reads) - set(pyversion.locals_written(instrs[i]))
            if out != live[i]:
                live[i] = out
                changed = True
    return [frozenset(s) for s in live[:n]]


def in_loop(instructions: Instructions, index: int) -> bool:
    """Whether some backward jump goes from after `index` to at or before it, from code that its target
    reaches again without an exception: the jump back from an exception handler to the code after its
    block (where 3.13 puts handlers, after the function's code) makes no loop."""
    for i, instr in enumerate(instructions.instrs):
        if is_jump(instr) and i >= index and instructions.jump_target(instr) <= index:
            if _reaches(instructions, instructions.jump_target(instr), i):
                return True
    return False


def _reaches(instructions: Instructions, start: int, goal: int) -> bool:
    """Whether control goes from `start` to `goal` with no exception raised on the way."""
    seen, pending = {start}, [start]
    while pending:
        index = pending.pop()
        if index == goal:
            return True
        for following in successors(instructions, index, exceptional=False):
            if following not in seen:
                seen.add(following)
                pending.append(following)
    return False


# Builtins that read the calling frame's namespace when called with no arguments (eval and exec:
# whenever they may run code there), and attributes that reach frame objects.
_NAMESPACE_READERS = {"locals": 0, "vars": 0, "dir": 0, "eval": None, "exec": None}
_FRAME_ATTRIBUTES = {"_getframe", "currentframe", "f_locals", "f_back"}


def reads_own_frame(instructions: Instructions) -> bool:
    """Whether the code looks at its own frame (locals(), vars(), dir(), sys._getframe(), ...): the
    converted frame and its resume functions have other locals than the user wrote."""
    instrs = instructions.instrs
    for i, instr in enumerate(instrs):
        if pyversion.attribute_name(instr) in _FRAME_ATTRIBUTES:
            return True
        name = pyversion.global_name(instr)
        if name not in _NAMESPACE_READERS:
            continue
        nargs = _NAMESPACE_READERS[name]
        if nargs is None or pyversion.immediate_call_nargs(instrs, i) == nargs:
            return True
    return False
