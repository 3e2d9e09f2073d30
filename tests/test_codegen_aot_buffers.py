"""Graphs that need gradients go through aot_autograd, which compiles them inside its fake mode: the
buffers and constants the "cpp" and "triton" backends make while compiling are real tensors, so the
compiled forward and backward return eager's values (an expanded input reshaped for a matmul needs
a buffer of its own)."""
import pytest
import torch

import minidynamo
from test_codegen_backends import backend, cache_dir  # noqa: F401  (fixtures)


def _expanded_linear():
    torch.manual_seed(0)
    lin = torch.nn.Linear(2, 3)

    def f(a):
        return lin(a.expand(2, *a.shape)).tanh()

    return f, lin


@pytest.mark.parametrize("input_grad", [False, True])
def test_forward_and_backward_match_eager(backend, input_grad):
    f, lin = _expanded_linear()
    compiled = minidynamo.optimize(backend)(f)
    for call in range(2):
        a = torch.randn(1, 5, 2, requires_grad=input_grad)
        a2 = a.detach().clone().requires_grad_(input_grad)
        expected = f(a)
        expected.sum().backward()
        grads = [p.grad.clone() for p in lin.parameters()] + ([a.grad] if input_grad else [])
        lin.zero_grad()
        actual = compiled(a2)
        torch.testing.assert_close(actual, expected, msg=lambda m: f"call {call}: {m}")
        actual.sum().backward()
        got = [p.grad.clone() for p in lin.parameters()] + ([a2.grad] if input_grad else [])
        lin.zero_grad()
        for g, e in zip(got, grads):
            torch.testing.assert_close(g, e)
