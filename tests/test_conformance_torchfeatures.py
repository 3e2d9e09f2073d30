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


def _autograd_facts(y, z):
    """Branches on what the transform shows its function (eager: requires_grad only at argnums)."""
    scale = (2.0 if y.requires_grad else 3.0) + (5.0 if z.requires_grad else 7.0)
    return (y * z * scale).sum() if y.is_leaf else (y * z).sum()


def f_grad_reads_requires_grad(x, w):
    return grad(_autograd_facts)(x, w)


def f_grad_argnums1_reads_requires_grad(x, w):
    return grad(_autograd_facts, argnums=1)(x, w)


def f_jacrev_reads_requires_grad(x, w):
    return jacrev(lambda y, z: _autograd_facts(y, z) * y, argnums=(0, 1))(x, w)


def f_jacfwd_reads_requires_grad(x, w):
    return jacfwd(lambda y, z: _autograd_facts(y, z) * y)(x, w)


def f_hessian_reads_requires_grad(x, w):
    return hessian(lambda y: _autograd_facts(y, w) * y.sum())(x)


def f_vmap_reads_requires_grad(x, w):
    return vmap(_autograd_facts)(x, w)


AUTOGRAD_FACTS = {f.__name__: (f, args) for f, args in [
    (f_grad_reads_requires_grad, (r(4), r(4))), (f_grad_argnums1_reads_requires_grad, (r(4), r(4, grad=True))),
    (f_jacrev_reads_requires_grad, (r(3), r(3))), (f_jacfwd_reads_requires_grad, (r(3), r(3))),
    (f_hessian_reads_requires_grad, (r(3), r(3))), (f_vmap_reads_requires_grad, (r(2, 3), r(2, 3, grad=True))),
]}


@pytest.mark.parametrize("name", sorted(AUTOGRAD_FACTS))
@reference_only_skip("torch 2.13 traces the function on the caller's tensors: requires_grad reads answer wrongly")
def test_function_transform_shows_its_function_eagers_autograd_facts(name):
    fn, args = AUTOGRAD_FACTS[name]
    assert_same(fn, args, graphs=1)


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


# ---------------------------------------------------------------------------------------------
# torch._foreach_* ops: tensor scalars, scalar lists, alpha, in-place variants on list elements
# ---------------------------------------------------------------------------------------------
def fe_mul_tensor_scalar(xs, s):
    return torch._foreach_mul(xs, s)


def fe_mul_list(xs, ys):
    return torch._foreach_mul(xs, ys)


def fe_mul_scalar_list(xs):
    return torch._foreach_mul(xs, [2.0, 3.0, 0.5])


def fe_add_list_alpha(xs, ys):
    return torch._foreach_add(xs, ys, alpha=2)


def fe_add_scalar(xs):
    return torch._foreach_add(xs, 1.5)


def fe_add_tensor_scalar(xs, s):
    return torch._foreach_add(xs, s.sum())


def fe_sub_list_alpha(xs, ys):
    return torch._foreach_sub(xs, ys, alpha=0.5)


def fe_div_scalar_list(xs):
    return torch._foreach_div(xs, [1.0, 2.0, 4.0])


def fe_lerp_scalar(xs, ys):
    return torch._foreach_lerp(xs, ys, 0.25)


def fe_lerp_list_weights(xs, ys, ws):
    return torch._foreach_lerp(xs, ys, ws)


def fe_lerp_inplace(xs, ys):
    torch._foreach_lerp_(xs, ys, 0.3)
    return xs[0] + 1


def fe_mul_inplace_tensor(xs, s):
    torch._foreach_mul_(xs, s)
    return sum(x.sum() for x in xs)


def fe_add_inplace_list_alpha(xs, ys):
    torch._foreach_add_(xs, ys, alpha=-1)


def fe_addcmul_inplace(xs, ys, zs):
    torch._foreach_addcmul_(xs, ys, zs, value=0.5)
    return xs


def fe_addcdiv_scalar_list(xs, ys, zs):
    return torch._foreach_addcdiv(xs, ys, [z.abs() + 1 for z in zs], [0.1, 0.2, 0.3])


def fe_sqrt_abs(xs):
    return torch._foreach_sqrt(torch._foreach_abs(xs))


def fe_norm(xs):
    return torch.stack(torch._foreach_norm(xs)).sum()


def fe_maximum(xs, ys):
    return torch._foreach_maximum(xs, ys)


def fe_clamp_min_inplace(xs):
    torch._foreach_clamp_min_(xs, 0.0)
    return xs[1] * 2


def fe_neg_exp(xs):
    return torch._foreach_exp(torch._foreach_neg(xs))


def fe_pow_scalar_list(xs):
    return torch._foreach_pow(torch._foreach_abs(xs), [2.0, 0.5, 3.0])


def fe_zero_inplace(xs):
    torch._foreach_zero_(xs)


def fe_copy_inplace(xs, ys):
    torch._foreach_copy_(xs, ys)
    return xs[2].sum()


def fe_adam_like(ps, gs, ms):
    torch._foreach_mul_(ms, 0.9)
    torch._foreach_add_(ms, gs, alpha=0.1)
    torch._foreach_add_(ps, ms, alpha=-0.01)
    return ps[0].sum()


def fe_add_inplace_computed_scalar(xs, s):
    torch._foreach_add_(xs, s.mean())
    return xs[0] * 2


def fe_mul_inplace_computed_scalar(xs, s):
    torch._foreach_mul_(xs, s.abs().max())


def fe_div_computed_scalar(xs, s):
    return torch._foreach_div(xs, s.sum() + 3)


def fe_add_computed_scalar_alpha(xs, s):
    return torch._foreach_add(xs, s.sum(), alpha=2)


def fe_maximum_computed_scalar(xs, s):
    return torch._foreach_maximum(xs, s.mean())


def xs3():
    return [r(3), r(2, 2), r(4)]


FOREACH = {f.__name__: (f, args) for f, args in [
    (fe_mul_tensor_scalar, (xs3(), r(()))), (fe_mul_list, (xs3(), xs3())), (fe_mul_scalar_list, (xs3(),)),
    (fe_add_list_alpha, (xs3(), xs3())), (fe_add_scalar, (xs3(),)), (fe_add_tensor_scalar, (xs3(), r(2))),
    (fe_sub_list_alpha, (xs3(), xs3())), (fe_div_scalar_list, (xs3(),)), (fe_lerp_scalar, (xs3(), xs3())),
    (fe_lerp_list_weights, (xs3(), xs3(), xs3())), (fe_lerp_inplace, (xs3(), xs3())),
    (fe_mul_inplace_tensor, (xs3(), r(()))), (fe_add_inplace_list_alpha, (xs3(), xs3())),
    (fe_addcmul_inplace, (xs3(), xs3(), xs3())), (fe_addcdiv_scalar_list, (xs3(), xs3(), xs3())),
    (fe_sqrt_abs, (xs3(),)), (fe_norm, (xs3(),)), (fe_maximum, (xs3(), xs3())), (fe_clamp_min_inplace, (xs3(),)),
    (fe_neg_exp, (xs3(),)), (fe_pow_scalar_list, (xs3(),)), (fe_zero_inplace, (xs3(),)),
    (fe_copy_inplace, (xs3(), xs3())), (fe_adam_like, (xs3(), xs3(), xs3())),
    (fe_add_inplace_computed_scalar, (xs3(), r(4))), (fe_mul_inplace_computed_scalar, (xs3(), r(4))),
    (fe_div_computed_scalar, (xs3(), r(4))), (fe_add_computed_scalar_alpha, (xs3(), r(4))),
    (fe_maximum_computed_scalar, (xs3(), r(4))),
]}


@pytest.mark.parametrize("name", sorted(FOREACH))
def test_foreach_one_graph(name):
    fn, args = FOREACH[name]
    assert_same(fn, args, graphs=1)


# ---------------------------------------------------------------------------------------------
# nested tensors: run eagerly (an unconverted frame, or a graph break where one is made), cleanly
# ---------------------------------------------------------------------------------------------
def strided_nt():
    return torch.nested.nested_tensor([r(2, 3), r(4, 3)])


def jagged_nt():
    return torch.nested.nested_tensor([r(2, 3), r(4, 3)], layout=torch.jagged)


def nt_arg_padded(nt):
    return torch.nested.to_padded_tensor(nt * 2, 0.0)


def nt_arg_unbind(nt):
    return (nt.sin() + 1).unbind()


def nt_arg_with_dense(nt, x):
    return x.cos(), torch.nested.to_padded_tensor(nt, -1.0) + x.sum()


def nt_made_jagged(x, y):
    nt = torch.nested.nested_tensor([x, y.relu()], layout=torch.jagged)
    return (nt * 2).unbind()


def nt_made_strided(x, y):
    nt = torch.nested.as_nested_tensor([x.cos(), y])
    return torch.nested.to_padded_tensor(nt + 1, 0.0)


NESTED = {f.__name__ + "_" + kind: (f, make) for f, kind, make in [
    (nt_arg_padded, "strided", lambda: (strided_nt(),)), (nt_arg_padded, "jagged", lambda: (jagged_nt(),)),
    (nt_arg_unbind, "strided", lambda: (strided_nt(),)), (nt_arg_unbind, "jagged", lambda: (jagged_nt(),)),
    (nt_arg_with_dense, "jagged", lambda: (jagged_nt(), r(3))),
    (nt_made_jagged, "dense", lambda: (r(2, 3), r(4, 3))), (nt_made_strided, "dense", lambda: (r(2, 3), r(4, 3))),
]}


@pytest.mark.parametrize("name", sorted(NESTED))
def test_nested_tensors_stay_correct_and_settle(name):
    fn, make = NESTED[name]
    assert_same(fn, make(), graphs=None, nopython=False, compare_inputs=False)


@minidynamo_only
@pytest.mark.parametrize("name", sorted(NESTED))
def test_nested_tensors_fall_back_with_a_reason(name):
    fn, make = NESTED[name]
    report = explain(fn, *make())
    reasons = [str(b) for b in report.break_reasons]
    assert reasons and all("nested tensor" in reason for reason in reasons), reasons
    assert not any("internal error" in reason for reason in reasons), reasons


# ---------------------------------------------------------------------------------------------
# torch.func.functional_call: the module's call traced with the given tensors in place of its own
# ---------------------------------------------------------------------------------------------
FC_SEQ = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
FC_BN = torch.nn.BatchNorm1d(3)
FC_LIN = torch.nn.Linear(3, 3)


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = torch.nn.Linear(3, 3, bias=False)
        self.dec = torch.nn.Linear(3, 3, bias=False)
        self.dec.weight = self.enc.weight

    def forward(self, x):
        return self.dec(self.enc(x).tanh())


FC_TIED = Tied()


class ReadsGlobalAlias(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 3))

    def forward(self, x):
        return x @ self.w + x @ FC_ALIAS_W  # the global is the module's own tensor: functional_call keeps it


FC_ALIASED = ReadsGlobalAlias()
FC_ALIAS_W = FC_ALIASED.w


def fc_weight_bias(x, w, b):
    return torch.func.functional_call(FC_LIN, {"weight": w, "bias": b}, (x,))


def fc_some_tensors(x, w):
    return torch.func.functional_call(FC_LIN, {"weight": w}, (x,)) + 1


def fc_single_arg(x, w):
    return torch.func.functional_call(FC_LIN, {"weight": w}, x)


def fc_kwargs_only(x, w):
    return torch.func.functional_call(FC_LIN, {"weight": w}, (), {"input": x})


def fc_nested_name(x, w):
    return torch.func.functional_call(FC_SEQ, {"2.weight": w}, (x,)).sum(0)


def fc_two_dicts(x, w, b):
    return torch.func.functional_call(FC_LIN, ({"weight": w}, {"bias": b}), (x,))


def fc_buffers_updated(x, mean, var):
    return torch.func.functional_call(FC_BN, {"running_mean": mean, "running_var": var}, (x,))


def fc_after_plain_call(x, w):
    return FC_LIN(x) - torch.func.functional_call(FC_LIN, {"weight": w}, (x,))


def fc_tied(x, w):
    return torch.func.functional_call(FC_TIED, {"enc.weight": w}, (x,))


def fc_under_grad(x, w):
    return grad(lambda ww: torch.func.functional_call(FC_LIN, {"weight": ww}, (x,)).pow(2).sum())(w)


def fc_under_vmap(xs, ws):
    return vmap(lambda x, w: torch.func.functional_call(FC_LIN, {"weight": w}, (x,)))(xs, ws)


FUNCTIONAL_CALL = {f.__name__: (f, args) for f, args in [
    (fc_weight_bias, (r(2, 3), r(3, 3), r(3))), (fc_some_tensors, (r(2, 3), r(3, 3))), (fc_single_arg, (r(2, 3), r(3, 3))),
    (fc_kwargs_only, (r(2, 3), r(3, 3))), (fc_nested_name, (r(2, 3), r(2, 4))), (fc_two_dicts, (r(2, 3), r(3, 3), r(3))),
    (fc_buffers_updated, (r(4, 3), r(3), torch.rand(3) + 0.5)), (fc_after_plain_call, (r(2, 3), r(3, 3))),
    (fc_tied, (r(2, 3), r(3, 3))), (fc_under_grad, (r(2, 3), r(3, 3))), (fc_under_vmap, (r(5, 2, 3), r(5, 3, 3))),
]}


@pytest.mark.parametrize("name", sorted(FUNCTIONAL_CALL))
def test_functional_call_one_graph(name):
    fn, args = FUNCTIONAL_CALL[name]
    assert_same(fn, args, graphs=1)


def fc_global_alias_of_own_tensor(x, w):
    return torch.func.functional_call(FC_ALIASED, {"w": w}, (x,))


def test_functional_call_keeps_other_references_to_the_module_tensor():
    assert_same(fc_global_alias_of_own_tensor, (r(2, 3), r(3, 3)), graphs=None, nopython=False)
