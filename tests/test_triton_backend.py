"""The "triton" backend: the cpp backend's op and fusion cases, run through the Triton emitter.

Without a GPU the kernels run on CPU tensors in Triton's interpreter (TRITON_INTERPRET=1, set by
the backend module before the kernels are loaded). The interpreter is slow, so ops are batched into
one graph per family as in test_cpp_backend, and sizes stay small.
"""
import functools
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

pytest.importorskip("triton", reason="the triton backend needs the optional triton package")

import minidynamo.backends.triton  # noqa: E402,F401  (sets TRITON_INTERPRET=1 without a GPU)
import minidynamo.config  # noqa: E402
from minidynamo.backends import lookup_backend  # noqa: E402
from minidynamo.codegen import graph_lowering, triton_cache, triton_pipeline, triton_wrapper  # noqa: E402
from minidynamo.codegen.ir import ExternNode  # noqa: E402
from minidynamo.codegen.scheduler import Kernel  # noqa: E402
from minidynamo.codegen.triton_pipeline import compile_triton_graph  # noqa: E402
from minidynamo.codegen.triton_wrapper import LaunchConfig  # noqa: E402
from test_cpp_backend import (  # noqa: E402
    BINARY, BINARY_EXTERNS, REDUCTION_EXTERNS, REDUCTIONS, UNARY, VIEW_EXTERNS, VIEWS, A, B, BOOL, IA, IB,
    POS, R, RI, UNIT, V, X, Batch,
    _kernels, _stored, assert_close,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TritonBatch = functools.partial(Batch, compile=compile_triton_graph)


@pytest.fixture(scope="module", autouse=True)
def cache_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("triton-cache"))
    old = minidynamo.config.cache_dir
    minidynamo.config.cache_dir = path
    yield path
    minidynamo.config.cache_dir = old


def compile_fn(fn, *inputs, **kw):
    return compile_triton_graph(torch.fx.symbolic_trace(fn), list(inputs), **kw)


@pytest.fixture(scope="module")
def unary():
    return TritonBatch(UNARY, X, POS, UNIT)


@pytest.mark.parametrize("name", list(UNARY))
def test_unary(unary, name):
    unary.check(name)


@pytest.fixture(scope="module")
def binary():
    return TritonBatch(BINARY, A, B, IA, IB, BOOL, externs=BINARY_EXTERNS)


@pytest.mark.parametrize("name", list(BINARY))
def test_binary(binary, name):
    binary.check(name)


@pytest.fixture(scope="module")
def reductions():
    return TritonBatch(REDUCTIONS, R, RI, externs=REDUCTION_EXTERNS)


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reduction(reductions, name):
    reductions.check(name)


@pytest.fixture(scope="module")
def looped_reductions():
    # Rows longer than 4 elements take the looped path, in chunks narrower than the rows.
    return TritonBatch(REDUCTIONS, R, RI, persistent_max=4, externs=REDUCTION_EXTERNS)


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_looped_reduction(looped_reductions, name):
    looped_reductions.check(name)


def test_reduction_kinds_emitted(reductions, looped_reductions):
    kinds = {k.kind for k in reductions.compiled.rendered}
    assert {"pointwise", "persistent"} <= kinds
    assert "looped" in {k.kind for k in looped_reductions.compiled.rendered}
    assert "for roffset in range(" in looped_reductions.compiled.source


@pytest.fixture(scope="module")
def views():
    return TritonBatch(VIEWS, V, externs=VIEW_EXTERNS + ("aten.cat.default",))  # cat: a kernel-group copy in cpp only


@pytest.mark.parametrize("name", list(VIEWS))
def test_views(views, name):
    views.check(name)


@pytest.mark.parametrize("persistent_max", [16384, 2])
def test_nan_propagation(persistent_max):
    x = torch.randn(4, 16)
    x[1, 3] = x[2, 0] = float("nan")
    y = torch.randn(4, 16)
    y[3, 5] = float("nan")
    ops = {
        "amax": lambda x, y: x.amax(1), "amin": lambda x, y: x.amin(0), "max_all": lambda x, y: x.max(),
        "argmax": lambda x, y: x.argmax(1), "argmin": lambda x, y: x.argmin(0),
        "maximum": lambda x, y: torch.maximum(x, y), "minimum": lambda x, y: torch.minimum(y, x),
        "clamp": lambda x, y: x.clamp(-0.1, 0.1), "softmax": lambda x, y: F.softmax(x, 1),
        "sum": lambda x, y: x.sum(0),
    }
    batch = TritonBatch(ops, x, y, persistent_max=persistent_max)
    for name in ops:
        batch.check(name)


def test_long_full_reduction_is_split(monkeypatch):
    # A lower split threshold keeps the interpreter quick: it runs amax's NaN-propagating combine
    # element by element in Python.
    monkeypatch.setattr(graph_lowering, "_SPLIT_MIN_NUMEL", 1 << 12)
    x = torch.randn(1 << 12)
    c = compile_fn(lambda x: (x.sum(), x.amax()), x)
    for a, b in zip(c(x), (x.sum(), x.amax())):
        assert_close(a, b)
    assert all(k.rnumel < x.numel() for k in c.rendered)


# -- fusion -------------------------------------------------------------------------------------


def test_pointwise_chain_is_one_masked_kernel():
    def chain(x, y):
        return ((x * y + 1).sin() * 0.5 - y).exp().relu() / 3

    x, y = torch.randn(50, 60), torch.randn(50, 60)
    c = compile_fn(chain, x, y)
    assert_close(c(x, y), chain(x, y))
    (k,) = c.rendered
    assert k.kind == "pointwise" and k.xnumel == 3000
    assert "xmask = xindex < 3000" in k.source and k.source.count("tl.store(") == 1


def test_softmax_is_one_kernel_storing_only_its_output():
    x = torch.randn(32, 100)
    c = compile_fn(lambda x: F.softmax(x, -1), x)
    assert_close(c(x), F.softmax(x, -1))
    (k,) = c.rendered
    assert k.kind == "persistent" and len(_stored(c)) == 1
    # The row is loaded once; the later stages reuse its registers.
    assert k.source.count("tl.load(") == 1


def test_layer_norm_and_gelu_block_is_one_kernel():
    block = nn.Sequential(nn.LayerNorm(64), nn.GELU())
    x = torch.randn(16, 64)
    with torch.no_grad():
        c = compile_fn(block, x)
        assert_close(c(x), block(x))
    assert len(c.rendered) == 1 and len(_stored(c)) == 1


def test_reduction_with_prologue_and_epilogue_fused():
    x = torch.randn(40, 50)

    def f(x):
        y = x * 2 + 1
        return y, y.sum(-1, keepdim=True) / y.amax(-1, keepdim=True)

    c = compile_fn(f, x)
    for a, b in zip(c(x), f(x)):
        assert_close(a, b)
    assert len(c.rendered) == 1


def test_matmul_bias_gelu_epilogue_after_torch_matmul():
    f = nn.Sequential(nn.Linear(32, 48), nn.GELU(approximate="tanh"))
    x = torch.randn(20, 32)
    with torch.no_grad():
        c = compile_fn(f, x)
        assert_close(c(x), f(x))
    assert [e.fn for e in c.steps if isinstance(e, ExternNode)] == [torch.ops.aten.mm.default]
    (k,) = c.rendered
    assert k.kind == "pointwise" and "libdevice.tanh" in k.source


def test_common_subexpressions_and_dead_code():
    x = torch.randn(64, 64)

    def f(x):
        unused = x.cos().sum()  # noqa: F841 (dead: never returned)
        a = torch.sin(x) * 2
        b = torch.sin(x) * 2
        return a + b, a.sum(), b.sum()

    c = compile_fn(f, x)
    for a, b in zip(c(x), f(x)):
        assert_close(a, b)
    assert c.source.count("tl.sin(") == 1 and "tl.cos(" not in c.source


def test_offsets_switch_to_int64_past_int32():
    x = torch.randn(1).expand(1 << 16, 1 << 16)  # 2**32 elements, no memory behind them
    from torch.fx.experimental.proxy_tensor import make_fx

    from minidynamo.codegen.graph_lowering import GraphLowering
    from minidynamo.codegen.scheduler import Scheduler
    from minidynamo.codegen.triton_render import render_triton

    # Traced on fake tensors only: the pipeline's trace runs the graph eagerly once (16 GiB here).
    lowering = GraphLowering(make_fx(lambda x: x * 2, tracing_mode="fake")(x), [x])
    lowering.run()
    steps = Scheduler(lowering.nodes, {lowering.outputs[0].buffer}).run()
    source, _ = render_triton([s for s in steps if isinstance(s, Kernel)], lowering.buffers)
    assert "tl.program_id(0).to(tl.int64)" in source


# -- the backend --------------------------------------------------------------------------------


def test_unsupported_devices_fall_back_to_eager(monkeypatch):
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    meta = torch.empty(3, device="meta")
    assert lookup_backend("triton")(gm, [meta]) == gm.forward
    # With a GPU (not interpreting), graphs on CPU tensors run eagerly.
    monkeypatch.setattr(triton_pipeline, "interpreting", lambda: False)
    assert lookup_backend("triton")(gm, [torch.randn(3)]) == gm.forward


def test_through_minidynamo_optimize():
    import minidynamo

    def f(x):
        return F.softmax(x * 2, -1).sum(0)

    x = torch.randn(5, 9)
    with minidynamo.optimize("triton"):
        out = f(x)
    assert_close(out, f(x))


# -- caching and tuning -------------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import json, sys, torch
    import minidynamo.backends.triton
    import minidynamo.config
    from minidynamo.codegen import triton_cache
    from minidynamo.codegen.triton_pipeline import compile_triton_graph
    minidynamo.config.cache_dir = sys.argv[1]
    def f(x):
        return (x.exp() + 1).log() * x.sum(-1, keepdim=True)
    x = torch.linspace(-2, 2, 600).reshape(20, 30)
    c = compile_triton_graph(torch.fx.symbolic_trace(f), [x])
    ok = torch.allclose(c(x), f(x), rtol=1e-5, atol=1e-6)
    print(json.dumps(dict(triton_cache.stats, ok=ok)))
""")


def run_child(cache):
    proc = subprocess.run([sys.executable, "-c", CHILD, cache], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_second_process_reuses_the_cached_module(tmp_path):
    cache = str(tmp_path / "cache")
    first = run_child(cache)
    assert first["ok"] and first["writes"] == 1 and first["disk_hits"] == 0
    second = run_child(cache)
    assert second["ok"] and second["writes"] == 0 and second["disk_hits"] == 1


def test_in_memory_cache_reuses_module():
    x = torch.randn(10, 10)
    before = dict(triton_cache.stats)
    a = compile_fn(lambda x: x * 2 + 1, x)
    b = compile_fn(lambda x: x * 2 + 1, x)
    assert a.module is b.module
    assert triton_cache.stats["memory_hits"] == before["memory_hits"] + 1


def test_autotune_picks_the_fastest_and_remembers_it(monkeypatch):
    configs = [LaunchConfig(16), LaunchConfig(64), LaunchConfig(256)]
    timed = []

    def fake_bench(run):
        run()
        timed.append(run)
        return [3.0, 1.0, 2.0][len(timed) - 1]

    monkeypatch.setattr(triton_wrapper, "candidate_configs", lambda k: configs)
    monkeypatch.setattr(triton_wrapper, "bench", fake_bench)

    def f(x):
        return x.sin() + 1

    x = torch.randn(300)
    c = compile_fn(f, x)
    assert_close(c(x), f(x))
    assert len(timed) == 3
    store = json.load(open(c.store.path))
    assert list(store.values()) == [{"XBLOCK": 64, "RBLOCK": 0, "num_warps": 4}]
    # A fresh compile of the same graph reads the choice back instead of timing again.
    triton_cache._modules.clear()
    before = triton_cache.stats["tune_hits"]
    again = compile_fn(f, x)
    assert_close(again(x), f(x))
    assert len(timed) == 3 and triton_cache.stats["tune_hits"] == before + 1


def test_missing_triton_gives_a_clear_error():
    code = textwrap.dedent("""
        import sys
        sys.modules["triton"] = None  # as if triton were not installed
        import torch, minidynamo
        with minidynamo.optimize("eager"):
            pass
        try:
            minidynamo.lookup_backend("triton")
        except ImportError as e:
            print("ERROR:", e)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "ERROR: the 'triton' backend needs the triton package" in proc.stdout
    assert "pip install 'minidynamo[triton]'" in proc.stdout
