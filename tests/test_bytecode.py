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
