"""Translator: calls (PRECALL/CALL, KW_NAMES, CALL_FUNCTION_EX), inlining of user functions
(defaults, keyword-only args, closures, recursion), lambdas, nested functions (MAKE_FUNCTION) and
functools.partial.  Whole-graph functions only."""
import functools

import pytest
import torch

from translator_harness import (  # noqa: F401
    Args,
    CompileCounter,
    assert_equal,
    assert_same,
    fresh_dynamo,
    optimize,
    rand,
    reference_only_skip,
)


# ---------------------------------------------------------------------------------------------
# helpers that get inlined
# ---------------------------------------------------------------------------------------------
def h_add(a, b):
    return a + b


def h_defaults(x, scale=2.0, shift=1):
    return x * scale + shift


def h_kwonly(x, *, alpha, beta=0.5):
    return x * alpha - beta


def h_varargs(*ts):
    out = ts[0]
    for t in ts[1:]:
        out = out + t
    return out


def h_varkw(x, **opts):
    if opts.get("square", False):
        x = x * x
    return x + opts.get("bias", 0)


def h_all_kinds(a, b=1, *rest, c, d=2, **kw):
    out = a * b + c * d
    for r in rest:
        out = out + r
    for k in sorted(kw):
        out = out + kw[k]
    return out


def h_rec(x, depth):
    if depth == 0:
        return x
    return h_rec(x * 2, depth - 1) + depth


def h_mutual_a(x, n):
    return x if n == 0 else h_mutual_b(x + 1, n - 1)


def h_mutual_b(x, n):
    return x if n == 0 else h_mutual_a(x * 3, n - 1)


def h_returns_tuple(x):
    return x.sin(), x.cos()


def h_calls_h(x):
    return h_add(h_defaults(x), h_kwonly(x, alpha=3))


# ---------------------------------------------------------------------------------------------
# functions under test
# ---------------------------------------------------------------------------------------------
def call_positional(x, y):
    return h_add(x, y) * 2


def call_defaults(x):
    return h_defaults(x) + h_defaults(x, 3.0) + h_defaults(x, shift=-1)


def call_keywords(x, y):
    return h_add(b=y, a=x) + h_defaults(x, shift=2, scale=0.5)


def call_kwonly(x):
    return h_kwonly(x, alpha=2.0) + h_kwonly(x, beta=1.0, alpha=-1.0)


def call_varargs(x, y):
    return h_varargs(x, y, x * y)


def call_star_args(x, y):
    args = (x, y)
    return h_add(*args) + h_varargs(*[x, y, x])


def call_star_kwargs(x):
    opts = {"square": True, "bias": 3}
    return h_varkw(x, **opts) + h_defaults(x, **{"scale": 4.0})


def call_star_both(x, y):
    args = [x]
    kwargs = {"b": y}
    return h_add(*args, **kwargs)


def call_all_kinds(x, y):
    return h_all_kinds(x, 2, y, y, c=x, e=1, f=y)


def call_recursive(x):
    return h_rec(x, 3)


def call_mutual_recursion(x):
    return h_mutual_a(x, 3)


def call_unpack_result(x):
    s, c = h_returns_tuple(x)
    return s * c


def call_nested_calls(x):
    return h_calls_h(x)


def call_method_on_result(x):
    return h_add(x, 1).relu().sum(dim=0)


def call_builtin_kw(x):
    return torch.sum(x, dim=1, keepdim=True) + torch.clamp(x, min=-0.5, max=0.5)


def call_torch_star(x, y):
    ts = [x, y]
    kw = {"dim": 0}
    return torch.cat(ts, **kw), torch.stack(ts, dim=1)


def call_passes_function(x):
    def apply(fn, t):
        return fn(t)

    return apply(torch.tanh, x) + apply(h_returns_tuple, x)[0]


def call_returns_function(x):
    def pick(flag):
        return torch.sin if flag else torch.cos

    return pick(True)(x) + pick(False)(x)


def call_with_args_forwarding(x, *args, **kwargs):
    return h_all_kinds(x, *args, **kwargs)


@pytest.mark.parametrize(
    "fn",
    [
        call_positional,
        call_defaults,
        call_keywords,
        call_kwonly,
        call_varargs,
        call_star_args,
        call_star_kwargs,
        call_star_both,
        call_all_kinds,
        call_recursive,
        call_mutual_recursion,
        call_unpack_result,
        call_nested_calls,
        call_method_on_result,
        call_builtin_kw,
        call_torch_star,
        call_passes_function,
        call_returns_function,
    ],
    ids=lambda f: f.__name__,
)
def test_calls(fn):
    n = fn.__code__.co_argcount
    sets = [tuple(rand(3, 3) for _ in range(n)) for _ in range(2)]
    assert_same(fn, *sets, graphs=1)


def test_call_forwarding_varargs_kwargs():
    x, y = rand(2), rand(2)
    assert_same(
        call_with_args_forwarding,
        Args(x, 2, y, c=y, d=3),
        Args(x, 2, y, c=y, d=3),
        graphs=1,
    )


def test_call_with_keyword_arguments_to_compiled():
    def f(x, *, scale=1.0, bias=None):
        out = x * scale
        if bias is not None:
            out = out + bias
        return out

    assert_same(f, Args(rand(2), scale=2.0), Args(rand(2), scale=2.0, bias=rand(2)), graphs=2)


# ---------------------------------------------------------------------------------------------
# lambdas and nested functions (MAKE_FUNCTION with defaults / kw-defaults / closures)
# ---------------------------------------------------------------------------------------------
def lambda_local(x):
    sq = lambda t: t * t  # noqa: E731
    return sq(x) + sq(x + 1)


def lambda_closure(x, k):
    f = lambda t: t * k + x  # noqa: E731
    return f(x)


def lambda_in_map(xs):
    return list(map(lambda t: t.exp(), xs))


def lambda_default(x):
    g = lambda t, s=3: t * s  # noqa: E731
    return g(x) + g(x, 0.5)


def nested_with_defaults(x):
    def inner(t, scale=2.0, *, shift=1.0):
        return t * scale + shift

    return inner(x) + inner(x, 0.5, shift=-1.0)


def nested_closure_chain(x):
    a = x + 1

    def outer(t):
        b = t * 2

        def inner(u):
            return u + a + b

        return inner(t)

    return outer(x)


def nested_factory(x):
    def make(k):
        def mul(t):
            return t * k

        return mul

    double, triple = make(2), make(3)
    return double(x) + triple(x)


def nested_closure_sees_update(x):
    k = 1

    def f(t):
        return t * k

    k = 5
    return f(x)


def nested_sort_key(x):
    items = [("b", 2), ("a", 3), ("c", 1)]
    ordered = sorted(items, key=lambda kv: kv[1])
    return x * ordered[0][1], [k for k, _ in ordered]


@pytest.mark.parametrize(
    "fn",
    [lambda_local, lambda_default, nested_with_defaults, nested_closure_chain, nested_factory,
     nested_closure_sees_update, nested_sort_key],
    ids=lambda f: f.__name__,
)
def test_nested_functions(fn):
    assert_same(fn, rand(3), rand(3), graphs=1)


def test_lambda_closure():
    assert_same(lambda_closure, (rand(3), 2), (rand(3), 4), graphs=2)


def test_lambda_in_map():
    assert_same(lambda_in_map, ([rand(2), rand(2)],), graphs=1)


def test_compiled_lambda():
    fn = lambda x, y: (x * y).sum(-1)  # noqa: E731
    assert_same(fn, (rand(2, 3), rand(2, 3)), graphs=1)


def test_returned_nested_function_still_works():
    def f(x):
        def g(t):
            return t + x

        return x * 2, g

    cf = optimize(CompileCounter(), nopython=True)(f)
    x = rand(3)
    out, g = cf(x)
    assert_equal(out, x * 2)
    assert_equal(g(x), x + x)


# ---------------------------------------------------------------------------------------------
# functools.partial
# ---------------------------------------------------------------------------------------------
PARTIAL_SCALE = functools.partial(h_defaults, scale=-2.0)


def partial_global(x):
    return PARTIAL_SCALE(x)


def partial_local(x, y):
    add_y = functools.partial(h_add, b=y)
    return add_y(x) + add_y(a=y)


def partial_of_torch(x):
    s = functools.partial(torch.sum, dim=0)
    return s(x)


@pytest.mark.parametrize("fn", [partial_global, partial_of_torch], ids=lambda f: f.__name__)
def test_partial(fn):
    assert_same(fn, rand(3, 2), graphs=1)


def test_partial_local():
    assert_same(partial_local, (rand(3), rand(3)), graphs=1)


# ---------------------------------------------------------------------------------------------
# calls from a compiled function into another compiled function
# ---------------------------------------------------------------------------------------------
def test_compiled_calling_compiled():
    cnt = CompileCounter()

    def inner(x):
        return x.sin() + 1

    c_inner = optimize(cnt, nopython=True)(inner)

    def outer(x):
        return inner(x) * 2

    c_outer = optimize(cnt, nopython=True)(outer)
    x = rand(3)
    assert_equal(c_outer(x), outer(x))
    assert_equal(c_inner(x), inner(x))
    assert_equal(c_outer(x), outer(x))
    assert cnt.frame_count == 2


# ---------------------------------------------------------------------------------------------
# optimize(...) as a context manager
# ---------------------------------------------------------------------------------------------
@reference_only_skip("torch 2.13 raises when optimize(...) is used as a context manager")
def test_optimize_as_context_manager():
    cnt = CompileCounter()

    def g(x):
        return h_defaults(x).relu() * 2

    x = rand(3)
    with optimize(cnt, nopython=True):
        out = g(x)
    assert_equal(out, g(x))
    assert cnt.frame_count == 1
    g(x)  # outside the block: not compiled again
    assert cnt.frame_count == 1
