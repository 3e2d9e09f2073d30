"""Graphs compiled by the "cpp" and "triton" backends under autocast return eager's values: module
tensors cast by autocast are read as they are when the graph runs (triton in interpreter mode)."""
import pytest
import torch

import minidynamo
from test_codegen_backends import backend, cache_dir  # noqa: F401  (fixtures)


def _modules():
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    frozen = torch.nn.Linear(8, 4).requires_grad_(False)
    conv = torch.nn.Conv2d(3, 4, 3)
    return lin, frozen, conv


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
def test_modules_under_autocast_match_eager(backend, grad):
    lin, frozen, conv = _modules()

    def f(x, img):
        return lin(x).relu() + frozen(x), conv(img).sum()

    x, img = torch.randn(5, 8), torch.randn(1, 3, 6, 6)
    compiled = minidynamo.optimize(backend)(f)
    with torch.set_grad_enabled(grad), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = f(x, img)
        for _ in range(2):
            actual = compiled(x, img)
            for a, e in zip(actual, expected):
                assert a.dtype == e.dtype
                torch.testing.assert_close(a.float(), e.float())
    with torch.no_grad():  # a weight changed in place is read anew
        frozen.weight.add_(1.0)
    with torch.set_grad_enabled(grad), torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(compiled(x, img)[0].float(), f(x, img)[0].float())
