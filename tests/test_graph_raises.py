"""A compiled graph that raises when it runs: the frame runs eagerly instead, once what the graph
changed is put back (tensors it writes in place, random draws), so what eager does before the error
(global stores, container and attribute mutations, prints, an except clause) happens as in eager and
the error is eager's own. More in tests/test_tail_rerun.py."""
import pytest
import torch

import minidynamo
from break_harness import check_breaks, compare_runs, rand, run_once
from translator_harness import REFERENCE, fresh_dynamo  # noqa: F401

pytestmark = pytest.mark.skipif(REFERENCE, reason="torch 2.13 loses these side effects (and raises its own errors)")

LIN = torch.nn.Linear(2, 2)
G = None


class Box:
    def __init__(self):
        self.value = None


def global_and_append_then_dtype_error(x, lst):
    global G
    G = x.sum()
    lst.append(1)
    return LIN(x.double())  # float64 input, float32 weight: fake tensors let it through


def attribute_then_dtype_error(x, box):
    box.value = x * 3
    return LIN(x.double())


def print_then_dtype_error(x):
    y = x + 1
    print("before", y.shape)
    z = y * 2
    return LIN(z.double())


def dict_store_then_index_error(x, d, idx):
    d["k"] = x.cos()
    return x[idx]  # the index is data: out of range only when it runs


def break_then_error_in_resume(x, lst):
    lst.append(x.sin())
    print("break")
    lst.append(x.cos())
    return LIN(x.double())


def data_dependent_error_after_append(x, lst):
    lst.append(x.max())
    return torch.nn.functional.embedding(x.long(), torch.ones(2, 3))


def append_then_in_place_op_that_raises(x, lst):
    y = x.expand(2, *x.shape)
    lst.append(y.sum())
    y.add_(1)  # one memory location written twice: raises before changing anything
    return y


def no_error(x, lst):
    lst.append(x + 1)
    return LIN(x)


CASES = [
    (global_and_append_then_dtype_error, lambda: (rand(2), [])),
    (attribute_then_dtype_error, lambda: (rand(2), Box())),
    (print_then_dtype_error, lambda: (rand(2),)),
    (dict_store_then_index_error, lambda: (rand(3), {}, torch.tensor(7))),
    (break_then_error_in_resume, lambda: (rand(2), [])),
    (data_dependent_error_after_append, lambda: (torch.tensor([0.0, 5.0]), [])),
    (append_then_in_place_op_that_raises, lambda: (rand(3), [])),
    (no_error, lambda: (rand(2), [])),
]


@pytest.mark.parametrize("backend", ["eager", "cpp"])
@pytest.mark.parametrize("fn,factory", CASES, ids=[fn.__name__ for fn, _ in CASES])
def test_effects_before_the_error_happen_as_in_eager(fn, factory, backend):
    check_breaks(fn, factory, global_names=("G",), repeat=3,
                 compile=lambda f, cnt: minidynamo.optimize(backend)(f))


def test_reruns_are_counted_and_the_entry_is_kept():
    compiled = minidynamo.optimize("eager")(data_dependent_error_after_append)
    for _ in range(3):
        lst = []
        with pytest.raises(IndexError):
            compiled(torch.tensor([0.0, 5.0]), lst)
        assert len(lst) == 1
    stats = minidynamo.stats()
    assert stats["eager_reruns"] == 3
    assert stats["compiled"] == 1


def test_graph_that_mutated_an_input_raises_as_it_is():
    """No side effect, no except clause: nothing to replay, the graph's error is eager's."""

    def fn(x):
        x.add_(1)
        return LIN(x.double())

    x_eager, x_compiled = rand(2), None
    x_compiled = x_eager.clone()
    expected = run_once(fn, (x_eager,))
    actual = run_once(minidynamo.optimize("eager")(fn), (x_compiled,))
    compare_runs(actual, expected)
    assert minidynamo.stats()["eager_reruns"] == 0


def test_module_buffer_changed_before_the_error_is_changed_once():
    bn = torch.nn.BatchNorm1d(2)

    def fn(x, lst):
        lst.append(1)
        return LIN(bn(x).double())

    lst = []
    with pytest.raises(RuntimeError):
        minidynamo.optimize("eager")(fn)(torch.randn(4, 2), lst)
    assert int(bn.num_batches_tracked) == 1 and lst == [1]
    assert minidynamo.stats()["eager_reruns"] >= 1  # the frame (and the Linear's own, nested)


def global_then_random_op_that_raises(x):
    global G
    G = 7
    return x + torch.rand_like(x.long())  # rand_like of an integer tensor raises


def test_random_draws_are_undone_before_the_rerun():
    torch.manual_seed(0)
    with pytest.raises(RuntimeError):
        global_then_random_op_that_raises(rand(2))
    eager_state, eager_g = torch.get_rng_state(), G
    globals()["G"] = None
    torch.manual_seed(0)
    with pytest.raises(RuntimeError):
        minidynamo.optimize("eager")(global_then_random_op_that_raises)(rand(2))
    assert G == eager_g == 7
    assert torch.equal(torch.get_rng_state(), eager_state)
    assert minidynamo.stats()["eager_reruns"] == 1


def test_graph_drawing_random_numbers_raises_as_it_is():
    """Nothing to replay (no side effect, no except clause): the graph's own error."""

    def fn(x):
        y = torch.rand(2) + x
        return LIN(y.double())

    torch.manual_seed(0)
    with pytest.raises(RuntimeError):
        fn(rand(2))
    eager_state = torch.get_rng_state()
    torch.manual_seed(0)
    with pytest.raises(RuntimeError):
        minidynamo.optimize("eager")(fn)(rand(2))
    assert torch.equal(torch.get_rng_state(), eager_state)
    assert minidynamo.stats()["eager_reruns"] == 0


def test_keyboard_interrupt_from_a_graph_is_not_rerun():
    def interrupting(gm, example_inputs):
        def run(*args):
            raise KeyboardInterrupt("in the graph")

        return run

    def fn(x, lst):
        lst.append(1)
        return x + 1

    lst = []
    with pytest.raises(KeyboardInterrupt):
        minidynamo.optimize(interrupting)(fn)(rand(2), lst)
    assert lst == []
    assert minidynamo.stats()["eager_reruns"] == 0


def test_except_clause_around_a_raising_graph():
    def fn(x, lst):
        lst.append(0)
        try:
            y = LIN(x.double())
        except RuntimeError:
            lst.append(1)
            y = x * 2
        return y

    check_breaks(fn, lambda: (rand(2), []), repeat=3)


def test_verify_mode_accepts_a_rerun_where_eager_raises_too(monkeypatch):
    """Verify mode reports a graph that raises where eager returns (tests/test_verify.py); a graph that
    raises where eager raises too is what re-running is for."""
    monkeypatch.setattr(minidynamo.config, "verify", True)
    lst = []
    with pytest.raises(RuntimeError):
        minidynamo.optimize("eager")(global_and_append_then_dtype_error)(rand(2), lst)
    assert lst == [1]
