"""The instruction model round-trips code objects: every function of the test suite and of several
stdlib modules disassembles and reassembles to code that runs identically."""
import dis
import glob
import importlib
import inspect
import json
import os
import textwrap
import types

import pytest

from minidynamo.bytecode_analysis import in_loop, live_locals
from minidynamo.bytecode_transformation import assemble, read_instructions

TEST_DIR = os.path.dirname(__file__)
STDLIB_MODULES = ["json.encoder", "json.decoder", "textwrap", "string", "functools", "collections", "dataclasses",
                  "inspect", "argparse", "csv", "difflib"]


def all_code_objects(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from all_code_objects(const)


def module_codes(path):
    with open(path) as f:
        top = compile(f.read(), path, "exec")
    return [c for c in all_code_objects(top) if c.co_flags & inspect.CO_OPTIMIZED]


def reassemble(code):
    instructions = read_instructions(code)
    return assemble(list(instructions.bytecode), like=code)


def shape(code):
    return [(i.opname, i.argrepr if i.opname not in dis.hasjrel else "") for i in dis.get_instructions(code)]


def codes_under_test():
    test_files = sorted(glob.glob(os.path.join(TEST_DIR, "test_*.py")))
    stdlib_files = [importlib.import_module(m).__file__ for m in STDLIB_MODULES]
    return [(os.path.basename(p), module_codes(p)) for p in test_files + stdlib_files]


@pytest.mark.parametrize("name,codes", codes_under_test(), ids=lambda v: v if isinstance(v, str) else "")
def test_round_trip_keeps_instructions(name, codes):
    assert codes
    for code in codes:
        again = reassemble(code)
        assert shape(again) == shape(code), code.co_qualname
        n_args = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 4) + bool(code.co_flags & 8)
        assert again.co_varnames[:n_args] == code.co_varnames[:n_args], code.co_qualname
        assert set(again.co_varnames) <= set(code.co_varnames) and again.co_cellvars == code.co_cellvars
        assert again.co_freevars == code.co_freevars and again.co_argcount == code.co_argcount
        assert again.co_stacksize >= code.co_stacksize - 1
        assert again.co_exceptiontable == code.co_exceptiontable or code.co_exceptiontable, code.co_qualname


def rebuilt(fn):
    new = types.FunctionType(reassemble(fn.__code__), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    return new


def with_closure_try_loop(xs, scale=2):
    total = 0
    seen = []

    def add(v):
        nonlocal total
        total += v * scale

    for x in xs:
        try:
            add(1 / x)
        except ZeroDivisionError:
            seen.append("zero")
        finally:
            seen.append("done")
    with open(os.devnull) as f:
        seen.append(f.closed)
    return total, seen, [y * y for y in xs if y], {k: v for k, v in zip("ab", xs)}


@pytest.mark.parametrize("fn,args", [
    (with_closure_try_loop, ([1, 0, 4],)),
    (textwrap.wrap, ("the quick brown fox jumps over the lazy dog " * 3, 20)),
    (textwrap.dedent, ("    a\n      b\n    c",)),
    (json.dumps, ({"a": [1, 2.5, None, True], "b": {"c": "d"}},)),
    (json.loads, ('{"x": [1, 2, {"y": null}], "z": "w"}',)),
])
def test_rebuilt_functions_run_identically(fn, args):
    assert rebuilt(fn)(*args) == fn(*args)


def test_rebuilt_function_raises_identically():
    def fails(d):
        try:
            return d["missing"]
        except KeyError as e:
            raise ValueError(f"no {e}") from e

    with pytest.raises(ValueError, match="no 'missing'"):
        rebuilt(fails)({})


def test_liveness_and_loops():
    def f(a, b):
        c = a + 1
        for i in range(3):
            c = c + i
        return c

    instructions = read_instructions(f.__code__)
    live = live_locals(instructions)
    first_store_c = next(i for i, ins in enumerate(instructions.instrs) if ins.name == "STORE_FAST" and ins.arg == "c")
    assert "a" in live[0] and "b" not in live[0]
    assert "c" not in live[first_store_c] and "c" in live[first_store_c + 1]
    loop_body = next(i for i, ins in enumerate(instructions.instrs) if ins.name == "STORE_FAST" and ins.arg == "i")
    assert in_loop(instructions, loop_body) and not in_loop(instructions, first_store_c)


def test_equal_code_of_two_files_keeps_its_own_file():
    """3.11's code equality ignores co_filename: caches keyed by equality gave the second file's
    function the first file's instructions and resume functions (tracebacks named the other file)."""
    import traceback

    import torch

    import minidynamo

    src = "def f(x):\n    y = x + 1\n    print('break')\n    raise ValueError(y)\n"
    spaces = []
    for name in ("/tmp/minidynamo_user_a.py", "/tmp/minidynamo_user_b.py"):
        namespace = {}
        exec(compile(src, name, "exec"), namespace)
        spaces.append((name, namespace["f"]))
    for name, fn in spaces:
        try:
            minidynamo.optimize("eager")(fn)(torch.ones(1))
        except ValueError as e:
            files = {frame.filename for frame in traceback.extract_tb(e.__traceback__)}
            assert name in files and not any(f.startswith("/tmp/minidynamo_user") and f != name for f in files)



def _closure_shape(a, b):
    def inner():
        return a + c  # noqa: F821 - only the shape of the code (cells a and c, free none) is used
    c = 1
    return inner


def _assemble_both_ways(elements, like):
    """`elements` assembled like `like` by minidynamo and by the `bytecode` package."""
    from bytecode import Bytecode

    reference = Bytecode(list(elements))
    for name in ("argcount", "posonlyargcount", "kwonlyargcount", "flags", "name", "qualname", "filename"):
        setattr(reference, name, getattr(like, f"co_{name}"))
    reference.first_lineno, reference.argnames = like.co_firstlineno, list(like.co_varnames[:like.co_argcount])
    reference.cellvars, reference.freevars = list(like.co_cellvars), list(like.co_freevars)
    return assemble(elements, like=like), reference.to_code()


def test_straight_line_code_is_what_the_bytecode_package_assembles():
    """Generated code with no jumps (most frames' transformed code) is assembled without the
    `bytecode` package: the same code object, byte for byte, including EXTENDED_ARG, inline caches,
    cells shared with arguments and cells of their own, free variables and the line table."""
    from bytecode import CellVar, FreeVar, Instr

    import minidynamo.pyversion as pyversion

    like = _closure_shape.__code__
    inner = next(c for c in like.co_consts if isinstance(c, types.CodeType))
    def called(*loads):  # a callable that is not a bound method, with the NULL where this CPython wants it
        return [pyversion.push_null(), *loads] if pyversion.NULL_BEFORE_CALLABLE else [*loads, pyversion.push_null()]

    elements = [Instr("MAKE_CELL", CellVar("a")), Instr("MAKE_CELL", CellVar("c")), Instr("RESUME", 0),
                Instr("LOAD_CONST", 7), Instr("STORE_DEREF", CellVar("c")),
                *called(pyversion.load_global("pick")),
                Instr("LOAD_DEREF", CellVar("a")), Instr("LOAD_DEREF", CellVar("c")), Instr("LOAD_FAST", "b"),
                Instr("LOAD_CONST", "x"), *pyversion.call(4, ("default",)),
                Instr("STORE_FAST", "___tmp"),
                Instr("LOAD_GLOBAL", (True, "len")), Instr("LOAD_CONST", "text"), *pyversion.call(1),
                Instr("POP_TOP"), Instr("LOAD_FAST", "___tmp")]
    elements += [Instr("LOAD_CONST", float(i)) for i in range(300)]  # const indexes past 255: EXTENDED_ARG
    elements += [Instr("BUILD_TUPLE", 301), pyversion.load_attr("count"), Instr("POP_TOP"), Instr("LOAD_FAST", "___tmp"),
                 pyversion.load_closure(CellVar("a")), Instr("BUILD_TUPLE", 1), Instr("LOAD_CONST", inner),
                 *pyversion.make_function(8), Instr("POP_TOP"), Instr("RETURN_VALUE")]
    free = [Instr("COPY_FREE_VARS", 2), Instr("RESUME", 0), Instr("LOAD_DEREF", FreeVar("a")),
            Instr("LOAD_DEREF", FreeVar("c")), Instr("BINARY_OP", 0), Instr("RETURN_VALUE")]
    for code, like_code in ((elements, like), (free, inner)):
        assert all(pyversion.is_straight_line(e) for e in code)
        fast, expected = _assemble_both_ways(code, like_code)
        for attr in ("co_code", "co_consts", "co_names", "co_varnames", "co_cellvars", "co_freevars", "co_nlocals",
                     "co_stacksize", "co_flags", "co_linetable", "co_exceptiontable", "co_firstlineno", "co_qualname"):
            assert getattr(fast, attr) == getattr(expected, attr), attr
    fast, _ = _assemble_both_ways(elements, like)
    pick = lambda *values, default: (values, default)  # noqa: E731
    assert types.FunctionType(fast, {"pick": pick, "len": len})(5, 3) == ((5, 7, 3), "x")
    assert fast.co_stacksize > 300
