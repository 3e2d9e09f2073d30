"""What the C++ and Triton kernel renderers share: loop levels, one named value per distinct
expression (common-subexpression elimination), variable naming, expression dispatch through
per-language op tables, literals and affine index text."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import torch

from .ir import Buffer, Const, Expr, Index, IndexValue, Load, Op
from .scheduler import Kernel, KNode, Stage, classify
from .sizes import size_code


def index_code(ix: Index, rename: Callable[[str], str] = str) -> str:
    """`const + sum(coeff * var)` as text valid in C++ and Python, loop variables through `rename`."""
    parts = [rename(n) if c == 1 else f"{size_code(c)} * {rename(n)}" for n, c in ix.terms]
    if ix.const != 0 or not parts:
        parts.append(size_code(ix.const))
    return " + ".join(parts)


def is_inner_var(name: str) -> bool:
    return name.startswith("r")


def varies_inner(e: Expr) -> bool:
    """Whether `e` reads an inner (reduction-stage) loop variable."""
    return any(isinstance(n, (Load, IndexValue)) and any(is_inner_var(v) for v in n.index.vars())
               for n in e.walk())


def flat_inner(inner: Tuple[int, ...]) -> Index:
    """The row-major flat position of an inner stage's loop variables."""
    out = Index()
    for d, size in enumerate(inner):
        out = out * size + Index.var(f"r{d}")
    return out


@dataclass
class Scope:
    """Lines at one loop level and the values already named there."""

    lines: List[str]
    cache: Dict[Expr, str] = field(default_factory=dict)


class KernelRenderer:
    """Renders one scheduled kernel. Each distinct expression becomes one named value in the
    scope of its loop level; subclasses spell literals, loads and ops (`OPS`: op name -> format
    template over the argument values and `{t}`, the result type; `special_op` for spellings
    that depend on more than the op name) and lay out the loops (`pointwise_node`,
    `inner_stage`)."""

    OPS: Dict[str, str] = {}
    TRUE, FALSE = "true", "false"

    def __init__(self, kernel: Kernel, buffers: Dict[str, Buffer]):
        self.k = kernel
        self.buffers = buffers
        self.counter = 0
        self.reads: set = set()  # buffers the kernel reads from memory
        self.stage_index = 0
        self._levels: Dict[Expr, int] = {}  # per stage: how deep in the loops each value varies

    def new_var(self, prefix: str = "tmp") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    # -- spelling ------------------------------------------------------------------------------

    def literal(self, value, dtype: torch.dtype) -> str:
        if dtype == torch.bool:
            return self.TRUE if value else self.FALSE
        if dtype.is_floating_point:
            if math.isnan(value):
                return self.nan_literal(dtype)
            if math.isinf(value):
                return self.inf_literal(dtype, value < 0)
            return self.float_literal(float(value), dtype)
        return self.int_literal(int(value), dtype)

    def nan_literal(self, dtype: torch.dtype) -> str:
        raise NotImplementedError

    def inf_literal(self, dtype: torch.dtype, negative: bool) -> str:
        raise NotImplementedError

    def float_literal(self, value: float, dtype: torch.dtype) -> str:
        raise NotImplementedError

    def int_literal(self, value: int, dtype: torch.dtype) -> str:
        raise NotImplementedError

    def type_name(self, dtype: torch.dtype) -> str:
        raise NotImplementedError

    # -- loop levels -----------------------------------------------------------------------------

    def level(self, e: Expr) -> int:
        """How deep in the kernel's loops `e` varies (0: the same everywhere)."""
        hit = self._levels.get(e)
        if hit is None:
            hit = self._levels[e] = self._level(e)
        return hit

    def _level(self, e: Expr) -> int:
        if isinstance(e, Load):
            local = self.local_level(e)
            if local is not None:
                return local
        if isinstance(e, (Load, IndexValue)):
            return self.index_level(e.index)
        return max((self.level(c) for c in e.children()), default=0)

    def local_level(self, ld: Load) -> Optional[int]:
        """The level of a load this kernel serves without reading memory; None otherwise."""
        raise NotImplementedError

    def index_level(self, ix: Index) -> int:
        raise NotImplementedError

    def load_kind(self, ld: Load) -> str:
        """How the scheduler serves `ld` in the current stage (scheduler.classify)."""
        return classify(self.k, self.stage_index, ld)

    # -- values --------------------------------------------------------------------------------

    def value(self, e: Expr) -> str:
        """The name (or literal) holding `e`, defining it in its level's scope on first use."""
        direct = self.direct_value(e)
        if direct is not None:
            return direct
        scope = self.scope_of(e)
        name = scope.cache.get(e)
        if name is None:
            name = scope.cache[e] = self.assign(scope, e)
        return name

    def direct_value(self, e: Expr) -> Optional[str]:
        """Text for `e` that needs no definition (a literal, a value the kernel holds); or None."""
        return None

    def scope_of(self, e: Expr) -> Scope:
        raise NotImplementedError

    def assign(self, scope: Scope, e: Expr) -> str:
        code = self.code(e)
        name = self.new_var()
        scope.lines.append(self.definition(name, e.dtype, code))
        return name

    def definition(self, name: str, dtype: torch.dtype, code: str) -> str:
        raise NotImplementedError

    def code(self, e: Expr) -> str:
        if isinstance(e, Const):
            return self.const_code(e.value, e.dtype)
        if isinstance(e, Load):
            return self.load_code(e)
        if isinstance(e, IndexValue):
            return self.index_value_code(e)
        assert isinstance(e, Op)
        return self.op_code(e, [self.value(a) for a in e.args])

    def const_code(self, value, dtype: torch.dtype) -> str:
        return self.literal(value, dtype)

    def load_code(self, ld: Load) -> str:
        raise NotImplementedError

    def index_value_code(self, e: IndexValue) -> str:
        raise NotImplementedError

    def op_code(self, e: Op, args: List[str]) -> str:
        special = self.special_op(e, args)
        if special is not None:
            return special
        return self.OPS[e.name].format(*args, t=self.type_name(e.dtype))

    def special_op(self, e: Op, args: List[str]) -> Optional[str]:
        """A spelling of `e` that depends on its dtypes or loop levels; None: the OPS table's."""
        return None

    # -- stages --------------------------------------------------------------------------------

    def render_stages(self) -> None:
        for i, stage in enumerate(self.k.stages):
            self.stage_index = i
            self._levels = {}
            if stage.inner is None:
                for kn in stage.nodes:
                    self.pointwise_node(kn)
            else:
                self.inner_stage(stage)

    def pointwise_node(self, kn: KNode) -> None:
        raise NotImplementedError

    def inner_stage(self, stage: Stage) -> None:
        raise NotImplementedError
