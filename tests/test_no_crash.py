"""Never crash where eager runs (issue 30): graph breaks inside try blocks inside loops, at several inline
depths, and the library entry points that used to kill the interpreter (torchdiffeq's odeint, peft over a
tiny BERT), each compared with eager; generated code whose stack depths do not hold is never run."""
import dis
import os
import subprocess
import sys
import textwrap
import types

import pytest
import torch

from break_harness import Cases, rand
from translator_harness import REFERENCE, fresh_dynamo  # noqa: F401

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = Cases()


# ---------------------------------------------------------------- try/except around a break in a loop
class Holder:
    a = 1.0
    b = 2.0


OBJ = Holder()
TABLE = {"a": 1.0, "b": 2.0}
SEQS = {"a": [1.0], "b": [2.0], "missing": []}
NAMES = ["a", "missing", "b"]

# each raises its exception for the name "missing" only
RAISERS = {
    "AttributeError": "getattr(OBJ, n)",
    "KeyError": "TABLE[n]",
    "StopIteration": "next(iter(SEQS[n]))",
    "IndexError": "SEQS[n][0]",
}
# the statement guarded by the try (BODY: a break, then the raising read), and how the try ends
SHAPES = {
    "except": "try:\n    BODY\nexcept EXC:\n    y = y - 1\n    out.append(n)",
    "except_else": "try:\n    BODY\nexcept EXC:\n    out.append(n)\nelse:\n    y = y + v",
    "except_finally": "try:\n    BODY\nexcept EXC:\n    y = y * 2\nfinally:\n    out.append(('f', n))",
    "else_finally": ("try:\n    BODY\nexcept EXC:\n    print('miss', n)\nelse:\n    y = y + v\n"
                     "finally:\n    out.append(len(out))"),
    "nested_try": ("try:\n    try:\n        BODY\n    finally:\n        out.append(n)\nexcept EXC:\n    y = y - 2\n"
                   "except ValueError:\n    y = y * 0"),
    "with_inside": "try:\n    with torch.enable_grad():\n        BODY\nexcept EXC:\n    y = y + 3",
    "break_is_the_read": "try:\n    y = y + RAISE\nexcept EXC:\n    out.append(n)",
}
LOOPS = {
    "for": "for n in NAMES:\n    STMT",
    "while": "k = 0\nwhile k < len(NAMES):\n    n = NAMES[k]\n    k += 1\n    STMT",
    "nested_for": "for j in range(2):\n    for n in NAMES:\n        STMT\n    y = y * 0.5",
}


def _indent_into(template: str, key: str, text: str) -> str:
    """`template` with the line holding `key` replaced by `text`, indented as that line."""
    lines = []
    for line in template.splitlines():
        if line.strip() == key:
            pad = line[: len(line) - len(line.lstrip())]
            lines += [pad + piece for piece in text.splitlines()]
        else:
            lines.append(line)
    return "\n".join(lines)


def _loop_source(exc: str, shape: str, loop: str) -> str:
    body = f"print('at', n)\nv = {RAISERS[exc]}"
    stmt = _indent_into(SHAPES[shape].replace("EXC", exc).replace("RAISE", RAISERS[exc]), "BODY", body)
    return _indent_into(LOOPS[loop], "STMT", stmt)


def _make_case(exc: str, shape: str, loop: str, depth: int):
    """The loop in the compiled function (depth 0) or in a helper `depth` calls down."""
    loop_code = textwrap.indent(_loop_source(exc, shape, loop), "    ")
    source = f"def level0(y, out):\n{loop_code}\n    return y\n"
    for d in range(1, depth + 1):
        source += f"\ndef level{d}(y, out):\n    y = level{d - 1}(y + 1, out)\n    return y * 2\n"
    source += f"\ndef fn(x):\n    out = []\n    y = level{depth}(x, out)\n    return y, out\n"
    namespace = dict(globals())
    exec(compile(source, f"<no_crash {exc} {shape} {loop} depth {depth}>", "exec"), namespace)
    fn = namespace["fn"]
    fn.__name__ = fn.__qualname__ = f"{loop}_{shape}_{exc}_depth{depth}"
    return fn


for _i, (_exc, _shape, _loop) in enumerate((e, s, lp) for e in RAISERS for s in SHAPES for lp in LOOPS):
    CASES.case(lambda: (rand(2),), lambda: (rand(3),))(_make_case(_exc, _shape, _loop, _i % 3))


# ---------------------------------------------------------------- the lead's and peft's shapes
class NoB:
    a = 1


NOB = NoB()


@CASES.case(lambda: (torch.ones(1),), lambda: (rand(2),))
def getattr_else_over_two_names(t):
    out = []
    for n in ["a", "b"]:
        try:
            v = getattr(NOB, n)
        except AttributeError:
            out.append(n)
        else:
            out.append(v)
    return t + 1, out


@CASES.case(lambda: (torch.ones(1),), lambda: (rand(2),))
def missing_attribute_in_loop(t):
    out = []
    for n in ["a", "b"]:
        try:
            NOB.missing
        except AttributeError:
            out.append(n)
    return t + 1, out


def graph_break_in_try_in_loop(t):
    out = []
    for n in ["a", "b"]:
        try:
            torch._dynamo.graph_break()
        except AttributeError:
            out.append(n)
    return t + 1, out


class Base(torch.nn.Module):
    scale = 3.0


class Delegating(torch.nn.Module):
    """peft's tuner shape: a missing attribute is looked up on the wrapped module."""

    def __init__(self, base):
        super().__init__()
        self.base = base

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "base":
                raise
            return getattr(self.base, name)


DELEGATING = Delegating(Base())


@CASES.case(lambda: (rand(2),), lambda: (rand(3),))
def module_getattr_delegating_to_base(x):
    if hasattr(DELEGATING, "scale"):
        x = x * DELEGATING.scale
    return x, hasattr(DELEGATING, "nothing"), getattr(DELEGATING, "nothing", 5)


class Spy:
    def __init__(self):
        self.v = 3.0

    def __getattribute__(self, name):
        if name == "hidden":
            print("hidden read")
            return object.__getattribute__(self, "v") * 2
        return object.__getattribute__(self, name)


SPY = Spy()


@CASES.case(lambda: (rand(2),))
def getattribute_with_a_break(x):
    out = []
    for n in ("hidden", "v", "nope"):
        try:
            out.append(getattr(SPY, n))
        except AttributeError:
            x = x + 1
    return x, out


class Other:
    def value(self):
        return 1


class NotOther:
    pass


@CASES.case(lambda: (rand(2), NotOther()), reference_skip="torch._dynamo raises InternalTorchDynamoError")
def super_of_an_object_of_another_class(x, obj):
    try:
        return super(Other, obj).value()
    except TypeError as e:
        return x, str(e)


@pytest.mark.parametrize("case", CASES.params())
def test_no_crash(case):
    case.run()


# ---------------------------------------------------------------- the check of assembled code
def _exception_table_item(value: int, first: bool) -> bytes:
    """One number of an exception-table entry: 6-bit groups, most significant first, bit 6 set on
    every group but the last, bit 7 on an entry's first group (Python/assemble.c)."""
    groups = [value & 63]
    while value >= 64:
        value >>= 6
        groups.append(value & 63 | 64)
    groups.reverse()
    groups[0] |= 128 if first else 0
    return bytes(groups)


def _handler_depths_unset(fn: types.FunctionType) -> types.CodeType:
    """`fn`'s code with every handler's kept stack depth left at the bytecode package's unset value,
    32768 (what it wrote on 3.11 for a try block entered in its middle)."""
    table = b"".join(
        _exception_table_item(entry.start // 2, True) + _exception_table_item((entry.end - entry.start) // 2, False)
        + _exception_table_item(entry.target // 2, False) + _exception_table_item(32768 << 1 | entry.lasti, False)
        for entry in dis._parse_exception_table(fn.__code__))
    return fn.__code__.replace(co_exceptiontable=table)


@pytest.mark.skipif(REFERENCE, reason="minidynamo's own bytecode layer")
def test_stack_depth_check_rejects_a_handler_depth_left_unset():
    from minidynamo import pyversion
    code = _handler_depths_unset(missing_attribute_in_loop)
    assert max(e.depth for e in dis._parse_exception_table(code)) == 32768
    assert pyversion.stack_depth_error(code) is not None


@pytest.mark.skipif(REFERENCE, reason="minidynamo's own bytecode layer")
def test_assembled_code_popping_an_empty_stack_is_never_made():
    from minidynamo.bytecode_transformation import Instr, assemble
    from minidynamo.exc import Unsupported
    with pytest.raises(Unsupported, match="stack depth -1"):
        assemble([Instr("RESUME", 0), Instr("POP_TOP"), Instr("LOAD_CONST", None), Instr("RETURN_VALUE")],
                 like=_handler_depths_unset.__code__)


@pytest.mark.skipif(REFERENCE, reason="minidynamo's own bytecode layer")
def test_stack_depth_check_accepts_compiled_code():
    import contextlib
    import json
    from minidynamo import pyversion
    seen = 0
    for module in (json.decoder, contextlib, torch.nn.modules.module, sys.modules[__name__]):
        stack = [v.__code__ for v in vars(module).values() if isinstance(v, types.FunctionType)]
        stack += [f.__code__ for c in vars(module).values() if isinstance(c, type)
                  for f in vars(c).values() if isinstance(f, types.FunctionType)]
        while stack:
            code = stack.pop()
            seen += 1
            assert pyversion.stack_depth_error(code) is None, code
            stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    assert seen > 100


@pytest.mark.skipif(REFERENCE, reason="minidynamo's own resume functions")
def test_resume_function_keeps_the_handler_depths():
    import minidynamo
    from minidynamo import frame_codegen
    made = []
    build = frame_codegen.resume_code

    def recording(instructions, spec):
        made.append(build(instructions, spec))
        return made[-1]

    frame_codegen.resume_code = recording
    try:
        minidynamo.optimize("eager")(graph_break_in_try_in_loop)(torch.ones(1))
    finally:
        frame_codegen.resume_code = build
    assert made
    original = {(e.depth, e.lasti) for e in dis._parse_exception_table(graph_break_in_try_in_loop.__code__)}
    for code in made:
        assert {(e.depth, e.lasti) for e in dis._parse_exception_table(code)} == original
        assert code.co_stacksize == graph_break_in_try_in_loop.__code__.co_stacksize


# ---------------------------------------------------------------- library entry points, in a child process
_ODE = """
import torch, torchdiffeq, minidynamo
class F(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(4, 4)
    def forward(self, t, y):
        return torch.tanh(self.l(y))
torch.manual_seed(0)
f, y0, t = F(), torch.randn(2, 4), torch.linspace(0, 1, 5)
for method in {methods!r}:
    expected = torchdiffeq.odeint(f, y0, t, method=method)
    run = minidynamo.optimize("eager")(lambda: torchdiffeq.odeint(f, y0, t, method=method))
    for _ in range(2):
        assert torch.allclose(run(), expected, atol=1e-6), method
print("OK")
"""

_PEFT = """
import torch, transformers, peft, minidynamo
torch.manual_seed(0)
cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=37)
model = transformers.BertModel(cfg).eval()
config = {config}
tuned = peft.get_peft_model(model, config)
ids = torch.randint(0, 100, (2, 8))
with torch.no_grad():
    expected = tuned(input_ids=ids).last_hidden_state
    compiled = minidynamo.compile(tuned, backend={backend!r})
    for _ in range(2):
        assert torch.allclose(compiled(input_ids=ids).last_hidden_state, expected, atol=1e-5)
print("OK")
"""


def _run_child(script: str, timeout: int = 400) -> None:
    """Runs `script` in a fresh interpreter; fails on a signal, an error or a missing OK."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
               PYTHONFAULTHANDLER="1")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=ROOT)
    tail = (done.stdout + done.stderr)[-3000:]
    assert done.returncode >= 0, f"the child died of signal {-done.returncode}:\n{tail}"
    assert done.returncode == 0 and "OK" in done.stdout, tail


_skip_reference = pytest.mark.skipif(REFERENCE, reason="runs minidynamo in a child process")


@_skip_reference
@pytest.mark.parametrize("methods", [("rk4", "euler", "midpoint"), ("dopri5", "bosh3")])
def test_torchdiffeq_odeint(methods):
    pytest.importorskip("torchdiffeq")
    _run_child(_ODE.format(methods=methods))


@_skip_reference
@pytest.mark.parametrize("config, backend", [
    ("peft.IA3Config(target_modules=['key', 'value', 'output.dense'], feedforward_modules=['output.dense'])", "eager"),
    ("peft.IA3Config(target_modules=['key', 'value', 'output.dense'], feedforward_modules=['output.dense'])", "cpp"),
    ("peft.LoraConfig(r=4, target_modules=['query', 'value'])", "eager"),
])
def test_peft_over_tiny_bert(config, backend):
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    _run_child(_PEFT.format(config=config, backend=backend))
