"""Runs one fuzz case: a program built twice (eager reference, compiled copy), steps applied to both, every call compared."""
# This file is pasted verbatim into every repro script: it imports only torch and minidynamo.
import contextlib
import enum
import functools
import io
import linecache
import math
import types

import torch

import minidynamo

PROGRAM_FILE = "fuzz_program.py"
_DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "bool": torch.bool,
}


class Mismatch(AssertionError):
    """The compiled call differs from the eager one; `what` names the aspect (result, args, globals...)."""

    def __init__(self, step: int, what: str, message: str) -> None:
        super().__init__(f"step {step}: {what}: {message}")
        self.step = step
        self.what = what


def T(seed: int, shape: tuple, dtype: str = "float32", layout: str = "c", offset: int = 0, rg: bool = False) -> torch.Tensor:
    """A deterministic tensor: layout "c" contiguous, "t" transposed, "s" strided slice, "cl" channels_last;
    `offset` elements before it in its storage; `rg` requires grad."""
    g = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    if layout == "t" and len(shape) >= 2:
        physical = shape[:-2] + (shape[-1], shape[-2])
    elif layout == "s" and shape:
        physical = shape[:-1] + (shape[-1] * 2,)
    else:
        physical = shape
    count = math.prod(physical) + offset
    dt = _DTYPES[dtype]
    if dt.is_floating_point:
        flat = torch.randn(count, generator=g, dtype=torch.float64).to(dt)
    else:
        flat = torch.randint(-4, 5, (count,), generator=g).to(dt)
    t = flat[offset:].view(physical)
    if layout == "t" and len(shape) >= 2:
        t = t.transpose(-1, -2)
    elif layout == "s" and shape:
        t = t[..., ::2]
    elif layout == "cl" and len(shape) == 4:
        t = t.contiguous(memory_format=torch.channels_last)
    return t.requires_grad_(rg) if rg and dt.is_floating_point else t


# ------------------------------------------------------------------------------------------------
# global torch state
# ------------------------------------------------------------------------------------------------
def torch_state() -> dict:
    """Every process-wide flag a compiled call could leave changed."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
    return {
        "grad": torch.is_grad_enabled(),
        "inference": torch.is_inference_mode_enabled(),
        "autocast_cpu": torch.is_autocast_enabled("cpu"),
        "autocast_cpu_dtype": torch.get_autocast_dtype("cpu"),
        "default_dtype": torch.get_default_dtype(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "anomaly": torch.is_anomaly_enabled(),
        "profiler": torch.autograd._profiler_enabled(),
        "torch_function_modes": torch._C._len_torch_function_stack(),
        "dispatch_modes": len(_get_current_dispatch_mode_stack()),
        "rng": bytes(torch.get_rng_state().numpy()),
    }


def set_torch_state(state: dict) -> None:
    """Restores what `torch_state` read (the settable part)."""
    torch.set_grad_enabled(state["grad"])
    torch.set_autocast_enabled("cpu", state["autocast_cpu"])
    torch.set_autocast_dtype("cpu", state["autocast_cpu_dtype"])
    torch.set_default_dtype(state["default_dtype"])
    torch.use_deterministic_algorithms(state["deterministic"], warn_only=state["deterministic_warn_only"])
    torch.set_anomaly_enabled(state["anomaly"])
    torch.set_rng_state(torch.frombuffer(bytearray(state["rng"]), dtype=torch.uint8))


# ------------------------------------------------------------------------------------------------
# snapshots: a value graph turned into nested tuples; identity shows as ("ref", n)
# ------------------------------------------------------------------------------------------------
class _Value:
    """A tensor's values: compared bit for bit, or with a tolerance (generated-code backends reorder float math)."""

    def __init__(self, t: torch.Tensor, exact: bool) -> None:
        self.t = t
        self.exact = exact

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Value) or self.t.shape != other.t.shape or self.t.dtype != other.t.dtype:
            return False
        a, b = self.t, other.t
        if self.exact:
            return _bits(a) == _bits(b)
        if not a.dtype.is_floating_point and not a.dtype.is_complex:
            return torch.equal(a, b)
        return torch.allclose(a.double(), b.double(), rtol=1e-3, atol=1e-4, equal_nan=True)

    def __repr__(self) -> str:
        return f"tensor{self.t.flatten()[:8].tolist()}"


def _bits(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


class Snapshot:
    """Turns values into comparable nested tuples; one instance per side and call, so aliasing between
    the result, the arguments and the globals is part of the picture."""

    def __init__(self, exact: bool) -> None:
        self.exact = exact
        self.memo: dict = {}
        self.storages: dict = {}
        self.alive: list = []  # keeps ids unique while the snapshot is taken

    def __call__(self, v):
        if v is None or isinstance(v, (bool, int, str, bytes)):
            return (type(v).__name__, v)
        if isinstance(v, (float, complex)):
            return (type(v).__name__, repr(v))
        if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format, torch.Size)):
            return (type(v).__name__, str(v))
        if isinstance(v, enum.Enum):
            return ("enum", type(v).__qualname__, v.name)
        if isinstance(v, (tuple, frozenset)):  # immutable: equal ones are interchangeable, identity is not compared
            return (type(v).__name__, tuple(sorted(map(self, v), key=repr) if isinstance(v, frozenset) else map(self, v)))
        if id(v) in self.memo:
            return ("ref", self.memo[id(v)])
        self.memo[id(v)] = len(self.memo)
        self.alive.append(v)
        return self._new(v)

    def _new(self, v):
        if isinstance(v, torch.Tensor):
            return self.tensor(v)
        if isinstance(v, torch.nn.Module):
            return self.module(v)
        if isinstance(v, list):
            return ("list", tuple(self(x) for x in v))
        if isinstance(v, dict):
            return (type(v).__name__, tuple(("item", self(k), self(x)) for k, x in v.items()))
        if isinstance(v, set):
            return (type(v).__name__, tuple(sorted((self(x) for x in v), key=repr)))
        if type(v).__name__ in ("dict_keys", "dict_values", "dict_items"):
            return (type(v).__name__, self(list(v)))
        if isinstance(v, types.CellType):
            return ("cell", self(v.cell_contents) if _cell_full(v) else ("empty",))
        if isinstance(v, types.FunctionType):
            return self.function(v)
        if isinstance(v, types.MethodType):
            return ("method", self(v.__func__), self(v.__self__))
        if isinstance(v, functools.partial):
            return ("partial", self(v.func), self(v.args), self(v.keywords))
        if isinstance(v, type):
            return self.cls(v)
        if isinstance(v, types.ModuleType):
            return ("module", v.__name__)
        if isinstance(v, (types.BuiltinFunctionType, types.BuiltinMethodType)):
            return ("builtin", getattr(v, "__qualname__", repr(v)))
        if hasattr(v, "__dict__"):
            return ("object", type(v).__qualname__, self(dict(sorted(vars(v).items()))))
        return ("other", type(v).__qualname__)

    def tensor(self, t: torch.Tensor):
        ptr = t.untyped_storage().data_ptr() if t.layout == torch.strided and not _is_fake(t) else 0
        meta = [("type", type(t).__name__), ("dtype", str(t.dtype)), ("shape", tuple(t.shape)),
                ("requires_grad", t.requires_grad), ("is_leaf", t.is_leaf),
                ("storage", self.storages.setdefault(ptr, len(self.storages)) if ptr else None),
                ("grad", self(t.grad) if t.is_leaf else None)]
        if self.exact:
            meta += [("stride", t.stride()), ("storage_offset", t.storage_offset())]
        return ("T", tuple(meta), ("value", _tensor_value(t, self.exact)))

    def module(self, m: torch.nn.Module):
        attrs = {k: x for k, x in vars(m).items() if not k.startswith("_")}
        return ("nn", type(m).__qualname__, self(dict(m._parameters)), self(dict(m._buffers)),
                self(dict(m._modules)), self(dict(sorted(attrs.items()))))

    def function(self, fn: types.FunctionType):
        code = fn.__code__
        return ("fn", fn.__qualname__, (code.co_name, code.co_firstlineno, code.co_code), self(fn.__defaults__),
                self(fn.__closure__ or ()), self(dict(sorted(vars(fn).items()))))

    def cls(self, c: type):
        if c.__module__ != "fuzzprog":
            return ("type", f"{c.__module__}.{c.__qualname__}")
        own = {k: x for k, x in vars(c).items() if not k.startswith("__") and k != "_member_map_"}
        return ("class", c.__qualname__, self(dict(sorted(own.items(), key=lambda kv: kv[0]))))


def _cell_full(cell: types.CellType) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _is_fake(t: torch.Tensor) -> bool:
    return type(t).__name__ == "FakeTensor" or t.device.type == "meta"


def _tensor_value(t: torch.Tensor, exact: bool):
    try:
        data = t.detach().clone()
        _bits(data)
        return _Value(data, exact)
    except Exception as e:  # a fake or otherwise unreadable tensor
        return ("unreadable", type(e).__name__)


def namespace_state(ns: types.ModuleType) -> dict:
    """The program's globals worth comparing: everything but modules, dunders and the fuzz helpers."""
    return {k: v for k, v in sorted(ns.__dict__.items())
            if not k.startswith("__") and not isinstance(v, types.ModuleType) and k != "T"}


def first_difference(a, b, path: str = ""):
    """The path to the first place two snapshots differ, and the two values there."""
    if type(a) is not type(b) or not isinstance(a, tuple) or _is_leaf(a):
        return path, a, b
    if len(a) != len(b):
        return f"{path} (length {len(a)} vs {len(b)})", a, b
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return first_difference(x, y, path + _path_step(a, i))
    return path, a, b


def _is_leaf(node: tuple) -> bool:
    return len(node) == 2 and isinstance(node[0], str) and not isinstance(node[1], tuple)


_FIELDS = {"nn": (None, "type", "parameters", "buffers", "modules", "attributes"), "T": (None, "", ""),
           "fn": (None, "name", "code", "defaults", "closure", "attributes"), "item": (None, "", "")}
_TENSOR_FIELDS = {"type", "dtype", "shape", "requires_grad", "is_leaf", "storage", "grad", "stride", "storage_offset", "value"}


def _path_step(node: tuple, i: int) -> str:
    """How one step down a snapshot reads: a field name, a key, an index."""
    head = node[0] if isinstance(node[0], str) else None
    if head in _FIELDS:
        return f"/{_FIELDS[head][i]}" if _FIELDS[head][i] else ""
    if head is not None:
        return ""  # into the payload of a container node
    child = node[i]
    if isinstance(child, tuple) and child and child[0] == "item":
        key = child[1]
        return f"[{key[1]!r}]" if key[0] in ("str", "int", "bool") else f"[key {i}]"
    if isinstance(child, tuple) and child and child[0] in _TENSOR_FIELDS:
        return f".{child[0]}"
    return f"[{i}]"


# ------------------------------------------------------------------------------------------------
# one call: eager then compiled, everything compared
# ------------------------------------------------------------------------------------------------
class Outcome:
    """What one side of a call produced and left behind."""

    def __init__(self, args, kwargs, result, error, stdout, state) -> None:
        self.args, self.kwargs, self.result, self.error, self.stdout, self.state = args, kwargs, result, error, stdout, state


def invoke(fn, call_args, backward: bool, state: dict) -> Outcome:
    """Calls `fn` from the global `state` (flags and RNG), capturing its result or exception and its output."""
    args, kwargs = call_args
    set_torch_state(state)
    captured = io.StringIO()
    result = error = None
    with contextlib.redirect_stdout(captured):
        try:
            result = fn(*args, **kwargs)
            if backward:
                _backward(result)
        except Exception as e:
            error = e
    return Outcome(args, kwargs, result, error, captured.getvalue(), torch_state())


def _backward(result) -> None:
    """Backpropagates from the first floating output that requires grad (grads land on the arguments)."""
    if isinstance(result, dict):
        result = list(result.values())
    for t in result if isinstance(result, (list, tuple)) else [result]:
        if isinstance(t, torch.Tensor) and t.requires_grad and t.dtype.is_floating_point:
            t.sum().backward()
            return


def compare_call(step: int, eager: Outcome, comp: Outcome, eager_ns, comp_ns, exact: bool) -> None:
    """Raises Mismatch on the first aspect in which the compiled call differs from the eager one."""
    if type(eager.error) is not type(comp.error):
        raise Mismatch(step, "exception", f"eager raised {eager.error!r}, compiled raised {comp.error!r}")
    if eager.stdout != comp.stdout:
        raise Mismatch(step, "stdout", f"eager printed {eager.stdout!r}, compiled printed {comp.stdout!r}")
    differing = [k for k in eager.state if eager.state[k] != comp.state[k] and (exact or k != "rng")]
    if differing:
        k = differing[0]
        shown = (eager.state[k], comp.state[k]) if k != "rng" else ("...", "...")
        raise Mismatch(step, "torch state", f"{k}: eager left {shown[0]!r}, compiled left {shown[1]!r}")
    sides = []
    for side, ns in ((eager, eager_ns), (comp, comp_ns)):
        snap = Snapshot(exact)
        sides.append([("result", snap(side.result)), ("args", snap(side.args)), ("kwargs", snap(side.kwargs)),
                      ("globals", snap(namespace_state(ns)))])
    for (what, a), (_, b) in zip(*sides):
        if a != b:
            path, x, y = first_difference(a, b)
            raise Mismatch(step, what, f"at {path or '.'}: eager {_short(x)} vs compiled {_short(y)}")


def _short(v) -> str:
    text = repr(v)
    return text if len(text) < 300 else text[:300] + "..."


# ------------------------------------------------------------------------------------------------
# a whole case
# ------------------------------------------------------------------------------------------------
def build(program: str) -> types.ModuleType:
    """A fresh module running `program` (its source registered so tracebacks show it)."""
    linecache.cache[PROGRAM_FILE] = (len(program), None, program.splitlines(True), PROGRAM_FILE)
    ns = types.ModuleType("fuzzprog")
    ns.T = T
    torch.manual_seed(0)  # module initialisers draw from the global generator: both copies get the same values
    exec(compile(program, PROGRAM_FILE, "exec"), ns.__dict__)
    return ns


def _mutate(step: int, code: str, eager_ns, comp_ns) -> None:
    errors = []
    rng = torch.get_rng_state()
    for ns in (eager_ns, comp_ns):
        torch.set_rng_state(rng)
        try:
            exec(code, ns.__dict__)
            errors.append(None)
        except Exception as e:
            errors.append(type(e))
    if errors[0] is not errors[1]:
        raise Mismatch(step, "mutation", f"{code!r} raised {errors[0]} on the eager copy, {errors[1]} on the compiled one")


def _call(step: int, args_code: str, backward: bool, eager_side, comp_side, exact: bool) -> int:
    """One call on both sides, compared; returns 1, or 0 when the arguments cannot be built (on both sides)."""
    before = torch_state()
    outcomes = []
    for fn, ns in (eager_side, comp_side):
        try:
            call_args = eval(args_code, ns.__dict__)
        except Exception as e:  # e.g. a view of a global rebound to an int
            outcomes.append(type(e))
            continue
        outcomes.append(invoke(fn, call_args, backward, before))
    if not all(isinstance(o, Outcome) for o in outcomes):
        if outcomes[0] is not outcomes[1]:
            raise Mismatch(step, "args", f"building the arguments gave {outcomes[0]} (eager) and {outcomes[1]} (compiled)")
        return 0
    compare_call(step, outcomes[0], outcomes[1], eager_side[1], comp_side[1], exact)
    set_torch_state(outcomes[0].state)
    return 1


# What torch.compile runs for each of our backends, when a case is checked against it: the same
# aot_autograd wrapping (where ours uses it) with torch's own kernels.
TORCH_BACKENDS = {"eager": "eager", "aot_eager": "aot_eager", "cpp": "aot_eager", "triton": "aot_eager"}


def run_case(program: str, steps: list, target: str = "f", backend: str = "eager", exact: bool = True,
             front: str = "minidynamo") -> int:
    """Builds `program` twice, compiles `target` of one copy, applies `steps` to both; returns the calls
    checked. Steps: ("call", args_expr[, "backward"]), ("mutate", code), ("state", code run once).
    `front` "torch" compiles with torch.compile instead (TORCH_BACKENDS), to tell our differences
    from eager apart from those torch.compile shares."""
    baseline = torch_state()
    minidynamo.reset()
    torch._dynamo.reset()
    calls = 0
    try:
        eager_ns, comp_ns = build(program), build(program)
        fn = getattr(comp_ns, target)
        compiled = (torch.compile(fn, backend=TORCH_BACKENDS[backend]) if front == "torch" else
                    minidynamo.compile(fn, backend=backend))
        for index, (kind, code, *flags) in enumerate(steps):
            if kind == "state":
                exec(code, {"torch": torch})
            elif kind == "mutate":
                _mutate(index, code, eager_ns, comp_ns)
            else:
                calls += _call(index, code, "backward" in flags, (getattr(eager_ns, target), eager_ns),
                               (compiled, comp_ns), exact)
    finally:
        set_torch_state(baseline)
        minidynamo.reset()
        torch._dynamo.reset()
    return calls
