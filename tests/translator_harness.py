"""Shared harness for the translator test suite (tests/test_translator_*.py).

The suite targets minidynamo's public API, which mirrors torch._dynamo's.  Setting the environment
variable ``MINIDYNAMO_TEST_REFERENCE=torch`` runs the very same tests against ``torch._dynamo`` as a
reference implementation, which is how the tests themselves are validated.

Everything that differs between the two targets lives here:
  * ``optimize`` / ``reset`` / ``explain`` / ``CompileCounter``
  * ``compile_module``: the one place deciding how an nn.Module is compiled
    (``MINIDYNAMO_TEST_MODULE_FORM`` = ``module`` (default) | ``forward`` | ``wrapper``)
  * guard accessors that normalise torch's guard kind names to minidynamo's vocabulary.
"""
import math
import os
import re
from typing import Callable, Optional, Set, Tuple

import numpy as np
import pytest
import torch

REFERENCE = os.environ.get("MINIDYNAMO_TEST_REFERENCE", "").strip().lower() == "torch"
MODULE_FORM = os.environ.get("MINIDYNAMO_TEST_MODULE_FORM", "module").strip().lower()

if REFERENCE:
    import torch._dynamo as _dynamo
    import torch._dynamo.config as _dynamo_config
    from torch._dynamo.testing import CompileCounter as _TorchCompileCounter

    class CompileCounter(_TorchCompileCounter):
        """torch's counter, normalised to minidynamo's rule that a frame without tensor ops yields no
        graph: torch 2.13 (fullgraph mode) sometimes hands the backend an empty graph that just returns
        an input; those are not counted.  Also records the graphs, like minidynamo's counter."""

        def __init__(self):
            super().__init__()
            self.graphs = []

        def __call__(self, gm, example_inputs):
            if not any(n.op in ("call_function", "call_method", "call_module") for n in gm.graph.nodes):
                return gm.forward
            self.graphs.append(gm)
            return super().__call__(gm, example_inputs)

        def clear(self):
            super().clear()
            self.graphs = []

    # minidynamo specialises on shapes and on int/float values; make the reference do the same so
    # graph counts agree (a new shape or a new scalar value is a recompile, never a dynamic graph).
    # Applied per test by the fresh_dynamo fixture, so other suites in the same run are unaffected.
    _REFERENCE_CONFIG = dict(
        automatic_dynamic_shapes=False,
        assume_static_by_default=True,
        specialize_float=True,
        specialize_int=True,
    )
else:
    import minidynamo as _dynamo
    from minidynamo.testing import CompileCounter

__all__ = [
    "REFERENCE",
    "MODULE_FORM",
    "CompileCounter",
    "Args",
    "optimize",
    "reset",
    "explain",
    "compile_fn",
    "compile_module",
    "assert_same",
    "assert_equal",
    "clone_inputs",
    "guard_kinds",
    "guard_names",
    "has_guard",
    "assert_guard",
    "MODULE_GUARD_KINDS",
    "OBJECT_GUARD_KINDS",
    "reference_only_skip",
    "frames_compiled",
    "minidynamo_only",
    "fresh_dynamo",
]


# --------------------------------------------------------------------------------------------
# the switch
# --------------------------------------------------------------------------------------------
def optimize(backend="eager", nopython: bool = False):
    """``minidynamo.optimize`` or ``torch._dynamo.optimize`` (decorator / context manager)."""
    return _dynamo.optimize(backend, nopython=nopython)


def reset() -> None:
    _dynamo.reset()


def explain(fn: Callable, *args, **kwargs):
    """Run ``explain(fn)(*args, **kwargs)`` on the current target and return its output."""
    reset()
    try:
        return _dynamo.explain(fn)(*args, **kwargs)
    finally:
        reset()


def reference_only_skip(reason: str):
    """Skip a test when running against torch (where minidynamo deliberately differs)."""
    return pytest.mark.skipif(REFERENCE, reason=f"reference (torch) differs: {reason}")


minidynamo_only = pytest.mark.skipif(REFERENCE, reason="checks minidynamo internals")


class ConformanceCases:
    """One small function per concept, each registered (`@CASES.case(...)`) with its input sets
    (default: one tensor of 3), the graph count to assert, and what torch._dynamo 2.13 cannot trace
    in it (`torch_breaks`: skipped in reference mode); `params()` for pytest.mark.parametrize."""

    def __init__(self) -> None:
        self.cases: dict = {}

    def case(self, *input_sets, graphs: int = 1, torch_breaks: Optional[str] = None) -> Callable:
        def register(fn: Callable) -> Callable:
            assert fn.__name__ not in self.cases, fn.__name__
            marks = [reference_only_skip(torch_breaks)] if torch_breaks else []
            self.cases[fn.__name__] = pytest.param(fn, input_sets or (rand(3),), graphs, marks=marks, id=fn.__name__)
            return fn
        return register

    def params(self) -> list:
        return [self.cases[name] for name in sorted(self.cases)]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Autouse (import it into each test module): every test starts and ends with empty caches."""
    reset()
    if REFERENCE:
        with _dynamo_config.patch(**_REFERENCE_CONFIG):
            yield
    else:
        yield
    reset()


def compile_fn(fn: Callable, backend=None, nopython: bool = False) -> Callable:
    """Compile ``fn`` with ``backend`` (default: the "eager" backend)."""
    if backend is None:
        backend = "eager"
    return optimize(backend, nopython=nopython)(fn)


def compile_module(mod: torch.nn.Module, backend=None, nopython: bool = False) -> Callable:
    """The one place deciding how a module is compiled (see MODULE_FORM)."""
    if backend is None:
        backend = "eager"
    if MODULE_FORM == "forward":
        return optimize(backend, nopython=nopython)(mod.forward)
    if MODULE_FORM == "wrapper":
        def call_module(*args, **kwargs):
            return mod(*args, **kwargs)

        return optimize(backend, nopython=nopython)(call_module)
    return optimize(backend, nopython=nopython)(mod)


# --------------------------------------------------------------------------------------------
# comparing with eager
# --------------------------------------------------------------------------------------------
class Args:
    """An input set with keyword arguments: ``Args(x, y, scale=2)``."""

    def __init__(self, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs

    def __repr__(self):
        return f"Args(*{self.args!r}, **{self.kwargs!r})"


def _clone(value):
    if isinstance(value, torch.Tensor):
        out = value.detach().clone()
        if value.requires_grad:
            out.requires_grad_(True)
        return out
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, list):
        return [_clone(v) for v in value]
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[_clone(v) for v in value])
    if isinstance(value, tuple):
        return tuple(_clone(v) for v in value)
    if isinstance(value, dict):
        return type(value)((k, _clone(v)) for k, v in value.items())
    return value  # objects and modules are shared: their identity is part of the guards


def clone_inputs(input_set) -> Tuple[tuple, dict]:
    if isinstance(input_set, Args):
        return _clone(input_set.args), _clone(input_set.kwargs)
    if not isinstance(input_set, tuple):
        input_set = (input_set,)
    return _clone(input_set), {}


def assert_equal(actual, expected, path: str = "out") -> None:
    """Recursive comparison: tensors with assert_close, containers element-wise, scalars exactly."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{path}: expected a tensor, got {type(actual)}"
        assert actual.shape == expected.shape, f"{path}: shape {actual.shape} != {expected.shape}"
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.requires_grad == expected.requires_grad, f"{path}: requires_grad differs"
        torch.testing.assert_close(actual.detach(), expected.detach(), equal_nan=True, msg=lambda m: f"{path}: {m}")
        return
    if isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), f"{path}: expected an ndarray, got {type(actual)}"
        assert actual.shape == expected.shape, f"{path}: shape {actual.shape} != {expected.shape}"
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        np.testing.assert_allclose(actual, expected, rtol=1.3e-6, atol=1e-5, equal_nan=True, err_msg=path)
        return
    if isinstance(expected, np.generic):
        assert isinstance(actual, (np.generic, np.ndarray)), f"{path}: expected a numpy scalar, got {type(actual)}"
        np.testing.assert_allclose(actual, expected, rtol=1.3e-6, atol=1e-5, equal_nan=True, err_msg=path)
        return
    if isinstance(expected, torch.nn.Module):
        assert actual is expected, f"{path}: a different module came back"
        return
    if isinstance(expected, (list, tuple)):
        assert type(actual) is type(expected), f"{path}: type {type(actual)} != {type(expected)}"
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_equal(a, e, f"{path}[{i}]")
        return
    if isinstance(expected, dict):
        assert type(actual) is type(expected), f"{path}: type {type(actual)} != {type(expected)}"
        assert list(actual.keys()) == list(expected.keys()), f"{path}: keys {list(actual)} != {list(expected)}"
        for k in expected:
            assert_equal(actual[k], expected[k], f"{path}[{k!r}]")
        return
    if isinstance(expected, (set, frozenset)):
        assert type(actual) is type(expected) and actual == expected, f"{path}: {actual!r} != {expected!r}"
        return
    if isinstance(expected, float) and math.isnan(expected):
        assert isinstance(actual, float) and math.isnan(actual), f"{path}: {actual!r} is not nan"
        return
    if isinstance(expected, (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device, torch.Size)):
        assert type(actual) is type(expected), f"{path}: type {type(actual)} != {type(expected)} ({actual!r} vs {expected!r})"
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"
        return
    if hasattr(expected, "__dataclass_fields__"):
        assert type(actual) is type(expected), f"{path}: type {type(actual)} != {type(expected)}"
        for name in expected.__dataclass_fields__:
            assert_equal(getattr(actual, name), getattr(expected, name), f"{path}.{name}")
        return
    assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def frames_compiled() -> int:
    """How many frames the current target has compiled (converted) since its last reset."""
    if REFERENCE:
        from torch._dynamo.utils import counters

        return counters["frames"]["total"]
    return _dynamo.stats()["compiled"]


def assert_same(
    fn: Callable,
    *input_sets,
    graphs: Optional[int] = 1,
    nopython: Optional[bool] = None,
    repeat: int = 3,
    min_ops: Optional[int] = None,
    compare_inputs: bool = True,
    counter: Optional[CompileCounter] = None,
) -> CompileCounter:
    """Compile ``fn`` with a CompileCounter, run it on every input set ``repeat`` times, compare each
    result (and the inputs afterwards, to catch mutation) with eager, and check the graph count.

    ``graphs`` is the expected total number of compiled graphs over all calls (None: don't check).
    ``nopython`` defaults to True (whole graph required) unless no graph is expected at all (torch's
    fullgraph mode rejects a frame that yields no graph).
    An input set is a tuple of positional args, a single non-tuple arg, or ``Args(*a, **kw)``.
    Calls after the first of an input set must compile nothing: a cache that never settles is a bug.
    """
    assert input_sets, "assert_same needs at least one input set"
    cnt = counter if counter is not None else CompileCounter()
    if nopython is None:
        nopython = graphs != 0
    compiled = optimize(cnt, nopython=nopython)(fn)
    for i, input_set in enumerate(input_sets):
        for r in range(repeat):
            e_args, e_kwargs = clone_inputs(input_set)
            c_args, c_kwargs = clone_inputs(input_set)
            expected = fn(*e_args, **e_kwargs)
            before = frames_compiled()
            actual = compiled(*c_args, **c_kwargs)
            if r > 0:
                assert frames_compiled() == before, f"input set {i}, call {r}: an identical call compiled again"
            assert_equal(actual, expected, f"input set {i}, call {r}: out")
            if compare_inputs:
                assert_equal(c_args, e_args, f"input set {i}, call {r}: args after the call")
                assert_equal(c_kwargs, e_kwargs, f"input set {i}, call {r}: kwargs after the call")
    if graphs is not None:
        assert cnt.frame_count == graphs, f"compiled {cnt.frame_count} graphs, expected {graphs}"
    if min_ops is not None:
        assert cnt.op_count >= min_ops, f"{cnt.op_count} ops in the graphs, expected at least {min_ops}"
    return cnt


# --------------------------------------------------------------------------------------------
# guards
# --------------------------------------------------------------------------------------------
# torch guard kind -> minidynamo's vocabulary
_KIND_MAP = {
    "CONSTANT_MATCH": "EQUALS_MATCH",
    "FUNCTION_MATCH": "ID_MATCH",
    "CLOSURE_MATCH": "ID_MATCH",
    "BUILTIN_MATCH": "ID_MATCH",
    "MODULE_MATCH": "ID_MATCH",
    "SEQUENCE_LENGTH": "LIST_LENGTH",
    "TUPLE_ITERATOR_LEN": "LIST_LENGTH",
    "DICT_KEYS_MATCH": "DICT_KEYS",
    "DICT_CONTAINS": "DICT_KEYS",
    "NN_MODULE_PARAM_NAMES": "NN_MODULE",
}

#: kinds that count as "this module is guarded".  Both minidynamo and torch 2.13 guard a module's type
#: plus each fact read of it (parameters' properties, attributes); minidynamo keeps identity guards
#: (NN_MODULE or ID_MATCH) for modules whose class finds attributes its own way.
MODULE_GUARD_KINDS = {"TYPE_MATCH", "NN_MODULE", "ID_MATCH"}
#: kinds that count as "this user object is guarded".
OBJECT_GUARD_KINDS = {"TYPE_MATCH", "ID_MATCH"}


def _kind_of(guard) -> str:
    kind = getattr(guard, "create_fn_name", None)
    if callable(kind):
        kind = kind()
    if kind is None:
        kind = getattr(guard, "kind", None)
    kind = str(getattr(kind, "name", kind))
    return _KIND_MAP.get(kind, kind)


def guard_kinds(explain_output) -> Set[Tuple[str, str]]:
    """``{(source name, normalised kind)}`` for every guard of an explain() output."""
    out = set()
    for guard in explain_output.out_guards:
        name = getattr(guard, "name", "") or ""
        out.add((str(name), _kind_of(guard)))
    return out


def guard_names(explain_output) -> Set[str]:
    return {name for name, _ in guard_kinds(explain_output)}


def _name_matches(guard_name: str, want: str) -> bool:
    if guard_name == want:
        return True
    if "[" in want or "." in want:  # a source fragment such as "L['x']" or ".weight"
        return want in guard_name
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(want)}(?![A-Za-z0-9_])", guard_name) is not None


def has_guard(guards, name: str, kinds) -> bool:
    """Whether some guard on a source whose name mentions ``name`` has one of ``kinds``."""
    if not isinstance(guards, set):
        guards = guard_kinds(guards)
    if isinstance(kinds, str):
        kinds = {kinds}
    return any(kind in kinds and _name_matches(gname, name) for gname, kind in guards)


def assert_guard(guards, name: str, kinds) -> None:
    if not isinstance(guards, set):
        guards = guard_kinds(guards)
    if isinstance(kinds, str):
        kinds = {kinds}
    if not has_guard(guards, name, kinds):
        relevant = sorted(g for g in guards if _name_matches(g[0], name))
        raise AssertionError(f"no {sorted(kinds)} guard on {name!r}; guards on it: {relevant}; all: {sorted(guards)}")


def assert_no_guard(guards, name: str, kinds) -> None:
    if not isinstance(guards, set):
        guards = guard_kinds(guards)
    if isinstance(kinds, str):
        kinds = {kinds}
    assert not has_guard(guards, name, kinds), f"unexpected {sorted(kinds)} guard on {name!r}"


__all__.append("assert_no_guard")


def rand(*shape, dtype=torch.float32, requires_grad=False):
    """A small random tensor (ints: values in [-8, 8); bool: random mask)."""
    if dtype == torch.bool:
        return torch.rand(*shape) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(-8, 8, shape, dtype=dtype)
    out = torch.randn(*shape, dtype=dtype)
    return out.requires_grad_(True) if requires_grad else out


__all__.append("rand")
