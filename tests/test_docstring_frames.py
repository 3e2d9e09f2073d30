"""Frames of functions with a docstring, converted and resumed after a graph break: generated code
carries no docstring (on 3.14 a function made from code flagged CO_HAS_DOCSTRING reads co_consts[0]
unchecked: the fuzzer's resume functions crashed the interpreter there)."""
import pytest
import torch

from translator_harness import CompileCounter, optimize, rand


def _documented_break(x):
    "A docstring."
    x = x + 1
    torch._dynamo.graph_break()
    return x * 2


def _documented_break_no_constants(x, y):
    """Resumed with no constant of its own after the break."""
    z = x + y
    torch._dynamo.graph_break()
    return z


def _documented_loop(x, n):
    """A loop broken in the middle."""
    for _ in range(n):
        x = x.sin()
        torch._dynamo.graph_break()
    return x


@pytest.mark.parametrize("fn,args", [(_documented_break, (rand(3),)), (_documented_break_no_constants, (rand(3), rand(3))),
                                     (_documented_loop, (rand(3), 3))], ids=lambda v: getattr(v, "__name__", ""))
def test_documented_frames_run_as_eager(fn, args):
    compiled = optimize(CompileCounter())(fn)
    for _ in range(3):
        torch.testing.assert_close(compiled(*args), fn(*args))
