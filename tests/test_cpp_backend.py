"""The "cpp" backend: correctness against eager, fusion, externs, autograd, and the kernel cache.

To keep g++ invocations few, ops are batched: one graph computes a whole family of ops, is compiled
once (module-scoped fixture), and each op is then checked by its own parametrized test.
"""
import copy
import gc
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import minidynamo
import minidynamo.config
from minidynamo.backends import lookup_backend
from minidynamo.codegen import cpp_build as build
from minidynamo.codegen import cpp_conv
from minidynamo.codegen.cpp_gemm import Gemm
from minidynamo.codegen.cpp_pipeline import compile_cpp_graph as compile_graph
from minidynamo.codegen.ir import ExternNode, contiguous_strides as contiguous
from minidynamo.codegen.scheduler import Kernel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session", autouse=True)
def cache_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("kernel-cache"))
    old = minidynamo.config.cache_dir
    minidynamo.config.cache_dir = path
    yield path
    minidynamo.config.cache_dir = old


def compile_fn(fn, *inputs):
    return compile_graph(torch.fx.symbolic_trace(fn), list(inputs))


def assert_close(actual, expected, dtype=None):
    dtype = dtype or expected.dtype
    tol = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-9, atol=1e-12)}
    torch.testing.assert_close(actual, expected, equal_nan=True, **tol.get(dtype, dict(rtol=0, atol=0)))


class Batch:
    """Many named ops compiled as one graph: `results[name]` and `expected[name]`. The ops that
    ran as plain torch calls (extern steps) must be exactly `externs` (by overload name, such as
    "aten.sort.default"), so no op falls back silently."""

    def __init__(self, ops, *inputs, compile=compile_graph, externs=(), **options):
        names = list(ops)
        fns = [ops[n] for n in names]

        def graph(*xs):
            return tuple(f(*xs) for f in fns)

        # symbolic_trace cannot trace *args; make_fx can (our pipeline re-traces it anyway).
        gm = make_fx(graph)(*inputs)
        compiled = compile(gm, list(inputs), **options)
        self.compiled = compiled
        ran_in_torch = sorted({str(s.fn) for s in compiled.steps if isinstance(s, ExternNode)})
        assert ran_in_torch == sorted(set(externs)), f"ops run as torch calls: {ran_in_torch}"
        self.results = dict(zip(names, compiled(*inputs)))
        self.expected = dict(zip(names, graph(*inputs)))

    def check(self, name):
        actual, expected = self.results[name], self.expected[name]
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        assert_close(actual, expected)


torch.manual_seed(0)
X = torch.randn(17, 33)
POS = torch.rand(17, 33) + 0.1
UNIT = torch.rand(17, 33) * 1.8 - 0.9

UNARY = {
    "exp": lambda x, p, u: torch.exp(x), "exp2": lambda x, p, u: torch.exp2(x),
    "expm1": lambda x, p, u: torch.expm1(x), "log": lambda x, p, u: torch.log(p),
    "log2": lambda x, p, u: torch.log2(p), "log10": lambda x, p, u: torch.log10(p),
    "log1p": lambda x, p, u: torch.log1p(p), "sqrt": lambda x, p, u: torch.sqrt(p),
    "rsqrt": lambda x, p, u: torch.rsqrt(p), "sin": lambda x, p, u: torch.sin(x),
    "cos": lambda x, p, u: torch.cos(x), "tan": lambda x, p, u: torch.tan(u),
    "asin": lambda x, p, u: torch.asin(u), "acos": lambda x, p, u: torch.acos(u),
    "atan": lambda x, p, u: torch.atan(x), "sinh": lambda x, p, u: torch.sinh(x),
    "cosh": lambda x, p, u: torch.cosh(x), "tanh": lambda x, p, u: torch.tanh(x),
    "asinh": lambda x, p, u: torch.asinh(x), "acosh": lambda x, p, u: torch.acosh(p + 1),
    "atanh": lambda x, p, u: torch.atanh(u), "erf": lambda x, p, u: torch.erf(x),
    "erfc": lambda x, p, u: torch.erfc(x), "sigmoid": lambda x, p, u: torch.sigmoid(x),
    "reciprocal": lambda x, p, u: torch.reciprocal(p), "floor": lambda x, p, u: torch.floor(x * 3),
    "ceil": lambda x, p, u: torch.ceil(x * 3), "trunc": lambda x, p, u: torch.trunc(x * 3),
    "round": lambda x, p, u: torch.round(x * 3), "frac": lambda x, p, u: torch.frac(x * 3),
    "neg": lambda x, p, u: -x, "abs": lambda x, p, u: torch.abs(x),
    "sign": lambda x, p, u: torch.sign(x), "relu": lambda x, p, u: torch.relu(x),
    "square": lambda x, p, u: torch.square(x), "pow_scalar": lambda x, p, u: torch.pow(p, 2.7),
    "pow_half": lambda x, p, u: p ** 0.5, "pow_cube": lambda x, p, u: x ** 3,
    "rpow": lambda x, p, u: 2.0 ** x, "lgamma": lambda x, p, u: torch.lgamma(p),
    "gelu": lambda x, p, u: F.gelu(x), "gelu_tanh": lambda x, p, u: F.gelu(x, approximate="tanh"),
    "silu": lambda x, p, u: F.silu(x), "softplus": lambda x, p, u: F.softplus(x),
    "elu": lambda x, p, u: F.elu(x), "leaky_relu": lambda x, p, u: F.leaky_relu(x, 0.1),
    "hardtanh": lambda x, p, u: F.hardtanh(x), "hardswish": lambda x, p, u: F.hardswish(x),
    "hardsigmoid": lambda x, p, u: F.hardsigmoid(x), "mish": lambda x, p, u: F.mish(x),
    "isnan": lambda x, p, u: torch.isnan(torch.log(x)), "isinf": lambda x, p, u: torch.isinf(1 / (x * 0)),
    "logical_not": lambda x, p, u: torch.logical_not(x > 0), "clamp": lambda x, p, u: x.clamp(-0.5, 0.5),
    "clamp_min": lambda x, p, u: x.clamp(min=0.1), "clamp_max": lambda x, p, u: x.clamp(max=0.1),
    "nan_to_num": lambda x, p, u: torch.nan_to_num(torch.log(x)),
}


@pytest.fixture(scope="module")
def unary():
    return Batch(UNARY, X, POS, UNIT)


@pytest.mark.parametrize("name", list(UNARY))
def test_unary(unary, name):
    unary.check(name)


A = torch.randn(9, 1, 13)
B = torch.randn(5, 13) + 0.5
IA = torch.randint(-20, 20, (9, 1, 13), dtype=torch.int32)
IB = torch.randint(-7, 7, (5, 13), dtype=torch.int64)
BOOL = torch.rand(5, 13) > 0.5

BINARY = {
    "add": lambda a, b, ia, ib, m: a + b, "sub": lambda a, b, ia, ib, m: a - b,
    "mul": lambda a, b, ia, ib, m: a * b, "div": lambda a, b, ia, ib, m: a / b,
    "add_alpha": lambda a, b, ia, ib, m: torch.add(a, b, alpha=2.5),
    "rsub": lambda a, b, ia, ib, m: 1 - a, "div_floor": lambda a, b, ia, ib, m: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b, ia, ib, m: torch.div(a, b, rounding_mode="trunc"),
    "floor_divide": lambda a, b, ia, ib, m: a // b, "remainder": lambda a, b, ia, ib, m: a % b,
    "fmod": lambda a, b, ia, ib, m: torch.fmod(a, b), "pow": lambda a, b, ia, ib, m: torch.pow(b.abs(), a),
    "atan2": lambda a, b, ia, ib, m: torch.atan2(a, b), "maximum": lambda a, b, ia, ib, m: torch.maximum(a, b),
    "minimum": lambda a, b, ia, ib, m: torch.minimum(a, b), "eq": lambda a, b, ia, ib, m: ia == ib,
    "ne": lambda a, b, ia, ib, m: a != b, "lt": lambda a, b, ia, ib, m: a < b,
    "le": lambda a, b, ia, ib, m: ia <= b, "gt": lambda a, b, ia, ib, m: a > 0.5,
    "ge": lambda a, b, ia, ib, m: ib >= ia, "where": lambda a, b, ia, ib, m: torch.where(m, a, b),
    "where_scalar": lambda a, b, ia, ib, m: torch.where(a > 0, a, 0.0),
    "masked_fill": lambda a, b, ia, ib, m: b.masked_fill(m, float("-inf")),
    "logical_and": lambda a, b, ia, ib, m: torch.logical_and(a > 0, m),
    "logical_or": lambda a, b, ia, ib, m: torch.logical_or(a > 0, m),
    "logical_xor": lambda a, b, ia, ib, m: torch.logical_xor(a > 0, m),
    "bitwise_and": lambda a, b, ia, ib, m: ia & ib, "bitwise_or": lambda a, b, ia, ib, m: ia | ib,
    "bitwise_xor": lambda a, b, ia, ib, m: ia ^ ib, "bitwise_not": lambda a, b, ia, ib, m: ~ia,
    "bool_and": lambda a, b, ia, ib, m: m & (a > 0), "bool_not": lambda a, b, ia, ib, m: ~m,
    "int_add": lambda a, b, ia, ib, m: ia + ib, "int_mul": lambda a, b, ia, ib, m: ia * ib * 3,
    "int_floordiv_const": lambda a, b, ia, ib, m: ia // 3, "int_neg_floordiv": lambda a, b, ia, ib, m: ia // -4,
    "int_remainder_const": lambda a, b, ia, ib, m: ia % 5, "int_neg_remainder": lambda a, b, ia, ib, m: ia % -3,
    "int_floordiv_tensor": lambda a, b, ia, ib, m: ia // (ib.abs() + 1),
    "int_truediv": lambda a, b, ia, ib, m: ia / 4, "int_pow": lambda a, b, ia, ib, m: ib ** 3,
    "int_abs": lambda a, b, ia, ib, m: ia.abs(), "int_max": lambda a, b, ia, ib, m: torch.maximum(ia, ib),
    "int_clamp": lambda a, b, ia, ib, m: ia.clamp(-5, 5), "mixed_promote": lambda a, b, ia, ib, m: ia * b + ib,
    "int_overflow": lambda a, b, ia, ib, m: ia * 2 ** 30, "bool_sum_int": lambda a, b, ia, ib, m: m + m,
    "to_int32": lambda a, b, ia, ib, m: (a * 10).to(torch.int32), "to_int64": lambda a, b, ia, ib, m: (b * -7.9).long(),
    "to_float": lambda a, b, ia, ib, m: ia.float(), "to_double": lambda a, b, ia, ib, m: a.double() * 1.1,
    "to_bool": lambda a, b, ia, ib, m: (a * 0 + ia).bool(), "bool_to_float": lambda a, b, ia, ib, m: m.float() * a,
    "double_to_float": lambda a, b, ia, ib, m: (a.double() / 3).float(),
    "int8_wrap": lambda a, b, ia, ib, m: ia.to(torch.int8) * 37,
    "uint8": lambda a, b, ia, ib, m: ia.to(torch.uint8) + 250,
}


BINARY_EXTERNS = ("aten.div.Tensor_mode",)  # int_floordiv_tensor: integer division by a tensor


@pytest.fixture(scope="module")
def binary():
    return Batch(BINARY, A, B, IA, IB, BOOL, externs=BINARY_EXTERNS)


@pytest.mark.parametrize("name", list(BINARY))
def test_binary(binary, name):
    binary.check(name)


R = torch.randn(6, 7, 8)
RI = torch.randint(-50, 50, (6, 7, 8))
REDUCTIONS = {}
for _dim in (0, 1, 2, -1, (0, 2), None):
    for _keep in (False, True):
        _kw = {} if _dim is None else {"dim": _dim, "keepdim": _keep}
        if _dim is None and _keep:
            continue
        tag = f"{_dim}_{'k' if _keep else 'n'}"
        REDUCTIONS[f"sum_{tag}"] = (lambda kw: lambda x, i: x.sum(**kw))(_kw)
        REDUCTIONS[f"mean_{tag}"] = (lambda kw: lambda x, i: x.mean(**kw))(_kw)
        REDUCTIONS[f"amax_{tag}"] = (lambda kw: lambda x, i: x.amax(**kw) if kw else x.amax())(_kw)
        REDUCTIONS[f"amin_int_{tag}"] = (lambda kw: lambda x, i: i.amin(**kw) if kw else i.amin())(_kw)
        REDUCTIONS[f"var_{tag}"] = (lambda kw: lambda x, i: x.var(**kw))(_kw)
        REDUCTIONS[f"isum_{tag}"] = (lambda kw: lambda x, i: i.sum(**kw))(_kw)
        if not isinstance(_dim, tuple):
            REDUCTIONS[f"argmax_{tag}"] = (lambda kw: lambda x, i: x.argmax(**kw))(_kw)
            REDUCTIONS[f"argmin_int_{tag}"] = (lambda kw: lambda x, i: i.argmin(**kw))(_kw)
            REDUCTIONS[f"prod_{tag}"] = (lambda kw: lambda x, i: (x * 0.3 + 1).prod(**kw))(_kw)
            REDUCTIONS[f"any_{tag}"] = (lambda kw: lambda x, i: (x > 2).any(**kw))(_kw)
            REDUCTIONS[f"all_{tag}"] = (lambda kw: lambda x, i: (x > -2).all(**kw))(_kw)
REDUCTIONS.update({
    "max_dim_values": lambda x, i: x.max(1)[0], "max_dim_indices": lambda x, i: x.max(1)[1],
    "min_dim_values": lambda x, i: x.min(2, keepdim=True)[0], "max_all": lambda x, i: x.max(),
    "std": lambda x, i: x.std(1), "bool_sum": lambda x, i: (x > 0).sum(1),
    "softmax_0": lambda x, i: F.softmax(x, 0), "softmax_1": lambda x, i: F.softmax(x, 1),
    "softmax_2": lambda x, i: F.softmax(x, -1), "log_softmax_2": lambda x, i: F.log_softmax(x, -1),
    "log_softmax_0": lambda x, i: F.log_softmax(x, 0), "logsumexp": lambda x, i: torch.logsumexp(x, 1),
    "layer_norm": lambda x, i: F.layer_norm(x, (8,), torch.linspace(0.5, 2, 8), torch.linspace(-1, 1, 8)),
    "layer_norm_2d": lambda x, i: F.layer_norm(x, (7, 8)),
    "norm": lambda x, i: torch.linalg.vector_norm(x, dim=-1),
    "norm_dims_keepdim": lambda x, i: torch.linalg.vector_norm(x, dim=(0, 1), keepdim=True),
    "norm_ord1": lambda x, i: torch.linalg.vector_norm(x, 1, dim=1),
    "norm_ord_inf": lambda x, i: torch.linalg.vector_norm(x, float("inf")),
    "norm_ord3": lambda x, i: torch.linalg.vector_norm(x, 3, dim=-1),
    "group_norm": lambda x, i: F.group_norm(x.transpose(1, 2), 2, torch.linspace(0.5, 2, 8), torch.linspace(-1, 1, 8)),
    "group_norm_no_affine": lambda x, i: F.group_norm(x, 7),
    "sum_dtype": lambda x, i: x.sum(-1, dtype=torch.float64),
})


REDUCTION_EXTERNS = ()  # vector norms and group norm run as their decompositions


@pytest.fixture(scope="module")
def reductions():
    return Batch(REDUCTIONS, R, RI, externs=REDUCTION_EXTERNS)


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reduction(reductions, name):
    reductions.check(name)


def test_nan_propagation():
    x = torch.randn(4, 16)
    x[1, 3] = float("nan")
    x[2, 0] = float("nan")
    y = torch.randn(4, 16)
    y[3, 5] = float("nan")
    ops = {
        "amax": lambda x, y: x.amax(1), "amin": lambda x, y: x.amin(0), "max_all": lambda x, y: x.max(),
        "argmax": lambda x, y: x.argmax(1), "argmin": lambda x, y: x.argmin(0),
        "maximum": lambda x, y: torch.maximum(x, y), "minimum": lambda x, y: torch.minimum(y, x),
        "clamp": lambda x, y: x.clamp(-0.1, 0.1), "relu": lambda x, y: torch.relu(y),
        "softmax": lambda x, y: F.softmax(x, 1), "sum": lambda x, y: x.sum(0),
    }
    batch = Batch(ops, x, y)
    for name in ops:
        batch.check(name)


V = torch.randn(4, 6, 10)
VIEWS = {
    "reshape_merge": lambda x: x.reshape(24, 10) + 1, "reshape_split": lambda x: (x * 2).reshape(4, 6, 2, 5),
    "reshape_lazy_merge": lambda x: (x * 2).reshape(4, 60) - 1, "view_flat": lambda x: x.view(-1).exp(),
    "permute": lambda x: x.permute(2, 0, 1) * 3, "permute_lazy": lambda x: (x + 1).permute(1, 2, 0).contiguous(),
    "transpose": lambda x: x.transpose(0, 2) + x.transpose(0, 2), "t": lambda x: x[0].t() * 2,
    "slice": lambda x: x[:, 1:5, ::3] + 1, "slice_neg": lambda x: (x * 2)[..., -4:],
    "select": lambda x: x[:, 2] * 2, "select_lazy": lambda x: (x * 2)[1, :, -1],
    "unsqueeze": lambda x: x.unsqueeze(1) * 2, "squeeze": lambda x: x[:, :1].squeeze(1) + 1,
    "expand": lambda x: x[:, :1, :].expand(4, 6, 10) * x, "expand_new_dim": lambda x: x.sum(0).expand(3, 6, 10) + 0,
    "split": lambda x: x.split(2, dim=1)[1] * 2, "chunk_lazy": lambda x: (x + 1).chunk(2, dim=-1)[1],
    "unbind": lambda x: x.unbind(0)[2] + 1, "flatten_permuted": lambda x: x.permute(0, 2, 1).reshape(4, 60) * 2,
    "view_as_output": lambda x: x.view(24, 10), "alias_output": lambda x: x,
    "broadcast_3way": lambda x: x[:1, :, :1] * x[:, :1, :] + x[:1, :1, :1],
    "cat": lambda x: torch.cat([x, x * 2], dim=1) + 1, "cumsum_extern": lambda x: torch.cumsum(x, 1) * 2,
    "sort_extern": lambda x: torch.sort(x, -1)[0] + 1, "arange": lambda x: x + torch.arange(10),
    "tril": lambda x: torch.tril(x), "full": lambda x: x + torch.full((10,), 2.5),
    "flip_extern": lambda x: torch.flip(x, [2]) - x,
    "split_sizes_lazy": lambda x: (x * 3).split([1, 4, 5], dim=-1)[2] + (x * 3).split([1, 4, 5], dim=-1)[0],
    "split_sizes_views": lambda x: x.split([2, 4], dim=1)[1].exp(),
    "cat_with_empty": lambda x: torch.cat([x[:, :0], x * 2, torch.zeros(4, 0, 10)], dim=1),
}


# The *_extern views, and cat of several non-empty inputs (no lowering); split is views.
VIEW_EXTERNS = ("aten.cumsum.default", "aten.sort.default", "aten.flip.default")  # cat is a Copy step


@pytest.fixture(scope="module")
def views():
    return Batch(VIEWS, V, externs=VIEW_EXTERNS)


@pytest.mark.parametrize("name", list(VIEWS))
def test_views(views, name):
    views.check(name)


# -- fusion -------------------------------------------------------------------------------------


def _kernels(compiled):
    return [s for s in compiled.steps if isinstance(s, Kernel)]


def _externs(compiled):
    return [s for s in compiled.steps if isinstance(s, ExternNode)]


def _stored(compiled):
    return set().union(*(k.stored for k in _kernels(compiled)))


def test_pointwise_chain_fuses_into_one_loop():
    def chain(x, y):
        return ((x * y + 1).sin() * 0.5 - y).exp().relu() / 3

    x, y = torch.randn(256, 256), torch.randn(256, 256)
    c = compile_fn(chain, x, y)
    assert_close(c(x, y), chain(x, y))
    (k,) = _kernels(c)
    assert len(k.stages) == 1 and len(k.stages[0].nodes) == 1
    assert k.outer == (256 * 256,)  # contiguous dims collapsed into one loop
    assert "#pragma omp parallel for num_threads(nthreads)" in c.source


def test_softmax_is_one_kernel_with_reductions_in_registers():
    x = torch.randn(32, 100)
    c = compile_fn(lambda x: F.softmax(x, -1), x)
    assert_close(c(x), F.softmax(x, -1))
    (k,) = _kernels(c)
    assert len(k.stages) <= 3
    assert len(_stored(c)) == 1  # only the output goes to memory


def test_layer_norm_and_gelu_block_is_one_kernel():
    block = nn.Sequential(nn.LayerNorm(64), nn.GELU())
    x = torch.randn(16, 64)
    with torch.no_grad():
        c = compile_fn(block, x)
        assert_close(c(x), block(x))
    (k,) = _kernels(c)
    assert len(_stored(c)) == 1


def test_reduction_with_producer_and_consumer_fused():
    x = torch.randn(40, 50)

    def f(x):
        y = x * 2 + 1
        return y, y.sum(-1, keepdim=True) / y.amax(-1, keepdim=True)

    c = compile_fn(f, x)
    for a, b in zip(c(x), f(x)):
        assert_close(a, b)
    assert len(_kernels(c)) == 1


def test_matmul_bias_gelu_epilogue_runs_in_the_products_call():
    """The product calls torch's BLAS from the generated code, and its epilogue (bias + GELU, one
    loop) runs in the same exported function right after it: no torch call, no separate kernel
    call, and the product's result never leaves that function's stack."""
    f = nn.Sequential(nn.Linear(32, 48), nn.GELU(approximate="tanh"))
    x = torch.randn(20, 32)
    with torch.no_grad():
        c = compile_fn(f, x)
        assert_close(c(x), f(x))
    assert _externs(c) == []
    gemm, k = c.steps
    assert isinstance(gemm, Gemm) and isinstance(k, Kernel)
    assert len(k.stages[0].nodes) == 1  # bias + GELU in one loop over the product
    (group,) = c.groups
    assert group.kernels == [gemm.name, k.name] and gemm.out in group.local
    assert c.pycode.count("_group0(") == 1 and "aten" not in c.pycode


@pytest.mark.parametrize("layout", ["plain", "transposed_a", "transposed_b", "offset_views"])
def test_products_of_any_blas_layout_run_in_the_generated_code(layout):
    a, b = torch.randn(7, 5), torch.randn(5, 9)
    ops = {
        "plain": lambda a, b: (a @ b).relu(),
        "transposed_a": lambda a, b: a.t().contiguous().t() @ b * 2,
        "transposed_b": lambda a, b: a @ b.t().contiguous().t() + 1,
        "offset_views": lambda a, b: torch.bmm(torch.stack([a, a * 2])[:, 1:], torch.stack([b, b])[..., 2:]) - 1,
    }
    f = ops[layout]
    c = compile_fn(f, a, b)
    assert_close(c(a, b), f(a, b))
    products = (torch.ops.aten.mm.default, torch.ops.aten.bmm.default)
    assert not [e for e in _externs(c) if e.fn in products] and any(isinstance(s, Gemm) for s in c.steps)


def test_common_subexpressions_and_dead_code():
    x = torch.randn(64, 64)

    def f(x):
        unused = x.cos().sum()  # noqa: F841 (dead: never returned)
        a = torch.sin(x) * 2
        b = torch.sin(x) * 2  # same expression again
        return a + b, a.sum(), b.sum()

    c = compile_fn(f, x)
    for a, b in zip(c(x), f(x)):
        assert_close(a, b)
    assert c.source.count("mdm::sin(") == 1
    assert "mdm::cos(" not in c.source
    assert c.source.count("_acc = 0;") == 1  # a.sum() and b.sum() are one reduction


def test_loops_are_vectorised(cache_dir):
    """gcc reports the inner loops of softmax (including the exp calls) as vectorised."""
    x = torch.randn(8, 256)
    c = compile_fn(lambda x: F.softmax(x, -1), x)
    src = os.path.join(cache_dir, "probe.cpp")
    with open(src, "w") as f:
        f.write(c.source)
    out = subprocess.run([build.compiler(), *build.FLAGS, "-fopt-info-vec-optimized", src, "-o",
                          os.path.join(cache_dir, "probe.so"), *build.LIBS],
                         capture_output=True, text=True, check=True).stderr
    assert out.count("loop vectorized") >= 3, out


# -- modules through the backend ----------------------------------------------------------------


class Attention(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.qkv, self.proj, self.ln, self.heads = nn.Linear(d, 3 * d), nn.Linear(d, d), nn.LayerNorm(d), heads
        self.register_buffer("mask", torch.tril(torch.ones(1, 1, 12, 12)))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (c // self.heads) ** 0.5)
        att = att.masked_fill(self.mask == 0, float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(b, t, c)
        return x + F.dropout(self.proj(y), 0.1, training=False)


MODULES = {
    "mlp": (lambda: nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)), (torch.randn(5, 32),)),
    "attention": (Attention, (torch.randn(2, 12, 32),)),
    "ln_gelu": (lambda: nn.Sequential(nn.LayerNorm(48), nn.GELU(), nn.Linear(48, 48), nn.Tanh()),
                (torch.randn(3, 7, 48),)),
    "embedding": (lambda: nn.Sequential(nn.Embedding(50, 16), nn.LayerNorm(16)),
                  (torch.randint(0, 50, (4, 9)),)),
    "conv": (lambda: nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8).eval(), nn.SiLU()),
             (torch.randn(2, 3, 10, 10),)),
}


# -- kernel cache -------------------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import json, sys, torch
    import minidynamo.config
    from minidynamo.codegen import cpp_build as build
    from minidynamo.codegen.cpp_pipeline import compile_cpp_graph as compile_graph
    minidynamo.config.cache_dir = sys.argv[1]
    def f(x):
        return (x.exp() + 1).log() * x.sum(-1, keepdim=True)
    x = torch.linspace(-2, 2, 600).reshape(20, 30)
    c = compile_graph(torch.fx.symbolic_trace(f), [x])
    ok = torch.allclose(c(x), f(x), rtol=1e-5, atol=1e-6)
    print(json.dumps(dict(build.stats, ok=ok)))
""")


def run_child(cache_dir, env=None):
    proc = subprocess.run([sys.executable, "-c", CHILD, cache_dir], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    import json
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def no_compile_cxx(tmp_path):
    """A CXX that answers version queries like g++ but refuses to compile anything."""
    script = tmp_path / "g++-nocompile"
    script.write_text("#!/bin/sh\ncase \"$*\" in *.cpp*) echo 'compiling is disabled' >&2; exit 1;; esac\n"
                      f"exec {build.compiler()} \"$@\"\n")
    script.chmod(0o755)
    return str(script)


def test_second_process_loads_from_disk_without_compiling(tmp_path, no_compile_cxx):
    cache = str(tmp_path / "cache")
    first = run_child(cache)
    assert first["ok"] and first["compiles"] == 1 and first["disk_hits"] == 0
    second = run_child(cache, {"CXX": no_compile_cxx})
    assert second["ok"] and second["compiles"] == 0 and second["disk_hits"] == 1


SPILLING_CHILD = textwrap.dedent("""
    import hashlib, sys, torch
    import torch.nn.functional as F
    from minidynamo.codegen.cpp_render import render_cpp
    from minidynamo.codegen.pipeline import lower_and_schedule
    def f(x):
        return F.softmax(x, -1) + F.softmax(x.sin(), -1) + F.softmax(x.cos(), -1)
    lowering, steps = lower_and_schedule(torch.fx.symbolic_trace(f), [torch.randn(8, 64)])
    source, _, _ = render_cpp(steps, lowering.buffers, {o.buffer for o in lowering.outputs})
    print(source.count("row"), hashlib.sha256(source.encode()).hexdigest())
""")


def test_source_does_not_depend_on_the_string_hash_seed():
    # A kernel with several spilled rows once named them in set order: each process could
    # generate another source for the same graph, and miss the disk cache.
    outputs = set()
    for seed in ("1", "4"):
        proc = subprocess.run([sys.executable, "-c", SPILLING_CHILD], capture_output=True, text=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        outputs.add(proc.stdout.strip().splitlines()[-1])
    assert len(outputs) == 1 and int(next(iter(outputs)).split()[0]) > 2


def test_corrupt_cache_entry_is_rebuilt(tmp_path, no_compile_cxx):
    cache = str(tmp_path / "cache")
    assert run_child(cache)["compiles"] == 1
    (so,) = [os.path.join(cache, "cpp", f) for f in os.listdir(os.path.join(cache, "cpp")) if f.endswith(".so")]
    with open(so, "r+b") as f:
        f.truncate(os.path.getsize(so) // 2)
    # With compilation disabled the truncated library must be rejected, never loaded: the rebuild
    # fails (in the background, so the graph's first call runs it eagerly).
    proc = subprocess.run([sys.executable, "-c", CHILD, cache], capture_output=True, text=True,
                          env={**os.environ, "CXX": no_compile_cxx}, cwd=ROOT)
    assert proc.returncode == 0 and "compiling is disabled" in proc.stderr, proc.stderr
    failed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert failed["ok"] and failed["rejected"] == 1 and failed["disk_hits"] == 0
    rebuilt = run_child(cache)
    assert rebuilt["ok"] and rebuilt["rejected"] == 1 and rebuilt["compiles"] == 1
    assert run_child(cache, {"CXX": no_compile_cxx})["disk_hits"] == 1


def test_in_memory_cache_reuses_library():
    x = torch.randn(10, 10)
    before = dict(build.stats)
    compile_fn(lambda x: x * 2 + 1, x)
    compile_fn(lambda x: x * 2 + 1, x)
    assert build.stats["memory_hits"] == before["memory_hits"] + 1
    assert build.stats["compiles"] + build.stats["disk_hits"] == before["compiles"] + before["disk_hits"] + 1


def test_large_outputs_reuse_storage_only_when_unreferenced():
    x = torch.randn(2048, 2048)  # 16 MiB results: pooled
    c = compile_fn(lambda x: (x * 2, x + 1), x)
    a, b = c(x)
    pa, pb = a.data_ptr(), b.data_ptr()
    del a, b
    a, b = c(x)  # nothing referred to the previous results: same storage
    assert (a.data_ptr(), b.data_ptr()) == (pa, pb)
    assert_close(a, x * 2)
    assert_close(b, x + 1)
    kept_view = a[1:]
    kept_storage = b.untyped_storage()
    del a, b
    a2, b2 = c(x)  # a view and a storage object are still alive: fresh memory, old values kept
    assert a2.data_ptr() != pa and b2.data_ptr() != pb
    assert_close(kept_view, (x * 2)[1:])
    assert torch.empty(0).set_(kept_storage, 0, (2048, 2048), (2048, 1)).equal(x + 1)
    assert_close(a2, x * 2)


def test_small_graphs_run_on_the_calling_thread_and_restore_its_thread_count():
    """A graph with little work runs serially, torch's extern calls included (a second thread
    that is descheduled would stall every parallel step); the thread count is restored after each
    call. Large products keep their threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = torch.randn(16, 16)
        small = compile_fn(lambda x: torch.cumsum(x @ x, 0).relu(), x)
        assert small.serial and "_serial()" in small.pycode and "md_threads(1)" in small.source
        assert_close(small(x), torch.cumsum(x @ x, 0).relu())
        assert torch.get_num_threads() == 2
        assert_close(small(x.t()), torch.cumsum(x.t() @ x.t(), 0).relu())  # relaid-out input
        assert torch.get_num_threads() == 2
        big = torch.randn(512, 512)
        large = compile_fn(lambda x: (x @ x).relu(), big)
        assert not large.serial and "md_threads(nthreads)" in large.source
        assert_close(large(big), (big @ big).relu())
    finally:
        torch.set_num_threads(before)


def test_transposed_linear_weights_are_prepacked_and_follow_parameter_updates():
    """An nn.Linear weight's transpose is kept contiguous across calls (BLAS reads (K,N) rows
    faster), and made again when the parameter changes in place or is replaced."""
    minidynamo.reset()
    lin = nn.Linear(16, 12)
    graphs = []

    def backend(gm, inputs):
        graphs.append(compile_graph(gm, inputs))
        return graphs[-1]

    fn = minidynamo.optimize(backend)(lambda x: lin(x).relu())
    x = torch.randn(5, 16)
    with torch.no_grad():
        assert_close(fn(x), lin(x).relu())
        (graph,) = graphs
        assert [s.packed_b for s in graph.steps if isinstance(s, Gemm)] == [True]
        packed = _packed_copies(graph)
        first = packed.copies[id(lin.weight)][2]
        assert_close(fn(x), lin(x).relu())
        assert packed.copies[id(lin.weight)][2] is first  # reused while the weight is unchanged
        lin.weight.mul_(-2)  # in place: the version moves
        assert_close(fn(x), lin(x).relu())
        assert packed.copies[id(lin.weight)][2] is not first
        lin.weight = nn.Parameter(torch.randn(12, 16))  # replaced
        assert_close(fn(x), lin(x).relu())
    opt = torch.optim.SGD(lin.parameters(), lr=0.5)
    lin(x).sum().backward()
    opt.step()
    with torch.no_grad():
        assert_close(fn(x), lin(x).relu())
    minidynamo.reset()


def _packed_copies(graph):
    return next(v for v in graph.run.__globals__.values() if type(v).__name__ == "_Transposed")


def test_instances_sharing_an_entry_keep_their_own_prepacked_weights():
    """One graph serves several nn.Linear instances: each weight gets its own packed copy, kept
    across alternating calls and freed with the weight."""
    minidynamo.reset()
    graphs = []

    def backend(gm, inputs):
        graphs.append(compile_graph(gm, inputs))
        return graphs[-1]

    layers = [nn.Linear(16, 12) for _ in range(3)]
    compiled = [minidynamo.optimize(backend)(layer) for layer in layers]
    x = torch.randn(5, 16)
    with torch.no_grad():
        for _ in range(2):
            for layer, fn in zip(layers, compiled):
                assert_close(fn(x), layer(x))
        (graph,) = graphs
        packed = _packed_copies(graph)
        copies = {id(layer.weight): packed.copies[id(layer.weight)][2] for layer in layers}
        assert len(copies) == 3
        for layer, fn in zip(layers, compiled):
            assert_close(fn(x), layer(x))
            assert packed.copies[id(layer.weight)][2] is copies[id(layer.weight)]  # not packed again
    del layers[0], compiled[0]
    gc.collect()
    assert len(packed.copies) == 2
    minidynamo.reset()


def _conv_results(compiled):
    return [compiled.buffers[e.names[0]] for e in _externs(compiled)
            if e.fn is torch.ops.aten.convolution.default]


@pytest.fixture
def onednn_convs(monkeypatch):
    """Every convolution left to oneDNN, as the large ones are (small ones run in the generated code)."""
    monkeypatch.setattr(cpp_conv, "GENERATED_MAX_MACS", 0)


def test_convolutions_run_channels_last_and_outputs_keep_eagers_layout(onednn_convs):
    """oneDNN takes channels-last memory as it is (NCHW it reorders on every call): the
    convolutions' inputs, weights and results are channels-last, the kernels between them
    follow, and the graph's outputs still have eager's strides."""
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3)).eval()
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        c = compile_graph(make_fx(lambda x: (net(x), net[0](x)))(x), [x])
        got, expected = c(x), (net(x), net[0](x))
    for g, e in zip(got, expected):
        assert_close(g, e)
        assert g.stride() == e.stride()
    results = _conv_results(c)
    assert len(results) == 3 and all(b.stride[1] == 1 for b in results)


def test_patch_embedding_convolution_then_tokens(onednn_convs):
    """A ViT patch embedding (strided convolution, flatten, transpose, linear) over the
    channels-last result: the transpose is a free view."""
    conv, proj = nn.Conv2d(3, 16, 4, stride=4), nn.Linear(16, 8)
    x = torch.randn(2, 3, 16, 16)

    def f(x):
        return proj(conv(x).flatten(2).transpose(1, 2))

    with torch.no_grad():
        c = compile_graph(make_fx(f)(x), [x])
        assert_close(c(x), f(x))
    (result,) = _conv_results(c)
    assert result.stride == (256, 1, 64, 16)


def test_convolutions_before_a_global_pooling_stay_nchw(onednn_convs):
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
    x = torch.randn(2, 3, 10, 10)
    with torch.no_grad():
        c = compile_fn(net, x)
        assert_close(c(x), net(x))
    assert all(b.stride == contiguous(b.size) for b in _conv_results(c))


def test_output_that_is_a_piece_of_a_split_has_eagers_strides():
    """A piece of a split lazy value returned (saved for backward, say) is laid out as eager's view
    into the whole, gaps included: a backward compiled for those strides takes it as is."""
    x = torch.randn(6, 8)

    def f(x):
        return (x * 2).split([3, 5], dim=1)[1].t()

    c = compile_fn(f, x)
    got, expected = c(x), f(x)
    assert_close(got, expected)
    assert got.stride() == expected.stride() == (1, 8)


def test_extern_with_a_list_argument_is_a_direct_call():
    """fx hands list arguments over as its immutable_list: the wrapper still calls the op directly
    (not through the generic environment-dict helper, which costs 20-30 us per call)."""
    x, y = torch.randn(8, 6), torch.randn(3, 6, dtype=torch.float64)  # promoting: a torch call, not a Copy
    c = compile_fn(lambda x, y: torch.cat([x * 2, y]) + 1, x, y)
    assert_close(c(x, y), torch.cat([x * 2, y]) + 1)
    (ext,) = _externs(c)
    assert ext.fn is torch.ops.aten.cat.default
    call = next(line for line in c.pycode.splitlines() if line.strip().startswith("r = "))
    assert "({" not in call and "[v" in call


def test_generated_wrapper_handles_views_tuples_and_relayout():
    x = torch.randn(8, 6)
    w = torch.randn(6, 5)

    def f(x, w):
        y = torch.mm(x.relu(), w)
        return {"t": y.t(), "pair": [y + 1, x[:, 1]], "n": 3}

    c = compile_fn(f, x, w)
    assert "def run" in c.pycode
    for args in ((x, w), (x.t().contiguous().t(), w)):  # second: column-major input gets relaid
        got, exp = c(*args), f(*args)
        assert_close(got["t"], exp["t"])
        assert got["t"].stride() == exp["t"].stride()
        assert_close(got["pair"][0], exp["pair"][0])
        assert_close(got["pair"][1], exp["pair"][1])
        assert got["n"] == 3


def test_blocked_reductions_streamed_outputs_and_spill_into_output():
    torch.manual_seed(0)
    cases = [
        # >= 32 MiB row-contiguous output of a last pointwise stage: non-temporal stores.
        (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b),
         [torch.randn(2048, 4096), torch.randn(4096), torch.randn(4096)], True),
        (lambda x: F.log_softmax(x, -1), [torch.randn(2048, 4096)], True),
        # softmax keeps exp(x - max) in its output row, scaled in place; a 32 MiB output is
        # streamed instead and exp goes to a row on the stack.
        (lambda x: F.softmax(x, -1), [torch.randn(512, 1024)], False),
        (lambda x: F.softmax(x, -1), [torch.randn(2048, 4096)], True),
        (lambda x: x.sum(), [torch.randn(3, 1000, 1000)], False),
        (lambda x: x.amax(-1), [torch.randn(333, 1024)], False),
        (lambda x: torch.stack([x.amin(-1), x.sum(-1)]), [torch.randn(16, 4096)], False),
        (lambda x: x.double().sum(-1), [torch.randn(64, 4096)], False),
    ]
    for fn, args, streamed in cases:
        g = compile_fn(fn, *args)
        assert_close(g(*args), fn(*args))
        body = g.source[g.source.index("void kernel0("):]
        assert ("md_stream16(" in body) == streamed
    x = torch.randn(256, 1024)
    x[3, 7] = float("nan")
    g = compile_fn(lambda x: (F.softmax(x, -1), x.amax(-1)), x)
    for got, want in zip(g(x), (F.softmax(x, -1), x.amax(-1))):
        torch.testing.assert_close(got, want, equal_nan=True)
    assert "row0 = buf" in g.source or "float* row0" in g.source


def test_kernel_groups_keep_small_intermediates_on_their_stack():
    x = torch.randn(1024, 1024)
    g = compile_fn(lambda x: x.sum(), x)
    assert_close(g(x), x.sum())
    # split sum: partial sums and their total are two kernels, one exported call
    (group,) = g.groups
    assert len(group.kernels) == 2 and len(group.local) == 1 and group.stored == [group.args[0]]
    assert g.pycode.count("data_ptr(), nt)") == 1 and g.pycode.count("_empty(") == 1

    y = torch.randn(128, 64)

    def f(y):
        h = y.relu() * 2  # read by the extern call: must stay a wrapper-allocated buffer
        return torch.cumsum(h, 1).tanh().sum(-1) + y.sum()

    g = compile_fn(f, y)
    assert_close(g(y), f(y))
    (ext,) = _externs(g)
    first, second = g.groups  # the extern call (torch's cumsum) separates two groups
    assert first.stored == [ext.reads[0]] and not first.local
    assert len(second.kernels) == 2 and len(second.local) == 1  # y.sum()'s partial sums
    assert ext.names[0] in second.args


def test_large_softmax_prefetches_the_next_row_during_the_compute_passes():
    x = torch.randn(2048, 4096)
    g = compile_fn(lambda x: F.softmax(x, -1), x)
    assert_close(g(x), F.softmax(x, -1))
    assert "__builtin_prefetch(in1 + (4096 * p0 + 4096) + rb + 0, 0);" in g.source
    assert "if (p0 + 1 < 2048)" in g.source


def test_max_pool2d_unbatched_and_integer_and_padded():
    torch.manual_seed(0)
    x = torch.randint(-50, 50, (3, 9, 9))
    g = compile_fn(lambda x: F.max_pool2d(x, 3, 2), x)
    assert torch.equal(g(x), F.max_pool2d(x, 3, 2))
    y = torch.randn(1, 2, 6, 6)
    g = compile_fn(lambda y: F.max_pool2d(y, 2, padding=1), y)  # padding: an extern, still right
    assert [s for s in g.steps if not hasattr(s, "stages")]
    assert_close(g(y), F.max_pool2d(y, 2, padding=1))


def test_batch_norm_lowered_in_eval_and_training():
    torch.manual_seed(0)
    x, w, b = torch.randn(3, 4, 5, 5), torch.randn(4), torch.randn(4)
    mean, var = torch.randn(4), torch.rand(4) + 0.5

    def evaluate(x, mean, var, w, b):
        return F.batch_norm(x, mean, var, w, b, False, 0.1, 1e-5)

    def batch_stats(x, w, b):
        return F.batch_norm(x, None, None, w, b, True, 0.1, 1e-5)

    for fn, args in ((evaluate, (x, mean, var, w, b)), (batch_stats, (x, w, b))):
        g = compile_fn(fn, *args)
        assert not [s for s in g.steps if not hasattr(s, "stages")], "batch norm ran as an extern"
        assert_close(g(*args), fn(*args))


def test_cnn_training_step_matches_eager():
    torch.manual_seed(0)
    make = lambda: nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                 nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 4 * 4, 3))
    ref = make()
    model = copy.deepcopy(ref)
    x = torch.randn(4, 3, 8, 8)
    fn = lookup_backend("cpp")(torch.fx.symbolic_trace(model), [x])
    assert hasattr(fn, "__call__") and fn is not model.forward
    ref(x).square().mean().backward()
    fn(x).square().mean().backward()
    for p, q in zip(ref.parameters(), model.parameters(), strict=True):
        assert_close(q.grad, p.grad)
    assert_close(model[1].running_mean, ref[1].running_mean)
    assert_close(model[1].running_var, ref[1].running_var)
    assert int(model[1].num_batches_tracked) == int(ref[1].num_batches_tracked) == 1


def test_view_of_a_folded_copy_that_cannot_be_a_view_is_materialised(monkeypatch):
    # clone() of a transposed tensor folds into the transposed buffer; the reshape after it is
    # no view of that layout, so it gets a copy. Under aot_autograd a fake mode is active and
    # torch reports that with ValueError instead of RuntimeError.
    monkeypatch.setattr(minidynamo.config, "strict", True)  # a failed compile raises
    x = torch.randn(1, 2, 32, 32, requires_grad=True)
    w = torch.randn(64)

    def f(x):
        return x.transpose(1, 2).contiguous().view(1, 32, 64) * w

    fn = lookup_backend("cpp")(torch.fx.symbolic_trace(f), [x])
    out = fn(x)
    out.square().sum().backward()
    grad, x.grad = x.grad, None
    f(x).square().sum().backward()
    assert_close(out.detach(), f(x).detach())
    assert_close(grad, x.grad)


def test_softmax_prefetches_the_next_output_row_it_spills_into():
    x = torch.randn(512, 1024)
    g = compile_fn(lambda x: F.softmax(x, -1), x)
    assert_close(g(x), F.softmax(x, -1))
    assert "float* row0 = buf" in g.source
    assert "__builtin_prefetch(buf4 + (1024 * p0 + 1024) + rb + 0, 1);" in g.source


def test_inline_tanh_and_exp_keep_special_values():
    x = torch.tensor([-0.0, 0.0, float("nan"), float("inf"), -float("inf"), 1e-3, -20.0, 0.7,
                      44.5, -88.0, 88.5, -104.5, 0.62, -0.63])
    g = compile_fn(lambda x: (torch.tanh(x), torch.exp(x)), x)
    for got, want in zip(g(x), (torch.tanh(x), torch.exp(x))):
        torch.testing.assert_close(got, want, equal_nan=True, rtol=2e-7, atol=0)
        assert torch.equal(got.signbit(), want.signbit())


def test_large_flat_pointwise_loops_prefetch_their_inputs():
    x = torch.randn(1 << 20)
    gelu = lambda x: 0.5 * x * (1.0 + torch.tanh(0.79788456 * (x + 0.044715 * x * x * x)))
    g = compile_fn(gelu, x)
    assert_close(g(x), gelu(x))
    assert "__builtin_prefetch(in1 + 0 + pb + 1024);" in g.source
    # an offset view (slice) prefetches from its offset; a length that is no multiple of 16 and
    # small inputs keep the plain loop
    y = torch.randn((1 << 20) + 40)
    g = compile_fn(lambda y: y[8:8 + (1 << 20)].exp() * 2, y)
    assert_close(g(y), y[8:8 + (1 << 20)].exp() * 2)
    assert "__builtin_prefetch(in1 + 8 + pb + 1024);" in g.source
    for n in ((1 << 20) + 3, 4096):
        z = torch.randn(n)
        g = compile_fn(lambda z: z.exp() * 2, z)
        assert_close(g(z), z.exp() * 2)
        assert "__builtin_prefetch" not in g.source[g.source.index("void kernel0("):]


def test_long_row_reductions_touch_the_page_after_next():
    x = torch.randn(256, 16384)
    g = compile_fn(lambda x: x.sum(), x)
    assert_close(g(x), x.sum())
    assert "if (rb % 1024 == 0 && rb + 2048 < 16384) __builtin_prefetch(in1 + (16384 * p0) + rb + 2048);" \
        in g.source
    y = torch.randn(64, 1024)  # short rows: nothing to prefetch
    g = compile_fn(lambda y: y.sum(-1), y)
    assert_close(g(y), y.sum(-1))
    assert "__builtin_prefetch" not in g.source[g.source.index("void kernel0("):]


@pytest.mark.parametrize("shape", [(4,), (6, 40), (3, 2000)])
def test_softmax_row_is_not_spilled_into_another_output_of_its_loop(shape):
    """softmax keeps exp(x - max) in its output row between passes; another output stored in the
    same loop (before softmax's own store) must not be chosen as that row, or it overwrites the
    exp values before they are scaled. (The scalar's softmax puts `other` in the last loop.)"""
    ops = {"scalar_softmax": lambda x, i, s: s.softmax(0), "other": lambda x, i, s: s * i,
           "softmax": lambda x, i, s: x.softmax(-1)}
    batch = Batch(ops, torch.randn(shape) * 4, torch.randint(-9, 9, shape, dtype=torch.int8),
                  torch.tensor(2.5))
    for name in ops:
        batch.check(name)
