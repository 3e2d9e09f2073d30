"""A graph break inside a grad-mode `with` block: the block continues in a compiled resume
function, and an exception at the break leaves the grad mode as eager does."""
import pytest
import torch

import minidynamo
from minidynamo.testing import CompileCounter


def print_inside(x):
    y = x * 2
    with torch.no_grad():
        z = y + 1
        print("inside", torch.is_grad_enabled())
        w = z * 3
    return w + y, torch.is_grad_enabled()


def test_block_continues_in_compiled_resume_function(capsys):
    x = torch.randn(3, requires_grad=True)
    cnt = CompileCounter()
    got = minidynamo.optimize(cnt)(print_inside)(x)
    want = print_inside(x)
    torch.testing.assert_close(got[0], want[0])
    assert got[0].requires_grad == want[0].requires_grad and got[1] is want[1] is True
    assert capsys.readouterr().out == "inside False\n" * 2
    assert cnt.frame_count == 2, "the graph before the break and the rest of the block after it"
    assert torch.is_grad_enabled()


def missing_key_inside(x):
    with torch.no_grad():
        y = x * 2
        y = y + {}["missing"]
    return y


def test_exception_at_the_break_restores_grad_mode():
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(KeyError, match="missing"):
        missing_key_inside(x)
    compiled = minidynamo.optimize(CompileCounter())(missing_key_inside)
    for _ in range(2):
        with pytest.raises(KeyError, match="missing"):
            compiled(x)
        assert torch.is_grad_enabled(), "the block's exit ran before the exception left the frame"
