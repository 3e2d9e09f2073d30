"""The transformed code of a frame, assembled here only: the compiled graph's call, the replayed side
effects, then the return value, or at a graph break the unsupported instruction and the resume calls."""
from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, List, Optional, Set, Tuple, Union

import torch

from . import pyversion
from .bytecode_transformation import Instr, Instructions, Label, TryBegin, TryEnd, assemble
from .output_graph import OutputGraph
from .pycodegen import PyCodegen
from .resume_execution import ResumeSpec, fresh_arguments, resume_code, stack_prefix
from .skip_policy import never_convert
from .variables import CellVariable, ConstantVariable, NullVariable, VariableTracker, is_new_each_call

PassedLocals = List[Tuple[str, Optional[VariableTracker]]]  # (name, tracker), or None: from its slot


@dataclass
class ReturnEnding:
    """The frame returned `value`."""

    value: VariableTracker

    def live_values(self) -> List[VariableTracker]:
        return [self.value]


@dataclass
class BreakEnding:
    """The trace stopped before `inst`: what generated code needs to run it and resume after it."""

    instructions: Instructions
    f_globals: Dict[str, object]
    kept: List[VariableTracker]  # the stack below the instruction's inputs
    inputs: List[VariableTracker]  # the instruction's inputs
    inst: Optional[Instr]  # run here, or None: the resume function starts at it, eagerly
    targets: List[Tuple[int, bool]]  # (instruction index, runs eagerly) of each resume function
    passed: Dict[int, PassedLocals]  # the locals handed to the resume function at each target
    grad_mode: bool  # at the break
    restore: Optional[bool]  # the grad mode to put back if `inst` raises inside a no_grad block
    kw_names: Optional[Tuple[str, ...]]  # of a call run here

    def live_values(self) -> List[VariableTracker]:
        passed = [v for names in self.passed.values() for _, v in names if v is not None]
        return [*self.kept, *self.inputs, *passed]


FrameEnding = Union[ReturnEnding, BreakEnding]


def transformed_code(output: OutputGraph, ending: FrameEnding, graph_fn: Optional[Callable]) -> types.CodeType:
    """The code that replaces the frame's: `graph_fn` (the compiled graph, if any) on the graph's
    inputs, the side effects, then what `ending` says."""
    codegen = PyCodegen(output.code)
    if graph_fn is not None:
        _call_graph(codegen, output, graph_fn)
    built = [*ending.live_values(), *output.side_effects.values()]
    cells = _cells_made(built)
    if output.side_effects or cells:
        _read_sources_first(codegen, built)
    for cell in cells:
        cell.write_contents(codegen)
    output.side_effects.codegen(codegen)
    if isinstance(ending, ReturnEnding):
        codegen.reconstruct(ending.value)
        codegen.append("RETURN_VALUE")
    else:
        if ending.grad_mode != output.initial_grad_mode:
            _set_grad_mode(codegen, ending.grad_mode)
        _break(codegen, output, ending)
    return assemble(pyversion.frame_prologue(output.code) + codegen.instructions, like=output.code)


def _call_graph(codegen: PyCodegen, output: OutputGraph, graph_fn: Callable) -> None:
    sources = [arg.load_source() for arg in output.graphargs]
    with codegen.hold_shared_bases(sources):
        codegen.load_function(graph_fn)
        for source in sources:
            codegen.load_source(source)
    codegen.call(len(output.graphargs))
    codegen.graph_output_var = "___graph_out"
    codegen.append("STORE_FAST", codegen.graph_output_var)
    codegen.graph_outputs = output.graph_output_index()


def _read_sources_first(codegen: PyCodegen, values: List[VariableTracker]) -> None:
    """Read every value below `values` that generated code takes from a source (a global, an
    attribute, a cell, a local) before the side effects write those places: `old = G; G = new;
    return old` returns what the frame read, as in eager."""
    seen: Set[int] = set()
    stack = list(values)
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if value.source is not None:
            if not isinstance(value, ConstantVariable) or value.reads_source():
                codegen.read_now(value)
        else:
            stack.extend(value.subvalues())


def _cells_made(values: List[VariableTracker]) -> List[CellVariable]:
    """The cells made by the trace (the frame's, or its inlined calls') below `values`: generated code
    fills them before building what closes over them (see CellVariable.write_contents)."""
    seen: Set[int] = set()
    cells: List[CellVariable] = []
    stack = list(values)
    while stack:
        value = stack.pop()
        if id(value) in seen or value.source is not None:
            continue
        seen.add(id(value))
        if isinstance(value, CellVariable) and value.writable:
            cells.append(value)
        stack.extend(value.subvalues())
    return cells


def _set_grad_mode(codegen: PyCodegen, mode: bool) -> None:
    codegen.load_function(torch._C._set_grad_enabled)
    codegen.load_const(mode)
    codegen.call(1)
    codegen.append("POP_TOP")


def _break(codegen: PyCodegen, output: OutputGraph, ending: BreakEnding) -> None:
    """The instruction on its inputs (if it runs here), then a call of the resume function at each
    target (two for a conditional jump)."""
    prefix = stack_prefix(output.code)
    _store_values(codegen, ending, prefix)
    passed = {t: [(n, None) for n, _ in names] for t, names in ending.passed.items()}
    nulls = [isinstance(v, NullVariable) for v in ending.kept]
    n_results = 0
    if ending.restore is not None:  # the instruction raising leaves its with block: restore the mode
        try_begin = TryBegin(Label(), push_lasti=False)
        codegen.instructions.append(try_begin)
    if ending.inst is not None:
        for j, value in enumerate(ending.inputs):
            if isinstance(value, NullVariable):
                codegen.push_null()
            else:
                codegen.append("LOAD_FAST", f"{prefix}in{j}")
        codegen.instructions.extend(pyversion.replay(ending.inst, ending.kw_names))
        n_results = pyversion.values_left(ending.inst, len(ending.inputs))
    branch_label = Label() if len(ending.targets) == 2 else None
    if branch_label is not None:
        codegen.instructions.extend(pyversion.conditional_jump(ending.inst, branch_label))
    if ending.restore is not None:
        codegen.instructions.append(TryEnd(try_begin))
    for r in reversed(range(n_results)):
        codegen.append("STORE_FAST", f"{prefix}{len(ending.kept) + r}")
    fresh, made = _fresh_values(output, ending, prefix, n_results)
    for k, (target, eager) in enumerate(ending.targets):
        if k == 1:
            codegen.instructions.append(branch_label)
        names = tuple(n for n, _ in passed[target])
        spec = ResumeSpec(target, tuple(nulls + [False] * n_results), names, prefix)
        arguments = {*names, *spec.stack_argnames()}
        spec = dataclasses.replace(spec, fresh=fresh & arguments, made=made & arguments)
        _call_resume(codegen, ending, spec, passed[target], eager)
    if ending.restore is not None:
        codegen.instructions.append(try_begin.target)
        _set_grad_mode(codegen, ending.restore)
        codegen.append("RERAISE", 0)


def _fresh_values(output: OutputGraph, ending: BreakEnding, prefix: str,
                  n_results: int) -> Tuple[FrozenSet[str], FrozenSet[str]]:
    """The locals and stack slots handed on that hold an object new on each call (see ResumeSpec):
    made by the frame's code, returned by the instruction run at the break, or already so here."""
    inherited, inherited_made = fresh_arguments(output.code)
    values = [(name, value) for names in ending.passed.values() for name, value in names]
    values += [(f"{prefix}{i}", value) for i, value in enumerate(ending.kept)]
    made = {name for name, value in values
            if (value is None and name in inherited_made) or (value is not None and is_new_each_call(value))}
    fresh = made | {name for name, value in values if value is None and name in inherited}
    fresh.update(f"{prefix}{len(ending.kept) + r}" for r in range(n_results))
    return frozenset(fresh), frozenset(made)


def _store_values(codegen: PyCodegen, ending: BreakEnding, prefix: str) -> None:
    """The kept stack and the instruction's inputs go to temporaries, then the locals' current
    values back to their slots (before any branch, so that objects built here exist on both paths
    of a conditional jump). Everything is read before any local slot is written: a value's source
    may be a slot that another local's value replaces."""
    for i, value in enumerate(ending.kept):
        if not isinstance(value, NullVariable):
            codegen.reconstruct(value)
            codegen.append("STORE_FAST", f"{prefix}{i}")
    for j, value in enumerate(ending.inputs if ending.inst is not None else []):
        if not isinstance(value, NullVariable):
            codegen.reconstruct(value)
            codegen.append("STORE_FAST", f"{prefix}in{j}")
    stores = {n: v for names in ending.passed.values() for n, v in names if v is not None}
    for value in stores.values():
        codegen.reconstruct(value)
    for name in reversed(list(stores)):
        codegen.append("STORE_FAST", name)


def _call_resume(codegen: PyCodegen, ending: BreakEnding, spec: ResumeSpec, passed: PassedLocals,
                 eager: bool) -> None:
    code = resume_code(ending.instructions, spec)
    if eager:
        never_convert(code)
    with codegen.callable():
        if code.co_freevars:
            for name in code.co_freevars:
                codegen.load_closure(name)
            codegen.append("BUILD_TUPLE", len(code.co_freevars))
            codegen.load_const(code)
            codegen.make_function(0x08)
        else:
            codegen.load_const(types.FunctionType(code, ending.f_globals, code.co_qualname))
    for name, _ in passed:
        codegen.load_local(name)
    for name in spec.stack_argnames():
        codegen.append("LOAD_FAST", name)
    codegen.call(len(spec.stack_argnames()) + len(passed))
    codegen.append("RETURN_VALUE")
