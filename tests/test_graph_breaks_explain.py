"""explain() output for graph breaks (counts, reasons, user stacks), nopython errors naming the
reason and the user's file:line, the README toy, and exceptions from compiled and resumed parts."""
import inspect
import operator
import os

import pytest
import torch

from break_harness import explain_quiet, rand
from translator_harness import REFERENCE, CompileCounter, optimize, fresh_dynamo  # noqa: F401

if REFERENCE:
    Unsupported = Exception  # torch raises its own Unsupported / UserError family
else:
    from minidynamo.exc import Unsupported

counts_only = pytest.mark.skipif(REFERENCE, reason="graph/break counts and reason texts are minidynamo's")
THIS_FILE = os.path.basename(__file__)
BUG_ID = ("minidynamo bug (wrong result): id() of an object created while tracing is a trace-time constant: "
          "`o = object(); return x + 1, o, id(o)` returns an id that is not id(o) of the returned object")
BUG_METHOD = ("minidynamo bug: a break at a bound-method call (x.sum().item()) has no user stack: "
              "'returning method item of tensor sum_1 created while tracing', so neither explain's reason "
              "nor the nopython error names the user's file and line")


def line_of(fn, marker: str) -> int:
    """Absolute line number of the first source line of `fn` containing `marker`."""
    lines, start = inspect.getsourcelines(fn)
    for i, text in enumerate(lines):
        if marker in text:
            return start + i
    raise AssertionError(f"{marker!r} not in {fn.__name__}")


# ---------------------------------------------------------------------------------------- the README toy
def toy_example(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def test_readme_toy_correct_on_both_branches():
    cnt = CompileCounter()
    compiled = optimize(cnt)(toy_example)
    torch.manual_seed(0)
    seen = set()
    counts = []
    for i in range(100):
        a, b = torch.randn(10), torch.randn(10)
        torch.testing.assert_close(compiled(a, b), toy_example(a, b))
        seen.add(bool(b.sum() < 0))
        counts.append(cnt.frame_count)
    assert seen == {True, False}, "random inputs should take both branches"
    if not REFERENCE:
        assert cnt.frame_count == 3, f"{cnt.frame_count} graphs after both branches, expected 3"
        both = next(i for i in range(100) if counts[i] == 3)
        assert counts[-1] == counts[both], "later calls should hit the cache"


@counts_only
def test_readme_toy_explain():
    torch.manual_seed(0)
    out = explain_quiet(toy_example, (torch.randn(10), torch.rand(10) + 0.1))  # b.sum() >= 0: no negation
    assert out.graph_count == 2
    assert out.graph_break_count == 1
    g1, g2 = out.graphs
    outputs = [n for n in g1.graph.nodes if n.op == "output"][0].args[0]
    targets = {getattr(o, "target", None) for o in outputs}
    assert operator.lt in targets or "lt" in {str(t) for t in targets}, f"graph 1 outputs: {outputs}"
    assert any(n.target in (operator.lt, torch.lt) or n.target == "lt" for n in g1.graph.nodes)
    ops2 = [n for n in g2.graph.nodes if n.op in ("call_function", "call_method")]
    assert [n.target for n in ops2] in ([operator.mul], [torch.mul], ["mul"]), ops2
    reason = out.break_reasons[0]
    assert "branch" in reason.reason or "data-dependent" in reason.reason
    assert reason.user_stack[-1].lineno == line_of(toy_example, "if b.sum() < 0")


# ---------------------------------------------------------------------------------------- explain reasons
def _fn_print(x):
    y = x + 1
    print("explained")
    return y * 2


def _fn_two(x):
    y = x.sin()
    print("one")
    y = y.cos()
    print("two")
    return y


def _helper_deep(t):
    print("deep print")
    return t * 3


def _helper_mid(t):
    return _helper_deep(t + 1) - 1


def _fn_nested(x):
    y = x * 2
    return _helper_mid(y) + 1


def _fn_branch(x):
    y = x * 2
    if y.max() > 0:
        return y + 1
    return y - 1


def _fn_item(x):
    s = x.sum().item()
    return x * s


def _fn_loop(x):
    for i in range(3):
        x = x + 1
        print("loop", i)
    return x


@counts_only
def test_explain_single_print():
    out = explain_quiet(_fn_print, (rand(3),))
    assert (out.graph_count, out.graph_break_count) == (2, 1)
    r = out.break_reasons[0]
    assert "print" in r.reason
    frame = r.user_stack[-1]
    assert os.path.basename(frame.filename) == THIS_FILE
    assert frame.lineno == line_of(_fn_print, 'print("explained")')
    assert frame.name == "_fn_print"
    assert 'print("explained")' in frame.line
    text = str(r)
    assert "print" in text and THIS_FILE in text and str(frame.lineno) in text


@counts_only
def test_explain_two_prints_resume_frame_named():
    out = explain_quiet(_fn_two, (rand(3),))
    assert (out.graph_count, out.graph_break_count) == (2, 2)  # sin | cos (nothing after the 2nd print)
    first, second = (r.user_stack[-1] for r in out.break_reasons)
    assert first.lineno == line_of(_fn_two, 'print("one")')
    assert second.lineno == line_of(_fn_two, 'print("two")')
    assert first.name == "_fn_two"
    assert second.name.startswith("__resume_at_") and second.name.endswith("_in__fn_two"), second.name


@counts_only
def test_explain_nested_helpers_every_frame_counted():
    out = explain_quiet(_fn_nested, (rand(3),))
    # _fn_nested breaks at the CALL of _helper_mid, _helper_mid at the CALL of _helper_deep, which breaks at print
    assert out.graph_break_count == 3, [str(r) for r in out.break_reasons]
    # x*2 | t+1 | (none before the print) t*3 | -1 | +1
    assert out.graph_count == 5
    print_line = line_of(_helper_deep, 'print("deep print")')
    # each break's stack runs from its frame down to the print: 3, 2 and 1 frames
    stacks = sorted((r.user_stack for r in out.break_reasons), key=len, reverse=True)
    assert [len(s) for s in stacks] == [3, 2, 1], [str(r) for r in out.break_reasons]
    assert [s[0].name for s in stacks] == ["_fn_nested", "_helper_mid", "_helper_deep"]
    assert all(s[-1].lineno == print_line and "print" in r.reason
               for s, r in zip(stacks, out.break_reasons))
    lines = {f.lineno for r in out.break_reasons for f in r.user_stack}
    assert line_of(_fn_nested, "_helper_mid(y)") in lines
    assert line_of(_helper_mid, "_helper_deep(t + 1)") in lines


@counts_only
def test_explain_branch():
    out = explain_quiet(_fn_branch, (torch.tensor([1.0, -2.0]),))
    assert (out.graph_count, out.graph_break_count) == (2, 1)
    assert out.break_reasons[0].user_stack[-1].lineno == line_of(_fn_branch, "if y.max() > 0")


@counts_only
def test_explain_loop():
    out = explain_quiet(_fn_loop, (rand(3),))
    assert (out.graph_count, out.graph_break_count) == (1, 1)
    assert out.break_reasons[0].user_stack[-1].lineno == line_of(_fn_loop, 'print("loop", i)')


@counts_only
def test_explain_item_names_line():
    out = explain_quiet(_fn_item, (rand(3),))
    assert (out.graph_count, out.graph_break_count) == (2, 1)
    assert out.break_reasons[0].user_stack[-1].lineno == line_of(_fn_item, ".item()")


# ---------------------------------------------------------------------------------------- nopython
NOPYTHON = [
    pytest.param(_fn_print, _fn_print, 'print("explained")', "print", id="print"),
    pytest.param(_fn_branch, _fn_branch, "if y.max() > 0", "branch", id="branch"),
    pytest.param(_fn_loop, _fn_loop, 'print("loop", i)', "print", id="loop"),
    pytest.param(_fn_nested, _helper_deep, 'print("deep print")', "print", id="nested_helper"),
    pytest.param(_fn_item, _fn_item, ".item()", "item", id="item",
                 marks=pytest.mark.skipif(REFERENCE, reason="torch handles .item() differently")),
]


@pytest.mark.parametrize("fn,where,marker,word", NOPYTHON)
def test_nopython_error_names_reason_and_line(fn, where, marker, word, capsys):
    compiled = optimize(CompileCounter(), nopython=True)(fn)
    with pytest.raises(Unsupported) as info:
        compiled(torch.tensor([1.0, 2.0, 3.0]))
    if REFERENCE:
        return
    msg = str(info.value)
    assert word in msg, msg
    assert THIS_FILE in msg, msg
    assert str(line_of(where, marker)) in msg, msg
    assert capsys.readouterr().out == "", "nothing of the function may run before the error"


def test_nopython_without_breaks_is_fine():
    def f(x):
        return (x + 1).relu()
    cnt = CompileCounter()
    x = rand(3)
    torch.testing.assert_close(optimize(cnt, nopython=True)(f)(x), f(x))
    assert cnt.frame_count == 1


# ---------------------------------------------------------------------------------------- exceptions
class CustomError(Exception):
    pass


def _raise_in_graph_part(x):
    y = x * 2
    if y.shape[0] == 3:
        raise CustomError(f"graph part {y.shape}")
    return y


def _raise_in_resume(x):
    y = x * 2
    print("before raise")
    z = y.sum()
    raise ValueError(f"resume part {z.dim()}")


def _raise_in_branch(x):
    y = x + 1
    if y.sum() > 0:
        raise KeyError("positive branch")
    return y


def _raise_op_error_in_resume(x, w):
    y = x.relu()
    print("then a bad matmul")
    return y @ w


def _raise_in_helper_after_break(x):
    y = x * 2
    return _helper_raises(y)


def _helper_raises(t):
    print("helper first")
    u = t + 1
    raise IndexError(f"helper {u.numel()}")


def _raise_in_loop(x):
    for i in range(5):
        x = x + 1
        print(i)
        if i == 2:
            raise ZeroDivisionError(f"loop {i}")
    return x


EXC = [
    pytest.param(_raise_in_graph_part, (torch.ones(3),), CustomError, id="graph_part"),
    pytest.param(_raise_in_resume, (torch.ones(3),), ValueError, id="resume_part"),
    pytest.param(_raise_in_branch, (torch.ones(3),), KeyError, id="branch_resume"),
    pytest.param(_raise_op_error_in_resume, (torch.ones(2, 3), torch.ones(2, 3)), RuntimeError, id="op_error_in_resume",
                 marks=pytest.mark.skipif(REFERENCE, reason="torch wraps the error raised while tracing")),
    pytest.param(_raise_in_helper_after_break, (torch.ones(3),), IndexError, id="helper"),
    pytest.param(_raise_in_loop, (torch.ones(3),), ZeroDivisionError, id="loop"),
]


@pytest.mark.parametrize("fn,args,exc_type", EXC)
def test_exception_same_as_eager(fn, args, exc_type, capsys):
    with pytest.raises(exc_type) as eager:
        fn(*[a.clone() for a in args])
    eager_out = capsys.readouterr().out
    compiled = optimize(CompileCounter())(fn)
    for _ in range(2):  # second call: from the cache
        with pytest.raises(exc_type) as comp:
            compiled(*[a.clone() for a in args])
        assert type(comp.value) is type(eager.value)
        assert str(comp.value) == str(eager.value)
        assert capsys.readouterr().out == eager_out


def test_id_of_new_object_is_its_id():
    def f(x):
        o = object()
        return x + 1, o, id(o)
    compiled = optimize(CompileCounter())(f)
    for _ in range(2):
        _, o, i = compiled(rand(2))
        assert i == id(o)


def test_counts_helper_breaks_against_cache():
    """Calling a breaking helper from two compiled functions: the helper converts once."""
    def a(x):
        return _helper_deep(x + 1)

    def b(x):
        return _helper_deep(x * 2)

    cnt = CompileCounter()
    x = rand(3)
    ea, eb = a(x), b(x)
    if REFERENCE:  # torch's optimize is not a context manager
        torch.testing.assert_close(optimize(cnt)(a)(x), ea)
        torch.testing.assert_close(optimize(cnt)(b)(x), eb)
        return
    with optimize(cnt):
        ra = a(x)
        first = cnt.frame_count
        rb = b(x)
    torch.testing.assert_close(ra, ea)
    torch.testing.assert_close(rb, eb)
    if not REFERENCE:
        assert first == 2  # x+1, t*3 (the helper's print breaks before any op)
        assert cnt.frame_count == 3  # only b's x*2 is new
