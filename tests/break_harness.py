"""Harness for the graph-break suite (tests/test_graph_breaks_*.py).

Builds on translator_harness (same switch: ``MINIDYNAMO_TEST_REFERENCE=torch`` runs everything on
torch._dynamo, where graph/break counts are not asserted, only correctness).

A *case* is a function plus an input factory and the expected counts:

    CASES = Cases()

    @CASES.case(lambda: (rand(3),), graphs=2, breaks=1)
    def print_top(x):
        x = x + 1
        print("hi")
        return x * 2

``run_case`` runs the function eagerly and compiled on identical deep copies of the inputs and
compares: the result (recursively, objects by their attributes), the inputs afterwards (mutation),
which outputs alias which inputs, the named globals afterwards, stdout, warnings, records logged to
``LOGGER``, and a raised exception (same type and message).  Counts: ``graphs`` is the number of
graphs compiled by the first compiled call (CompileCounter.frame_count), ``breaks`` the
graph_break_count of ``explain``; ``graphs_after`` the total after all ``repeat`` calls (cache hits).
"""
import contextlib
import copy
import dataclasses
import io
import logging
import math
import warnings
from typing import Any, Callable, List, Optional, Sequence

import pytest
import torch

from translator_harness import REFERENCE, CompileCounter, explain, optimize

LOGGER = logging.getLogger("minidynamo_tests.graph_breaks")
LOGGER.propagate = False
LOGGER.setLevel(logging.DEBUG)


def _not_compiled(fn: Callable) -> Callable:
    if REFERENCE:
        return fn
    import minidynamo

    return minidynamo.disable(fn)


class _ListHandler(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: List[str] = []

    # The handler is test machinery, not code under test: called from a graph break, it must not be
    # converted itself (a user would disable a debugging handler the same way).
    @_not_compiled
    def emit(self, record):
        self.records.append(f"{record.levelname}:{record.getMessage()}")


_HANDLER = _ListHandler()
LOGGER.addHandler(_HANDLER)

_MISSING = object()


# --------------------------------------------------------------------------------------------
# comparing states
# --------------------------------------------------------------------------------------------
def compare(actual, expected, path="out", seen=None):
    """Recursive comparison of two independently produced states (eager vs compiled)."""
    if seen is None:
        seen = set()
    if id(expected) in seen:
        return
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{path}: expected a tensor, got {type(actual)}"
        assert actual.shape == expected.shape, f"{path}: shape {actual.shape} != {expected.shape}"
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.requires_grad == expected.requires_grad, (
            f"{path}: requires_grad {actual.requires_grad} != {expected.requires_grad}")
        torch.testing.assert_close(actual.detach(), expected.detach(), equal_nan=True,
                                   msg=lambda m: f"{path}: {m}")
        return
    assert type(actual) is type(expected), f"{path}: type {type(actual)} != {type(expected)} ({actual!r} vs {expected!r})"
    if isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(actual), f"{path}: {actual!r} is not nan"
        return
    if isinstance(expected, (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device,
                             torch.Size, type)) or callable(expected) and not isinstance(expected, torch.nn.Module):
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"
        return
    seen = seen | {id(expected)}
    if isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}: {actual!r} vs {expected!r}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            compare(a, e, f"{path}[{i}]", seen)
        return
    if isinstance(expected, dict):
        assert list(actual.keys()) == list(expected.keys()), f"{path}: keys {list(actual)} != {list(expected)}"
        for k in expected:
            compare(actual[k], expected[k], f"{path}[{k!r}]", seen)
        return
    if isinstance(expected, (set, frozenset)):
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"
        return
    if isinstance(expected, torch.nn.Module):
        a_sd, e_sd = actual.state_dict(keep_vars=True), expected.state_dict(keep_vars=True)
        compare(dict(a_sd), dict(e_sd), f"{path}.state_dict()", seen)
        assert actual.training == expected.training, f"{path}.training differs"
        skip = {"_parameters", "_buffers", "_modules"}
        a_vars = {k: v for k, v in vars(actual).items() if not k.startswith("_") and k not in skip}
        e_vars = {k: v for k, v in vars(expected).items() if not k.startswith("_") and k not in skip}
        compare(a_vars, e_vars, f"{path}.__dict__", seen)
        for name, sub in expected.named_children():
            compare(getattr(actual, name), sub, f"{path}.{name}", seen)
        return
    if dataclasses.is_dataclass(expected) or hasattr(expected, "__dict__"):
        compare(dict(vars(actual)), dict(vars(expected)), f"{path}.__dict__", seen)
        return
    assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def _alias_map(out, args):
    """Which top-level outputs (or the output itself) are which inputs."""
    outs = out if isinstance(out, (list, tuple)) and not any(out is a for a in args) else (out,)
    return [[i for i, a in enumerate(args) if o is a] for o in outs]


# --------------------------------------------------------------------------------------------
# running eagerly / compiled
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Run:
    result: Any = None
    exc: Optional[BaseException] = None
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)
    stdout: str = ""
    warnings: List[str] = dataclasses.field(default_factory=list)
    logs: List[str] = dataclasses.field(default_factory=list)
    globals_after: dict = dataclasses.field(default_factory=dict)
    grad_enabled_after: bool = True
    aliases: list = dataclasses.field(default_factory=list)


def _split(inputs):
    if not isinstance(inputs, tuple):
        inputs = (inputs,)
    return inputs, {}


def snapshot_globals(fn, names):
    g = fn.__globals__
    return {n: copy.deepcopy(g[n]) if n in g else _MISSING for n in names}


def restore_globals(fn, snap):
    g = fn.__globals__
    for n, v in snap.items():
        if v is _MISSING:
            g.pop(n, None)
        else:
            g[n] = copy.deepcopy(v)


def run_once(fn: Callable, inputs, global_names: Sequence[str] = (), globals_dict: Optional[dict] = None) -> Run:
    """Call ``fn`` on ``inputs`` (already private copies) and record everything observable."""
    args, kwargs = _split(inputs)
    run = Run(args=args, kwargs=kwargs)
    out = io.StringIO()
    del _HANDLER.records[:]
    grad_before = torch.is_grad_enabled()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
        warnings.simplefilter("always")
        try:
            run.result = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - compared with the other run
            run.exc = e
    run.grad_enabled_after = torch.is_grad_enabled()
    torch.set_grad_enabled(grad_before)
    run.stdout = out.getvalue()
    run.warnings = [f"{w.category.__name__}:{w.message}" for w in caught if not _reference_noise(str(w.message))]
    run.logs = list(_HANDLER.records)
    g = globals_dict if globals_dict is not None else getattr(fn, "__globals__", {})
    run.globals_after = {n: copy.deepcopy(g.get(n, _MISSING)) for n in global_names}
    if run.exc is None:
        run.aliases = _alias_map(run.result, list(args) + list(kwargs.values()))
    return run


def _reference_noise(message: str) -> bool:
    """torch._dynamo's own warnings (reference mode only)."""
    return REFERENCE and ("Dynamo" in message or "To copy construct from a tensor" in message)


def compare_runs(actual: Run, expected: Run, where: str = "") -> None:
    if expected.exc is not None:
        assert actual.exc is not None, f"{where}eager raised {expected.exc!r}, compiled returned {actual.result!r}"
        assert type(actual.exc) is type(expected.exc), f"{where}raised {actual.exc!r}, eager raised {expected.exc!r}"
        assert str(actual.exc) == str(expected.exc), f"{where}message {str(actual.exc)!r} != {str(expected.exc)!r}"
    else:
        if actual.exc is not None:
            raise AssertionError(f"{where}compiled raised {actual.exc!r}, eager returned") from actual.exc
        compare(actual.result, expected.result, f"{where}out")
        assert actual.aliases == expected.aliases, f"{where}output aliasing {actual.aliases} != {expected.aliases}"
    compare(actual.args, expected.args, f"{where}args after the call")
    compare(actual.kwargs, expected.kwargs, f"{where}kwargs after the call")
    assert actual.stdout == expected.stdout, f"{where}stdout {actual.stdout!r} != eager {expected.stdout!r}"
    assert actual.warnings == expected.warnings, f"{where}warnings {actual.warnings} != {expected.warnings}"
    assert actual.logs == expected.logs, f"{where}logs {actual.logs} != {expected.logs}"
    for name, value in expected.globals_after.items():
        compare(actual.globals_after[name], value, f"{where}global {name}")
    assert actual.grad_enabled_after == expected.grad_enabled_after, f"{where}grad mode after the call differs"


def make_inputs(factory):
    torch.manual_seed(0)
    return factory() if callable(factory) else factory


def check_breaks(
    fn: Callable,
    *factories,
    graphs: Optional[int] = None,
    breaks: Optional[int] = None,
    graphs_after: Optional[int] = None,
    global_names: Sequence[str] = (),
    repeat: int = 2,
    compile=None,
    reasons: Sequence[str] = (),
):
    """Compare ``fn`` compiled with eager on each input factory (see module doc) and check counts.

    ``compile(fn, backend)`` builds the compiled callable (default ``optimize(backend)(fn)``).
    ``reasons``: substrings that must appear, in order, in explain's break reasons.
    Returns (counter, explain output or None).
    """
    if not factories:
        factories = ((),)
    cnt = CompileCounter()
    compiled = compile(fn, cnt) if compile is not None else optimize(cnt)(fn)
    first_count = None
    for i, factory in enumerate(factories):
        base = make_inputs(factory)
        for r in range(repeat):
            snap = snapshot_globals(_fn_of(fn), global_names)
            try:
                g = _fn_of(fn).__globals__ if global_names else None
                expected = run_once(fn, copy.deepcopy(base), global_names, g)
                restore_globals(_fn_of(fn), snap)
                actual = run_once(compiled, copy.deepcopy(base), global_names, g)
            finally:
                restore_globals(_fn_of(fn), snap)
            compare_runs(actual, expected, f"input set {i}, call {r}: ")
            if first_count is None:
                first_count = cnt.frame_count
    out = None
    if not REFERENCE:
        if graphs is not None:
            assert first_count == graphs, f"first call compiled {first_count} graphs, expected {graphs}"
        if graphs_after is not None:
            assert cnt.frame_count == graphs_after, f"compiled {cnt.frame_count} graphs in all, expected {graphs_after}"
        if breaks is not None or reasons:
            out = explain_quiet(fn, factories[0], global_names)
            if breaks is not None:
                assert out.graph_break_count == breaks, (
                    f"explain: {out.graph_break_count} breaks, expected {breaks}: "
                    f"{[r.reason for r in out.break_reasons]}")
            texts = [str(r) for r in out.break_reasons]
            for want, text in zip(reasons, texts):
                assert want in text, f"break reason {text!r} does not mention {want!r}"
            assert len(texts) >= len(reasons)
    return cnt, out


def _fn_of(fn):
    if hasattr(fn, "__globals__"):
        return fn
    if isinstance(fn, torch.nn.Module):
        return type(fn).forward
    return fn


def explain_quiet(fn, factory=(), global_names: Sequence[str] = ()):
    """explain() on fresh inputs with stdout, warnings and globals kept out of the way."""
    args, kwargs = _split(copy.deepcopy(make_inputs(factory)))
    snap = snapshot_globals(_fn_of(fn), global_names)
    grad = torch.is_grad_enabled()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            return explain(fn, *args, **kwargs)
    finally:
        torch.set_grad_enabled(grad)
        restore_globals(_fn_of(fn), snap)
        del _HANDLER.records[:]


# --------------------------------------------------------------------------------------------
# table-driven cases
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Case:
    fn: Callable
    factories: tuple
    graphs: Optional[int] = None
    breaks: Optional[int] = None
    graphs_after: Optional[int] = None
    global_names: tuple = ()
    reasons: tuple = ()
    xfail: Optional[str] = None
    repeat: int = 2
    reference_skip: Optional[str] = None

    @property
    def name(self):
        return self.fn.__name__

    def run(self):
        return check_breaks(self.fn, *self.factories, graphs=self.graphs, breaks=self.breaks,
                            graphs_after=self.graphs_after, global_names=self.global_names,
                            repeat=self.repeat, reasons=self.reasons)


class Cases(list):
    def case(self, *factories, graphs=None, breaks=None, graphs_after=None, global_names=(), reasons=(),
             xfail=None, repeat=2, reference_skip=None):
        def deco(fn):
            self.append(Case(fn, factories, graphs, breaks, graphs_after, tuple(global_names), tuple(reasons),
                             xfail, repeat, reference_skip))
            return fn

        return deco

    def params(self):
        out = []
        for c in self:
            marks = [pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail and not REFERENCE else []
            if c.reference_skip and REFERENCE:
                marks = [pytest.mark.skip(reason=f"reference (torch) differs: {c.reference_skip}")]
            out.append(pytest.param(c, id=c.name, marks=marks))
        return out


def rand(*shape, requires_grad=False):
    out = torch.randn(*shape)
    return out.requires_grad_(True) if requires_grad else out


def xfail_unless_reference(reason):
    """A strict xfail for a minidynamo bug (the reference run is expected to pass)."""
    return [] if REFERENCE else [pytest.mark.xfail(strict=True, reason=reason)]
