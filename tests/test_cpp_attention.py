"""Scaled dot-product attention in the generated C++ (codegen/cpp_attention): torch's CPU flash
attention forward and backward as Attention steps, against eager's outputs and gradients, for
causal and masked heads, grouped-query heads, rows with every key masked, odd sizes, a given
scale, float32 and float64; heads too large for the generated loops stay torch calls."""
import pytest
import torch
import torch.nn.functional as F

import minidynamo
from minidynamo import perf
from minidynamo.codegen import cpp_attention
from minidynamo.codegen.cpp_attention import BACKWARD, FORWARD, Attention
from minidynamo.codegen.ir import ExternNode

# (batch, heads, key/value heads, queries, keys, head dim, causal, mask)
CASES = [
    (2, 4, 2, 8, 8, 16, True, None),  # llama: causal, grouped-query heads
    (1, 3, 3, 5, 7, 12, False, "float"),  # a (queries, keys) float mask, broadcast
    (2, 2, 2, 6, 6, 5, False, "bool"),  # a boolean mask with rows every key of which is masked
    (2, 2, 1, 7, 4, 8, True, "heads"),  # more queries than keys, causal and a per-head mask
    (1, 2, 2, 3, 9, 16, True, None),  # fewer queries than keys
    (2, 4, 4, 17, 17, 16, False, None),  # vit's 17 tokens: enough work for the parallel loop
]
LARGE = (1, 1, 1, 64, 64, 16, False, None)  # past MAX_HEAD_MACS: torch's kernel


def _inputs(case, dtype, gen):
    b, h, hk, lq, lk, d, causal, mask = case
    q = torch.randn(b, h, lq, d, dtype=dtype, generator=gen)
    k, v = (torch.randn(b, hk, lk, d, dtype=dtype, generator=gen) for _ in range(2))
    if mask == "float":
        mask = torch.randn(lq, lk, dtype=dtype, generator=gen)
    elif mask == "bool":
        mask = torch.rand(b, 1, lq, lk, generator=gen) > 0.3
        mask[0, 0, 1] = False  # every key of a row masked
    elif mask == "heads":
        mask = torch.randn(b, h, lq, lk, dtype=dtype, generator=gen)
    return [q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), mask]


def _attend(cases, *tensors):
    outs = []
    for i, case in enumerate(cases):
        q, k, v, mask = tensors[4 * i: 4 * i + 4]
        scale = 0.3 if i == 1 else None
        outs.append(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=case[6], scale=scale,
                                                   enable_gqa=case[1] != case[2]))
    return tuple(outs)


def _grads(fn, tensors):
    outs = fn(*tensors)
    leaves = [t for t in tensors if t is not None and t.requires_grad]
    return [*outs, *torch.autograd.grad(sum(o.pow(2).sum() for o in outs), leaves)]


def _new_graphs(before):
    return [g for g in list(perf._graphs) if g.times.number > before]


def _latest():
    return max((g.times.number for g in list(perf._graphs)), default=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attention_forward_and_backward_in_the_generated_code(dtype):
    cases = CASES + [LARGE]
    gen = torch.Generator().manual_seed(0)
    tensors = [t for case in cases for t in _inputs(case, dtype, gen)]
    fn = lambda *ts: _attend(cases, *ts)  # noqa: E731
    compiled = minidynamo.optimize("cpp")(fn)
    before = _latest()
    got, want = _grads(compiled, tensors), _grads(fn, tensors)
    tol = {} if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **tol)
    assert minidynamo.stats()["backend_fallbacks"] == 0
    graphs = {g.times.role: g for g in _new_graphs(before)}
    assert sorted(graphs) == ["backward", "forward"]
    for role, op in (("forward", FORWARD), ("backward", BACKWARD)):
        graph = graphs[role]
        steps = [s for s in graph.steps if isinstance(s, Attention)]
        assert len(steps) == len(CASES) and {s.backward for s in steps} == {role == "backward"}
        # the large head is the one torch call left
        externs = [s for s in graph.steps if isinstance(s, ExternNode)]
        assert [s.fn for s in externs] == [op] and externs[0].args[0].size[2] * externs[0].args[1].size[2] \
            * externs[0].args[0].size[3] > cpp_attention.MAX_HEAD_MACS
    # no grad: the forward alone (its log-sum-exp read by nothing), on two threads
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.no_grad():
            torch.testing.assert_close(compiled(*tensors), fn(*tensors), **tol)
    finally:
        torch.set_num_threads(threads)
    assert minidynamo.stats()["backend_fallbacks"] == 0


def test_fully_masked_rows_match_torchs_kernel():
    """A row whose every key is masked: zeros and a log-sum-exp of 0, and zero gradients, as
    torch's flash kernel gives them (the generated step against the op itself)."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 4, 8, generator=gen, requires_grad=True) for _ in range(3))
    mask = torch.zeros(4, 4)
    mask[2] = float("-inf")

    def f(q, k, v, mask):
        out, lse = FORWARD(q, k, v, 0.0, False, attn_mask=mask)
        return out, lse

    got, want = minidynamo.optimize("cpp")(f)(q, k, v, mask), f(q, k, v, mask)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    assert got[1][0, :, 2].eq(0).all() and got[0][0, :, 2].eq(0).all()
