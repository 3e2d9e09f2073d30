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
