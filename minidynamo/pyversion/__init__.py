"""The bytecode layer of the running CPython: the names the rest of the package reads and writes bytecode through.

`base.py` holds what all supported versions share; `py311.py`, `py313.py` and `py314.py` (which derives
from 3.13's) hold only their differences: a `BytecodeVersion` subclass (tables, readers, emitters) and
the translator's opcode handlers grouped by family. Adding a version is one module here, one C frame
file (`csrc/frame_pyXY.c`) and tests. Instructions are the `bytecode` package's `Instr`.
"""
import importlib
import sys

SUPPORTED = {(3, 11): "py311", (3, 13): "py313", (3, 14): "py314"}

_running = sys.version_info[:2]
if _running not in SUPPORTED:
    _tag = f"{_running[0]}{_running[1]}"
    raise ImportError(
        f"minidynamo supports CPython {', '.join(f'{a}.{b}' for a, b in SUPPORTED)}, not {_running[0]}.{_running[1]}: "
        f"a new version needs minidynamo/pyversion/py{_tag}.py beside py311.py (deriving from its predecessor's) "
        f"and csrc/frame_py{_tag}.c beside csrc/frame_py311.c"
    )
_module = importlib.import_module(f".{SUPPORTED[_running]}", __name__)

BYTECODE = _module.BYTECODE
VersionHandlers = _module.VersionHandlers
CALL_OPS = BYTECODE.call_ops
TERMINATORS = BYTECODE.terminators
NULL_BEFORE_CALLABLE = BYTECODE.null_before_callable
DECOMPILED_BY_DEPYF = BYTECODE.decompiled_by_depyf

# reading
instruction_offsets = BYTECODE.instruction_offsets
is_prologue = BYTECODE.is_prologue
global_name = BYTECODE.global_name
attribute_name = BYTECODE.attribute_name
immediate_call_nargs = BYTECODE.immediate_call_nargs
call_start = BYTECODE.call_start
is_conditional_jump = BYTECODE.is_conditional_jump
is_with_cleanup = BYTECODE.is_with_cleanup
closing_runs_code = BYTECODE.closing_runs_code
break_pops = BYTECODE.breaking_pops
locals_read = BYTECODE.locals_read
locals_written = BYTECODE.locals_written
compare_operator = BYTECODE.compare_operator
# emitting
frame_prologue = BYTECODE.frame_prologue
closure_prologue = BYTECODE.closure_prologue
push_null = BYTECODE.push_null
call = BYTECODE.call
load_global = BYTECODE.load_global
load_attr = BYTECODE.load_attr
load_closure = BYTECODE.load_closure
make_function = BYTECODE.make_function
subscript = BYTECODE.subscript
dup_top = BYTECODE.dup_top
conditional_jump = BYTECODE.conditional_jump
resume_entry = BYTECODE.resume_entry
replay = BYTECODE.replay
values_left = BYTECODE.values_left
as_free_variables = BYTECODE.as_free_variables
# checking and assembling
stack_depth_error = BYTECODE.stack_depth_error
is_straight_line = BYTECODE.is_straight_line
straight_line_code = BYTECODE.straight_line_code

__all__ = [
    "BYTECODE", "CALL_OPS", "NULL_BEFORE_CALLABLE", "SUPPORTED", "TERMINATORS", "VersionHandlers",
    "as_free_variables", "attribute_name", "break_pops", "call", "call_start", "closure_prologue",
    "compare_operator", "conditional_jump", "dup_top", "frame_prologue", "global_name", "immediate_call_nargs",
    "instruction_offsets", "is_conditional_jump", "is_prologue", "is_straight_line", "is_with_cleanup",
    "load_attr", "load_closure", "load_global", "locals_read", "locals_written", "make_function", "push_null",
    "replay", "resume_entry", "stack_depth_error", "straight_line_code", "subscript", "values_left",
]
