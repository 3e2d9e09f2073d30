"""The eager re-run after a compiled graph raises leaves everything as eager leaves it: the random
generators (the numbers drawn after the call are eager's), the tensors written in place (a kernel that
wrote part of its output before raising writes it once), the grad mode; resume functions re-run
inside `with` and `try` blocks; things torch.compile refuses about `mark_dynamic` are refused; verify
mode does not run a frame's writes outside Python objects twice."""
import inspect
import os
import subprocess
import sys

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

import minidynamo
from break_harness import compare, compare_runs, run_once
from translator_harness import REFERENCE, fresh_dynamo, optimize  # noqa: F401

G = None
BAD = torch.tensor([9])  # out of range for every tensor indexed with it here: a runtime error
BUFFERS = torch.nn.BatchNorm1d(3)
ATTENTION = torch.nn.MultiheadAttention(4, 2, dropout=0.5)


def uniform_then_error(x):
    global G
    G = 1
    y = torch.empty(3).uniform_()
    return x.index_select(0, BAD) + y


def sdpa_dropout_then_error(x):
    global G
    G = 1
    q = x.reshape(1, 1, 3, 1).expand(1, 2, 3, 4)
    y = torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    return y.index_select(0, BAD)


def init_then_error(x):
    global G
    G = 1
    w = torch.nn.init.kaiming_uniform_(torch.empty(3, 3))
    return (w @ x).index_select(0, BAD)


def attention_dropout_then_error(x):
    global G
    G = 1
    q = x.reshape(3, 1, 1).expand(3, 1, 4)
    y, _ = ATTENTION(q, q, q)
    return y.index_select(0, BAD)


def bernoulli_then_error_in_except(x):
    y = torch.empty(3).bernoulli_(0.5)
    try:
        return x.index_select(0, BAD)
    except IndexError:
        return y * 2


def draw_break_then_error(x):
    y = torch.rand(3)
    print("break")
    global G
    G = torch.rand(2)
    return (x + y).index_select(0, BAD)


RANDOM_CASES = [uniform_then_error, sdpa_dropout_then_error, init_then_error, attention_dropout_then_error,
                bernoulli_then_error_in_except, draw_break_then_error]


def _run_seeded(fn, make_inputs):
    """One call of `fn` from seed 0, and the numbers drawn after it."""
    torch.manual_seed(0)
    run = run_once(fn, make_inputs(), global_names=("G",), globals_dict=globals())
    return run, torch.rand(4)


def check_same_as_eager(fn, make_inputs, backend="eager", calls=3):
    globals()["G"] = None
    expected, expected_next = _run_seeded(fn, make_inputs)
    compiled = minidynamo.optimize(backend)(fn)
    for call in range(calls):
        globals()["G"] = None
        actual, actual_next = _run_seeded(compiled, make_inputs)
        compare_runs(actual, expected, where=f"call {call}: ")
        assert torch.equal(actual_next, expected_next), f"call {call}: the draws after the call differ from eager's"


@pytest.mark.skipif(REFERENCE, reason="torch 2.13 does not re-run a raising graph")
@pytest.mark.parametrize("backend", ["eager", "cpp"])
@pytest.mark.parametrize("fn", RANDOM_CASES, ids=[fn.__name__ for fn in RANDOM_CASES])
def test_random_draws_of_a_raising_graph_are_undone(fn, backend):
    check_same_as_eager(fn, lambda: (torch.ones(3),), backend)
    assert minidynamo.stats()["eager_reruns"] >= 3


GENERATOR = torch.Generator()


def generator_then_error(x):
    global G
    G = 1
    y = torch.rand(3, generator=GENERATOR)
    return x.index_select(0, BAD) + y


@pytest.mark.skipif(REFERENCE, reason="torch 2.13 does not re-run a raising graph")
def test_a_generator_passed_in_draws_as_in_eager():
    def run(fn):
        GENERATOR.manual_seed(5)
        return run_once(fn, (torch.ones(3),), global_names=("G",), globals_dict=globals()), torch.rand(4, generator=GENERATOR)

    expected, expected_next = run(generator_then_error)
    compiled = minidynamo.optimize("eager")(generator_then_error)
    for _ in range(2):
        actual, actual_next = run(compiled)
        compare_runs(actual, expected)
        assert torch.equal(actual_next, expected_next)


def index_add_then_error(x, lst):
    lst.append(1)
    x.index_add_(0, torch.tensor([0, 1, 9]), torch.ones(3))  # writes rows 0 and 1, then raises
    return x


def setitem_then_error(x, lst):
    lst.append(1)
    x[torch.tensor([1, 9])] = 5.0
    return x


def scatter_then_error(x, lst):
    lst.append(1)
    x.scatter_(0, torch.tensor([0, 2, 9]), torch.ones(3))
    return x


def complete_write_then_error(x, lst):
    lst.append(x.sum())
    x.mul_(2)
    return x.index_select(0, BAD)


def buffer_write_then_error(x, lst):
    lst.append(1)
    BUFFERS.running_mean.index_add_(0, torch.tensor([0, 9]), x[:2])
    return x


def index_add_in_try(x, lst):
    try:
        x.index_add_(0, torch.tensor([0, 9]), torch.ones(2))
    except IndexError:
        lst.append(x.clone())
        return x * 2
    return x


def view_write_then_error(x, lst):
    lst.append(1)
    y = x[1:]
    y.index_add_(0, torch.tensor([0, 9]), torch.ones(2))
    return x


WRITE_CASES = [index_add_then_error, setitem_then_error, scatter_then_error, complete_write_then_error,
               buffer_write_then_error, index_add_in_try, view_write_then_error]


@pytest.mark.skipif(REFERENCE, reason="torch 2.13 does not re-run a raising graph")
@pytest.mark.parametrize("backend", ["eager", "cpp"])
@pytest.mark.parametrize("fn", WRITE_CASES, ids=[fn.__name__ for fn in WRITE_CASES])
def test_a_write_begun_before_the_error_happens_once(fn, backend):
    mean = BUFFERS.running_mean.clone()
    expected = run_once(fn, (torch.zeros(3), []))
    expected_mean = BUFFERS.running_mean.clone()
    for call in range(3):
        BUFFERS.running_mean.copy_(mean)
        x = torch.zeros(3)
        actual = run_once(minidynamo.optimize(backend)(fn), (x, []))
        compare_runs(actual, expected, where=f"call {call}: ")
        compare(BUFFERS.running_mean, expected_mean, "running_mean")
        assert x._version == expected.args[0]._version, "the version counter says what eager's says"


def test_a_large_write_is_not_rerun_and_done_once():
    """Beyond the copy's size limit the graph's error is raised as it is: the write still happens once."""
    def fn(x, lst):
        lst.append(1)
        x.index_add_(0, torch.tensor([0, 1, 1 << 14]), torch.ones(3))
        return x

    x_eager, x_compiled = torch.zeros(1 << 14), torch.zeros(1 << 14)
    with pytest.raises(IndexError):
        fn(x_eager, [])
    with pytest.raises(IndexError):
        minidynamo.optimize("eager")(fn)(x_compiled, [])
    assert torch.equal(x_compiled, x_eager)
    assert minidynamo.stats()["eager_reruns"] == 0


RESUME_IN_BLOCKS = """
import torch, minidynamo

def in_no_grad(x, lst):
    with torch.no_grad():
        lst.append(x.sin())
        print("break")
        lst.append(x.cos())
        return x.index_select(0, torch.tensor([9]))

def in_user_context(x, lst):
    class Ctx:
        def __enter__(self):
            lst.append("enter")
        def __exit__(self, *exc):
            lst.append(exc[0].__name__ if exc[0] else None)
    with Ctx():
        print("break")
        lst.append(x.cos())
        return x.index_select(0, torch.tensor([9]))

def in_try(x, lst):
    try:
        lst.append(x.sin())
        print("break")
        lst.append(x.cos())
        y = x.index_select(0, torch.tensor([9]))
    except IndexError:
        y = x * 2
    return y

for fn in (in_no_grad, in_user_context, in_try):
    for outer in (torch.no_grad, torch.enable_grad):
        results = []
        for run in (fn, minidynamo.optimize("eager")(fn)):
            lst = []
            with outer():
                try:
                    out = run(torch.ones(2), lst)
                except IndexError as e:
                    out = repr(e)
                results.append((str(out), [str(v) for v in lst], torch.is_grad_enabled()))
        assert results[0] == results[1], (fn.__name__, results)
assert minidynamo.stats()["eager_reruns"] >= 2  # in_no_grad's resume function, under both modes
print("ok")
"""


@pytest.mark.skipif(REFERENCE, reason="torch 2.13 does not re-run a raising graph")
def test_resume_function_rerun_inside_with_and_try_blocks():
    """A resume function's entry jumps into the middle of its `with`/`try` block: its exception table
    keeps the original's stack depths (computing them from the entry got them wrong, and an error
    inside the block crashed the interpreter). In a subprocess, so a crash fails only this test."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", RESUME_IN_BLOCKS], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")


# ---- mark_dynamic: what torch.compile refuses is refused ----

def _line_of(fn, text: str) -> str:
    """`file", line N` of the line of `fn`'s source holding `text`, as tracebacks write it."""
    lines, first = inspect.getsourcelines(fn)
    number = first + next(i for i, line in enumerate(lines) if text in line)
    return f'{fn.__code__.co_filename}", line {number}'


def branches_on_the_size(x):
    if x.shape[0] == 4:
        return x + 1
    return x - 1


def reshapes_to_the_size(x):
    return x.reshape(4, -1) * 2


def _specialises(x):
    return x.view(4, 3)


def specialises_in_a_callee(x):
    y = x.sin()
    return _specialises(y)


def specialises_after_a_break(x):
    y = x.cos()
    print("break")
    if x.shape[0] == 4:
        return y + 1
    return y


SPECIALISING = [(branches_on_the_size, "if x.shape[0] == 4"), (reshapes_to_the_size, "x.reshape(4, -1)"),
                (specialises_in_a_callee, "x.view(4, 3)"), (specialises_after_a_break, "if x.shape[0] == 4")]


@pytest.mark.parametrize("nopython", [False, True])
@pytest.mark.parametrize("fn,text", SPECIALISING, ids=[fn.__name__ for fn, _ in SPECIALISING])
def test_a_dim_marked_dynamic_that_the_code_specialises_is_refused(fn, text, nopython):
    if nopython and fn is specialises_after_a_break:
        pytest.skip("a graph break under fullgraph is an error of its own")
    x = torch.ones(4, 3)
    torch._dynamo.mark_dynamic(x, 0)
    with pytest.raises(ConstraintViolationError) as raised:
        optimize("eager", nopython=nopython)(fn)(x)
    message = str(raised.value)
    assert "marked L['x'].size()[0] as dynamic but your code specialized it to be a constant (4)" in message
    where = fn if fn is not specialises_in_a_callee else _specialises
    assert _line_of(where, text) in message


def test_a_dim_marked_dynamic_that_stays_symbolic_compiles():
    def fn(x):
        return x.sum(0) * x.shape[0]

    compiled = optimize("eager")(fn)
    for n in (4, 6, 9):
        x = torch.ones(n, 3)
        torch._dynamo.mark_dynamic(x, 0)
        assert torch.equal(compiled(x), fn(x))


def _mark_in_callee(x):
    torch._dynamo.mark_dynamic(x, 0)


MARKS = [(minidynamo.mark_dynamic, "minidynamo.mark_dynamic(x, 0)"),
         (torch._dynamo.mark_dynamic, "mark(x, 0)"), (torch._dynamo.maybe_mark_dynamic, "mark(x, 0)")]


@pytest.mark.parametrize("nopython", [False, True])
@pytest.mark.parametrize("mark", [m for m, _ in MARKS], ids=["minidynamo.mark_dynamic", "mark_dynamic", "maybe_mark_dynamic"])
def test_mark_dynamic_inside_the_compiled_function_is_refused(mark, nopython):
    if REFERENCE and mark is minidynamo.mark_dynamic:
        pytest.skip("torch traces minidynamo's function as any other")

    def fn(x):
        y = x * 2
        if mark is minidynamo.mark_dynamic:
            minidynamo.mark_dynamic(x, 0)
        else:
            mark(x, 0)
        return y

    with pytest.raises(AssertionError, match="forbidden callable") as raised:
        optimize("eager", nopython=nopython)(fn)(torch.ones(4, 3))
    text = "minidynamo.mark_dynamic(x, 0)" if mark is minidynamo.mark_dynamic else "mark(x, 0)"
    assert _line_of(fn, text) in str(raised.value)


def test_mark_dynamic_in_a_callee_of_the_compiled_function_is_refused():
    def fn(x):
        _mark_in_callee(x)
        return x + 1

    with pytest.raises(AssertionError, match="forbidden callable") as raised:
        optimize("eager")(fn)(torch.ones(4, 3))
    assert _line_of(_mark_in_callee, "mark_dynamic(x, 0)") in str(raised.value)


def test_mark_static_inside_the_compiled_function_is_traced():
    def fn(x):
        torch._dynamo.mark_static(x, 0)
        return x + 1

    x = torch.ones(4, 3)
    assert torch.equal(optimize("eager")(fn)(x), x + 1)


# ---- verify mode: effects outside Python objects happen once ----

OUT = None  # a file object some cases write through


def writes_a_file(x, path):
    with open(path, "a") as f:
        f.write("line\n")
    return x + 1


def appends_bytes_through_os_open(x, path):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, b"line\n")
    os.close(fd)
    return x * 2


def prints_to_a_global_file(x, path):
    print("line", file=OUT)
    return x - 1


def writes_through_a_graph_break(x, path):
    y = x.sin()
    with open(path, "a") as f:
        print("line", file=f)
    return y.cos()


FILE_WRITERS = [writes_a_file, appends_bytes_through_os_open, prints_to_a_global_file, writes_through_a_graph_break]


@pytest.mark.skipif(REFERENCE, reason="verify mode is minidynamo's")
@pytest.mark.parametrize("fn", FILE_WRITERS, ids=[fn.__name__ for fn in FILE_WRITERS])
def test_verify_mode_writes_a_file_once(fn, tmp_path, monkeypatch, caplog):
    global OUT
    monkeypatch.setattr(minidynamo.config, "verify", True)
    path = str(tmp_path / "out.txt")
    OUT = open(path, "a")
    try:
        compiled = minidynamo.optimize("eager")(fn)
        x = torch.ones(3)
        for call in range(1, 4):
            assert torch.equal(compiled(x, path), _eager(fn, x, path))
            OUT.flush()
            with open(path) as f:
                assert f.read() == "line\n" * (2 * call), "the compiled call and the eager one here write a line each"
    finally:
        OUT.close()
    assert minidynamo.verify.counts["unverified"] >= 3
    assert any("outside Python objects" in r.getMessage() for r in caplog.records)


def _eager(fn, *args):
    previous = minidynamo._C.set_eval_frame(None)
    try:
        return fn(*args)
    finally:
        minidynamo._C.set_eval_frame(previous)


@pytest.mark.skipif(REFERENCE, reason="verify mode is minidynamo's")
def test_verify_mode_still_verifies_a_call_that_only_reads_a_file(tmp_path, monkeypatch):
    monkeypatch.setattr(minidynamo.config, "verify", True)
    path = str(tmp_path / "in.txt")
    with open(path, "w") as f:
        f.write("3")

    def fn(x):
        with open(path) as f:
            return x * int(f.read())

    before = minidynamo.verify.counts["verified"]
    assert torch.equal(minidynamo.optimize("eager")(fn)(torch.ones(2)), torch.full((2,), 3.0))
    assert minidynamo.verify.counts["verified"] == before + 1


@pytest.mark.skipif(REFERENCE, reason="verify mode is minidynamo's")
def test_verify_mode_changes_the_environment_once(monkeypatch):
    monkeypatch.setattr(minidynamo.config, "verify", True)
    monkeypatch.setenv("MINIDYNAMO_TAIL_RERUN_COUNT", "0")

    def fn(x):
        os.environ["MINIDYNAMO_TAIL_RERUN_COUNT"] = str(int(os.environ["MINIDYNAMO_TAIL_RERUN_COUNT"]) + 1)
        return x + 1

    compiled = minidynamo.optimize("eager")(fn)
    for call in range(1, 3):
        compiled(torch.ones(2))
        assert os.environ["MINIDYNAMO_TAIL_RERUN_COUNT"] == str(call)
