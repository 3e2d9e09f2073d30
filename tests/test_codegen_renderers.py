"""The C++ and Triton renderers share one base (render.KernelRenderer): every IR op has a spelling in
both, and their op tables name no op the IR lacks."""
import pytest
import torch

from minidynamo.codegen.cpp_render import CppRenderer
from minidynamo.codegen.ir import OP_NAMES, Load, Index, Op, op_arity
from minidynamo.codegen.render import KernelRenderer
from minidynamo.codegen.scheduler import Kernel
from minidynamo.codegen.triton_render import PERSISTENT_MAX, TritonRenderer


def cpp_renderer():
    return CppRenderer(Kernel("k", (4,)), {})


def triton_renderer():
    return TritonRenderer(Kernel("k", (4,)), {}, PERSISTENT_MAX)


RENDERERS = {"cpp": cpp_renderer, "triton": triton_renderer}


@pytest.mark.parametrize("renderer", list(RENDERERS))
def test_op_tables_name_only_ir_ops(renderer):
    cls = type(RENDERERS[renderer]())
    assert issubclass(cls, KernelRenderer)
    assert set(cls.OPS) <= OP_NAMES


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("renderer", list(RENDERERS))
@pytest.mark.parametrize("name", sorted(OP_NAMES))
def test_every_ir_op_is_rendered(renderer, name, dtype):
    if name in ("isnan", "isinf") and not dtype.is_floating_point:
        pytest.skip("lowered to a constant for integers")
    r = RENDERERS[renderer]()
    n = op_arity(name)
    arg_dtypes = [torch.bool, dtype, dtype] if name == "where" else [dtype] * n
    args = tuple(Load(f"in{i}", Index(), t) for i, t in enumerate(arg_dtypes))
    names = [f"a{i}" for i in range(n)]
    code = r.op_code(Op(name, args, dtype), names)
    assert isinstance(code, str) and all(a in code for a in names), code


def test_scheduler_producer_index_follows_fusion_and_restaging():
    """Kernel.producer answers from an index kept through fusion's trial copies and the restaging
    of pointwise nodes into a row kernel: the same node a scan of the kernel finds."""
    from minidynamo.codegen.ir import PointwiseNode, ReductionNode
    from minidynamo.codegen.scheduler import Scheduler

    f32 = torch.float32
    flat = Index.var("p0") * 8 + Index.var("p1")
    x = Load("in0", flat, f32)
    a = PointwiseNode("a", (4, 8), Op("exp", (x,), f32), flat, f32)
    b = PointwiseNode("b", (4, 8), Op("add", (Load("a", flat, f32), x), f32), flat, f32)
    rows = Index.var("p0") * 8 + Index.var("r0")
    r = ReductionNode("r", "sum", (4,), (8,), Load("b", rows, f32), f32)
    c = PointwiseNode("c", (4, 8), Op("mul", (Load("b", flat, f32), Load("r", Index.var("p0"), f32)), f32), flat, f32)
    steps = Scheduler([a, b, r, c], {"c", "r"}).run()
    kernels = [s for s in steps if isinstance(s, Kernel)]
    assert len(kernels) == 1 and [kn.name for kn in kernels[0].knodes()] == ["a", "b", "r", "c"]
    k = kernels[0]
    for name in ("a", "b", "r", "c", "in0"):
        assert k.producer(name) is next((kn for kn in k.knodes() if kn.name == name), None)
    assert k.outer == (4,) and k.stored == {"b", "r", "c"}  # restaged to rows; b read from memory by c
