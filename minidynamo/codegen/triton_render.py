"""Render scheduled kernels as `@triton.jit` functions (the same loop IR the C++ renderer reads).

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
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from .ir import UNARY_MATH, Buffer, Expr, Index, IndexValue, Load, Op, ReductionNode, numel
from .render import KernelRenderer, Scope, index_code, is_inner_var
from .scheduler import Kernel, KNode, Stage
from .sizes import SizeExpr, any_symbolic, at_least_1, hint, is_symbolic, size_code

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
_LIBDEVICE = {"round": "nearbyint", "trunc": "trunc"}
_OPS = {
    **{n: f"({{0}} {s} {{1}})" for n, s in _INFIX.items()},
    **{n: f"libdevice.{_LIBDEVICE.get(n, n)}({{0}})" for n in UNARY_MATH
       if n not in ("sigmoid", "reciprocal")},  # spelled in special_op
    **{n: f"{fn}({{0}})" for n, fn in _CORE_MATH.items()},
    "pow": "libdevice.pow({0}, {1})", "atan2": "libdevice.atan2({0}, {1})",
    "cast": "{0}.to({t})", "where": "tl.where({0}, {1}, {2})", "maximum": "tl.maximum({0}, {1})",
    "minimum": "tl.minimum({0}, {1})", "floordiv": "_floordiv_int({0}, {1})",
    "remainder": "_remainder({0}, {1})", "neg": "(-{0})", "not": "(~{0})", "bitnot": "(~{0})",
    "sign": "_sign({0})", "isnan": "({0} != {0})", "frac": "({0} - libdevice.trunc({0}))",
}
# Reductions go through tl.reduce with our own combine functions, never tl.sum and friends:
# those are jit functions of Triton's standard library, which the interpreter cannot call when
# triton was imported before TRITON_INTERPRET was set (torch._dynamo imports it early).
_COMBINE = {"sum": "_add", "prod": "_prod", "max": "_max_nan", "min": "_min_nan", "any": "_max_nan",
            "all": "_min_nan", "argmax": "_arg_max", "argmin": "_arg_min"}


@dataclass
class TritonKernel:
    """One rendered kernel and what its launcher needs to know."""

    name: str
    source: str
    args: List[str]  # buffer names, in parameter order
    kind: str  # "pointwise", "persistent" or "looped"
    xnumel: SizeExpr
    rnumel: SizeExpr  # the longest inner stage (0 for pointwise kernels)
    xhint: int = 0  # xnumel and rnumel at the example inputs (launch configs are chosen from them)
    rhint: int = 0


def next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


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


class TritonRenderer(KernelRenderer):
    """Levels: 0 the same for every element, 1 varies per row (outer point), 2 per element."""

    OPS = _OPS
    TRUE, FALSE = "True", "False"

    def __init__(self, kernel: Kernel, buffers: Dict[str, Buffer], persistent_max: int,
                 symbols: Sequence[str] = ()):
        super().__init__(kernel, buffers)
        self.symbols = list(symbols)  # size symbols: kernel arguments after the buffers
        inner = [numel(s.inner) for s in kernel.stages if s.inner is not None]
        self.rnumel = max(inner, default=0, key=hint)
        if not inner:
            self.kind = "pointwise"
        elif not is_symbolic(self.rnumel) and next_power_of_2(self.rnumel) <= persistent_max:
            self.kind = "persistent"
        else:
            self.kind = "looped"
        self.rank = 1 if self.kind == "pointwise" else 2
        self.xnumel = numel(kernel.outer)
        self.top = Scope([])
        self.inner: Optional[Scope] = None
        self.persistent_caches: Dict[Tuple[int, ...], Dict[Expr, str]] = {}
        self.reduced: Dict[str, str] = {}  # reduction node -> its per-row result variable
        self.rblock = ""  # the current stage's block width (a literal or "RBLOCK")
        self.var_names: Dict[str, str] = {}  # r0.. -> this stage's variables
        self.wide = self._needs_int64()

    # -- spelling ------------------------------------------------------------------------------

    def nan_literal(self, dtype: torch.dtype) -> str:
        return "_NAN"

    def inf_literal(self, dtype: torch.dtype, negative: bool) -> str:
        return "-_INF" if negative else "_INF"

    def float_literal(self, value: float, dtype: torch.dtype) -> str:
        return repr(value)

    def int_literal(self, value: int, dtype: torch.dtype) -> str:
        return str(value)

    def type_name(self, dtype: torch.dtype) -> str:
        return TL_TYPES[dtype]

    def definition(self, name: str, dtype: torch.dtype, code: str) -> str:
        return f"{name} = {code}"

    # -- shapes and indices --------------------------------------------------------------------

    def _needs_int64(self) -> bool:
        """Whether some offset (or the flat loop index) can pass int32."""
        limit = 2 ** 31 - 1 - 2 * PERSISTENT_MAX
        if self.symbols:  # sizes vary: offsets may pass int32 for some of them
            return True
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

    def offsets(self, ix: Index, level: int = 0) -> str:
        """Offsets for `ix`, padded to the block shape of `level` when some of its loop
        variables are missing (stores and broadcast loads need full-shape pointers)."""
        code = index_code(ix, lambda n: self.var_names.get(n, n))
        names = ix.vars()
        if level >= 1 and not any(v.startswith("p") for v in names):
            code += " + 0 * xindex"
        if level == 2 and not any(is_inner_var(v) for v in names):
            code += f" + 0 * {self.var_names['rindex']}"
        return code

    def mask_of(self, ix: Index) -> Optional[str]:
        names = ix.vars()
        masks = []
        if any(v.startswith("p") for v in names):
            masks.append("xmask")
        if any(is_inner_var(v) for v in names):
            masks.append(self.var_names["rmask"])
        return " & ".join(masks) if masks else None

    def index_level(self, ix: Index) -> int:
        names = ix.vars()
        if any(is_inner_var(v) for v in names):
            return 2
        return 1 if names else 0

    # -- values --------------------------------------------------------------------------------

    def _producer(self, ld: Load) -> Optional[KNode]:
        if self.load_kind(ld) == "external":
            self.reads.add(ld.buffer)
            return None
        return self.k.producer(ld.buffer)

    def local_level(self, ld: Load) -> Optional[int]:
        prod = self._producer(ld)
        if prod is None:
            return None
        return 1 if prod.is_reduction else self.level(prod.body)

    def direct_value(self, e: Expr) -> Optional[str]:
        if isinstance(e, Load):
            prod = self._producer(e)
            if prod is not None:
                return self.reduced[prod.name] if prod.is_reduction else self.value(prod.body)
        return None

    def scope_of(self, e: Expr) -> Scope:
        return self.inner if self.level(e) == 2 else self.top

    def const_code(self, value, dtype: torch.dtype) -> str:
        shape = "[1]" if self.rank == 1 else "[1, 1]"
        return f"tl.full({shape}, {self.literal(value, dtype)}, {TL_TYPES[dtype]})"

    def load_code(self, ld: Load) -> str:
        ptr = f"{ld.buffer} + ({self.offsets(ld.index)})"
        mask = self.mask_of(ld.index)
        load = f"tl.load({ptr}, {mask}, other=0)" if mask else f"tl.load({ptr})"
        # Loads of bool buffers come back as int8 on some Triton versions.
        return f"{load}.to(tl.int1)" if ld.dtype == torch.bool else load

    def index_value_code(self, e: IndexValue) -> str:
        if not e.index.terms and is_symbolic(e.index.const):  # a size, as a value
            shape = "[1]" if self.rank == 1 else "[1, 1]"
            return f"(tl.full({shape}, 0, tl.int64) + {size_code(e.index.const)}).to({TL_TYPES[e.dtype]})"
        if not e.index.terms:
            return self.const_code(e.index.const, e.dtype)
        return f"({self.offsets(e.index)}).to({TL_TYPES[e.dtype]})"

    def special_op(self, e: Op, a: List[str]) -> Optional[str]:
        n, src = e.name, e.args[0].dtype
        if n == "cast" and e.dtype == torch.bool:
            return f"({a[0]} != 0)"
        if src == torch.bool and n in _BOOL_INFIX:
            return f"({a[0]} {_BOOL_INFIX[n]} {a[1]})"
        if n in ("maximum", "minimum") and src.is_floating_point:
            return f"_{n[:3]}_nan({a[0]}, {a[1]})"
        if n == "floordiv" and src.is_floating_point:
            return f"_floordiv_float({a[0]}, {a[1]})"
        if n == "bitnot" and src != torch.bool and not src.is_signed:
            # Triton's interpreter builds ~x from a -1 of x's dtype, which NumPy 2.5 refuses if unsigned
            return f"({a[0]} ^ {self.const_code(torch.iinfo(src).max, src)})"
        if n == "isinf":
            return f"(tl.abs({a[0]}) == {self.const_code(math.inf, src)})"
        one = self.const_code(1, e.dtype) if e.dtype.is_floating_point else ""
        if n == "reciprocal":
            return f"({one} / {a[0]})"
        if n == "sigmoid":
            return f"({one} / ({one} + tl.exp(-{a[0]})))"
        if n == "sqrt" and src == torch.float64:
            return f"tl.sqrt({a[0]})"  # sqrt_rn takes fp32 only; fp64 sqrt is correctly rounded
        return None

    # -- kernel --------------------------------------------------------------------------------

    def render(self) -> TritonKernel:
        k = self.k
        self.render_stages()
        head = self._prologue()
        args = sorted(self.reads | k.stored)
        params = args + self.symbols + ["XBLOCK: tl.constexpr"]
        if self.kind == "looped":
            params.append("RBLOCK: tl.constexpr")
        body = head + self.top.lines
        src = "@triton.jit\n" + f"def {k.name}({', '.join(params)}):\n"
        src += "\n".join("    " + line for line in body) + "\n"
        return TritonKernel(k.name, src, args, self.kind, self.xnumel, self.rnumel,
                            hint(self.xnumel), hint(self.rnumel))

    def _prologue(self) -> List[str]:
        pid = "tl.program_id(0).to(tl.int64)" if self.wide else "tl.program_id(0)"
        arange = "tl.arange(0, XBLOCK)" + ("[:, None]" if self.rank == 2 else "")
        lines = [f"xindex = {pid} * XBLOCK + {arange}", f"xmask = xindex < {size_code(at_least_1(self.xnumel))}"]
        lines += self._decompose("xindex", "p", self.k.outer)
        return lines

    @staticmethod
    def _decompose(flat: str, prefix: str, sizes: Sequence[int], suffix: str = "") -> List[str]:
        """Loop variables from a flat row-major index (the innermost varies fastest)."""
        lines, inner = [], 1
        for d in reversed(range(len(sizes))):
            v = f"({flat} // {size_code(inner)})" if inner != 1 else flat
            if d > 0:
                v = f"{v} % {size_code(sizes[d])}"
            lines.append(f"{prefix}{d}{suffix} = {v}")
            inner *= sizes[d]
        return list(reversed(lines))

    def pointwise_node(self, kn: KNode) -> None:
        self._store(kn, self.value(kn.body), 1)

    def _store(self, kn: KNode, value: str, level: int) -> None:
        if kn.name not in self.k.stored:
            return
        lines = self.inner.lines if level == 2 else self.top.lines
        mask = "xmask" if level < 2 else f"xmask & {self.var_names['rmask']}"
        if self.level(kn.body) < level and not kn.is_reduction:
            value = f"tl.broadcast_to({value}, {self.block_shape(level)})"
        lines.append(f"tl.store({kn.name} + ({self.offsets(kn.store, level)}), {value}, {mask})")

    def inner_stage(self, stage: Stage) -> None:
        i = self.stage_index
        rnumel = numel(stage.inner)
        looped = self.kind == "looped"
        self.rblock = "RBLOCK" if looped else str(next_power_of_2(rnumel))
        rindex, rmask = f"rindex_{i}", f"rmask_{i}"
        self.var_names = {f"r{d}": f"r{d}_{i}" for d in range(len(stage.inner))}
        self.var_names.update(rindex=rindex, rmask=rmask)
        if looped:
            self.inner = Scope([])
        else:
            # A whole row is one block: equal expressions of equal-shaped stages are equal values.
            self.inner = Scope([], self.persistent_caches.setdefault(stage.inner, {}))
        start = "roffset + " if looped else ""
        arange = f"tl.arange(0, {self.rblock})[None, :]"
        if self.wide:
            arange += ".to(tl.int64)"
        self.inner.lines.append(f"{rindex} = {start}{arange}")
        self.inner.lines.append(f"{rmask} = {rindex} < {size_code(rnumel)}")
        self.inner.lines += self._decompose(rindex, "r", stage.inner, f"_{i}")
        finals: List[str] = []
        for kn in stage.nodes:
            if kn.is_reduction:
                finals += self._reduction(kn, looped)
            else:
                self._store(kn, self.value(kn.body), 2)
        if looped:
            self.top.lines.append(f"for roffset in range(0, {size_code(rnumel)}, RBLOCK):")
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
        masked = f"tl.where({self.var_names['rmask']}, {v}, {self.const_code(_neutral(kind, work), work)})"
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
        init = self.const_code(_neutral(kind, work), work)
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



def render_triton(kernels: List[Kernel], buffers: Dict[str, Buffer],
                  persistent_max: Optional[int] = None, symbols: Sequence[str] = ()) -> Tuple[str, List[TritonKernel]]:
    """The module source (prelude + one function per kernel) and the kernels' descriptions; every
    kernel takes the size `symbols` as arguments after its buffers."""
    limit = PERSISTENT_MAX if persistent_max is None else persistent_max
    rendered = [TritonRenderer(k, buffers, limit, symbols).render() for k in kernels]
    return PRELUDE + "\n\n" + "\n\n".join(r.source for r in rendered), rendered
