"""Verify mode: each compiled call also runs eagerly on copies and the two are compared.

Wrong backends, stale entries, wrong mutations and leaked global state raise VerifyError naming the
function, the differing value, the entries that ran (guards, graphs); correct code runs silently with
each side effect done once."""
import dataclasses
import os
import random
import subprocess
import sys

import pytest
import torch

import minidynamo
from minidynamo import VerifyError, convert_frame, verify
from minidynamo.testing import CompileCounter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def verify_on(monkeypatch):
    monkeypatch.setattr(minidynamo.config, "verify", True)


def plus_one_backend(gm, example_inputs):
    """Deliberately wrong: every output one too large."""
    return lambda *args: tuple(out + 1 for out in gm.forward(*args))


def scale(x, k: int):
    return x * k + 1


# ---- caught ----


def test_wrong_backend_names_frame_value_graph_and_guards():
    compiled = minidynamo.optimize(plus_one_backend)(scale)
    with pytest.raises(VerifyError) as info:
        compiled(torch.ones(3), 2)
    message = str(info.value)
    line = scale.__code__.co_firstlineno
    assert f"compiled call of 'scale' ({__file__}:{line}) differs from eager at return value" in message
    assert "3 of 3 elements differ, max abs diff 1" in message
    assert "eager:    Tensor(shape=(3,), dtype=torch.float32, values=[3.0, 3.0, 3.0])" in message
    assert "compiled: Tensor(shape=(3,), dtype=torch.float32, values=[4.0, 4.0, 4.0])" in message
    assert f"converted frame 'scale' ({__file__}:{line}), cache entry 1 of 1" in message
    assert "L['x']: TENSOR_MATCH" in message and "L['k']" in message, "the entry's guards"
    assert "graph 0:" in message and "def forward(self, l_x" in message, "the entry's graph code"
    assert info.value.path == "return value" and info.value.function.startswith("'scale'")


def test_wrong_backend_caught_on_a_cache_hit_and_for_modules():
    calls = []

    def wrong_on_second_run(gm, example_inputs):
        def run(*args):
            calls.append(1)
            outs = gm.forward(*args)
            return outs if len(calls) == 1 else tuple(o * 2 for o in outs)
        return run

    module = minidynamo.compile(torch.nn.Linear(3, 2), backend=wrong_on_second_run)
    x = torch.randn(4, 3)
    module(x)
    with pytest.raises(VerifyError, match="differs from eager at return value") as info:
        module(x)
    assert info.value.function.startswith("'Linear.forward' (")
    assert "cache entry 1 of 1" in str(info.value)


def test_stale_entry_whose_guard_was_dropped(monkeypatch):
    """An entry missing its guard on `k` is reused for another k: the stale result is caught."""
    build = convert_frame.build_check_function

    def without_k(code, guards, *rest):
        return build(code, [g for g in guards if g.name != "L['k']"], *rest)

    monkeypatch.setattr(convert_frame, "build_check_function", without_k)
    cnt = CompileCounter()
    compiled = minidynamo.optimize(cnt)(scale)
    torch.testing.assert_close(compiled(torch.ones(2), 2), torch.full((2,), 3.0))
    with pytest.raises(VerifyError) as info:
        compiled(torch.ones(2), 5)
    assert "return value: 2 of 2 elements differ, max abs diff 3" in str(info.value)
    assert "(compared bitwise)" in str(info.value), "graphs run with torch's kernels compare exactly"
    assert "L['k']" not in str(info.value), "the guards shown are the stale entry's"
    assert cnt.frame_count == 1


def test_wrong_mutation_of_an_argument():
    def mutating_backend(gm, example_inputs):
        def run(*args):
            outs = gm.forward(*args)
            args[0].mul_(2)
            return outs
        return run

    def f(x):
        return x.sum()

    x = torch.ones(3)
    with pytest.raises(VerifyError, match=r"at argument 'x': 3 of 3 elements differ"):
        minidynamo.optimize(mutating_backend)(f)(x)
    assert torch.equal(x, torch.full((3,), 2.0)), "the compiled call really ran, once"


def test_list_append_replayed_with_a_custom_backend():
    def dropping_backend(gm, example_inputs):
        return lambda *args: gm.forward(*args)

    def f(xs, x):
        xs.append(x + 1)
        return x

    xs = []
    compiled = minidynamo.optimize(dropping_backend)(f)
    compiled(xs, torch.ones(1))  # correct: the append is replayed by the generated code
    assert len(xs) == 1
    before = verify.counts["verified"]
    compiled(xs, torch.ones(1))
    assert len(xs) == 2 and verify.counts["verified"] == before + 1


class PassThroughMode(torch.utils._python_dispatch.TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


PASS_THROUGH = PassThroughMode()
LEAKS = {  # what a compiled function leaves changed, how the test undoes it, the path reported
    "grad mode": (lambda: torch._C._set_grad_enabled(False), lambda: torch._C._set_grad_enabled(True)),
    "autocast cpu": (lambda: torch.set_autocast_enabled("cpu", True), lambda: torch.set_autocast_enabled("cpu", False)),
    "default dtype": (lambda: torch.set_default_dtype(torch.float64), lambda: torch.set_default_dtype(torch.float32)),
    "deterministic algorithms": (lambda: torch.use_deterministic_algorithms(True),
                                 lambda: torch.use_deterministic_algorithms(False)),
    "dispatch modes (fake mode, ...)": (PASS_THROUGH.__enter__, lambda: PASS_THROUGH.__exit__(None, None, None)),
}


@pytest.mark.parametrize("state", list(LEAKS))
def test_leaked_global_state(state):
    leak, undo = LEAKS[state]

    def leaking_backend(gm, example_inputs):
        def run(*args):
            outs = gm.forward(*args)
            leak()
            return outs
        return run

    try:
        with pytest.raises(VerifyError) as info:
            minidynamo.optimize(leaking_backend)(scale)(torch.ones(2), 3)
    finally:
        undo()
    assert info.value.path == f"global state: {state}"
    assert "the compiled call left it differently" in str(info.value)
    assert "converted frame 'scale'" in str(info.value)


def test_leaked_grad_mode_values_shown():
    def leaking_backend(gm, example_inputs):
        def run(*args):
            torch._C._set_grad_enabled(False)
            return gm.forward(*args)
        return run

    try:
        with pytest.raises(VerifyError) as info:
            minidynamo.optimize(leaking_backend)(scale)(torch.ones(2), 3)
    finally:
        torch._C._set_grad_enabled(True)
    assert "eager:    True" in str(info.value) and "compiled: False" in str(info.value)


def test_raising_where_eager_returns():
    def raising_backend(gm, example_inputs):
        def run(*args):
            raise ValueError("kernel failed")
        return run

    with pytest.raises(VerifyError, match="at the call: one run raised, the other returned") as info:
        minidynamo.optimize(raising_backend)(scale)(torch.ones(2), 3)
    assert isinstance(info.value.__cause__, ValueError)


def test_identity_of_returned_argument(monkeypatch):
    """Without its guards on `y`, the entry for pick(t, t) returns `x` for pick(t, copy of t):
    same values, but not the object eager returns."""
    build = convert_frame.build_check_function
    monkeypatch.setattr(convert_frame, "build_check_function",
                        lambda code, guards, *rest: build(code, [g for g in guards if g.name != "L['y']"], *rest))

    def pick(x, y):
        return (x if x is y else y) + 0, y

    t = torch.ones(2)
    compiled = minidynamo.optimize("eager")(pick)
    compiled(t, t)
    with pytest.raises(VerifyError) as info:
        compiled(t, t.clone())
    assert info.value.path == "return value[1]"
    assert "eager has the object that existed before the call, compiled a different one" in str(info.value)


def test_output_sharing_memory_with_an_input():
    def copying_backend(gm, example_inputs):
        return lambda *args: tuple(o.clone() for o in gm.forward(*args))

    def flat(x):
        return x.view(-1)

    with pytest.raises(VerifyError, match="at argument 'x': eager shares memory with return value, compiled does not"):
        minidynamo.optimize(copying_backend)(flat)(torch.ones(2, 2))


# ---- silent on correct code, each side effect once ----

STATE = {"calls": 0, "seen": []}


class Counter:
    created = 0

    def __init__(self):
        Counter.created += 1


def side_effects(x, log):
    STATE["calls"] += 1
    STATE["seen"].append(x.sum().item())  # .item(): a graph break
    log.append(Counter())
    print("called", len(log))
    return x * 2


def test_side_effects_happen_once_and_match(capsys):
    compiled = minidynamo.optimize("eager")(side_effects)
    log = []
    before = verify.counts["verified"]
    for i in range(3):
        compiled(torch.full((2,), float(i)), log)
    assert verify.counts["verified"] == before + 3
    assert STATE["calls"] == 3 and STATE["seen"] == [0.0, 2.0, 4.0]
    assert Counter.created == 3 and len(log) == 3
    assert capsys.readouterr().out == "called 1\ncalled 2\ncalled 3\n"


def test_module_state_rng_and_exceptions():
    bn = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3), torch.nn.Dropout(0.5))
    compiled = minidynamo.compile(bn)
    x = torch.randn(8, 3)
    torch.manual_seed(0)
    got = compiled(x)
    after = torch.get_rng_state()
    torch.manual_seed(0)
    want = bn(x)  # running stats updated a second time: the compiled call updated them once
    torch.testing.assert_close(got, want)
    torch.manual_seed(0)
    compiled(x)
    assert torch.equal(torch.get_rng_state(), after), "the RNG is left as the compiled call left it"
    assert int(bn[1].num_batches_tracked) == 3

    def raises(x):
        y = x + 1
        return y + {}["missing"]

    with pytest.raises(KeyError, match="missing"):
        minidynamo.optimize("eager")(raises)(torch.ones(1))


class DropsOnCopy:
    """Like torch's optimizers: `__getstate__` leaves `_warned` out, so copies lack it."""

    def __init__(self):
        self.steps = 0
        self._warned = True

    def __getstate__(self):
        return {"steps": self.steps}


def test_attribute_a_copy_lacks_is_no_difference_unless_a_run_changes_it():
    holder = DropsOnCopy()

    def step(x):
        holder.steps += 1
        return x + holder.steps

    assert minidynamo.optimize("eager")(step)(torch.zeros(2)).tolist() == [1.0, 1.0]
    assert holder.steps == 1 and holder._warned is True

    def wrong_backend(gm, example_inputs):
        def run(*args):
            holder._warned = "changed"
            return gm.forward(*args)
        return run

    with pytest.raises(VerifyError, match="attribute '_warned' set in only one run"):
        minidynamo.optimize(wrong_backend)(step)(torch.zeros(2))


@dataclasses.dataclass
class WithFactory:
    a: torch.Tensor
    extra: list = dataclasses.field(default_factory=list)


def test_dataclass_with_a_default_factory_made_in_both_runs():
    """The eager run's copies keep dataclasses' sentinels: the generated __init__ compares its
    default with one by identity."""
    def make(x):
        d = WithFactory(x)
        d.extra.append(x * 2)
        return d.extra[0] + d.a, d

    got, made = minidynamo.optimize("eager")(make)(torch.ones(2))
    assert got.tolist() == [3.0, 3.0] and made.extra[0].tolist() == [2.0, 2.0]
    assert verify.counts["verified"] > 0


def test_numpy_floats_compare_with_tolerance_and_wrong_ones_are_caught():
    """Compiled numpy code runs torch's kernels, whose float32 sums round otherwise than numpy's."""
    np = pytest.importorskip("numpy")
    a = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)

    def gram(a):
        return a @ a.T, np.float32(a.sum())

    minidynamo.optimize("eager")(gram)(a)
    with pytest.raises(VerifyError, match="return value"):
        minidynamo.optimize(plus_one_backend)(gram)(a)


def test_random_python_and_torch_numbers():
    def f(x):
        return x + torch.rand(2) + random.random()

    random.seed(1)
    torch.manual_seed(1)
    got = minidynamo.optimize("eager")(f)(torch.ones(2))
    random.seed(1)
    torch.manual_seed(1)
    torch.testing.assert_close(got, f(torch.ones(2)))


def test_nested_compiled_function_and_non_leaf_input():
    inner = minidynamo.optimize("eager")(lambda t: t.relu() * 3)

    def outer(x):
        y = x.sin()
        print("break")
        return inner(y) + 1

    a = torch.randn(4, requires_grad=True)
    x = a * 2  # not a leaf: copied detached for the eager run
    cnt = CompileCounter()
    out = minidynamo.optimize(cnt)(outer)(x)
    out.sum().backward()
    torch.testing.assert_close(out, outer(x))
    assert a.grad is not None


def test_cpp_backend_compares_with_tolerance():
    def f(x):
        return torch.softmax(x, -1).sum(0) / 3

    compiled = minidynamo.optimize("cpp")(f)
    x = torch.randn(64, 33)
    torch.testing.assert_close(compiled(x), f(x))
    assert compiled.fn.exact is False


# ---- switching it on ----


def test_off_means_no_wrapper(monkeypatch):
    monkeypatch.setattr(minidynamo.config, "verify", False)
    assert minidynamo.optimize("eager")(scale).fn is scale
    module = torch.nn.Linear(2, 2)
    assert minidynamo.compile(module)._compiled_call.fn == module.__call__
    monkeypatch.setattr(minidynamo.config, "verify", True)
    assert isinstance(minidynamo.optimize("eager")(scale).fn, verify.Verified)


def test_environment_variable_and_suite_subset_in_verify_mode():
    """A few translator and graph-break modules, run whole with MINIDYNAMO_VERIFY=1."""
    env = dict(os.environ, MINIDYNAMO_VERIFY="1")
    check = subprocess.run([sys.executable, "-c", "import minidynamo; print(minidynamo.config.verify)"],
                           cwd=ROOT, env=env, capture_output=True, text=True)
    assert check.stdout.strip() == "True", check.stderr
    modules = ["tests/test_with_block_breaks.py", "tests/test_graph_breaks_side_effects.py",
               "tests/test_translator_containers.py"]
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *modules],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
