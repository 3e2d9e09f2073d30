"""Translator: torch functions, Tensor methods and tensor metadata used as constants.
Whole-graph functions only."""
import pytest
import torch
import torch.nn.functional as F

from translator_harness import (  # noqa: F401
    CompileCounter,
    assert_equal,
    assert_same,
    fresh_dynamo,
    optimize,
    rand,
)


# ---------------------------------------------------------------------------------------------
# torch functions
# ---------------------------------------------------------------------------------------------
def tf_add_alpha(x, y):
    return torch.add(x, y, alpha=2)


def tf_cat_stack(x, y):
    return torch.cat([x, y], dim=0), torch.stack((x, y), dim=-1)


def tf_where(x, y):
    return torch.where(x > y, x, y), torch.where(x > 0, x, 0.0)


def tf_matmul(x, y):
    return torch.matmul(x, y.t()), torch.mm(x, y.t()), torch.bmm(x[None], y.t()[None])


def tf_functional(x, y):
    return F.relu(x), F.gelu(y), F.softmax(x, dim=-1), F.log_softmax(y, dim=0)


def tf_layer_norm_linear(x, y):
    w = torch.ones(x.shape[-1])
    return F.layer_norm(x, (x.shape[-1],), w, None, 1e-5), F.linear(x, y, None)


def tf_dropout_eval(x, y):
    return F.dropout(x, p=0.5, training=False) + y


def tf_creation(x, y):
    z = torch.zeros_like(x) + torch.ones(x.shape) + torch.full((x.shape[0], 1), 2.0)
    e = torch.eye(x.shape[0])
    a = torch.arange(x.shape[1], dtype=x.dtype)
    return z + a, e @ y


def tf_reductions(x, y):
    return torch.sum(x), torch.mean(x, dim=0), torch.amax(y, dim=1), torch.prod(x + 1, 1), torch.norm(y)


def tf_elementwise(x, y):
    return torch.exp(x), torch.log(y.abs() + 1), torch.sqrt(x.abs()), torch.clamp(y, -0.1, 0.1), torch.sigmoid(x) * torch.tanh(y)


def tf_comparisons(x, y):
    return torch.maximum(x, y), torch.minimum(x, y), torch.eq(x, y), torch.gt(x, 0).any(), torch.isclose(x, x).all()


def tf_shape_funcs(x, y):
    return torch.flatten(x), torch.transpose(y, 0, 1), torch.unsqueeze(x, 0).squeeze(0), torch.broadcast_to(x[:1], x.shape)


def tf_cumulative(x, y):
    return torch.cumsum(x, 0), torch.argmax(y, dim=1), torch.sort(x, dim=1).values, torch.topk(y, 2, dim=1).indices


def tf_einsum(x, y):
    return torch.einsum("ij,kj->ik", x, y)


TORCH_FNS = [tf_add_alpha, tf_cat_stack, tf_where, tf_matmul, tf_functional, tf_layer_norm_linear,
             tf_dropout_eval, tf_creation, tf_reductions, tf_elementwise, tf_comparisons, tf_shape_funcs,
             tf_cumulative, tf_einsum]


@pytest.mark.parametrize("fn", TORCH_FNS, ids=lambda f: f.__name__)
def test_torch_functions(fn):
    assert_same(fn, (rand(3, 3), rand(3, 3)), (rand(3, 3), rand(3, 3)), (rand(4, 4), rand(4, 4)), graphs=2)


# ---------------------------------------------------------------------------------------------
# tensor methods
# ---------------------------------------------------------------------------------------------
def tm_view_reshape(x):
    return x.view(-1), x.reshape(x.shape[1], x.shape[0]), x.view(2, -1).contiguous()


def tm_permute_transpose(x):
    if x.dim() == 3:
        return x.permute(2, 0, 1), x.transpose(0, 2), x.mT
    return x.t(), x.transpose(0, 1), x.permute(1, 0).contiguous()


def tm_reductions(x):
    return x.sum(), x.sum(dim=1), x.mean(-1, keepdim=True), x.std(), x.var(0), x.min(), x.abs().max()


def tm_max_dim_namedtuple(x):
    r = x.max(dim=1)
    vals, idx = x.min(0)
    return r.values * 2, r.indices, r, vals + 1, idx


def tm_chunk_split(x):
    a, b = x.chunk(2, dim=0)
    parts = x.split(1, dim=1)
    return a - b, parts, len(parts), x.split([1, 3], dim=1)


def tm_metadata_constants(x):
    n = x.size(0) * x.size()[1] + x.shape[-1] + x.ndim + x.dim() + x.numel()
    return x * n, x.size(), x.shape, x.dtype, x.device, x.ndim, x.numel()


def tm_dtype_conversions(x):
    return x.to(torch.float64), x.float(), x.double(), x.to(dtype=torch.int32), x.half().float(), x.bool(), x.long()


def tm_masked_fill(x):
    return x.masked_fill(x < 0, 0.0), x.masked_fill(torch.eye(x.shape[1], dtype=torch.bool)[: x.shape[0]], -1)


def tm_inplace_on_clone(x):
    y = x.clone()
    y.add_(1)
    y.mul_(2)
    y.clamp_(min=0)
    y[0].zero_()
    return y


def tm_clone_detach(x):
    return x.clone(), x.detach() * 2, x.clone().contiguous()


def tm_unary_methods(x):
    return x.exp(), x.abs().sqrt(), x.sigmoid(), x.neg(), x.relu(), x.softmax(-1), x.pow(2), x.round()


def tm_expand_repeat(x):
    return x[:, :1].expand(-1, 4), x.repeat(2, 1), x.unsqueeze(1).expand(x.shape[0], 2, x.shape[1]).flatten(1)


def tm_type_as_new(x):
    y = torch.ones(2, dtype=torch.int64)
    return y.type_as(x) * 2, x.new_zeros(3) + 1, x.new_full((2,), 5.0)


def tm_matmul_methods(x):
    return x.matmul(x.t()), x.mm(x.t()), x.T @ x


def tm_item_free_metadata(x):
    # everything here is known at trace time
    if x.is_contiguous() and not x.is_complex():
        return x.flip(0), x.stride(), x.element_size()
    return x, x.stride(), 0


TENSOR_METHODS_2D = [tm_view_reshape, tm_reductions, tm_max_dim_namedtuple, tm_chunk_split, tm_metadata_constants,
                     tm_dtype_conversions, tm_masked_fill, tm_inplace_on_clone, tm_clone_detach, tm_unary_methods,
                     tm_expand_repeat, tm_type_as_new, tm_matmul_methods, tm_item_free_metadata]


@pytest.mark.parametrize("fn", TENSOR_METHODS_2D, ids=lambda f: f.__name__)
def test_tensor_methods(fn):
    assert_same(fn, rand(2, 4), rand(2, 4), rand(4, 4), graphs=2)


def test_permute_transpose():
    assert_same(tm_permute_transpose, rand(2, 3, 4), rand(2, 3), graphs=2)


def test_requires_grad_propagates():
    def f(x, w):
        return (x * w).sum(0), x.detach() * 2

    assert_same(f, (rand(3, 2), rand(2, requires_grad=True)), graphs=1)


def test_int_tensor_ops():
    def f(idx, x):
        return x[idx], idx.max(), (idx * 2) // 3, idx.float().mean()

    assert_same(f, (torch.tensor([0, 2, 1]), rand(3, 2)), graphs=1)


def test_metadata_dtype_change_recompiles():
    cnt = assert_same(tm_metadata_constants, rand(2, 2), rand(2, 2, dtype=torch.float64), rand(2, 2), graphs=2)
    assert cnt.frame_count == 2


def test_scalar_tensor_arithmetic():
    def f(x, s):
        return x * s + s, (s * 3).exp()

    assert_same(f, (rand(3), torch.tensor(2.0)), (rand(3), torch.tensor(-1.0)), graphs=1)


def test_non_contiguous_input():
    def f(x):
        return x.reshape(-1) * 2

    base = torch.randn(4, 3)
    assert_same(f, base.t(), base.t().contiguous(), graphs=2)
