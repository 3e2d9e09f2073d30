"""Dynamic shapes: which dims of a graph input are symbolic, the sources of symbolic sizes, and
the shape guards of a compile.

A dim is symbolic when the user marked it (`mark_dynamic`, minidynamo's or torch._dynamo's), when
`optimize(dynamic=True)`, or (automatic dynamic, `dynamic=None`) when an earlier compile of the same
code saw another size there, unless `mark_static` pinned it. Sizes 0 and 1 always stay static, as in
torch: code often behaves differently for them.
"""
from __future__ import annotations

import ast
import math
import functools
import traceback
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

import torch
import torch._dynamo
import torch._guards
from torch.fx.experimental.symbolic_shapes import (
    DimDynamic, RelaxedUnspecConstraint, ShapeEnv, StatelessSymbolicContext)

from .source import ChainedSource, Source

# The attributes torch._dynamo.mark_dynamic / mark_static set: a dim marked by either API counts.
DYNAMIC_DIMS_ATTR = "_dynamo_dynamic_indices"
STATIC_DIMS_ATTR = "_dynamo_static_indices"
_SIZES_KEY = "input_sizes"  # frame_state[_SIZES_KEY][source name]: sizes seen, None where they varied
_SCALARS_KEY = "input_scalars"  # frame_state[_SCALARS_KEY][source name]: the number seen, None once it varied


def _dims_in_range(tensor: torch.Tensor, index: Union[int, Sequence[int]], api: str) -> Set[int]:
    dims = [index] if isinstance(index, int) else list(index)
    for dim in dims:
        if not -tensor.dim() <= dim < tensor.dim():
            raise IndexError(f"{api}: dim {dim} out of range for a {tensor.dim()}-d tensor")
    return {d % tensor.dim() for d in dims}


def mark_dynamic(tensor: torch.Tensor, index: Union[int, Sequence[int]]) -> None:
    """Compile `tensor`'s dim(s) `index` with a symbolic size from the first compile on."""
    marked = set(getattr(tensor, DYNAMIC_DIMS_ATTR, ())) | _dims_in_range(tensor, index, "mark_dynamic")
    setattr(tensor, DYNAMIC_DIMS_ATTR, marked)


# Functions whose call in traced code is refused, as torch.compile refuses it (ids; a dim must be
# marked dynamic before the compiled call starts)
REFUSED_IN_TRACE = frozenset(map(id, (mark_dynamic, torch._dynamo.mark_dynamic, torch._dynamo.maybe_mark_dynamic)))


def mark_static(tensor: torch.Tensor, index: Optional[Union[int, Sequence[int]]] = None) -> None:
    """Keep `tensor`'s dim(s) `index` (all when None) static, even under `dynamic=True` or after a
    size change; `mark_dynamic` on the same dim wins."""
    dims = range(tensor.dim()) if index is None else index
    marked = set(getattr(tensor, STATIC_DIMS_ATTR, ())) | _dims_in_range(tensor, dims, "mark_static")
    setattr(tensor, STATIC_DIMS_ATTR, marked)


def _marked(value: torch.Tensor, attr: str) -> Set[int]:
    return {d % value.dim() for d in getattr(value, attr, ()) if -value.dim() <= d < value.dim()}


def is_marked(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and bool(_marked(value, DYNAMIC_DIMS_ATTR))


def dynamic_dims(value: torch.Tensor, name: str, dynamic: Optional[bool], frame_state: Dict[str, Any]) -> Tuple[int, ...]:
    """The dims of graph input `value` (found at source `name`) to trace with symbolic sizes."""
    if dynamic is False:
        return ()
    marked = _marked(value, DYNAMIC_DIMS_ATTR)
    if dynamic:
        dims: Set[int] = set(range(value.dim()))
    else:
        dims = set(marked)
        seen = frame_state.get(_SIZES_KEY, {}).get(name)
        if seen is not None and len(seen) == value.dim():
            dims |= {d for d, size in enumerate(seen) if size != value.size(d)}
    dims -= _marked(value, STATIC_DIMS_ATTR) - marked
    return tuple(d for d in sorted(dims) if value.size(d) > 1)


def dynamic_scalar(value: Union[int, float], name: str, dynamic: Optional[bool], frame_state: Dict[str, Any]) -> bool:
    """Whether the int or float local `name` is traced as a symbolic graph input: always with
    dynamic=True, else (automatic) once an earlier compile of the code saw another value there.
    0 and 1 stay constants, as sizes do, and so do floats that are not finite."""
    if dynamic is False or value in (0, 1) or not math.isfinite(value):
        return False
    history = frame_state.get(_SCALARS_KEY, {})
    return bool(dynamic) or (name in history and history[name] != value)


def remember_scalars(frame_state: Dict[str, Any], scalars: Dict[str, Union[int, float]]) -> None:
    """Record one compile's int and float locals; one whose value changed is remembered as varying (None)."""
    history = frame_state.setdefault(_SCALARS_KEY, {})
    for name, now in scalars.items():
        history[name] = now if history.get(name, now) == now else None


def has_compiled(frame_state: Dict[str, Any]) -> bool:
    """Whether an earlier compile of this code recorded its input sizes."""
    return bool(frame_state.get(_SIZES_KEY))


def remember_sizes(frame_state: Dict[str, Any], sizes: Dict[str, Tuple[int, ...]]) -> None:
    """Record one compile's input sizes; a dim whose size changed is remembered as varying (None)."""
    history = frame_state.setdefault(_SIZES_KEY, {})
    for name, now in sizes.items():
        before = history.get(name)
        if before is None or len(before) != len(now):
            history[name] = list(now)
        else:
            history[name] = [b if b == n else None for b, n in zip(before, now)]


class _TraceShapeEnv(ShapeEnv):
    """A ShapeEnv that remembers the user's line where a symbolic size became one number: the
    error about a dim marked dynamic names it (torch's records it from its own tracing context)."""

    def __init__(self, running: List[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # the translators running now, innermost last (empty once the trace is over: it holds no
        # value of the frame for as long as the compiled graph keeps this ShapeEnv)
        self.running = running

    def _set_replacement(self, a, tgt, msg: str) -> None:
        super()._set_replacement(a, tgt, msg)
        sources = [s for s in self.var_to_sources.get(a, []) if s not in self.specialization_stacks]
        if tgt.is_number and sources:
            user_stack = self.running[-1].user_stack() if self.running else []
            stack = traceback.StackSummary.from_list([(f.filename, f.lineno, f.name, f.line) for f in user_stack])
            for source in sources:
                self.specialization_stacks[source] = stack


def new_shape_env(running: List[Any]) -> ShapeEnv:
    """`running`: the translators of the trace running now, innermost last (where in the user's code it is)."""
    # Data-dependent output shapes (nonzero) and .item() stay unsupported, as without a shape env.
    return _TraceShapeEnv(running, allow_scalar_outputs=False, allow_dynamic_output_shape_ops=False)


def symbolic_context(value: torch.Tensor, dims: Tuple[int, ...]) -> StatelessSymbolicContext:
    return StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC if d in dims else DimDynamic.STATIC for d in range(value.dim())]
    )


@dataclass(frozen=True)
class SizeSource(ChainedSource):
    """`base.size()[dim]`: a symbolic size passed to the graph; loaded as `base.shape[dim]`."""

    dim: int

    def expression(self) -> str:
        return f"{self.base.name()}.size()[{self.dim}]"

    def reconstruct(self, codegen) -> None:
        codegen.load_source(self.base)
        codegen.load_attr("shape")
        codegen.load_const(self.dim)
        codegen.subscript()


@dataclass(frozen=True)
class ShapeEnvSource(torch._guards.Source):
    """One of our sources as torch's ShapeEnv sees it: the shape env names sizes, strides and
    storage offsets after it (`L['x'].size()[0]`) in the guards it produces."""

    text: str

    @property
    def _name_template(self) -> str:
        return self.text

    @functools.cached_property
    def guard_source(self) -> torch._guards.GuardSource:
        return torch._guards.GuardSource.LOCAL


@dataclass
class SymbolicInput:
    """A graph input traced with symbolic sizes at `dims`, or a symbolic int or float (`fake` a
    SymInt or SymFloat, `dims` empty)."""

    source: Source
    value: Union[torch.Tensor, int, float]
    fake: Union[torch.Tensor, torch.SymInt, torch.SymFloat]
    dims: Tuple[int, ...]


def _marked_dims_context(i: SymbolicInput) -> Optional[StatelessSymbolicContext]:
    """What torch checks of `i`'s dims marked dynamic: that the trace did not make them one number."""
    if not isinstance(i.value, torch.Tensor):
        return None
    marked = _marked(i.value, DYNAMIC_DIMS_ATTR)
    return StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC if d in i.dims else DimDynamic.STATIC for d in range(i.value.dim())],
        constraint_sizes=[RelaxedUnspecConstraint(warn_only=False) if d in marked and d in i.dims else None
                          for d in range(i.value.dim())])


def shape_guards(shape_env: ShapeEnv, inputs: List[SymbolicInput]) -> List[str]:
    """Python checks, over our sources, of what the traced code assumed about symbolic sizes:
    ranges and relations (`5 <= L['x'].size()[0]`), the strides and storage offsets of symbolic
    tensors (which the tensor guard leaves unchecked), and specialisations to one value. A dim
    marked dynamic that the trace made one number raises torch's ConstraintViolationError, naming
    the line that did."""
    exprs = shape_env.produce_guards(
        [i.fake for i in inputs], [ShapeEnvSource(i.source.name()) for i in inputs], ignore_static=False,
        input_contexts=[_marked_dims_context(i) for i in inputs])
    # static sizes of these tensors are checked by their tensor guards already
    checked = {f"{i.source.name()}.size()[{d}] == {i.value.size(d)}"
               for i in inputs if isinstance(i.value, torch.Tensor) for d in range(i.value.dim()) if d not in i.dims}
    return [e for e in exprs if e not in checked]


def guard_scope(exprs: Iterable[str]) -> Dict[str, Any]:
    """The globals shape guard expressions name: torch (`torch.sym_float(...)`) and the sympy
    functions the shape env prints as calls."""
    from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP

    known = {**SYMPY_INTERP, "torch": torch}
    names = {node.id for expr in exprs for node in ast.walk(ast.parse(expr)) if isinstance(node, ast.Name)}
    return {name: known[name] for name in names if name in known}
