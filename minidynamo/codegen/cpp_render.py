"""Render scheduled kernels as C++ (OpenMP + auto-vectorisable loops).

Every expression node becomes one typed local (`T tmpN = ...;`), which both deduplicates common
subexpressions and gives torch's per-op rounding and integer wrap-around. Expressions that do not
depend on an inner loop's variables are hoisted out of it. Transcendental functions are declared
`omp declare simd`, so gcc calls glibc's vector math library (libmvec) inside vectorised loops.
Which loops run in parallel, spill, stream or prefetch is decided in cpp_tuning.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

import torch

from .cpp_build import UNIT_BREAK
from .cpp_attention import Attention
from .cpp_conv import Conv, render_conv
from .cpp_conv_backward import ConvBackward, render_conv_backward
from .cpp_copy import Copy, Gather, render_copy, render_gather
from .cpp_gemm import Gemm, blas_declarations, blas_definitions, render_gemm
from .cpp_indexed import IndexedStep
from .cpp_multi_tensor import multi_tensor_loops, share_equal_kernels, shared_kernel_source
from .cpp_prelude import OWNED_MEMORY, PRELUDE
from .cpp_tuning import FLOAT_SUM_MAX, CppTuning, PARALLEL_FOR, PREFETCH_AHEAD_BYTES, double_accumulator, parallel_if, runs_in_parallel
from .errors import CannotCompile
from .ir import UNARY_MATH, Buffer, Const, Expr, ExternNode, Index, IndexValue, Load, Op, ReductionNode, numel
from .render import KernelRenderer, Scope, flat_inner, index_code, is_inner_var
from .scheduler import Kernel, KNode, Stage, Step
from .sizes import is_symbolic, size_code

CTYPES = {
    torch.float32: "float", torch.float64: "double", torch.int8: "int8_t", torch.uint8: "uint8_t",
    torch.int16: "int16_t", torch.int32: "int32_t", torch.int64: "int64_t", torch.bool: "bool",
}

_BINARY_INFIX = {
    "add": "+", "sub": "-", "mul": "*", "truediv": "/", "truncdiv": "/", "eq": "==", "ne": "!=",
    "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "and": "&", "or": "|", "xor": "!=",
    "bitand": "&", "bitor": "|", "bitxor": "^", "lshift": "<<", "rshift": ">>",
}
_HELPERS = {"maximum": "md_max", "minimum": "md_min", "floordiv": "md_floordiv",
            "remainder": "md_remainder", "fmod": "md_fmod", "pow": "mdm::pow",
            "atan2": "mdm::atan2"}
_UNARY = {
    "neg": "(-{0})", "not": "(!{0})", "bitnot": "(~{0})", "abs": "mdm::abs({0})",
    "sign": "md_sign({0})", "isnan": "({0} != {0})",
    "isinf": "(mdm::abs({0}) == std::numeric_limits<decltype({0})>::infinity())",
    "rsqrt": "({t}(1) / mdm::sqrt({0}))", "sigmoid": "({t}(1) / ({t}(1) + mdm::exp(-{0})))",
    "reciprocal": "({t}(1) / {0})", "frac": "({0} - mdm::trunc({0}))", "round": "mdm::nearbyint({0})",
}
_OPS = {
    **{n: f"mdm::{n}({{0}})" for n in UNARY_MATH},
    **{n: f"({{0}} {s} {{1}})" for n, s in _BINARY_INFIX.items()},
    **{n: f"{fn}({{0}}, {{1}})" for n, fn in _HELPERS.items()},
    **_UNARY,
    "cast": "static_cast<{t}>({0})", "where": "({0} ? {1} : {2})",
}
_FLOAT_INLINE = {"exp": "md_expf({0})", "tanh": "md_tanhf({0})"}


@dataclass
class CppScope(Scope):
    locals: Dict[str, str] = field(default_factory=dict)  # buffer -> the local holding its value


@dataclass
class CppKernel:
    name: str
    source: str
    args: List[str]  # buffer names, in parameter order (nthreads follows)
    can_fail: bool = False  # returns an int, nonzero for an index out of range (see cpp_copy)


class CppRenderer(KernelRenderer):
    """Levels: 0 outside the inner loops, 1 varies inside them."""

    OPS = _OPS

    def __init__(self, kernel: Kernel, buffers: Dict[str, Buffer], symbols: Sequence[str] = (),
                 loads_as: Optional[Dict[str, str]] = None):
        super().__init__(kernel, buffers)
        self.symbols = list(symbols)  # size symbols, int64 parameters before nthreads
        # input -> the buffer of its new values, whose memory is the input's: loads read it there
        # (cpp_pipeline._stored_in_place); one pointer, so `__restrict__` holds
        self.loads_as = loads_as or {}
        self.tuning = CppTuning(kernel, buffers)
        self.outer = CppScope([])
        self.loop: Optional[CppScope] = None
        self.parallel_rows = False  # a scalar-outer kernel: its inner loops run in parallel
        self.stream_lines: Dict[str, str] = {}  # streaming store line -> the plain store line
        self.flat = ""  # flat inner-loop position of the current stage
        self.blocked: Dict[str, List[str]] = {}  # reductions with per-lane accumulator arrays
        self.chunked: List[str] = []  # float sums of the stage accumulated chunk by chunk

    # -- spelling ------------------------------------------------------------------------------

    def nan_literal(self, dtype: torch.dtype) -> str:
        return f"std::numeric_limits<{CTYPES[dtype]}>::quiet_NaN()"

    def inf_literal(self, dtype: torch.dtype, negative: bool) -> str:
        return f"{'-' if negative else ''}std::numeric_limits<{CTYPES[dtype]}>::infinity()"

    def float_literal(self, value: float, dtype: torch.dtype) -> str:
        return value.hex() + ("f" if dtype == torch.float32 else "")

    def int_literal(self, value: int, dtype: torch.dtype) -> str:
        if value == -(2 ** 63):
            return "std::numeric_limits<int64_t>::min()"
        t = CTYPES[dtype]
        return f"{t}({value}LL)" if dtype == torch.int64 else f"{t}({value})"

    def type_name(self, dtype: torch.dtype) -> str:
        return CTYPES[dtype]

    def definition(self, name: str, dtype: torch.dtype, code: str) -> str:
        return f"{CTYPES[dtype]} {name} = {code};"

    # -- values --------------------------------------------------------------------------------

    def _local(self, ld: Load) -> Optional[Tuple[str, int]]:
        if self.load_kind(ld) != "local":
            self.reads.add(ld.buffer)
            return None
        if self.loop is not None and ld.buffer in self.loop.locals:
            return self.loop.locals[ld.buffer], 1
        return self.outer.locals[ld.buffer], 0

    def local_level(self, ld: Load) -> Optional[int]:
        local = self._local(ld)
        return None if local is None else local[1]

    def index_level(self, ix: Index) -> int:
        return int(any(is_inner_var(v) for v in ix.vars()))

    def direct_value(self, e: Expr) -> Optional[str]:
        if isinstance(e, Const):
            return self.literal(e.value, e.dtype)
        if isinstance(e, Load):
            local = self._local(e)
            if local is not None:
                return local[0]
        return None

    def scope_of(self, e: Expr) -> CppScope:
        return self.loop if (self.loop is not None and self.level(e) == 1) else self.outer

    def assign(self, scope: Scope, e: Expr) -> str:
        spill = self.tuning.spills.get(e) if self.loop is not None else None
        reuse = spill is not None and self.stage_index in spill[2]
        code = f"{spill[0]}[{self.flat}]" if reuse else self.code(e)
        name = self.new_var()
        scope.lines.append(self.definition(name, e.dtype, code))
        if spill is not None and self.stage_index == spill[1]:
            scope.lines.append(f"{spill[0]}[{self.flat}] = {name};")
        return name

    def load_code(self, ld: Load) -> str:
        return f"{ld.buffer}[{index_code(ld.index)}]"

    def index_value_code(self, e: IndexValue) -> str:
        return f"static_cast<{CTYPES[e.dtype]}>({index_code(e.index)})"

    def special_op(self, e: Op, args: List[str]) -> Optional[str]:
        if e.name == "truediv" and e.dtype.is_floating_point and self.loop is not None \
                and not isinstance(e.args[1], Const) \
                and self.level(e.args[1]) == 0 and self.level(e.args[0]) == 1:
            # Loop-invariant divisor: one division per row, a multiply per element (as eager's
            # softmax does); differs from division by at most an ulp.
            recip = self.value(Op("truediv", (Const(1.0, e.dtype), e.args[1]), e.dtype))
            return f"({args[0]} * {recip})"
        if e.dtype == torch.float32 and e.name in _FLOAT_INLINE:
            return _FLOAT_INLINE[e.name].format(args[0])
        return None

    # -- kernel --------------------------------------------------------------------------------

    def render(self) -> CppKernel:
        k = self.k
        has_loops = any(s.inner is not None for s in k.stages)
        parallel = runs_in_parallel(k)
        self.parallel_rows = parallel and not k.outer
        self.render_stages()
        body, helpers = self._loads_renamed(self.outer.lines), []
        if not k.outer and not self.symbols:
            body, helpers = multi_tensor_loops(
                body, k.name, {b: CTYPES[self.buffers[b].dtype] for b in self.reads | k.stored}, k.stored)
        n = len(k.outer)
        blocked = self._prefetched_loop(body, parallel) if n == 1 and not has_loops else None
        if blocked is not None:
            body = blocked
        elif n:
            loops = []
            pure = not has_loops
            par_dims = n - 1 if pure and n > 1 else n
            for d, size in enumerate(k.outer):
                pragma = ""
                # Never the combined "parallel for simd": gcc then keeps every temporary in
                # per-lane arrays in memory (10x slower); plain loops auto-vectorise.
                if d == 0 and parallel and par_dims:
                    collapse = f" collapse({par_dims})" if par_dims > 1 else ""
                    pragma = PARALLEL_FOR.format(collapse, parallel_if(k))
                if d == n - 1 and pure and not pragma:
                    pragma = "#pragma omp simd"
                loops.append((pragma, f"for (int64_t p{d} = 0; p{d} < {size_code(size)}; p{d}++) {{"))
            body = _nest(loops, body)
        args = sorted(self.reads | k.stored)
        params = []
        for a in args:
            qual = "" if a in k.stored else "const "
            params.append(f"{qual}{CTYPES[self.buffers[a].dtype]}* __restrict__ {a}")
        params += [f"int64_t {s}" for s in self.symbols] + ["int nthreads"]
        src = "".join(helpers) + f'static void {k.name}({", ".join(params)}) {{\n'
        src += "\n".join("  " + line for line in body) + "\n}\n"
        return CppKernel(k.name, src, args)

    def _loads_renamed(self, lines: List[str]) -> List[str]:
        if not self.loads_as:
            return lines
        self.reads -= set(self.loads_as)
        names = re.compile(r"\b(" + "|".join(map(re.escape, self.loads_as)) + r")\b")
        return [names.sub(lambda m: self.loads_as[m.group(1)], line) for line in lines]

    def _page_ahead(self, stage: Stage, lanes: int) -> List[str]:
        size = stage.inner[0]
        out = []
        for name, row, itemsize in self.tuning.page_ahead(stage, lanes):
            page, ahead = 4096 // itemsize, 8192 // itemsize
            out.append(f"if (rb % {page} == 0 && rb + {ahead} < {size}) "
                       f"__builtin_prefetch({name} + ({index_code(row)}) + rb + {ahead});")
        return out

    def _prefetched_loop(self, body: List[str], parallel: bool) -> Optional[List[str]]:
        """The flat pointwise loop in blocks of 16 prefetching its inputs ahead, where tuning
        says so; None otherwise."""
        size = self.k.outer[0]
        starts = self.tuning.prefetched_inputs()
        if not starts:
            return None
        lines = [PARALLEL_FOR.format("", "nthreads > 1")] if parallel else []
        lines.append(f"for (int64_t pb = 0; pb < {size}; pb += 16) {{")
        for name, const, itemsize in starts:
            ahead = PREFETCH_AHEAD_BYTES // itemsize
            for line in range(0, 16, 64 // itemsize):
                lines.append(f"  if (pb + {ahead + line} < {size}) "
                             f"__builtin_prefetch({name} + {const} + pb + {ahead + line});")
        lines += ["  #pragma omp simd", "  for (int64_t rj = 0; rj < 16; rj++) {",
                  "    int64_t p0 = pb + rj;"]
        return lines + ["    " + line for line in body] + ["  }", "}"]

    def pointwise_node(self, kn: KNode) -> None:
        self._pointwise(kn, self.outer)

    def _pointwise(self, kn: KNode, scope: CppScope) -> None:
        v = self.value(kn.body)
        scope.locals[kn.name] = v
        if kn.name in self.k.stored:
            line = f"{kn.name}[{index_code(kn.store)}] = {v};"
            if scope is self.loop and kn.name in self.tuning.stream \
                    and self.stage_index == len(self.k.stages) - 1:
                st = f"{kn.name}_st[rj] = {v};"
                self.stream_lines[st] = line
                line = st
            scope.lines.append(line)

    def inner_stage(self, stage: Stage) -> None:
        self.loop = CppScope([])
        self.flat = index_code(flat_inner(stage.inner))
        for e, (name, first, _) in self.tuning.spills.items():
            if first == self.stage_index:
                if name in self.tuning.spill_into:
                    self.outer.lines.append(f"{CTYPES[e.dtype]}* {name} = {self.tuning.spill_into[name]};")
                else:
                    self.outer.lines.append(
                        f"alignas(64) {CTYPES[e.dtype]} {name}[{numel(stage.inner)}];")
        reductions = [kn for kn in stage.nodes if kn.is_reduction]
        clauses, finals = [], []
        serial = False
        lanes = self.tuning.blocked_lanes(stage, reductions)
        self.chunked = [] if lanes else self.tuning.chunked_sums(stage, reductions)
        for kn in reductions:
            # With `lanes` accumulators each sums numel/lanes values; _reduction_init's float
            # threshold is stated for 16 of them.
            length = numel(stage.inner) * 16 // lanes if lanes else numel(stage.inner)
            c, f, is_serial = self._reduction_init(kn, length)
            clauses += c
            finals.append((kn, f))
            serial |= is_serial
        self.blocked = {}
        if lanes:
            self._lane_accumulators(stage, reductions, lanes)
        for kn in stage.nodes:
            if kn.is_reduction:
                self._reduction_update(kn, stage.inner)
            else:
                self._pointwise(kn, self.loop)
        if lanes:
            self._blocked_loop(stage, lanes)
            self._combine_lanes(reductions, lanes)
        elif self.stream_lines:
            self._emit_streaming(stage)
        else:
            self._plain_loop(stage, clauses, serial, bool(reductions))
        self.loop = None
        self._finish_reductions(finals)

    def _lane_accumulators(self, stage: Stage, reductions: List[KNode], lanes: int) -> None:
        """Several independent vector accumulators per reduction (lanes / vector width of
        them): one accumulator would make the loop latency-bound on the add/max chain."""
        for kn in reductions:
            acc = f"{kn.name}_acc"
            names = [acc] + ([f"{acc}_nan"] if kn.node.kind in ("max", "min")
                             and kn.body.dtype.is_floating_point else [])
            for a in names:
                self.outer.lines.append(f"decltype({a}) {a}_l[{lanes}];")
                self.outer.lines.append(f"for (int rj = 0; rj < {lanes}; rj++) {a}_l[rj] = {a};")
            self.blocked[kn.name] = names
        last = len(stage.inner) - 1
        self.loop.lines.append(f"int64_t r{last} = rb + rj;")

    def _blocked_loop(self, stage: Stage, lanes: int) -> None:
        loops = [("", f"for (int64_t r{d} = 0; r{d} < {size}; r{d}++) {{")
                 for d, size in enumerate(stage.inner[:-1])]
        last = size_code(stage.inner[-1])
        tail = is_symbolic(stage.inner[-1])  # a length the lanes may not divide: a tail loop
        full = f"rfull{self.stage_index}"  # where the tail starts
        if tail:
            self.outer.lines.append(f"const int64_t {full} = {last} - {last} % {lanes};")
        loops += [("", f"for (int64_t rb = 0; rb < {full if tail else last}; rb += {lanes}) {{")]
        lines = _nest(loops, [])
        close = lines[len(loops):]
        lines = lines[:len(loops)]
        pad = "  " * len(loops)
        tuning = self.tuning
        if self.stage_index == 0 and len(stage.inner) == 1 and tuning.prefetch \
                and self.k.stages[-1].inner == stage.inner:
            for b, off in sorted(tuning.prefetch.items()):
                for i in range(0, lanes, 16):
                    lines.append(f"{pad}__builtin_prefetch({b} + ({off}) + rb + {i}, 1);")
        if len(stage.inner) == 1 and not tuning.next_row:
            lines += [pad + ln for ln in self._page_ahead(stage, lanes)]
        if self.stage_index > 0 and len(stage.inner) == 1 and tuning.next_row \
                and self.k.stages[0].inner == stage.inner:
            lines.append(f"{pad}if (p0 + 1 < {size_code(self.k.outer[0])}) {{")
            for start, line, write in tuning.next_row:
                for i in range(0, lanes, line):
                    lines.append(f"{pad}  __builtin_prefetch({start} + rb + {i}, {write});")
            lines.append(f"{pad}}}")
        lines += _nest([("#pragma omp simd", f"for (int64_t rj = 0; rj < {lanes}; rj++) {{")],
                       self.loop.lines)
        lines = lines[:len(loops)] + [pad + ln if not ln.startswith(pad) else ln
                                      for ln in lines[len(loops):]] + close
        if tail:
            lines += ["{", f"  const int64_t rb = {full};"] + ["  " + ln for ln in _nest(
                [("#pragma omp simd", f"for (int64_t rj = 0; rj < {last} - {full}; rj++) {{")], self.loop.lines)] + ["}"]
        self.outer.lines.extend(lines)

    def _combine_lanes(self, reductions: List[KNode], lanes: int) -> None:
        """Tree combine of the lane accumulators (halving: vector ops, log-depth) instead of a
        serial chain."""
        for kn in reductions:
            kind = kn.node.kind
            acc = f"{kn.name}_acc"
            a, b = f"{acc}_l[rj]", f"{acc}_l[rj + w]"
            if kind == "sum":
                comb = [f"{a} += {b};"]
            else:
                cmp = ">" if kind == "max" else "<"
                comb = [f"{a} = {b} {cmp} {a} ? {b} : {a};"]
                if len(self.blocked[kn.name]) > 1:
                    comb.append(f"{acc}_nan_l[rj] |= {acc}_nan_l[rj + w];")
            w = lanes // 2
            while w:
                self.outer.lines.append(f"{{ const int w = {w}; for (int rj = 0; rj < w; rj++) {{ "
                                        + " ".join(comb) + " } }")
                w //= 2
            final = (f"{acc} += {acc}_l[0];" if kind == "sum" else
                     f"{acc} = {acc}_l[0]; " + (f"{acc}_nan = {acc}_nan_l[0];"
                                                if len(self.blocked[kn.name]) > 1 else ""))
            self.outer.lines.append(final)
        self.blocked = {}

    def _plain_loop(self, stage: Stage, clauses: List[str], serial: bool, reduces: bool) -> None:
        loops = []
        clause = "".join(f" reduction({c})" for c in clauses)
        for d, size in enumerate(stage.inner):
            pragma = ""
            # Large full reductions were split into row reductions by the lowering, so only
            # pointwise stages of scalar-outer kernels run their inner loop in parallel.
            if d == 0 and self.parallel_rows and not reduces:
                pragma = PARALLEL_FOR.format("", parallel_if(self.k))
            elif d == len(stage.inner) - 1 and not serial:
                pragma = f"#pragma omp simd{clause}"
            loops.append((pragma, f"for (int64_t r{d} = 0; r{d} < {size_code(size)}; r{d}++) {{"))
        if self.chunked:
            self.outer.lines.extend(self._chunked_loop(stage, loops[0][0]))
        else:
            self.outer.lines.extend(_nest(loops, self.loop.lines))

    def _chunked_loop(self, stage: Stage, pragma: str) -> List[str]:
        """The single inner loop in chunks of FLOAT_SUM_MAX, the chunked sums' float partials
        added to their double accumulators after each (see CppTuning.chunked_sums)."""
        size = size_code(stage.inner[0])
        lines = [f"for (int64_t rc = 0; rc < {size}; rc += {FLOAT_SUM_MAX}) {{",
                 f"  const int64_t re = rc + {FLOAT_SUM_MAX} < {size} ? rc + {FLOAT_SUM_MAX} : {size};"]
        lines += [f"  float {name}_acc_c = 0;" for name in self.chunked]
        lines += ["  " + line for line in _nest([(pragma, "for (int64_t r0 = rc; r0 < re; r0++) {")], self.loop.lines)]
        lines += [f"  {name}_acc += {name}_acc_c;" for name in self.chunked]
        return lines + ["}"]

    def _emit_streaming(self, stage: Stage) -> None:
        """Rows whose outputs are 64-byte aligned: 16 values at a time into a register-sized
        array, then one non-temporal store each; other rows: the plain loop."""
        names = sorted(self.tuning.stream)
        aligned = " && ".join(f"(reinterpret_cast<uintptr_t>({n} + ({self.tuning.stream[n]})) % 64 == 0)"
                              for n in names)
        out = [f"if ({aligned}) {{",
               f"  for (int64_t rb = 0; rb < {stage.inner[0]}; rb += 16) {{"]
        out += [f"    alignas(64) float {n}_st[16];" for n in names]
        out += ["    #pragma omp simd", "    for (int64_t rj = 0; rj < 16; rj++) {",
                "      int64_t r0 = rb + rj;"]
        out += ["      " + line for line in self.loop.lines]
        out += ["    }"]
        out += [f"    md_stream16({n} + ({self.tuning.stream[n]}) + rb, {n}_st);" for n in names]
        out += ["  }", "} else {"]
        plain = [self.stream_lines.get(line, line) for line in self.loop.lines]
        out += ["  " + line for line in _nest(
            [("#pragma omp simd", f"for (int64_t r0 = 0; r0 < {stage.inner[0]}; r0++) {{")],
            plain)]
        out += ["}"]
        self.outer.lines.extend(out)
        self.stream_lines = {}

    def _finish_reductions(self, finals) -> None:
        for kn, final in finals:
            self.outer.lines.extend(final)
            self.outer.locals[kn.name] = f"{kn.name}_v"
            if kn.name in self.k.stored:
                self.outer.lines.append(f"{kn.name}[{index_code(kn.store)}] = {kn.name}_v;")

    def _reduction_init(self, kn: KNode, length: int = 1 << 30):
        node: ReductionNode = kn.node  # type: ignore[assignment]
        t_out = CTYPES[node.dtype]
        src_dtype = kn.body.dtype
        t_src = CTYPES[src_dtype]
        acc = f"{kn.name}_acc"
        res = f"{kn.name}_v"
        kind = node.kind
        floating = src_dtype.is_floating_point
        lines = self.outer.lines
        if kn.name in self.chunked:
            lines.append(f"double {acc} = 0;")
            return [f"+:{acc}_c"], [f"{t_out} {res} = static_cast<{t_out}>({acc});"], False
        if kind in ("sum", "prod"):
            t_acc = "double" if double_accumulator(node.dtype, length) else t_out
            lines.append(f"{t_acc} {acc} = {0 if kind == 'sum' else 1};")
            return ([f"{'+' if kind == 'sum' else '*'}:{acc}"],
                    [f"{t_out} {res} = static_cast<{t_out}>({acc});"], False)
        if kind in ("any", "all"):
            # int, not bool: gcc vectorises int or/and reductions far better.
            lines.append(f"int {acc} = {0 if kind == 'any' else 1};")
            return [f"{'|' if kind == 'any' else '&'}:{acc}"], [f"bool {res} = {acc} != 0;"], False
        is_max = kind in ("max", "argmax")
        init = (f"-std::numeric_limits<{t_src}>::infinity()" if floating and is_max else
                f"std::numeric_limits<{t_src}>::infinity()" if floating else
                f"std::numeric_limits<{t_src}>::lowest()" if is_max else
                f"std::numeric_limits<{t_src}>::max()")
        lines.append(f"{t_src} {acc} = {init};")
        if kind in ("max", "min"):
            clauses = [f"{kind}:{acc}"]
            final = f"{t_out} {res} = {acc};"
            if floating:
                lines.append(f"int {acc}_nan = 0;")
                clauses.append(f"|:{acc}_nan")
                final = (f"{t_out} {res} = {acc}_nan ? "
                         f"std::numeric_limits<{t_out}>::quiet_NaN() : {acc};")
            return clauses, [final], False
        lines.append(f"int64_t {acc}_idx = 0;")
        return [], [f"int64_t {res} = {acc}_idx;"], True

    def _reduction_update(self, kn: KNode, inner: Tuple[int, ...]) -> None:
        node: ReductionNode = kn.node  # type: ignore[assignment]
        v = self.value(kn.body)
        acc = f"{kn.name}_acc"
        nan = f"{acc}_nan"
        if kn.name in self.blocked:
            nan = f"{acc}_nan_l[rj]"
            acc = f"{acc}_l[rj]"
        if kn.name in self.chunked:
            acc = f"{acc}_c"
        lines = self.loop.lines
        kind = node.kind
        floating = kn.body.dtype.is_floating_point
        if kind == "sum":
            lines.append(f"{acc} += {v};")
        elif kind == "prod":
            lines.append(f"{acc} *= {v};")
        elif kind == "any":
            lines.append(f"{acc} = {acc} | {v};")
        elif kind == "all":
            lines.append(f"{acc} = {acc} & {v};")
        elif kind in ("max", "min"):
            cmp = ">" if kind == "max" else "<"
            lines.append(f"{acc} = {v} {cmp} {acc} ? {v} : {acc};")
            if floating:
                lines.append(f"{nan} = {nan} | ({v} != {v});")
        else:
            cmp = ">" if kind == "argmax" else "<"
            flat = index_code(flat_inner(inner))
            cond = f"{v} {cmp} {acc}"
            if floating:
                cond += f" || ({v} != {v} && {acc} == {acc})"
            lines.append(f"if ({cond}) {{ {acc} = {v}; {acc}_idx = {flat}; }}")



def _nest(loops: List[Tuple[str, str]], body: List[str]) -> List[str]:
    out: List[str] = []
    depth = 0
    for pragma, header in loops:
        if pragma:
            out.append("  " * depth + pragma)
        out.append("  " * depth + header)
        depth += 1
    out.extend("  " * depth + line for line in body)
    for d in reversed(range(depth)):
        out.append("  " * d + "}")
    return out


# steps run by the generated code (the others are extern calls to torch)
GENERATED = (Kernel, Gemm, Conv, ConvBackward, IndexedStep, Copy, Gather, Attention)
# The steps that call BLAS routines (bound once the library is loaded).
BLAS_STEPS = (Gemm, Conv, ConvBackward)
_GROUP_LOCAL_BYTES = 16 << 10  # stack room a kernel group gives its intermediates


@dataclass
class KernelGroup:
    """A run of consecutive kernels called through one exported function. Intermediates that no
    other step reads and that are small live on its stack, so the wrapper neither allocates them
    nor makes a call per kernel."""

    name: str
    kernels: List[str]
    args: List[str]  # buffers the wrapper passes, in parameter order (scratch, size symbols, nthreads follow)
    stored: List[str]  # the args the group writes: the wrapper allocates them
    local: List[str]
    # new value -> the input it replaces: computed into memory of the group's own, copied into
    # the input once all its kernels ran (the input is an arg the group writes)
    writeback: Dict[str, str] = field(default_factory=dict)
    scratch: Dict[str, int] = field(default_factory=dict)  # intermediate -> byte offset in the scratch
    scratch_bytes: int = 0  # one block the wrapper allocates per call, shared by liveness
    can_fail: bool = False  # returns an int, nonzero when a kernel found an index out of range
    in_place: Set[str] = field(default_factory=set)  # of writeback: stored in the input's memory, no copy


def group_kernels(steps: Sequence[Union[Step, Gemm, Conv, IndexedStep, Copy, Gather]], rendered: Dict[str, CppKernel], buffers: Dict[str, Buffer],
                  keep: Set[str], writeback: Dict[str, str]) -> List[KernelGroup]:
    runs: List[List[Kernel]] = []
    after_kernel = False
    for step in steps:
        if isinstance(step, GENERATED):
            if after_kernel:
                runs[-1].append(step)
            else:
                runs.append([step])
        after_kernel = isinstance(step, GENERATED)
    readers: Dict[str, Set[int]] = {b: {-1} for b in keep}  # -1: an extern call or the caller
    for step in steps:
        if isinstance(step, ExternNode):
            for b in step.reads:
                readers.setdefault(b, set()).add(-1)
    for i, run in enumerate(runs):
        for k in run:
            for b in rendered[k.name].args:
                readers.setdefault(b, set()).add(i)
    groups = []
    for i, run in enumerate(runs):
        stored = set().union(*(k.stored for k in run))
        inside = [b for b in sorted(stored)  # read only by this group, with a size known now
                  if readers.get(b, set()) <= {i} and not is_symbolic(buffers[b].span_bytes())]
        local, room = [], _GROUP_LOCAL_BYTES
        for b in inside:
            nbytes = buffers[b].span_bytes()
            if nbytes <= room and b not in writeback:
                local.append(b)
                room -= nbytes
        own = {b: writeback[b] for b in sorted(stored & set(writeback)) if readers.get(b, set()) <= {i}}
        scratch, scratch_bytes = _plan_scratch(
            run, [b for b in inside if b not in local and b not in writeback], rendered, buffers)
        args = sorted(set().union(*(rendered[k.name].args for k in run)) - set(local) - set(own) - set(scratch)
                      | set(own.values()))
        groups.append(KernelGroup(f"group{i}", [k.name for k in run], args,
                                  [b for b in args if b in stored], local, own, scratch, scratch_bytes,
                                  any(rendered[k.name].can_fail for k in run)))
    return groups


def _plan_scratch(run: Sequence, names: List[str], rendered: Dict[str, CppKernel],
                  buffers: Dict[str, Buffer]) -> Tuple[Dict[str, int], int]:
    """Byte offsets in one scratch block for intermediates of a group too large for its stack:
    two share memory when no kernel of the group needs both (live from the first kernel naming
    one to the last), so the wrapper makes one allocation per call instead of one per buffer."""
    uses: Dict[str, List[int]] = {b: [] for b in names}
    for j, k in enumerate(run):
        for b in rendered[k.name].args:
            if b in uses:
                uses[b].append(j)
    placed: List[Tuple[int, int, int, int]] = []  # (start, end, first kernel, last kernel)
    offsets: Dict[str, int] = {}
    for b in sorted(names, key=lambda b: -buffers[b].span_bytes()):
        first, last = min(uses[b]), max(uses[b])
        size = -(-buffers[b].span_bytes() // 64) * 64
        at = 0
        for start, end, lo, hi in sorted(p for p in placed if not (p[3] < first or last < p[2])):
            if at + size <= start:
                break
            at = max(at, end)
        placed.append((at, at + size, first, last))
        offsets[b] = at
    return offsets, max((p[1] for p in placed), default=0)


def _group_source(group: KernelGroup, rendered: Dict[str, CppKernel], buffers: Dict[str, Buffer],
                  symbols: Sequence[str], shared: Dict[str, Tuple[str, List[str]]]) -> str:
    written = set(group.stored) | set(group.writeback.values())
    params = [f"{'' if b in written else 'const '}{CTYPES[buffers[b].dtype]}* __restrict__ {b}"
              for b in group.args] + (["char* md_scratch"] if group.scratch else []) + [
        f"int64_t {s}" for s in symbols] + ["int nthreads"]
    lines = [f'extern "C" {LIGHT}{"int" if group.can_fail else "void"} {group.name}({", ".join(params)}) {{']
    for b in group.local:
        lines.append(f"  alignas(64) {CTYPES[buffers[b].dtype]} "
                     f"{b}[{buffers[b].span_bytes() // buffers[b].dtype.itemsize}];")
    for b, x in group.writeback.items():
        ctype, n = CTYPES[buffers[b].dtype], buffers[b].span_bytes() // buffers[b].dtype.itemsize
        lines.append(f"  {ctype}* {b} = {x};" if b in group.in_place else
                     f"  md_owned {b}_own({n * buffers[b].dtype.itemsize}); {ctype}* {b} = static_cast<{ctype}*>({b}_own.p);")
    for b, offset in group.scratch.items():
        lines.append(f"  {CTYPES[buffers[b].dtype]}* {b} = ({CTYPES[buffers[b].dtype]}*)(md_scratch + {offset});")
    for name in group.kernels:
        callee, args = shared.get(name, (name, rendered[name].args))
        call = f"{callee}({', '.join(_call_args(args, symbols))})"
        lines.append(f"  if ({call}) return 1;" if rendered[name].can_fail else f"  {call};")
    for b, x in group.writeback.items():
        if b not in group.in_place:
            lines.append(f"  __builtin_memcpy({x}, {b}, {buffers[b].span_bytes()});")
    return "\n".join(lines + ["  return 0;"] * group.can_fail) + "\n}\n"


# gcc -O3 spends most of an optimizer library's build on its straight-line functions (a group's
# calls and copies, the per-parameter scalars before the multi-tensor calls): register allocation
# over hundreds of pointer arguments. They run no loop worth optimising: they build at -O0, which
# halves the GPT-2 AdamW library's build against -O1 (0.28 -> 0.14 s CPU) at the same step time.
LIGHT = '[[gnu::optimize("O0")]] '
_LOOP = re.compile(r"\b(for|while|do)\b")
_TABLE_CALL = re.compile(r"^\s*for \(int64_t t = 0; t < \d+; t\+\+\) \w+\([^;{]*\);$")


def straight_line_light(source: str, name: str) -> str:
    """`source` with the function `name` (defined last in it) built at -O1 when it runs no loop
    other than multi-tensor table calls."""
    start = source.rfind(f"static void {name}(")
    if start < 0 or any(_LOOP.search(line) and not _TABLE_CALL.match(line) for line in source[start:].splitlines()):
        return source
    return source[:start] + LIGHT + source[start:]


def _call_args(args: List[str], symbols: Sequence[str]) -> List[str]:
    """A kernel call's arguments: buffers, then the size symbols, a shared kernel's length and
    nthreads (the length is the last of `args` past the buffers, see share_equal_kernels)."""
    buffers = [a for a in args if not a.isdigit()]
    return buffers + list(symbols) + [a for a in args if a.isdigit()] + ["nthreads"]


def _group_part(group: KernelGroup, rendered: Dict[str, CppKernel], buffers: Dict[str, Buffer],
                symbols: Sequence[str]) -> str:
    """A group's kernels and its exported function; kernels equal up to their buffers and length
    are written once (share_equal_kernels)."""
    shared = share_equal_kernels([(k, rendered[k].source, rendered[k].args) for k in group.kernels])
    sources = []
    for k in group.kernels:
        callee, args = shared.get(k, (k, rendered[k].args))
        if callee == k:
            sources.append(shared_kernel_source(rendered[k].source, len(args) > len(rendered[k].args))
                           if k in shared else straight_line_light(rendered[k].source, k))
    return "\n".join(sources + [_group_source(group, rendered, buffers, symbols, shared)])


def _loads_as(step: Union[Step, Gemm, Conv, IndexedStep, Copy, Gather], writeback: Dict[str, str],
              in_place: Set[str]) -> Dict[str, str]:
    """Input -> the buffer of its new value, for the new values `step` stores in place."""
    if not isinstance(step, Kernel):
        return {}
    return {writeback[n]: n for n in sorted(in_place & step.stored)}


def _render_step(k: Union[Kernel, Gemm, Conv, IndexedStep, Copy, Gather], buffers: Dict[str, Buffer],
                 symbols: Sequence[str], loads_as: Dict[str, str]) -> CppKernel:
    if isinstance(k, Kernel):
        return CppRenderer(k, buffers, symbols, loads_as).render()
    if isinstance(k, Gemm):
        return CppKernel(k.name, *render_gemm(k, buffers, symbols))
    if isinstance(k, Conv):
        return CppKernel(k.name, *render_conv(k, buffers))
    if isinstance(k, ConvBackward):
        return CppKernel(k.name, *render_conv_backward(k, buffers))
    if isinstance(k, IndexedStep):
        return CppKernel(k.name, *k.render(buffers), can_fail=k.checked)
    if isinstance(k, Attention):
        return CppKernel(k.name, *k.render(buffers))
    if isinstance(k, Gather):
        return CppKernel(k.name, *render_gather(k, buffers, CTYPES, symbols), can_fail=True)
    return CppKernel(k.name, *render_copy(k, buffers, CTYPES[k.dtype], symbols))


def render_cpp(steps: Sequence[Union[Step, Gemm, Conv, IndexedStep, Copy, Gather]], buffers: Dict[str, Buffer], keep: Set[str],
               symbols: Sequence[str] = (), writeback: Optional[Dict[str, str]] = None,
               in_place: Set[str] = frozenset()) -> Tuple[str, List[CppKernel], List[KernelGroup]]:
    """The library source (prelude, kernels, one exported function per kernel group), the
    kernels and the groups; every kernel and group takes the size `symbols` as int64 arguments.
    `writeback`: new values (buffers only the kernels read) -> the inputs they are copied into at
    the end of their group (see KernelGroup); those of `in_place` are stored in the input itself
    (see cpp_pipeline._stored_in_place)."""
    writeback = writeback or {}
    rendered = [_render_step(k, buffers, symbols, _loads_as(k, writeback, in_place))
                for k in steps if isinstance(k, GENERATED)]
    by_name = {e.name: e for e in rendered}
    groups = group_kernels(steps, by_name, buffers, keep, writeback)
    for g in groups:
        g.in_place = in_place & set(g.writeback)
    if sum(len(g.in_place) for g in groups) != len(in_place):
        raise CannotCompile("a value stored in place is not copied by its kernel group")
    # each group with its kernels: the parts cpp_build may compile as separate translation units
    parts = [_group_part(g, by_name, buffers, symbols) for g in groups]
    head = PRELUDE + (OWNED_MEMORY if any(set(g.writeback) - g.in_place for g in groups) else "")
    if any(isinstance(k, BLAS_STEPS) for k in steps):  # BLAS pointers declared in every unit, defined in one
        head, parts = head + blas_declarations(), parts + [blas_definitions()]
    return head + UNIT_BREAK + UNIT_BREAK.join(parts), rendered, groups
