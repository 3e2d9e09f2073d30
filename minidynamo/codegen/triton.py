"""Emit `@triton.jit` kernels for scheduled kernels (the same loop IR the C++ emitter reads).

A kernel's outer loop nest becomes the program grid: each program handles XBLOCK consecutive
points of the flattened outer space (`xindex`), and the loop variables are recovered from it with
division and modulo by the (baked-in) sizes. Kernels come in three kinds:

- pointwise: no inner stages; values are 1-D blocks `[XBLOCK]`;
- persistent: every inner stage fits one block, so a whole row is loaded at once (`[XBLOCK, RB]`
  with RB the stage's size rounded up to a power of two) and values a later stage needs again
  stay in registers;
- looped: rows longer than `PERSISTENT_MAX` are walked in RBLOCK-wide chunks; reductions keep a
  `[XBLOCK, RBLOCK]` accumulator combined element-wise, reduced across the block after the loop.

Every value is typed explicitly (constants are `tl.full` of the IR dtype), so Triton's own
promotion rules never change a result type. A load of a buffer that an earlier stage of the same
kernel wrote is recomputed from the producer's expression instead (in persistent kernels that is
the register the producer already holds), so a kernel never reads memory it writes itself.
Functions Triton's core language lacks come from `libdevice` (see triton_cache for the interpreter).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from .ir import Buffer, Const, Expr, Index, IndexValue, Load, Op, ReductionNode
from .scheduler import Kernel, KNode, Stage, classify

# Rows up to this many elements (rounded up to a power of two) are reduced in one block.
PERSISTENT_MAX = 16384

TL_TYPES = {
    torch.float32: "tl.float32", torch.float64: "tl.float64", torch.int8: "tl.int8",
    torch.uint8: "tl.uint8", torch.int16: "tl.int16", torch.int32: "tl.int32",
    torch.int64: "tl.int64", torch.bool: "tl.int1",
}

PRELUDE = '''import triton
import triton.language as tl
from triton.language.extra import libdevice

_INF = tl.constexpr(float("inf"))
_NAN = tl.constexpr(float("nan"))


@triton.jit
def _max_nan(a, b):
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def _min_nan(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def _prod(a, b):
    return a * b


@triton.jit
def _arg_max(a, ia, b, ib):
    # NaN beats everything; equal values (or two NaNs) go to the lower index, as in torch.
    a_nan = a != a
    b_nan = b != b
    tie = ((a == b) | (a_nan & b_nan)) & (ia < ib)
    take = (a > b) | (a_nan & ~b_nan) | tie
    return tl.where(take, a, b), tl.where(take, ia, ib)


@triton.jit
def _arg_min(a, ia, b, ib):
    a_nan = a != a
    b_nan = b != b
    tie = ((a == b) | (a_nan & b_nan)) & (ia < ib)
    take = (a < b) | (a_nan & ~b_nan) | tie
    return tl.where(take, a, b), tl.where(take, ia, ib)


@triton.jit
def _floordiv_int(a, b):
    q = a // b
    fix = ((a % b) != 0) & ((a < 0) != (b < 0))
    return q - fix.to(q.dtype)


@triton.jit
def _floordiv_float(a, b):
    # torch's floor division: exact through fmod, rounding the quotient to the nearest integer.
    mod = a % b
    div = (a - mod) / b
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1.0, div)
    fl = tl.floor(div)
    fl = tl.where(div - fl > 0.5, fl + 1.0, fl)
    q = a / b
    fl = tl.where(div == 0, 0.0 * q, fl)
    return tl.where(b == 0, q, fl)


@triton.jit
def _remainder(a, b):
    m = a % b
    fix = (m != 0) & ((m < 0) != (b < 0))
    return tl.where(fix, m + b, m)


@triton.jit
def _sign(a):
    return (a > 0).to(a.dtype) - (a < 0).to(a.dtype)
'''

_INFIX = {
    "add": "+", "sub": "-", "mul": "*", "truediv": "/", "truncdiv": "//", "fmod": "%",
    "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "and": "&", "or": "|",
    "xor": "^", "bitand": "&", "bitor": "|", "bitxor": "^", "lshift": "<<", "rshift": ">>",
}
# bool arithmetic saturates in torch (True + True is True) but wraps in Triton's 1-bit integers.
_BOOL_INFIX = {"add": "|", "mul": "&", "maximum": "|", "minimum": "&"}
_CORE_MATH = {"exp": "tl.exp", "exp2": "tl.exp2", "log": "tl.log", "log2": "tl.log2",
              "sqrt": "tl.sqrt_rn", "rsqrt": "tl.rsqrt", "sin": "tl.sin", "cos": "tl.cos",
              "erf": "tl.erf", "floor": "tl.floor", "ceil": "tl.ceil", "abs": "tl.abs"}
# Reductions go through tl.reduce with our own combine functions, never tl.sum and friends:
# those are jit functions of Triton's standard library, which the interpreter cannot call when
# triton was imported before TRITON_INTERPRET was set (torch._dynamo imports it early).
_COMBINE = {"sum": "_add", "prod": "_prod", "max": "_max_nan", "min": "_min_nan", "any": "_max_nan",
            "all": "_min_nan", "argmax": "_arg_max", "argmin": "_arg_min"}
_LIBDEVICE = {"round": "nearbyint", "pow": "pow", "atan2": "atan2", "trunc": "trunc"}


@dataclass
class TritonKernel:
    """One emitted kernel and what its launcher needs to know."""

    name: str
    source: str
    args: List[str]  # buffer names, in parameter order
    kind: str  # "pointwise", "persistent" or "looped"
    xnumel: int
    rnumel: int  # the longest inner stage (0 for pointwise kernels)


@dataclass
class _Scope:
    lines: List[str]
    cache: Dict[Expr, str] = field(default_factory=dict)


def next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _numel(sizes: Sequence[int]) -> int:
    return math.prod(sizes)


def literal(value, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "True" if value else "False"
    if dtype.is_floating_point:
        if math.isnan(value):
            return "_NAN"
        if math.isinf(value):
            return "-_INF" if value < 0 else "_INF"
        return repr(float(value))
    return str(int(value))


def _neutral(kind: str, dtype: torch.dtype):
    if kind in ("sum", "any"):
        return 0
    if kind in ("prod", "all"):
        return 1
    is_max = kind in ("max", "argmax")
    if dtype.is_floating_point:
        return -math.inf if is_max else math.inf
    info = torch.iinfo(dtype)
    return info.min if is_max else info.max


class KernelEmitter:
    def __init__(self, kernel: Kernel, buffers: Dict[str, Buffer], persistent_max: int):
        self.k = kernel
        self.buffers = buffers
        inner = [_numel(s.inner) for s in kernel.stages if s.inner is not None]
        self.rnumel = max(inner, default=0)
        if not inner:
            self.kind = "pointwise"
        elif next_power_of_2(self.rnumel) <= persistent_max:
            self.kind = "persistent"
        else:
            self.kind = "looped"
        self.rank = 1 if self.kind == "pointwise" else 2
        self.xnumel = _numel(kernel.outer)
        self.top = _Scope([])
        self.inner: Optional[_Scope] = None
        self.persistent_caches: Dict[Tuple[int, ...], Dict[Expr, str]] = {}
        self.reduced: Dict[str, str] = {}  # reduction node -> its per-row result variable
        self.reads: set = set()
        self.counter = 0
        self.stage_index = 0
        self.rblock = ""  # the current stage's block width (a literal or "RBLOCK")
        self.var_names: Dict[str, str] = {}  # r0.. -> this stage's variables
        self._levels: Dict[Expr, int] = {}
        self.wide = self._needs_int64()

    def new_var(self, prefix: str = "tmp") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    # -- shapes and indices --------------------------------------------------------------

    def _needs_int64(self) -> bool:
        """Whether some offset (or the flat loop index) can pass int32."""
        limit = 2 ** 31 - 1 - 2 * PERSISTENT_MAX
        if self.xnumel * max(self.rnumel, 1) >= limit:
            return True
        for kn in self.k.knodes():
            stage = self.k.stages[kn.stage]
            sizes = {f"p{i}": s for i, s in enumerate(self.k.outer)}
            sizes.update({f"r{i}": s for i, s in enumerate(stage.inner or ())})
            for ix in [kn.store] + [e.index for e in kn.body.walk() if isinstance(e, (Load, IndexValue))]:
                bound = abs(ix.const) + sum(abs(c) * (sizes.get(v, 1) - 1) for v, c in ix.terms)
                if bound >= limit:
                    return True
        return False

    def block_shape(self, level: int) -> str:
        if self.rank == 1:
            return "[XBLOCK]"
        return f"[XBLOCK, {self.rblock}]" if level == 2 else "[XBLOCK, 1]"

    def index_code(self, ix: Index, level: int = 0) -> str:
        """Offsets for `ix`, padded to the block shape of `level` when some of its loop
        variables are missing (stores and broadcast loads need full-shape pointers)."""
        parts = []
        for n, c in ix.terms:
            name = self.var_names.get(n, n)
            parts.append(name if c == 1 else f"{c} * {name}")
        if ix.const or not parts:
            parts.append(str(ix.const))
        names = ix.vars()
        if level >= 1 and not any(v.startswith("p") for v in names):
            parts.append("0 * xindex")
        if level == 2 and not any(v.startswith("r") for v in names):
            parts.append(f"0 * {self.var_names['rindex']}")
        return " + ".join(parts)

    def mask_of(self, ix: Index) -> Optional[str]:
        names = ix.vars()
        masks = []
        if any(v.startswith("p") for v in names):
            masks.append("xmask")
        if any(v.startswith("r") for v in names):
            masks.append(self.var_names["rmask"])
        return " & ".join(masks) if masks else None

    def index_level(self, ix: Index) -> int:
        names = ix.vars()
        if any(v.startswith("r") for v in names):
            return 2
        return 1 if names else 0

    # -- expressions ---------------------------------------------------------------------

    def _producer(self, ld: Load) -> Optional[KNode]:
        if classify(self.k, self.stage_index, ld) == "external":
            self.reads.add(ld.buffer)
            return None
        return self.k.producer(ld.buffer)

    def level(self, e: Expr) -> int:
        """0: the same for every element, 1: varies per row (outer point), 2: per element."""
        hit = self._levels.get(e)
        if hit is None:
            hit = self._levels[e] = self._level(e)
        return hit

    def _level(self, e: Expr) -> int:
        if isinstance(e, Load):
            prod = self._producer(e)
            if prod is not None:
                return 1 if prod.is_reduction else self.level(prod.body)
            return self.index_level(e.index)
        if isinstance(e, IndexValue):
            return self.index_level(e.index)
        return max((self.level(c) for c in e.children()), default=0)

    def const(self, value, dtype: torch.dtype) -> str:
        shape = "[1]" if self.rank == 1 else "[1, 1]"
        return f"tl.full({shape}, {literal(value, dtype)}, {TL_TYPES[dtype]})"

    def value(self, e: Expr) -> str:
        if isinstance(e, Load):
            prod = self._producer(e)
            if prod is not None:
                return self.reduced[prod.name] if prod.is_reduction else self.value(prod.body)
        scope = self.inner if self.level(e) == 2 else self.top
        hit = scope.cache.get(e)
        if hit is not None:
            return hit
        code = self._code(e)
        name = self.new_var()
        scope.lines.append(f"{name} = {code}")
        scope.cache[e] = name
        return name

    def _code(self, e: Expr) -> str:
        if isinstance(e, Const):
            return self.const(e.value, e.dtype)
        if isinstance(e, Load):
            ptr = f"{e.buffer} + ({self.index_code(e.index)})"
            mask = self.mask_of(e.index)
            load = f"tl.load({ptr}, {mask}, other=0)" if mask else f"tl.load({ptr})"
            # Loads of bool buffers come back as int8 on some Triton versions.
            return f"{load}.to(tl.int1)" if e.dtype == torch.bool else load
        if isinstance(e, IndexValue):
            if not e.index.terms:
                return self.const(e.index.const, e.dtype)
            return f"({self.index_code(e.index)}).to({TL_TYPES[e.dtype]})"
        assert isinstance(e, Op)
        return self._op(e, [self.value(a) for a in e.args])

    def _op(self, e: Op, a: List[str]) -> str:
        n, t = e.name, TL_TYPES[e.dtype]
        src = e.args[0].dtype
        if n == "cast":
            return f"({a[0]} != 0)" if e.dtype == torch.bool else f"{a[0]}.to({t})"
        if src == torch.bool and n in _BOOL_INFIX:
            return f"({a[0]} {_BOOL_INFIX[n]} {a[1]})"
        if n in _INFIX:
            return f"({a[0]} {_INFIX[n]} {a[1]})"
        if n == "where":
            return f"tl.where({a[0]}, {a[1]}, {a[2]})"
        if n in ("maximum", "minimum"):
            if src.is_floating_point:
                return f"_{n[:3]}_nan({a[0]}, {a[1]})"
            return f"tl.{n}({a[0]}, {a[1]})"
        if n == "floordiv":
            return f"_floordiv_{'float' if src.is_floating_point else 'int'}({a[0]}, {a[1]})"
        if n == "remainder":
            return f"_remainder({a[0]}, {a[1]})"
        if n == "neg":
            return f"(-{a[0]})"
        if n in ("not", "bitnot"):
            return f"(~{a[0]})"
        if n == "sign":
            return f"_sign({a[0]})"
        if n == "isnan":
            return f"({a[0]} != {a[0]})"
        if n == "isinf":
            return f"(tl.abs({a[0]}) == {self.const(math.inf, src)})"
        one = self.const(1, e.dtype) if e.dtype.is_floating_point else ""
        if n == "reciprocal":
            return f"({one} / {a[0]})"
        if n == "sigmoid":
            return f"({one} / ({one} + tl.exp(-{a[0]})))"
        if n == "frac":
            return f"({a[0]} - libdevice.trunc({a[0]}))"
        if n == "sqrt" and src == torch.float64:
            return f"tl.sqrt({a[0]})"  # sqrt_rn takes fp32 only; fp64 sqrt is correctly rounded
        if n in _CORE_MATH:
            return f"{_CORE_MATH[n]}({a[0]})"
        return f"libdevice.{_LIBDEVICE.get(n, n)}({', '.join(a)})"

    # -- kernel ---------------------------------------------------------------------------

    def emit(self) -> TritonKernel:
        k = self.k
        for i, stage in enumerate(k.stages):
            self.stage_index = i
            self._levels = {}
            if stage.inner is None:
                for kn in stage.nodes:
                    self._store(kn, self.value(kn.body), 1)
            else:
                self._inner_stage(stage)
        head = self._prologue()
        args = sorted(self.reads | k.stored)
        params = args + ["XBLOCK: tl.constexpr"]
        if self.kind == "looped":
            params.append("RBLOCK: tl.constexpr")
        body = head + self.top.lines
        src = "@triton.jit\n" + f"def {k.name}({', '.join(params)}):\n"
        src += "\n".join("    " + line for line in body) + "\n"
        return TritonKernel(k.name, src, args, self.kind, self.xnumel, self.rnumel)

    def _prologue(self) -> List[str]:
        pid = "tl.program_id(0).to(tl.int64)" if self.wide else "tl.program_id(0)"
        arange = "tl.arange(0, XBLOCK)" + ("[:, None]" if self.rank == 2 else "")
        lines = [f"xindex = {pid} * XBLOCK + {arange}", f"xmask = xindex < {max(self.xnumel, 1)}"]
        lines += self._decompose("xindex", "p", self.k.outer)
        return lines

    @staticmethod
    def _decompose(flat: str, prefix: str, sizes: Sequence[int], suffix: str = "") -> List[str]:
        """Loop variables from a flat row-major index (the innermost varies fastest)."""
        lines, inner = [], 1
        for d in reversed(range(len(sizes))):
            v = f"({flat} // {inner})" if inner > 1 else flat
            if d > 0:
                v = f"{v} % {sizes[d]}"
            lines.append(f"{prefix}{d}{suffix} = {v}")
            inner *= sizes[d]
        return list(reversed(lines))

    def _store(self, kn: KNode, value: str, level: int) -> None:
        if kn.name not in self.k.stored:
            return
        lines = self.inner.lines if level == 2 else self.top.lines
        mask = "xmask" if level < 2 else f"xmask & {self.var_names['rmask']}"
        if self.level(kn.body) < level and not kn.is_reduction:
            value = f"tl.broadcast_to({value}, {self.block_shape(level)})"
        lines.append(f"tl.store({kn.name} + ({self.index_code(kn.store, level)}), {value}, {mask})")

    def _inner_stage(self, stage: Stage) -> None:
        i = self.stage_index
        rnumel = _numel(stage.inner)
        looped = self.kind == "looped"
        self.rblock = "RBLOCK" if looped else str(next_power_of_2(rnumel))
        rindex, rmask = f"rindex_{i}", f"rmask_{i}"
        self.var_names = {f"r{d}": f"r{d}_{i}" for d in range(len(stage.inner))}
        self.var_names.update(rindex=rindex, rmask=rmask)
        if looped:
            self.inner = _Scope([])
        else:
            # A whole row is one block: equal expressions of equal-shaped stages are equal values.
            self.inner = _Scope([], self.persistent_caches.setdefault(stage.inner, {}))
        start = "roffset + " if looped else ""
        arange = f"tl.arange(0, {self.rblock})[None, :]"
        if self.wide:
            arange += ".to(tl.int64)"
        self.inner.lines.append(f"{rindex} = {start}{arange}")
        self.inner.lines.append(f"{rmask} = {rindex} < {rnumel}")
        self.inner.lines += self._decompose(rindex, "r", stage.inner, f"_{i}")
        finals: List[str] = []
        for kn in stage.nodes:
            if kn.is_reduction:
                finals += self._reduction(kn, looped)
            else:
                self._store(kn, self.value(kn.body), 2)
        if looped:
            self.top.lines.append(f"for roffset in range(0, {rnumel}, RBLOCK):")
            self.top.lines += ["    " + line for line in self.inner.lines]
        else:
            self.top.lines += self.inner.lines
        self.top.lines += finals
        for kn in stage.nodes:
            if kn.is_reduction:
                self._store(kn, self.reduced[kn.name], 1)
        self.inner = None

    def _reduction(self, kn: KNode, looped: bool) -> List[str]:
        """Accumulate `kn` in the current stage; returns the lines that finish it after the
        stage (and records the variable holding the per-row result)."""
        node: ReductionNode = kn.node  # type: ignore[assignment]
        kind = node.kind
        src = kn.body.dtype
        work = torch.int8 if src == torch.bool else src  # any/all and bool max/min reduce int8
        shape = f"[XBLOCK, {self.rblock}]"
        v = self.value(kn.body)
        if work != src:
            v = f"{v}.to(tl.int8)"
        masked = f"tl.where({self.var_names['rmask']}, {v}, {self.const(_neutral(kind, work), work)})"
        vname = self.new_var("red")
        self.inner.lines.append(f"{vname} = tl.broadcast_to({masked}, {shape})")
        out = f"{kn.name}_v"
        self.reduced[kn.name] = out
        arg = kind in ("argmax", "argmin")
        if arg:
            idx = self.new_var("ridx")
            self.inner.lines.append(
                f"{idx} = tl.broadcast_to({self.var_names['rindex']}.to(tl.int64), {shape})")
        combine = _COMBINE[kind]
        if not looped:
            vals = f"({vname}, {idx})" if arg else vname
            reduced = f"tl.reduce({vals}, 1, {combine})"
            if arg:
                self.inner.lines.append(f"_, {out} = {reduced}")
                return [f"{out} = {out}[:, None]"]
            return [f"{out} = {self._finish(f'{reduced}[:, None]', kind, src)}"]
        acc = f"{kn.name}_acc"
        init = self.const(_neutral(kind, work), work)
        self.top.lines.append(f"{acc} = tl.broadcast_to({init}, {shape})")
        if arg:
            self.top.lines.append(f"{acc}_idx = tl.full({shape}, {2 ** 62}, tl.int64)")
            self.inner.lines.append(
                f"{acc}, {acc}_idx = {combine}({acc}, {acc}_idx, {vname}, {idx})")
            return [f"_, {out} = tl.reduce(({acc}, {acc}_idx), 1, {combine})",
                    f"{out} = {out}[:, None]"]
        self.inner.lines.append(f"{acc} = {combine}({acc}, {vname})")
        return [f"{out} = {self._finish(f'tl.reduce({acc}, 1, {combine})[:, None]', kind, src)}"]

    @staticmethod
    def _finish(code: str, kind: str, src: torch.dtype) -> str:
        return f"({code} != 0)" if src == torch.bool or kind in ("any", "all") else code


def emit_triton(kernels: List[Kernel], buffers: Dict[str, Buffer],
                persistent_max: Optional[int] = None) -> Tuple[str, List[TritonKernel]]:
    """The module source (prelude + one function per kernel) and the kernels' descriptions."""
    limit = PERSISTENT_MAX if persistent_max is None else persistent_max
    emitted = [KernelEmitter(k, buffers, limit).emit() for k in kernels]
    return PRELUDE + "\n\n" + "\n\n".join(e.source for e in emitted), emitted
