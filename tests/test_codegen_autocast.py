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


def _conv_bn():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(144, 3))


def test_bf16_autocast_training_matches_eager(backend):
    """CPU batch norm keeps float statistics of bf16 inputs where its meta kernel says bf16: a
    compiled forward saving bf16 statistics made the backward raise; such a graph runs eagerly (a
    counted fallback) and gradients, outputs and running statistics equal eager's."""
    model, reference = _conv_bn().train(), _conv_bn().train()
    compiled = minidynamo.compile(model, backend=backend)
    x = torch.randn(2, 3, 8, 8)
    for _ in range(2):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, expected = compiled(x), reference(x)
        assert out.dtype == expected.dtype == torch.bfloat16
        torch.testing.assert_close(out.float(), expected.float())
        out.float().square().mean().backward()
        expected.float().square().mean().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    torch.testing.assert_close(model[1].running_mean, reference[1].running_mean)
    assert any("eager makes" in str(f) and "torch.float32" in str(f) for f in minidynamo.counters.fallbacks)
