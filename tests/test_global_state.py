"""After every compiled call torch's global state (grad mode, autocast, default dtype, deterministic
algorithms, function/dispatch modes, fake mode) is exactly what eager leaves, and so is the result."""
import pytest
import torch
from torch.overrides import TorchFunctionMode

import minidynamo
from minidynamo.global_state import GlobalState
from translator_harness import REFERENCE, assert_equal, fresh_dynamo, optimize  # noqa: F401

BACKENDS = ["eager"] if REFERENCE else ["eager", "cpp"]
# Where torch 2.13's dynamo itself leaves a different state (or raises): skipped in reference mode.
REFERENCE_DIFFERS = {
    "set_autocast_enabled_call": "torch leaves autocast off after torch.set_autocast_enabled in the frame",
    "autocast_entered_by_hand": "torch leaves autocast off after ctx.__enter__() in the frame",
    "function_mode_entered": "torch raises on a torch function mode entered by hand",
    "no_grad_index_error": "torch leaves grad mode off when its graph raises inside no_grad",
    "ctx_made_before_break": "torch leaves grad mode off after a no_grad object made before a break",
    "set_grad_enabled_object_across_break": "torch restores grad mode after set_grad_enabled() across a break",
}


def skip_where_reference_differs(fn):
    if REFERENCE and fn.__name__ in REFERENCE_DIFFERS:
        pytest.skip(f"reference (torch) differs: {REFERENCE_DIFFERS[fn.__name__]}")


def run(fn, args):
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001 - compared with the other run
        return None, e


def check_state(fn, make_args, backend="eager", calls=3):
    """Eager and compiled calls give the same result or exception and leave the same global state."""
    skip_where_reference_differs(fn)
    compiled = optimize(backend)(fn)
    for call in range(calls):
        before = GlobalState.capture()
        try:
            expected, expected_exc = run(fn, make_args())
            eager_state = GlobalState.capture()
            before.restore()
            actual, actual_exc = run(compiled, make_args())
            compiled_state = GlobalState.capture()
        finally:
            before.restore()
        assert type(actual_exc) is type(expected_exc), f"call {call}: raised {actual_exc!r}, eager {expected_exc!r}"
        if expected_exc is None:
            assert_equal(actual, expected, f"call {call}: out")
        assert compiled_state.differences(eager_state) == [], f"call {call}: global state after the call differs"


def args_2d():
    torch.manual_seed(0)
    return (torch.randn(4, 4),)


# ---- autocast ----
def autocast_block(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ x
    return y, (x @ x).dtype


def cpu_amp_autocast(x):
    with torch.cpu.amp.autocast():
        y = torch.mm(x, x)
    return y + 1


def nested_autocast(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = x @ x
        with torch.autocast("cpu", enabled=False):
            b = x @ x
        c = x @ x
    return a, b, c, (x @ x).dtype


def autocast_with_break(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ x
        print("inside")
        y = y @ x
    return y * 2


def autocast_raising(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ x
        y = y + {}["missing"]
    return y


def autocast_returning_inside(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return torch.sin(x @ x)


def set_autocast_enabled_call(x):
    torch.set_autocast_enabled("cpu", True)
    return x @ x


def autocast_entered_by_hand(x):
    ctx = torch.autocast("cpu", dtype=torch.bfloat16)
    ctx.__enter__()
    return x @ x


AUTOCAST_CASES = [autocast_block, cpu_amp_autocast, nested_autocast, autocast_with_break, autocast_raising,
                  autocast_returning_inside, set_autocast_enabled_call, autocast_entered_by_hand]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", AUTOCAST_CASES, ids=lambda f: f.__name__)
def test_autocast_left_as_eager_leaves_it(fn, backend, capsys):
    check_state(fn, args_2d, backend)
    assert (torch.randn(2, 2) @ torch.randn(2, 2)).dtype == torch.float32


# ---- grad mode ----
def set_grad_enabled_call(x):
    torch.set_grad_enabled(False)
    return x * 2


def set_grad_enabled_call_then_break(x):
    torch.set_grad_enabled(False)
    y = x * 2
    print("break")
    return y * 3


def grad_mode_blocks(x):
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = x * 3
    with torch.set_grad_enabled(False):
        c = x * 4
    return a, b, c, torch.is_grad_enabled()


def no_grad_raising(x):
    with torch.no_grad():
        return x * {}["missing"]


def grad_args():
    torch.manual_seed(0)
    return (torch.randn(3, requires_grad=True),)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [set_grad_enabled_call, set_grad_enabled_call_then_break, grad_mode_blocks,
                                no_grad_raising], ids=lambda f: f.__name__)
def test_grad_mode_left_as_eager_leaves_it(fn, backend, capsys):
    check_state(fn, grad_args, backend)


# ---- default dtype, deterministic algorithms ----
def set_default_dtype_inside(x):
    torch.set_default_dtype(torch.float64)
    return x + torch.ones(3)


def default_dtype_round_trip(x):
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    y = torch.ones(3)
    torch.set_default_dtype(old)
    return x + y, torch.zeros(2).dtype


def deterministic_inside(x):
    torch.use_deterministic_algorithms(True)
    return x * 2, torch.are_deterministic_algorithms_enabled()


def deterministic_warn_only_inside(x):
    torch.use_deterministic_algorithms(True, warn_only=True)
    y = x * 2
    torch.use_deterministic_algorithms(False)
    return y


def anomaly_mode_inside(x):
    torch.autograd.set_detect_anomaly(True)
    return x * 2, torch.is_anomaly_enabled()


def vector_args():
    torch.manual_seed(0)
    return (torch.randn(3),)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [set_default_dtype_inside, default_dtype_round_trip, deterministic_inside,
                                deterministic_warn_only_inside, anomaly_mode_inside], ids=lambda f: f.__name__)
def test_flags_left_as_eager_leaves_them(fn, backend):
    check_state(fn, vector_args, backend)


# ---- torch function modes ----
class AddOneMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out + 1 if func is torch.mul else out


def function_mode_block(x):
    with AddOneMode():
        y = torch.mul(x, 2)
    return y, torch.mul(x, 2)


def function_mode_entered(x):
    AddOneMode().__enter__()
    return torch.mul(x, 2)


@pytest.mark.parametrize("fn", [function_mode_block, function_mode_entered], ids=lambda f: f.__name__)
def test_function_modes_left_as_eager_leaves_them(fn):
    try:
        check_state(fn, vector_args)
    finally:
        while torch._C._len_torch_function_stack():
            torch._C._pop_torch_function_stack()


# ---- a graph raising between its grad-mode switches ----
def no_grad_index_error(x, idx):
    with torch.no_grad():
        y = x[idx] * 2
    return y + x


def out_of_bounds_args():
    return torch.randn(4, requires_grad=True), torch.tensor([0, 1, 2, 9])


@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_raising_inside_no_grad_restores_grad_mode(backend):
    check_state(no_grad_index_error, out_of_bounds_args, backend)
    assert torch.is_grad_enabled()


# ---- grad-mode objects made outside the frame or before a break ----
def ctx_argument(x, ctx):
    with ctx:
        y = x * 2
    return y, torch.is_grad_enabled()


def ctx_argument_after_break(x, ctx):
    y = x + 1
    print("break")
    with ctx:
        z = y * 2
    return z, torch.is_grad_enabled()


def ctx_argument_break_inside(x, ctx):
    with ctx:
        y = x * 2
        print("break")
        z = y + torch.is_grad_enabled()
    return z, torch.is_grad_enabled()


def ctx_argument_used_twice(x, ctx):
    with ctx:
        y = x * 2
    with ctx:
        z = y * 3
    return z


def ctx_made_before_break(x):
    ctx = torch.no_grad()
    y = x + 1
    print("break")
    with ctx:
        z = y * 2
    with ctx:
        w = z * 2
    return w, z.requires_grad


def set_grad_enabled_object_across_break(x):
    ctx = torch.set_grad_enabled(False)
    y = x * 2
    print("break")
    with ctx:
        z = y + x
    return z, torch.is_grad_enabled()


CONTEXTS = {
    "set_grad_enabled_true": lambda: _made_then_restored(True),
    "set_grad_enabled_false": lambda: _made_then_restored(False),
    "no_grad": torch.no_grad,
    "enable_grad": torch.enable_grad,
    "inference_mode": torch.inference_mode,
}


def _made_then_restored(mode):
    before = torch.is_grad_enabled()
    ctx = torch.set_grad_enabled(mode)
    torch.set_grad_enabled(before)
    return ctx


def _context_state(ctx):
    return type(ctx), {k: v for k, v in vars(ctx).items() if not k.startswith("_")}


@pytest.mark.parametrize("make_ctx", list(CONTEXTS.values()), ids=list(CONTEXTS))
@pytest.mark.parametrize("fn", [ctx_argument, ctx_argument_after_break, ctx_argument_break_inside,
                                ctx_argument_used_twice], ids=lambda f: f.__name__)
@pytest.mark.parametrize("grad", [True, False])
def test_grad_mode_object_arguments(fn, make_ctx, grad, capsys):
    compiled = optimize("eager")(fn)
    for call in range(3):
        with torch.set_grad_enabled(grad):
            x = torch.randn(3, requires_grad=True)
            eager_ctx, compiled_ctx = make_ctx(), make_ctx()
            before = GlobalState.capture()
            expected = fn(x, eager_ctx)
            eager_state = GlobalState.capture()
            before.restore()
            actual = compiled(x, compiled_ctx)
            assert GlobalState.capture().differences(eager_state) == [], f"call {call}"
            before.restore()
        assert_equal(actual, expected, f"call {call}")
        assert _context_state(compiled_ctx) == _context_state(eager_ctx), f"call {call}: the context object"


@pytest.mark.parametrize("fn", [ctx_made_before_break, set_grad_enabled_object_across_break], ids=lambda f: f.__name__)
def test_grad_mode_objects_made_before_a_break(fn, capsys):
    check_state(fn, grad_args)


@pytest.mark.parametrize("backend", ["eager", "cpp"])
def test_break_inside_no_grad_leaves_grad_mode_and_gradients_as_eager(backend):
    def fn(x):
        with torch.no_grad():
            print("", end="")  # a graph break inside the block
            y = x * 2
        return x * 3 + y

    compiled = minidynamo.optimize(backend)(fn)
    for _ in range(2):
        x = torch.ones(2, requires_grad=True)
        out = compiled(x)
        assert torch.is_grad_enabled()
        out.sum().backward()
        assert torch.equal(x.grad, torch.full((2,), 3.0))
        torch.testing.assert_close(out, fn(torch.ones(2)))
