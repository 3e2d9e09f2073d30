"""Training graphs that used to run eagerly under cpp (a counted fallback), compiled now with gradients
equal to eager's: a boolean-mask write (`x[mask] = v`, wav2vec2's SpecAugment), whose backward reads a
data-dependent `grad[mask]`, and a forward graph that saves an expanded view for the backward (BERT's
and ALBERT's token type ids `buffer.expand(batch, seq)` before their embedding); a backward compiled for
its saved tensors as the compiled forward lays them out (T5's scores)."""
import copy

import torch
import torch.nn as nn

import minidynamo
from minidynamo import perf
from minidynamo.codegen.ir import ExternNode


def _new_graphs(before):
    return [g for g in list(perf._graphs) if g.times.number > before]


def _latest():
    return max((g.times.number for g in list(perf._graphs)), default=0)


def _grads(fn, *inputs):
    out = fn(*inputs)
    leaves = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    return (out, *torch.autograd.grad(out.pow(2).sum(), leaves))


def _assert_forward_and_backward_in_one_group_each(before):
    """No fallback; the graphs compiled since `before` are a forward and a backward, each one
    kernel group with no torch call left."""
    assert minidynamo.stats()["backend_fallbacks"] == 0
    graphs = _new_graphs(before)
    assert len(graphs) == 2
    for g in graphs:
        assert len(g.groups) == 1 and not [s.fn for s in g.steps if isinstance(s, ExternNode)]


def _masked_writes(x, y, v, mask2, mask3):
    h = x * 2
    h[mask2] = v  # the mask covers (batch, time); v fills the features
    g = y * 3
    g[:, 1:][mask3[:, 1:]] = 0.5  # a full-shape mask into a view, a scalar value
    return h.sin() + g.sum(-1, keepdim=True)


def test_boolean_mask_writes_train_compiled_with_eagers_gradients():
    x, y = torch.randn(2, 6, 4, requires_grad=True), torch.randn(2, 6, 4, requires_grad=True)
    v = torch.randn(4, requires_grad=True)
    compiled = minidynamo.optimize("cpp")(_masked_writes)
    before = _latest()
    for seed in range(3):  # new masks each call: the same graphs
        gen = torch.Generator().manual_seed(seed)
        mask2, mask3 = torch.rand(2, 6, generator=gen) > 0.5, torch.rand(2, 6, 4, generator=gen) > 0.5
        got = _grads(compiled, x, y, v, mask2, mask3)
        want = _grads(_masked_writes, x, y, v, mask2, mask3)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)
    stats = minidynamo.stats()
    assert stats["backend_fallbacks"] == 0 and stats["compiled"] == 1
    graphs = _new_graphs(before)
    assert len(graphs) == 2  # forward and backward
    for g in graphs:
        assert not [s.fn for s in g.steps if isinstance(s, ExternNode)]
        assert len(g.groups) == 1


def test_boolean_mask_write_of_one_value_per_position_stays_eagers():
    """Values with a dim for the selected positions: the size rule (and its error) are eager's."""
    def f(x, mask, values):
        h = x + 1
        h[mask] = values
        return h

    x, mask = torch.randn(5, 3, requires_grad=True), torch.tensor([True, False, True, False, False])
    values = torch.randn(2, 3, requires_grad=True)
    got = _grads(minidynamo.optimize("cpp")(f), x, mask, values)
    for a, b in zip(got, _grads(f, x, mask, values)):
        torch.testing.assert_close(a, b)


class _TokenTypes(nn.Module):
    """BERT's embeddings: token type ids from a buffer, expanded over the batch."""

    def __init__(self):
        super().__init__()
        self.words, self.types = nn.Embedding(20, 8), nn.Embedding(2, 8)
        self.register_buffer("type_ids", torch.zeros(1, 16, dtype=torch.long), persistent=False)
        self.norm = nn.LayerNorm(8)

    def forward(self, ids):
        batch, seq = ids.shape
        types = self.type_ids[:, :seq].expand(batch, seq)
        return self.norm(self.words(ids) + self.types(types))


def test_forward_saving_an_expanded_view_trains_compiled():
    torch.manual_seed(0)
    model, ids = _TokenTypes(), torch.randint(0, 20, (3, 10))
    eager = copy.deepcopy(model)
    compiled = minidynamo.optimize("cpp")(model)
    before = _latest()
    for _ in range(2):
        for m in (compiled, eager):
            m(ids).pow(2).mean().backward()
        for p, q in zip(model.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
            p.grad = q.grad = None
    _assert_forward_and_backward_in_one_group_each(before)


def _rotary(q, cos, sin):
    """Llama's rotary embedding: its backward scatters each half's gradient into a slice (slice_scatter)."""
    half = q.shape[-1] // 2
    rotated = torch.cat([-q[..., half:], q[..., :half]], -1)
    return (q * cos + rotated * sin).softmax(-1)


def test_rotary_backward_scatters_slices_inside_the_kernel_group():
    q = torch.randn(2, 4, 6, 8, requires_grad=True)
    angles = torch.arange(6.0)[:, None] * torch.arange(1.0, 9.0)
    cos, sin = angles.cos(), angles.sin()
    compiled = minidynamo.optimize("cpp")(_rotary)
    before = _latest()
    for _ in range(2):
        for a, b in zip(_grads(compiled, q, cos, sin), _grads(_rotary, q, cos, sin)):
            torch.testing.assert_close(a, b)
    _assert_forward_and_backward_in_one_group_each(before)


def _t5_scores(q, k, v):
    """T5's attention: its key (a concatenation) transposed and scaled by 1.0, saved for the
    backward in the layout the forward's kernel gives it, not the one aot_autograd's trace gave it."""
    k = torch.cat([k[:, :, :1] * 2, k[:, :, 1:]], dim=-2)
    return torch.matmul(torch.matmul(q, k.transpose(3, 2) * 1.0).softmax(-1), v)


def test_backward_is_compiled_for_the_saved_tensors_as_the_forward_lays_them_out():
    q, k, v = (torch.randn(2, 4, n, 16, requires_grad=True) for n in (5, 7, 7))
    compiled = minidynamo.optimize("cpp")(_t5_scores)
    before = _latest()
    relaid = []
    for step in range(2):
        for a, b in zip(_grads(compiled, q, k, v), _grads(_t5_scores, q, k, v)):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)  # float32 products summed in another order
        if step == 0:  # count the inputs copied into another layout from the second call on
            for g in _new_graphs(before):
                fix = g._globals["_fix_input"]
                g._globals["_fix_input"] = lambda t, buf, fix=fix: relaid.append(buf.name) or fix(t, buf)
    assert minidynamo.stats()["backend_fallbacks"] == 0
    assert sorted(g.times.role for g in _new_graphs(before)) == ["backward", "forward"] and relaid == []
