"""Conformance: NumPy inside compiled functions, traced through torch's NumPy layer (torch._numpy)
as torch does: ndarray arguments, `tensor.numpy()`, NumPy functions, ufuncs and array methods as
graph ops, ndarrays handed back, `np.finfo`/`np.iinfo` as constants. Each small function is checked
against eager and against torch._dynamo."""
import numpy as np
import pytest
import torch

from translator_harness import (  # noqa: F401
    CompileCounter,
    assert_equal,
    assert_same,
    fresh_dynamo,
    optimize,
    rand,
    reference_only_skip,
)


def arr(*shape, dtype=np.float32):
    return rand(*shape).numpy().astype(dtype)


# ---------------------------------------------------------------------------------------------
# functions of an ndarray argument (float32, 3x4)
# ---------------------------------------------------------------------------------------------
def np_add_scalar(a):
    return a + 1.5


def np_mul_arrays(a):
    return a * a


def np_sub_rsub(a):
    return 2.0 - a, a - 2.0


def np_truediv(a):
    return a / 3.0


def np_floordiv_mod(a):
    return a // 0.5, a % 0.5


def np_pow(a):
    return a ** 2


def np_neg_abs(a):
    return -a, abs(a)


def np_matmul(a):
    return a @ a.T


def np_compare(a):
    return a > 0, a <= 0.5, a == a


def np_getitem_int(a):
    return a[1]


def np_getitem_slice(a):
    return a[1:, ::2]


def np_getitem_neg(a):
    return a[-1, -2]


def np_getitem_mask(a):
    return a[:, [0, 2]]


def np_shape_ndim_size(a):
    return a * a.shape[0] + a.ndim + a.size


def np_transpose_attr(a):
    return a.T


def np_sum(a):
    return np.sum(a)


def np_sum_axis(a):
    return np.sum(a, axis=0)


def np_mean_keepdims(a):
    return np.mean(a, axis=1, keepdims=True)


def np_std_var(a):
    return np.std(a), np.var(a, axis=0)


def np_min_max(a):
    return np.min(a), np.max(a, axis=1)


def np_argmax_argmin(a):
    return np.argmax(a, axis=0), np.argmin(a, axis=1)


def np_prod(a):
    return np.prod(a + 1.0, axis=1)


def np_cumsum(a):
    return np.cumsum(a, axis=1)


def np_sin_cos(a):
    return np.sin(a) + np.cos(a)


def np_exp_log(a):
    return np.log(np.exp(a) + 1.0)


def np_sqrt_abs(a):
    return np.sqrt(np.abs(a))


def np_tanh(a):
    return np.tanh(a)


def np_maximum_minimum(a):
    return np.maximum(a, 0.0), np.minimum(a, 0.0)


def np_clip(a):
    return np.clip(a, -0.5, 0.5)


def np_where(a):
    return np.where(a > 0, a, 0.0)


def np_floor_ceil_round(a):
    return np.floor(a), np.ceil(a), np.round(a, 1)


def np_sign(a):
    return np.sign(a)


def np_square(a):
    return np.square(a)


def np_exp2_log2(a):
    return np.exp2(a), np.log2(np.abs(a) + 1.0)


def np_arctan2(a):
    return np.arctan2(a, a + 1.0)


def np_hypot(a):
    return np.hypot(a, 2.0)


def np_reshape(a):
    return np.reshape(a, (4, 3))


def np_ravel(a):
    return np.ravel(a)


def np_transpose(a):
    return np.transpose(a)


def np_swapaxes(a):
    return np.swapaxes(a[None], 0, 2)


def np_expand_squeeze(a):
    return np.squeeze(np.expand_dims(a, 0), 0)


def np_concatenate(a):
    return np.concatenate([a, a], axis=1)


def np_stack(a):
    return np.stack([a, a * 2])


def np_vstack_hstack(a):
    return np.vstack([a, a]), np.hstack([a, a])


def np_split(a):
    return tuple(np.split(a, 2, axis=1))


def np_flip(a):
    return np.flip(a, axis=0)


def np_roll(a):
    return np.roll(a, 1, axis=1)


def np_tile(a):
    return np.tile(a, (2, 1))


def np_repeat(a):
    return np.repeat(a, 2, axis=0)


def np_dot(a):
    return np.dot(a, a.T)


def np_matmul_fn(a):
    return np.matmul(a.T, a)


def np_einsum(a):
    return np.einsum("ij,kj->ik", a, a)


def np_outer(a):
    return np.outer(a[0], a[1])


def np_linalg_norm(a):
    return np.linalg.norm(a, axis=1)


def np_linalg_inv(a):
    return np.linalg.inv(a[:, :3] @ a[:, :3].T + np.eye(3, dtype=np.float32) * 4)


def np_triu_tril(a):
    return np.triu(a), np.tril(a, -1)


def np_diag(a):
    return np.diag(a[:, :3])


def np_trace(a):
    return np.trace(a)


def np_any_all(a):
    return np.any(a > 1.0), np.all(a > -10.0)


def np_isnan_isfinite(a):
    return np.isnan(a), np.isfinite(a)


def np_nan_to_num(a):
    return np.nan_to_num(a / 0.0)


def np_zeros_like(a):
    return np.zeros_like(a) + np.ones_like(a)


def np_full_like(a):
    return np.full_like(a, 7.0)


def np_astype(a):
    return a.astype(np.float64) * 2


def np_astype_int(a):
    return (a * 10).astype(np.int64)


def np_method_sum(a):
    return a.sum(axis=1)


def np_method_mean_std(a):
    return a.mean(), a.std(axis=0)


def np_method_reshape(a):
    return a.reshape(2, 6)


def np_method_flatten(a):
    return a.flatten()


def np_method_transpose(a):
    return a.transpose(1, 0)


def np_method_clip(a):
    return a.clip(0.0, 1.0)


def np_method_max_argmax(a):
    return a.max(axis=0), a.argmax()


def np_method_copy(a):
    b = a.copy()
    b *= 2
    return b


def np_method_cumsum(a):
    return a.cumsum(axis=0)


def np_method_squeeze(a):
    return a[None].squeeze(0)


def np_inplace_on_copy(a):
    b = a.copy()
    b += 1
    b -= 0.5
    return b


def np_setitem_on_copy(a):
    b = a.copy()
    b[0] = 0.0
    return b


def np_mutates_argument(a):
    a *= 2
    return a.sum()


def np_chain(a):
    return np.exp(-np.square(a - a.mean(axis=0))).sum(axis=1)


def np_softmax(a):
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def np_loop_over_rows(a):
    out = 0.0
    for row in a:
        out = out + row * 2
    return out


def np_pi_constants(a):
    return a * np.pi + np.e


def np_newaxis(a):
    return a[:, np.newaxis, :]


def np_returns_input(a):
    return a


ARRAY_FUNCTIONS = [
    np_add_scalar, np_mul_arrays, np_sub_rsub, np_truediv, np_floordiv_mod, np_pow, np_neg_abs, np_matmul, np_compare,
    np_getitem_int, np_getitem_slice, np_getitem_neg, np_getitem_mask, np_shape_ndim_size, np_transpose_attr, np_sum,
    np_sum_axis, np_mean_keepdims, np_std_var, np_min_max, np_argmax_argmin, np_prod, np_cumsum, np_sin_cos,
    np_exp_log, np_sqrt_abs, np_tanh, np_maximum_minimum, np_clip, np_where, np_floor_ceil_round, np_sign, np_square,
    np_exp2_log2, np_arctan2, np_hypot, np_reshape, np_ravel, np_transpose, np_swapaxes, np_expand_squeeze,
    np_concatenate, np_stack, np_vstack_hstack, np_split, np_flip, np_roll, np_tile, np_repeat, np_dot, np_matmul_fn,
    np_einsum, np_outer, np_linalg_norm, np_linalg_inv, np_triu_tril, np_diag, np_trace, np_any_all,
    np_isnan_isfinite, np_nan_to_num, np_zeros_like, np_full_like, np_astype, np_astype_int, np_method_sum,
    np_method_mean_std, np_method_reshape, np_method_flatten, np_method_transpose, np_method_clip,
    np_method_max_argmax, np_method_copy, np_method_cumsum, np_method_squeeze, np_inplace_on_copy,
    np_setitem_on_copy, np_mutates_argument, np_chain, np_softmax, np_loop_over_rows, np_pi_constants, np_newaxis,
]


# torch 2.13 hands back the tensor of abs(array), not an ndarray
_TORCH_DIFFERS = {np_neg_abs: "abs(ndarray) comes back as a tensor"}


@pytest.mark.parametrize("fn", [pytest.param(f, marks=reference_only_skip(_TORCH_DIFFERS[f]) if f in _TORCH_DIFFERS
                                             else ()) for f in ARRAY_FUNCTIONS], ids=lambda f: f.__name__)
def test_numpy_on_an_ndarray_argument(fn):
    assert_same(fn, arr(3, 4))


def test_an_ndarray_returned_as_it_came_is_the_same_object():
    compiled = optimize("eager")(np_returns_input)
    a = arr(3, 4)
    assert compiled(a) is a


def test_ndarray_arguments_are_guarded_by_dtype_and_shape():
    cnt = CompileCounter()
    compiled = optimize(cnt)(np_sin_cos)
    for a in (arr(3, 4), arr(3, 4), arr(2, 4), arr(3, 4, dtype=np.float64), arr(3, 4)):
        assert_equal(compiled(a), np_sin_cos(a))
    assert cnt.frame_count == 3


# ---------------------------------------------------------------------------------------------
# integer arrays
# ---------------------------------------------------------------------------------------------
def int_bitwise(a):
    return a & 3, a | 1, a ^ 2


def int_shifts(a):
    return a << 1, np.abs(a) >> 1


def int_floor_divide(a):
    return np.floor_divide(a, 3), np.remainder(a, 3)


def int_sum_dtype(a):
    return np.sum(a), a.sum(axis=0)


def int_to_float(a):
    return a.astype(np.float32) * 0.5, a.astype(np.float64) / 4


def int_true_divide(a):
    return a / 2, np.true_divide(a, 4), a / a.max()


def int_bincount_free_ops(a):
    return np.maximum(a, 0) * 2 - 1


@pytest.mark.parametrize("fn", [int_bitwise, int_shifts, int_floor_divide, int_sum_dtype, int_to_float,
                                pytest.param(int_true_divide, marks=reference_only_skip("int / int gives float32")),
                                int_bincount_free_ops], ids=lambda f: f.__name__)
def test_numpy_on_an_integer_array(fn):
    assert_same(fn, arr(3, 4, dtype=np.int64))


# ---------------------------------------------------------------------------------------------
# tensor.numpy() inside the compiled function, and back to torch
# ---------------------------------------------------------------------------------------------
def tn_numpy_sin(x):
    return np.sin(x.numpy())


def tn_numpy_then_from_numpy(x):
    return torch.from_numpy(np.exp(x.numpy())) + 1


def tn_as_tensor(x):
    return torch.as_tensor(x.numpy().mean(axis=0))


def tn_tensor_copy(x):
    return torch.tensor(x.numpy() * 2)


def tn_detach_numpy(x):
    return np.square(x.detach().numpy())


def tn_force_numpy(x):
    return np.tanh(x.numpy(force=True))


def tn_mixed(x):
    y = x.relu()
    z = np.clip(y.numpy(), 0.1, 0.9)
    return torch.from_numpy(z) * x


def tn_numpy_shape(x):
    a = x.numpy()
    return x * a.shape[1]


def tn_numpy_mutation_reaches_tensor(x):
    a = x.numpy()
    a += 1
    return x * 2


def tn_roundtrip_twice(x):
    a = torch.from_numpy(x.numpy() + 1).numpy()
    return torch.from_numpy(a * 2)


def tn_numpy_of_result(x):
    return (x @ x.T).numpy()


def tn_numpy_reduce_to_tensor(x):
    return x.sum() + torch.from_numpy(np.sum(x.numpy(), axis=0, keepdims=True))


TENSOR_NUMPY = [tn_numpy_sin, tn_numpy_then_from_numpy, tn_as_tensor, tn_tensor_copy, tn_detach_numpy,
                tn_force_numpy, tn_mixed, tn_numpy_shape, tn_numpy_mutation_reaches_tensor, tn_roundtrip_twice,
                tn_numpy_of_result, tn_numpy_reduce_to_tensor]


@pytest.mark.parametrize("fn", TENSOR_NUMPY, ids=lambda f: f.__name__)
def test_tensor_numpy_inside_the_compiled_function(fn):
    assert_same(fn, rand(3, 4))


def tn_requires_grad(x):
    return np.sin(x.numpy())


@reference_only_skip("tensor.numpy() on a tensor requiring grad does not raise")
def test_numpy_of_a_tensor_requiring_grad_raises_as_in_eager():
    x = rand(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        tn_requires_grad(x)
    with pytest.raises(RuntimeError, match="requires grad"):
        optimize("eager")(tn_requires_grad)(x)


# ---------------------------------------------------------------------------------------------
# np.finfo / np.iinfo and NumPy scalar types as constants
# ---------------------------------------------------------------------------------------------
def info_finfo_min(x):
    return x.clamp(min=np.finfo(np.float32).min)


def info_finfo_eps(x):
    return x + np.finfo(np.float32).eps


def info_finfo_tiny_max(x):
    return x.clamp(np.finfo(np.float16).tiny, np.finfo(np.float16).max)


def info_iinfo(x):
    return x.clamp(max=np.iinfo(np.int8).max) + np.iinfo(np.int16).min / 1e5


def info_finfo_bits(x):
    return x * np.finfo(np.float64).bits


def info_finfo_from_string(x):
    return x + np.finfo("float32").resolution


INFO = [info_finfo_min, info_finfo_eps, info_finfo_tiny_max, info_iinfo, info_finfo_bits, info_finfo_from_string]


@pytest.mark.parametrize("fn", INFO, ids=lambda f: f.__name__)
def test_finfo_and_iinfo_are_constants(fn):
    cnt = assert_same(fn, rand(3, 4))
    assert not any(n.op == "call_function" and "numpy" in str(n.target) for n in cnt.graphs[0].graph.nodes)


# ---------------------------------------------------------------------------------------------
# NumPy arrays made inside the function
# ---------------------------------------------------------------------------------------------
def make_np_arange(x):
    return x * torch.from_numpy(np.arange(4, dtype=np.float32))


def make_np_ones_zeros(x):
    return x + torch.from_numpy(np.ones((3, 4), dtype=np.float32) - np.zeros((3, 4), dtype=np.float32))


def make_np_linspace(x):
    return x * torch.from_numpy(np.linspace(0, 1, 4).astype(np.float32))


def make_np_eye(x):
    return x[:, :3] @ torch.from_numpy(np.eye(3, dtype=np.float32))


def make_np_full(x):
    return x - torch.from_numpy(np.full((4,), 0.25, dtype=np.float32))


@pytest.mark.parametrize("fn", [make_np_arange, make_np_ones_zeros, make_np_linspace, make_np_eye, make_np_full],
                         ids=lambda f: f.__name__)
def test_arrays_made_inside_the_function(fn):
    assert_same(fn, rand(3, 4))


# ---------------------------------------------------------------------------------------------
# what stays in Python
# ---------------------------------------------------------------------------------------------
def py_branch_on_values(a):
    if (a > 0).any():
        return a * 2
    return a


def py_tolist(a):
    return a.tolist()


def py_random(a):
    return a + np.random.rand(*a.shape)


@pytest.mark.parametrize("fn", [py_branch_on_values, py_tolist], ids=lambda f: f.__name__)
def test_reading_array_values_runs_in_python(fn):
    assert_same(fn, arr(3, 4), graphs=None, nopython=False)


@reference_only_skip("np.random is traced with torch's generator: other numbers than eager's")
def test_numpy_random_runs_numpys_generator():
    """np.random is not traced: the draws are NumPy's own, as in eager."""
    compiled = optimize("eager")(py_random)
    a = arr(2, 2)
    np.random.seed(0)
    expected = py_random(a)
    np.random.seed(0)
    assert_equal(compiled(a), expected)


SCALAR_RESULTS = {
    "sum": lambda a: np.sum(a),
    "method_mean": lambda a: a.mean(),
    "max_of_row": lambda a: np.max(a[0]),
    "ufunc_of_a_reduction": lambda a: np.sin(a.sum()),
    "reduction_plus_one": lambda a: a.std() + 1,
    "tuple_of_reductions": lambda a: (a.min(), a.max()),
    "array_of_a_reduction": lambda a: np.asarray(a.sum()),
    "reshaped_to_0d": lambda a: a[:1, :1].reshape(()),
}


@reference_only_skip("torch 2.13 hands out NumPy's 0-d results as 0-d arrays")
@pytest.mark.parametrize("name", list(SCALAR_RESULTS))
def test_0d_results_are_numpy_scalars_where_numpy_gives_scalars(name):
    fn = SCALAR_RESULTS[name]
    a = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    expected, actual = fn(a), optimize("eager")(fn)(a)
    for e, g in zip(*(x if isinstance(x, tuple) else (x,) for x in (expected, actual))):
        assert type(g) is type(e), f"{type(g).__name__} instead of {type(e).__name__}"
        np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# 0-d results NumPy hands out as 0-d arrays, not scalars; and results' dtypes
# ---------------------------------------------------------------------------------------------
ZERO_D_ARRAY_RESULTS = {
    "where_of_0d": lambda a: np.where(np.asarray(a.sum()) > 0, 1.0, 2.0),
    "transpose_attr_of_0d": lambda a: np.asarray(a.sum()).T,
    "ellipsis_of_0d": lambda a: a[:1, :1].reshape(())[...],
    "empty_index_of_0d": lambda a: a[:1, :1].reshape(())[()],
    "keepdims_then_empty_index": lambda a: a.sum(keepdims=True)[()],
    "nan_to_num_of_0d": lambda a: np.nan_to_num(np.asarray(a.sum())),
    "clip_of_0d": lambda a: np.clip(np.asarray(a.sum()), 0, 1),
    "ufunc_of_0d": lambda a: np.sin(np.asarray(a.sum())),
    "copy_of_0d": lambda a: np.asarray(a.sum()).copy(),
    "full_index": lambda a: a[1, 2],
    "row_then_index": lambda a: a[1][2],
}


def assert_same_numpy_types(expected, actual):
    for e, g in zip(*(x if isinstance(x, tuple) else (x,) for x in (expected, actual))):
        assert type(g) is type(e), f"{type(g).__name__} instead of {type(e).__name__}"
        assert g.dtype == e.dtype, f"{g.dtype} instead of {e.dtype}"
        np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-5)


@reference_only_skip("torch 2.13 hands out NumPy's 0-d results as 0-d arrays")
@pytest.mark.parametrize("name", list(ZERO_D_ARRAY_RESULTS))
def test_0d_results_are_arrays_or_scalars_as_numpy_gives_them(name):
    fn = ZERO_D_ARRAY_RESULTS[name]
    a = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    assert_same_numpy_types(fn(a), optimize("eager")(fn)(a))


DTYPE_RESULTS = {
    "sum_of_uint8": (lambda a: np.sum(a), np.uint8),
    "prod_of_uint16": (lambda a: a.prod(), np.uint16),
    "cumsum_of_int8": (lambda a: np.cumsum(a), np.int8),
    "cumsum_of_int32": (lambda a: a.cumsum(axis=0), np.int32),
    "sum_of_uint32_axis": (lambda a: a.sum(axis=1), np.uint32),
    "sum_of_bool": (lambda a: np.sum(a > 3), np.int64),
    "add_of_int8": (lambda a: a + a, np.int8),
}


@reference_only_skip("torch 2.13's NumPy layer sums small integer types in other dtypes than NumPy")
@pytest.mark.parametrize("name", list(DTYPE_RESULTS))
def test_results_have_numpys_dtypes(name):
    fn, dtype = DTYPE_RESULTS[name]
    a = np.arange(12).reshape(3, 4).astype(dtype)
    assert_same_numpy_types(fn(a), optimize("eager")(fn)(a))


def scalar_in_place_add(a):
    s = a[0, 0]
    s += 1
    return s, a


@reference_only_skip("torch 2.13 adds in place into the array the scalar was read from")
def test_an_in_place_operator_on_a_numpy_scalar_rebinds_it():
    """NumPy scalars are immutable: `s += 1` on `a[0, 0]` leaves `a` as it was."""
    assert_same(scalar_in_place_add, np.ones((2, 2)), graphs=None)


# ---------------------------------------------------------------------------------------------
# ndarray subclasses: their operators and methods are their own, not a plain array's
# ---------------------------------------------------------------------------------------------
class UserArray(np.ndarray):
    def __mul__(self, other):
        return np.asarray(self) * other + 100


def _memmap(tmp_path):
    array = np.memmap(tmp_path / "m.dat", dtype=np.float64, mode="w+", shape=(2, 2))
    array[:] = [[1.0, 2.0], [3.0, 4.0]]
    return array


SUBCLASS_ARRAYS = {
    "matrix": lambda tmp: np.matrix([[1.0, 2.0], [3.0, 4.0]]),
    "masked_array": lambda tmp: np.ma.masked_array([[1.0, 2.0], [100.0, 4.0]], mask=[[0, 0], [1, 0]]),
    "recarray": lambda tmp: np.arange(4.0).reshape(2, 2).view(np.recarray),
    "memmap": _memmap,
    "user_subclass": lambda tmp: np.arange(4.0).reshape(2, 2).view(UserArray),
}
SUBCLASS_FUNCTIONS = {
    "mul": lambda a: a * a,
    "sum_method": lambda a: a.sum(),
    "np_sum": lambda a: np.sum(a),
    "add_and_index": lambda a: (a + 1)[0],
    "mean_axis": lambda a: np.mean(a, axis=0),
    "ufunc": lambda a: np.exp(a),
}


def _assert_same_array(actual, expected):
    assert type(actual) is type(expected), f"{type(actual).__name__} instead of {type(expected).__name__}"
    np.testing.assert_array_equal(np.ma.getdata(actual), np.ma.getdata(expected))
    np.testing.assert_array_equal(np.ma.getmaskarray(actual), np.ma.getmaskarray(expected))


@pytest.mark.parametrize("fn", list(SUBCLASS_FUNCTIONS))
@pytest.mark.parametrize("kind", list(SUBCLASS_ARRAYS))
def test_ndarray_subclasses_are_not_traced_as_plain_arrays(kind, fn, tmp_path):
    make, function = SUBCLASS_ARRAYS[kind], SUBCLASS_FUNCTIONS[fn]
    compiled = optimize("eager")(function)
    for _ in range(2):
        _assert_same_array(compiled(make(tmp_path)), function(make(tmp_path)))


@reference_only_skip("torch 2.13 runs a matrix through the entry of a plain array")
def test_a_plain_array_after_a_subclass_and_back():
    """The exact type is the guard: a matrix after a plain array (and back) is not run as the other."""
    compiled = optimize("eager")(SUBCLASS_FUNCTIONS["mul"])
    plain, matrix = np.arange(4.0).reshape(2, 2), np.matrix(np.arange(4.0).reshape(2, 2))
    for a in (plain, matrix, plain, matrix):
        _assert_same_array(compiled(a), a * a)


def negative_strides(a):
    return a * 2 + 1


def test_an_array_with_negative_strides_runs_in_python():
    a = np.arange(6.0)
    assert_same(negative_strides, a[::-1], graphs=None)
    assert_same(negative_strides, a, a[::-1], graphs=None)
