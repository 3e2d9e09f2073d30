"""What makes a cpp first call cheaper: the backward compiled with the forward and both libraries
built in the background, straight-line functions built at -O0, and number-weighted
lerp/addcmul/addcdiv decomposed as eager computes them, without torch's wrappers. Results equal
eager's; a library whose build fails runs its graph eagerly, counted."""
import pytest
import torch

import minidynamo
from minidynamo import counters
from minidynamo.codegen import cpp_build, cpp_render, trace

aten = torch.ops.aten


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.GELU(), torch.nn.Linear(8, 3))


def test_fwd_bwd_builds_the_backward_with_the_forward():
    model, reference = _mlp(), _mlp()
    compiles = cpp_build.stats["compiles"]
    compiled = minidynamo.optimize("cpp")(model)
    x = torch.randn(5, 6)
    out = compiled(x)
    # both libraries were asked for before backward() ran
    assert cpp_build.stats["compiles"] - compiles == 2
    expected = reference(x)
    torch.testing.assert_close(out, expected)
    out.square().sum().backward()
    expected.square().sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    assert minidynamo.stats()["backend_fallbacks"] == 0, list(counters.fallbacks)


def test_a_failed_build_runs_the_graph_eagerly_and_is_counted(monkeypatch):
    monkeypatch.setattr(cpp_build, "FLAGS", cpp_build.FLAGS + ("-fno-such-flag-minidynamo",))
    fn = minidynamo.optimize("cpp")(lambda x: (x * 3 + 1).relu().sum(0))
    x = torch.randn(7, 5)
    torch.testing.assert_close(fn(x), (x * 3 + 1).relu().sum(0))  # the build fails in the background
    assert minidynamo.stats()["backend_fallbacks"] == 1
    assert "g++ failed" in str(counters.fallbacks[-1])


def test_builds_in_parallel_give_each_graph_its_own_library():
    waits = [cpp_build.load_library_later(f'extern "C" int md_probe() {{ return {k}; }}\n') for k in range(3)]
    assert [w().md_probe() for w in waits] == [0, 1, 2]


def test_straight_line_functions_build_at_o1_loops_at_o3():
    table_calls = ("static void kernel0(float* a, int nthreads) {\n  a[0] = 1;\n"
                   "  for (int64_t t = 0; t < 3; t++) kernel0_mt0(tab[t], nthreads);\n}\n")
    loop = "static void kernel1(float* a, int nthreads) {\n  for (int64_t p0 = 0; p0 < 8; p0++) {\n  a[p0] = 0;\n  }\n}\n"
    assert cpp_render.straight_line_light(table_calls, "kernel0") == cpp_render.LIGHT + table_calls
    assert cpp_render.straight_line_light(loop, "kernel1") == loop


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_number_weighted_decompositions_equal_torch(dtype):
    table = trace.decompositions()
    a, b = torch.randn(50, dtype=dtype), torch.randn(50, dtype=dtype)
    c = torch.rand(50, dtype=dtype) + 0.5
    for w in (0.1, 0.5, 0.9, -0.7, 2):
        torch.testing.assert_close(table[aten.lerp.Scalar](a, b, w), torch.lerp(a, b, w))
    torch.testing.assert_close(table[aten.addcmul.default](a, b, c, value=-0.3), torch.addcmul(a, b, c, value=-0.3))
    torch.testing.assert_close(table[aten.addcdiv.default](a, b, c, value=2), torch.addcdiv(a, b, c, value=2))
    # other dtypes keep torch's decomposition
    assert table[aten.lerp.Scalar](a.half(), b.half(), 0.3).dtype == torch.float16
