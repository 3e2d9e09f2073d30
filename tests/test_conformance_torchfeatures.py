"""Conformance: torch features run inside compiled frames: activation checkpointing
(torch.utils.checkpoint), torch.func transforms (grad, grad_and_value, vmap, jacrev, jacfwd, hessian),
torch._foreach_* ops with tensor scalars and scalar lists, and nested tensors (run eagerly, cleanly).
Each small function is checked against eager (outputs, gradients, mutated inputs) and torch._dynamo."""
import pytest
import torch
import torch.utils.checkpoint as cp
from torch.func import grad, grad_and_value, hessian, jacfwd, jacrev, vmap

from translator_harness import (  # noqa: F401
    REFERENCE,
    Args,
    CompileCounter,
    assert_equal,
    assert_same,
    explain,
    frames_compiled,
    fresh_dynamo,
    minidynamo_only,
    optimize,
    reference_only_skip,
)


def r(*shape, grad=False):
    return torch.randn(*shape, requires_grad=grad)


LIN = torch.nn.Linear(4, 4)
SCALE = torch.randn(4)


def sin2(y):
    return torch.sin(y) * 2


def two(a, b):
    return a * b + a.cos()


def pair(y):
    return y.sin(), y.cos() + 1


# ---------------------------------------------------------------------------------------------
# torch.utils.checkpoint: one graph (torch: the tag_activation_checkpoint higher-order op)
# ---------------------------------------------------------------------------------------------
def ckpt_lambda(x):
    return cp.checkpoint(lambda y: y.relu() * 3, x.cos(), use_reentrant=False) + 1


def ckpt_reentrant(x):
    return cp.checkpoint(sin2, x + 1, use_reentrant=True) - 1


def ckpt_function(x):
    return cp.checkpoint(sin2, x, use_reentrant=False).sum(0)


def ckpt_two_args(x, y):
    return cp.checkpoint(two, x, y, use_reentrant=False) * 2


def ckpt_two_args_reentrant(x, y):
    return cp.checkpoint(two, x, y, use_reentrant=True) * 2


def ckpt_fn_kwarg(x, y):
    return cp.checkpoint(two, x, b=y, use_reentrant=False)


def ckpt_constant_arg(x):
    return cp.checkpoint(lambda y, k: y * k + k, x, 3, use_reentrant=False)


def ckpt_none_arg(x):
    return cp.checkpoint(lambda y, m: y if m is None else y * m, x, None, use_reentrant=False) + 1


def ckpt_closure_tensor(x):
    w = x.sum() + 1
    return cp.checkpoint(lambda y: y * w, x, use_reentrant=False)


def ckpt_global_tensor(x):
    return cp.checkpoint(lambda y: y * SCALE, x, use_reentrant=False)


def ckpt_module(x):
    return cp.checkpoint(LIN, x, use_reentrant=False).relu()


def ckpt_module_reentrant(x):
    return cp.checkpoint(LIN, x, use_reentrant=True).relu()


def ckpt_module_in_lambda(x):
    return cp.checkpoint(lambda y: torch.tanh(LIN(y)), x, use_reentrant=False)


def ckpt_returns_tuple(x):
    a, b = cp.checkpoint(pair, x, use_reentrant=False)
    return a * b


def ckpt_returns_list(x):
    out = cp.checkpoint(lambda y: [y + 1, y * 2], x, use_reentrant=False)
    return out[0] - out[1]


def ckpt_nested(x):
    return cp.checkpoint(lambda y: cp.checkpoint(sin2, y, use_reentrant=False) + 1, x, use_reentrant=False)


def ckpt_twice(x):
    y = cp.checkpoint(sin2, x, use_reentrant=False)
    return cp.checkpoint(sin2, y, use_reentrant=False)


def ckpt_no_preserve_rng(x):
    return cp.checkpoint(sin2, x, use_reentrant=False, preserve_rng_state=False)


def ckpt_under_no_grad(x):
    with torch.no_grad():
        y = cp.checkpoint(sin2, x, use_reentrant=False)
    return y + x


def ckpt_reads_shape(x):
    return cp.checkpoint(lambda y: y.reshape(y.shape[0], -1).sum(1), x, use_reentrant=False)


def ckpt_matmul_chain(x, y):
    return cp.checkpoint(lambda a, b: (a @ b).softmax(-1) @ b.t(), x, y, use_reentrant=False)


def ckpt_determinism_none(x):
    return cp.checkpoint(sin2, x, use_reentrant=False, determinism_check="none")


def ckpt_in_loop(x):
    for _ in range(3):
        x = cp.checkpoint(sin2, x, use_reentrant=False)
    return x


class CkptBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 8), torch.nn.Linear(8, 4)

    def inner(self, x):
        return self.b(torch.nn.functional.gelu(self.a(x)))

    def forward(self, x):
        return x + cp.checkpoint(self.inner, x, use_reentrant=False)


BLOCK = CkptBlock()


def ckpt_bound_method(x):
    return BLOCK(x).mean()


def ckpt_sequential_module(x):
    seq = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Tanh())
    return cp.checkpoint(seq, x, use_reentrant=False)


CHECKPOINT = {f.__name__: (f, args) for f, args in [
    (ckpt_lambda, r(3, 4)), (ckpt_reentrant, r(3, 4, grad=True)), (ckpt_function, r(3, 4)),
    (ckpt_two_args, (r(3, 4), r(3, 4))), (ckpt_two_args_reentrant, (r(3, 4, grad=True), r(3, 4))),
    (ckpt_fn_kwarg, (r(3, 4), r(3, 4))),
    (ckpt_constant_arg, r(3, 4)), (ckpt_none_arg, r(3, 4)), (ckpt_closure_tensor, r(3, 4)),
    (ckpt_global_tensor, r(3, 4)), (ckpt_module, r(3, 4)), (ckpt_module_reentrant, r(3, 4, grad=True)),
    (ckpt_module_in_lambda, r(3, 4)), (ckpt_returns_tuple, r(3, 4)), (ckpt_returns_list, r(3, 4)),
    (ckpt_nested, r(3, 4)), (ckpt_twice, r(3, 4)), (ckpt_no_preserve_rng, r(3, 4)),
    (ckpt_under_no_grad, r(3, 4)), (ckpt_reads_shape, r(3, 4, 2)), (ckpt_matmul_chain, (r(3, 4), r(4, 4))),
    (ckpt_determinism_none, r(3, 4)), (ckpt_in_loop, r(3, 4)), (ckpt_bound_method, r(3, 4)),
    (ckpt_sequential_module, r(3, 4)),
]}


@pytest.mark.parametrize("name", sorted(CHECKPOINT))
def test_checkpoint_one_graph(name):
    fn, args = CHECKPOINT[name]
    assert_same(fn, args, graphs=1)


# ---- forward and backward, with dropout inside the checkpointed function ----
class DropBlock(torch.nn.Module):
    def __init__(self, reentrant: bool, p: float = 0.5):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(4, 8), torch.nn.Linear(8, 4)
        self.p, self.reentrant = p, reentrant

    def inner(self, x):
        return self.l2(torch.nn.functional.dropout(torch.relu(self.l1(x)), self.p, training=True))

    def forward(self, x):
        return cp.checkpoint(self.inner, x * 2, use_reentrant=self.reentrant).pow(2).sum()


def seeded_forward_backward(model, fn, seed):
    """Output and gradients (input's, then parameters') of one training step drawn from `seed`."""
    torch.manual_seed(seed)
    x = torch.randn(5, 4, requires_grad=True)
    for p in model.parameters():
        p.grad = None
    loss = fn(x)
    loss.backward()
    return [loss.detach(), x.grad, *(p.grad for p in model.parameters())]


@pytest.mark.parametrize("reentrant", [False, True])
@pytest.mark.parametrize("p", [0.0, pytest.param(0.5, marks=reference_only_skip(
    "torch 2.13's tag_activation_checkpoint leaves the random state to inductor: outside it, backward "
    "recomputes dropout with other draws than eager's"))])
def test_checkpoint_gradients_and_dropout_match_eager(reentrant, p):
    torch.manual_seed(0)
    model = DropBlock(reentrant, p)
    cnt = CompileCounter()
    compiled = optimize(cnt, nopython=True)(model)
    for seed in range(3):
        want = seeded_forward_backward(model, model, seed)
        got = seeded_forward_backward(model, compiled, seed)
        assert_equal(got, want)
    assert cnt.frame_count == 1


def test_checkpoint_recomputes_in_backward():
    """The checkpointed function runs again in backward (activations are not kept), as in eager."""
    def body(y):
        z = y.sin()
        return z * z

    def fn(x):
        return cp.checkpoint(body, x, use_reentrant=False).sum()

    def count_saved(f):
        saved = []
        x = torch.linspace(-1, 1, 8, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t, lambda t: t):
            out = f(x)
        out.backward()
        return len(saved), x.grad

    cnt = CompileCounter()
    compiled = optimize(cnt, nopython=True)(fn)
    eager_saved, eager_grad = count_saved(fn)
    ours_saved, ours_grad = count_saved(compiled)
    assert ours_saved == eager_saved
    torch.testing.assert_close(ours_grad, eager_grad)
    assert cnt.frame_count == 1


# ---- functions checkpoint cannot take into a graph: the call runs in Python, results stay eager's ----
def ckpt_body_appends(x):
    seen = []

    def body(y):
        seen.append(1)
        return y * 2

    return cp.checkpoint(body, x, use_reentrant=False) + len(seen)


def ckpt_body_in_place_on_input(x):
    return cp.checkpoint(lambda y: y.mul_(2), x.clone(), use_reentrant=False) + 1


def ckpt_body_item(x):
    return cp.checkpoint(lambda y: y * y.sum().item(), x, use_reentrant=False) + 1


CHECKPOINT_FALLBACK = {f.__name__: f for f in [ckpt_body_appends, ckpt_body_in_place_on_input, ckpt_body_item]}


@pytest.mark.parametrize("name", sorted(CHECKPOINT_FALLBACK))
def test_checkpoint_untraceable_body_stays_correct(name):
    assert_same(CHECKPOINT_FALLBACK[name], r(3, 4), graphs=None, nopython=False)


# ---------------------------------------------------------------------------------------------
# torch.func transforms: transform(f, ...)(*tensors) is one graph
# ---------------------------------------------------------------------------------------------
def sum_sin(y):
    return y.sin().sum()


def f_grad(x):
    return grad(sum_sin)(x.cos()) + 1


def f_grad_lambda(x):
    return grad(lambda y: (y * y).sum())(x)


def f_grad_argnums1(x, y):
    return grad(lambda a, b: (a * b.exp()).sum(), argnums=1)(x, y)


def f_grad_argnums_tuple(x, y):
    ga, gb = grad(lambda a, b: (a * b.exp()).sum(), argnums=(0, 1))(x, y)
    return ga - gb


def f_grad_has_aux(x):
    g, aux = grad(lambda y: (y.sin().sum(), y.cos()), has_aux=True)(x)
    return g * aux


def f_grad_aux_tuple(x):
    g, (a, b) = grad(lambda y: (y.sum() * 2, (y + 1, y - 1)), has_aux=True)(x)
    return g + a * b


def f_grad_closure_tensor(x):
    w = x.mean() + 1
    return grad(lambda y: (y * w).pow(2).sum())(x)


def f_grad_global_module(x):
    return grad(lambda y: LIN(y).tanh().sum())(x)


def f_grad_of_grad(x):
    return grad(grad(lambda y: y.sin().sum()))(x.sum())


def f_grad_scalar_input(x):
    return grad(lambda s: s ** 3)(x.sum())


def f_grad_then_ops(x):
    g = grad(sum_sin)(x)
    return (g * x).sum(0)


def f_grad_and_value(x):
    g, v = grad_and_value(sum_sin)(x)
    return g * v


def f_grad_and_value_aux(x):
    g, (v, aux) = grad_and_value(lambda y: ((y * 3).sum(), y.abs()), has_aux=True)(x)
    return g + v + aux


def f_grad_and_value_argnums(x, y):
    (gx, gy), v = grad_and_value(lambda a, b: (a @ b).sum(), argnums=(0, 1))(x, y)
    return gx.sum() + gy.sum() + v


def f_vmap(x):
    return vmap(lambda y: y.sum() * y)(x)


def f_vmap_function(x):
    return vmap(torch.sin)(x) + 1


def f_vmap_in_dims(x, y):
    return vmap(lambda a, b: a * b, in_dims=(0, None))(x, y)


def f_vmap_in_dim1(x):
    return vmap(lambda a: a.cumsum(0), in_dims=1)(x)


def f_vmap_out_dims(x):
    return vmap(lambda a: a * 2, out_dims=1)(x)


def f_vmap_two_outputs(x):
    a, b = vmap(lambda y: (y.max(), y.argmax()))(x)
    return a * b


def f_vmap_matmul(x, w):
    return vmap(lambda row: w @ row)(x)


def f_vmap_nested(x):
    return vmap(vmap(lambda v: v * v.sum()))(x)


def f_vmap_chunked(x):
    return vmap(lambda y: y.softmax(0), chunk_size=2)(x)


def f_vmap_closure(x):
    bias = x.mean(0)
    return vmap(lambda y: y - bias)(x)


def f_vmap_module(x):
    return vmap(LIN)(x)


def f_per_sample_grads(x, y):
    return vmap(grad(lambda a, b: (a * b).sum().sin()), in_dims=(0, 0))(x, y)


def f_jacrev(x):
    return jacrev(torch.sin)(x)


def f_jacrev_lambda(x):
    return jacrev(lambda y: y.softmax(0))(x) * 2


def f_jacrev_argnums(x, y):
    return jacrev(lambda a, b: a * b.cos(), argnums=1)(x, y)


def f_jacrev_has_aux(x):
    j, aux = jacrev(lambda y: (y.exp(), y.sum()), has_aux=True)(x)
    return j * aux


def f_jacfwd(x):
    return jacfwd(torch.tanh)(x)


def f_jacfwd_two_args(x, y):
    ja, jb = jacfwd(lambda a, b: a * b + a, argnums=(0, 1))(x, y)
    return ja + jb


def f_hessian(x):
    return hessian(lambda y: y.sin().sum())(x)


def f_hessian_quadratic(x, m):
    return hessian(lambda y: y @ m @ y)(x)


def f_jacrev_of_jacfwd(x):
    return jacrev(jacfwd(lambda y: (y ** 3).sum()))(x)


TRANSFORMS = {f.__name__: (f, args) for f, args in [
    (f_grad, r(5)), (f_grad_lambda, r(3, 2)), (f_grad_argnums1, (r(4), r(4))), (f_grad_argnums_tuple, (r(4), r(4))),
    (f_grad_has_aux, r(4)), (f_grad_aux_tuple, r(4)), (f_grad_closure_tensor, r(4)), (f_grad_global_module, r(2, 4)),
    (f_grad_of_grad, r(3)), (f_grad_scalar_input, r(3)), (f_grad_then_ops, r(3, 4)), (f_grad_and_value, r(4)),
    (f_grad_and_value_aux, r(4)), (f_grad_and_value_argnums, (r(2, 3), r(3, 2))),
    (f_vmap, r(3, 4)), (f_vmap_function, r(3, 4)), (f_vmap_in_dims, (r(3, 4), r(4))), (f_vmap_in_dim1, r(3, 5)),
    (f_vmap_out_dims, r(3, 4)), (f_vmap_two_outputs, r(3, 4)), (f_vmap_matmul, (r(5, 4), r(3, 4))),
    (f_vmap_nested, r(2, 3, 4)), (f_vmap_chunked, r(5, 3)), (f_vmap_closure, r(3, 4)), (f_vmap_module, r(6, 4)),
    (f_per_sample_grads, (r(5, 3), r(5, 3))),
    (f_jacrev, r(4)), (f_jacrev_lambda, r(4)), (f_jacrev_argnums, (r(3), r(3))), (f_jacrev_has_aux, r(3)),
    (f_jacfwd, r(4)), (f_jacfwd_two_args, (r(3), r(3))), (f_hessian, r(3)), (f_hessian_quadratic, (r(3), r(3, 3))),
    (f_jacrev_of_jacfwd, r(3)),
]}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_function_transform_one_graph(name):
    fn, args = TRANSFORMS[name]
    assert_same(fn, args, graphs=1)
