"""Outputs of graphs compiled by the "cpp" and "triton" backends alias what eager's alias: views of
other outputs and of inputs come back as views with eager's storage, size, stride and offset, and
mutating one shows in the others (triton in interpreter mode without a GPU)."""
import pytest
import torch

import minidynamo
from minidynamo.backends import lookup_backend
from test_codegen_backends import backend, cache_dir  # noqa: F401  (fixtures)


def _view_of_output(a):
    y = a + 1
    return y, y[..., ::2]


def _view_before_its_base(a):
    y = a + 1
    return y[..., ::2], y


def _transpose_of_output(a):
    y = a * 2
    return y, y.t()


def _expand_of_output(a):
    y = a.sin()
    return y[:1].expand(3, 4), y


def _chunks_of_output(a):
    return (a * 2).chunk(2, 1)


def _views_of_an_extern_result(a):
    y = a @ a.t()
    return y[0], y[1:], y.t()


def _input_slice(a):
    return a[1:], a + 1


def _input_transpose(a):
    return a.t(), a.sum()


def _input_flattened(a):
    return a.view(-1), a * 2


def _input_itself_and_a_view(a):
    return a, a[:, 1], a.exp()


def _two_equal_computations(a):
    return a + 1, a + 1


def _views_with_the_input_layout(a):
    return a.view(2, 4), a.reshape(2, 4), a[:], a.squeeze(), a * 2


CASES = [_view_of_output, _view_before_its_base, _transpose_of_output, _expand_of_output,
         _chunks_of_output, _views_of_an_extern_result, _input_slice, _input_transpose,
         _input_flattened, _input_itself_and_a_view, _two_equal_computations, _views_with_the_input_layout]


def _layout(tensors, inputs):
    """Per tensor: size, stride, offset, and which of the tensors and inputs share its storage."""
    ptrs = [t.untyped_storage().data_ptr() for t in (*tensors, *inputs)]
    return [(tuple(t.shape), t.stride(), t.storage_offset(),
             [p == t.untyped_storage().data_ptr() for p in ptrs]) for t in tensors]


def assert_aliases_like_eager(fn, compiled, make_input):
    a, b = make_input(), make_input()
    actual, expected = compiled(a), fn(b)
    assert _layout(actual, [a]) == _layout(expected, [b])
    assert [x is a for x in actual] == [y is b for y in expected], "an input itself where eager has a new view"
    for x, y in zip(actual, expected):
        torch.testing.assert_close(x, y)
    for i, (x, y) in enumerate(zip(actual, expected)):  # mutation shows wherever eager's does
        if torch._debug_has_internal_overlap(y) == 0:  # not an expanded view
            x.add_(10 ** i)
            y.add_(10 ** i)
    for x, y in zip((*actual, a), (*expected, b)):
        torch.testing.assert_close(x, y)


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__.strip("_"))
def test_outputs_alias_like_eager(backend, fn):
    make_input = lambda: torch.arange(8.0).reshape(2, 4)  # noqa: E731
    compiled = lookup_backend(backend)(torch.fx.symbolic_trace(fn), [make_input()])
    assert hasattr(compiled, "compiled"), "fell back to eager"
    assert_aliases_like_eager(fn, compiled, make_input)
    # Called again with an input at an offset in a larger storage.
    assert_aliases_like_eager(fn, compiled, lambda: torch.arange(12.0)[4:].reshape(2, 4))


def test_view_of_an_input_called_with_other_strides_is_a_view_of_that_input(backend):
    # The kernels want the compiled strides: a relayout copy would make the output a view of it.
    compiled = lookup_backend(backend)(torch.fx.symbolic_trace(_input_slice), [torch.randn(4, 6)])
    assert hasattr(compiled, "compiled"), "fell back to eager"
    assert_aliases_like_eager(_input_slice, compiled, lambda: torch.arange(24.0).reshape(6, 4).t())


def test_returned_in_place_update_of_an_input(backend):
    def f(a):
        return a.add_(1), a[1:]

    a, b = torch.zeros(3, 2), torch.zeros(3, 2)
    actual, expected = minidynamo.optimize(backend)(f)(a), f(b)
    assert _layout(actual, [a]) == _layout(expected, [b])
    assert actual[0] is a and torch.equal(a, b)


def test_fuzz_finding_view_output_through_optimize(backend):
    r = minidynamo.optimize(backend)(_view_of_output)(torch.ones(2, 4))
    assert r[1]._base is r[0] or r[1].untyped_storage().data_ptr() == r[0].untyped_storage().data_ptr()
    r[0].zero_()
    assert torch.equal(r[1], torch.zeros(2, 2))
