"""Emit C++ (OpenMP + auto-vectorisable loops) for scheduled kernels.

Every expression node becomes one typed local (`T tmpN = ...;`), which both deduplicates common
subexpressions and gives torch's per-op rounding and integer wrap-around. Expressions that do not
depend on an inner loop's variables are hoisted out of it. Transcendental functions are declared
`omp declare simd`, so gcc calls glibc's vector math library (libmvec) inside vectorised loops.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

import torch

from .ir import Buffer, Const, Expr, ExternNode, Index, IndexValue, Load, Op, ReductionNode, UNARY_MATH
from .scheduler import Kernel, KNode, Stage, Step, classify

CTYPES = {
    torch.float32: "float", torch.float64: "double", torch.int8: "int8_t", torch.uint8: "uint8_t",
    torch.int16: "int16_t", torch.int32: "int32_t", torch.int64: "int64_t", torch.bool: "bool",
}

_VECTOR_MATH = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan",
                "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf",
                "erfc")


def _simd_decls() -> str:
    lines = ['extern "C" {']
    for fn in _VECTOR_MATH:
        for suffix, t in (("f", "float"), ("", "double")):
            lines.append(f"#pragma omp declare simd notinbranch\n{t} {fn}{suffix}({t}) noexcept;")
    for suffix, t in (("f", "float"), ("", "double")):
        for fn in ("pow", "atan2"):
            lines.append(f"#pragma omp declare simd notinbranch\n{t} {fn}{suffix}({t}, {t}) noexcept;")
    lines.append("}")
    return "\n".join(lines)


_MDM_UNARY = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin", "cos", "tan",
              "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf",
              "erfc", "lgamma", "floor", "ceil", "trunc", "nearbyint")


def _math_decls() -> str:
    """The few <cmath> functions the kernels use, as gcc builtins in namespace mdm: including
    <cmath> costs ~0.13 s of every g++ run, more than compiling a typical graph's kernels."""
    lines = ["namespace mdm {"]
    for fn in _MDM_UNARY:
        lines.append(f"static inline float {fn}(float x) {{ return __builtin_{fn}f(x); }}")
        lines.append(f"static inline double {fn}(double x) {{ return __builtin_{fn}(x); }}")
        lines.append(f"template <typename T> static inline double {fn}(T x) "
                     f"{{ return __builtin_{fn}(double(x)); }}")
    for fn in ("pow", "atan2", "fmod", "copysign"):
        lines.append(f"static inline float {fn}(float a, float b) {{ return __builtin_{fn}f(a, b); }}")
        lines.append(f"static inline double {fn}(double a, double b) {{ return __builtin_{fn}(a, b); }}")
        lines.append(f"template <typename A, typename B> static inline double {fn}(A a, B b) "
                     f"{{ return __builtin_{fn}(double(a), double(b)); }}")
    lines.append("static inline float abs(float x) { return __builtin_fabsf(x); }")
    lines.append("static inline double abs(double x) { return __builtin_fabs(x); }")
    lines.append("static inline int abs(int x) { return x < 0 ? -x : x; }")
    lines.append("static inline long abs(long x) { return x < 0 ? -x : x; }")
    lines.append("static inline long long abs(long long x) { return x < 0 ? -x : x; }")
    lines.append("}")
    return "\n".join(lines)


PRELUDE = r"""#include <cstdint>
#include <limits>
#include <type_traits>
""" + _simd_decls() + "\n" + _math_decls() + r"""
template <typename T> static inline T md_max(T a, T b) { return (a > b || a != a) ? a : b; }
template <typename T> static inline T md_min(T a, T b) { return (a < b || a != a) ? a : b; }
template <typename T> static inline T md_floordiv(T a, T b) {
  if constexpr (std::is_floating_point<T>::value) {
    if (b == 0) return a / b;
    T mod = mdm::fmod(a, b);
    T div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= T(1);
    if (div == 0) return mdm::copysign(T(0), a / b);
    T fl = mdm::floor(div);
    return div - fl > T(0.5) ? fl + T(1) : fl;
  } else {
    T q = a / b;
    return ((a < 0) != (b < 0) && q * b != a) ? T(q - 1) : q;
  }
}
template <typename T> static inline T md_remainder(T a, T b) {
  if constexpr (std::is_floating_point<T>::value) {
    T m = mdm::fmod(a, b);
    return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
  } else {
    T m = a % b;
    return (m != 0 && ((b < 0) != (m < 0))) ? T(m + b) : m;
  }
}
template <typename T> static inline T md_fmod(T a, T b) {
  if constexpr (std::is_floating_point<T>::value) return mdm::fmod(a, b); else return a % b;
}
template <typename T> static inline T md_sign(T a) { return T((T(0) < a) - (a < T(0))); }
// Non-temporal store of 16 floats (a 64-byte aligned line): large outputs written without first
// reading each line into the cache.
typedef float md_v16f __attribute__((vector_size(64)));
static inline void md_stream16(float* p, const float* v) {
#ifdef __AVX512F__
  md_v16f x; __builtin_memcpy(&x, v, 64); __builtin_ia32_movntps512(p, x);
#else
  for (int i = 0; i < 16; i++) p[i] = v[i];
#endif
}
static inline void md_sfence() {
#ifdef __AVX512F__
  __builtin_ia32_sfence();
#endif
}
// float32 exp and tanh written out so gcc inlines and vectorises them at full vector width
// (glibc's vector tanhf falls back to scalar calls).
static inline float md_pow2i(int32_t k) { return __builtin_bit_cast(float, (k + 127) << 23); }
static inline float md_exp_reduced(float x, int32_t& k) {
  // Cephes-style: exp(x) = 2^k * p, p = exp(r), |r| <= ln2/2, degree-6 polynomial; about 1 ulp.
  float n = mdm::nearbyint(x * 1.44269504088896341f);
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  k = static_cast<int32_t>(n);
  return p * r * r + r + 1.0f;
}
static inline float md_expf(float x) {
  float xc = x > 88.8f ? 88.8f : x;
  xc = xc < -104.0f ? -104.0f : xc;
  int32_t k;
  float p = md_exp_reduced(xc, k);
  int32_t k1 = k >> 1;
  // Two scalings keep 2^k representable for the full range (denormal results, k = 128).
  return p * md_pow2i(k1) * md_pow2i(k - k1);
}
static inline float md_tanhf(float x) {
  float ax = mdm::abs(x);
  float z = x * x;
  float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z
                 + 1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
  // exp(2|x|) with |x| <= 44 needs no clamps and one scaling; a NaN flows through to the result.
  int32_t k;
  float e = md_exp_reduced(2.0f * (ax > 44.f ? 44.f : ax), k) * md_pow2i(k);
  return mdm::copysign(ax < 0.625f ? small : 1.0f - 2.0f / (e + 1.0f), x);
}
"""

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

_FLOAT_INLINE = {"exp": "md_expf({0})", "tanh": "md_tanhf({0})",
                 "sigmoid": "(1.0f / (1.0f + md_expf(-{0})))"}

_PARALLEL_MIN_WORK = 32768
_EXPENSIVE = frozenset(UNARY_MATH) - {"floor", "ceil", "trunc", "round", "frac", "reciprocal"} | {"pow", "atan2"}
_FLOAT_SUM_MAX = 4096
_SPILL_MAX = 16384  # elements of a row array (64 KiB of float32), kept on the thread's stack
_STREAM_MIN_BYTES = 32 << 20  # outputs this large go to memory: non-temporal stores
_PREFETCH_MIN_BYTES = 4 << 20  # flat pointwise inputs this large stream from memory
_PREFETCH_AHEAD_BYTES = 4096
_PAGE_AHEAD_MIN_ROW_BYTES = 32 << 10


def literal(value, dtype: torch.dtype) -> str:
    t = CTYPES[dtype]
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        if math.isnan(value):
            return f"std::numeric_limits<{t}>::quiet_NaN()"
        if math.isinf(value):
            return f"{'-' if value < 0 else ''}std::numeric_limits<{t}>::infinity()"
        text = float(value).hex()
        return text + ("f" if dtype == torch.float32 else "")
    if value == -(2 ** 63):
        return "std::numeric_limits<int64_t>::min()"
    return f"{t}({value}LL)" if dtype == torch.int64 else f"{t}({value})"


def index_code(ix: Index) -> str:
    parts = [n if c == 1 else f"{c} * {n}" for n, c in ix.terms]
    if ix.const or not parts:
        parts.append(str(ix.const))
    return " + ".join(parts)


@dataclass
class Scope:
    lines: List[str]
    level: int
    cache: Dict[Expr, str] = field(default_factory=dict)
    locals: Dict[str, str] = field(default_factory=dict)


@dataclass
class EmittedKernel:
    name: str
    source: str
    args: List[str]  # buffer names, in parameter order (nthreads follows)


class KernelEmitter:
    def __init__(self, kernel: Kernel, buffers: Dict[str, Buffer]):
        self.k = kernel
        self.buffers = buffers
        self.counter = 0
        self.reads: set = set()
        self.stage_index = 0
        self.outer: Scope = Scope([], 0)
        self.loop: Optional[Scope] = None
        self._levels: Dict[Expr, int] = {}  # per stage: 1 if the value varies in the inner loop
        self.stream: Dict[str, str] = {}
        self.prefetch: Dict[str, str] = {}
        self.stream_lines: Dict[str, str] = {}  # streaming store line -> the plain store line
        # An output too large for the cache is streamed; a smaller one may hold a spilled row
        # (see _spill_target), which the kernel then re-reads from the cache.
        self.stream = self._plan_stream(_STREAM_MIN_BYTES)
        self.spills = self._plan_spills()
        rows = {b: off for b, off in self._plan_stream().items()
                if not any(t.startswith(b + " ") for t in self.spill_into.values())}
        # Output rows the last (store-only) pass writes: prefetched for writing during the first,
        # load-bound, pass so the stores do not stall on cache misses with nothing to overlap.
        self.prefetch = {b: off for b, off in rows.items() if b not in self.stream}
        self.next_row = self._next_row_loads()
        self.flat = ""  # flat inner-loop position of the current stage
        self.blocked: Dict[str, List[str]] = {}  # reductions with per-lane accumulator arrays

    def new_var(self, prefix: str = "tmp") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def _plan_spills(self) -> Dict[Expr, Tuple[str, int, set]]:
        """Expensive values needed by several inner loops of one row (softmax's exp) are computed
        once into a thread-local row array instead of being recomputed."""
        stages_of: Dict[Expr, List[int]] = {}
        for i, st in enumerate(self.k.stages):
            if st.inner is None or _numel(st.inner) > _SPILL_MAX:
                continue
            found = {e for kn in st.nodes for e in kn.body.walk()
                     if isinstance(e, Op) and e.name in _EXPENSIVE and _varies_inner(e)}
            for e in found:
                stages_of.setdefault(e, []).append(i)
        spills = {}
        self.spill_into: Dict[str, str] = {}
        self.spill_rows: List[Tuple[str, Index]] = []  # (buffer, row offset) of each spill target
        for e, stages in stages_of.items():
            first = stages[0]
            later = {s for s in stages[1:] if self.k.stages[s].inner == self.k.stages[first].inner}
            if later:
                name = f"row{len(spills)}"
                spills[e] = (name, first, later)
                target = self._spill_target(e, later)
                if target is not None:
                    buf, outer = target
                    self.spill_into[name] = f"{buf} + ({index_code(outer)})"
                    self.spill_rows.append((buf, outer))
        return spills

    def _plan_stream(self, min_bytes: int = 0) -> Dict[str, str]:
        """Outputs of the last (pointwise, row-contiguous) stage that are large enough to miss the
        cache anyway: written with non-temporal stores. Maps buffer -> row offset code."""
        if not self.k.stages or not self.k.outer:
            return {}
        stage = self.k.stages[-1]
        if stage.inner is None or len(stage.inner) != 1 or stage.inner[0] % 16 \
                or any(kn.is_reduction for kn in stage.nodes):
            return {}
        loaded = {n.buffer for st in self.k.stages for kn in st.nodes for n in kn.body.walk()
                  if isinstance(n, Load)}
        out = {}
        for kn in stage.nodes:
            buf = self.buffers.get(kn.name)
            if kn.name not in self.k.stored or kn.name in loaded or buf is None \
                    or buf.dtype != torch.float32 or _numel(buf.size) * 4 < min_bytes:
                continue
            if {n: c for n, c in kn.store.terms if n.startswith("r")} != {"r0": 1}:
                continue
            outer = Index(tuple((n, c) for n, c in kn.store.terms if not n.startswith("r")),
                          kn.store.const)
            out[kn.name] = index_code(outer)
        return out

    def _spill_target(self, e: Expr, later: set) -> Optional[Tuple[str, Index]]:
        """Where the spilled row can live instead of a stack array: the kernel's output row that
        the (single) later stage stores element by element at the same positions (softmax writes
        exp(x - max) there, then scales it in place). Its stores then overlap the exp pass's
        compute instead of stalling a store-only pass; returns (buffer, row offset). Only the
        stage's last node reading the row qualifies: it stores each element after every read of
        it, where another output of the stage would overwrite elements still to be read."""
        if len(later) != 1:
            return None
        stage = self.k.stages[next(iter(later))]
        flat = dict(_flat_inner(stage.inner).terms)
        used = set(self.spill_into.values())
        loaded = {n.buffer for st in self.k.stages for kn in st.nodes for n in kn.body.walk()
                  if isinstance(n, Load)}
        readers = [kn for kn in stage.nodes if any(x == e for x in kn.body.walk())]
        for kn in readers[-1:]:
            if kn.is_reduction or kn.name not in self.k.stored or kn.name in loaded \
                    or self.buffers[kn.name].dtype != e.dtype:
                continue
            inner = {n: c for n, c in kn.store.terms if n.startswith("r")}
            if inner != flat or kn.name in self.stream:
                continue
            outer = Index(tuple((n, c) for n, c in kn.store.terms if not n.startswith("r")),
                          kn.store.const)
            if f"{kn.name} + ({index_code(outer)})" not in used:
                return kn.name, outer
        return None

    def _next_row_loads(self) -> List[Tuple[str, int, int]]:
        """What the next outer iteration touches first, row by row: the first pass's contiguous
        reads and the spilled rows it writes, as (`buffer + offset`, elements per cache line,
        1 if written). Later passes work on the cached row and are compute-bound; prefetching
        the next row there overlaps its memory traffic with that compute."""
        if len(self.k.outer) != 1 or len(self.k.stages) < 2 or self.k.stages[0].inner is None \
                or len(self.k.stages[0].inner) != 1:
            return []
        rows = [(buf, row, 0) for buf, row in self._contiguous_loads(self.k.stages[0].nodes, "r0")]
        rows += [(buf, row, 1) for buf, row in self.spill_rows]
        starts = set()
        for buf, row, write in rows:
            step = row.coeffs()
            if set(step) == {"p0"}:
                starts.add((f"{buf} + ({index_code(row)} + {step['p0']})",
                            64 // self.buffers[buf].dtype.itemsize, write))
        return sorted(starts)

    def _contiguous_loads(self, nodes: List[KNode], var: str) -> List[Tuple[str, Index]]:
        """(buffer, index without `var`) of each load in `nodes` that steps one element per
        `var`: the rows a prefetch can run ahead along."""
        found = set()
        for kn in nodes:
            for e in kn.body.walk():
                if isinstance(e, Load) and e.buffer in self.buffers \
                        and e.index.coeffs().get(var) == 1:
                    found.add((e.buffer, Index(tuple(t for t in e.index.terms if t[0] != var),
                                               e.index.const)))
        return sorted(found, key=lambda f: (f[0], index_code(f[1])))

    def _page_ahead(self, stage: Stage, lanes: int) -> List[str]:
        """For a blocked reduction over long rows (a split full sum): once per page, touch the
        page after next of each contiguous input, so its address translation is ready when the
        loop gets there instead of stalling it (pages are 4 KiB; the hardware prefetcher stops
        at page boundaries)."""
        size = stage.inner[0]
        out = []
        for name, row in self._contiguous_loads(stage.nodes, "r0"):
            itemsize = self.buffers[name].dtype.itemsize
            page, ahead = 4096 // itemsize, 8192 // itemsize
            if size * itemsize >= _PAGE_AHEAD_MIN_ROW_BYTES and page % lanes == 0:
                out.append(f"if (rb % {page} == 0 && rb + {ahead} < {size}) "
                           f"__builtin_prefetch({name} + ({index_code(row)}) + rb + {ahead});")
        return out

    def _prefetched_loop(self, body: List[str], parallel: bool) -> Optional[List[str]]:
        """A flat pointwise loop over large inputs in blocks of 16, each prefetching its
        contiguous inputs a page ahead: left to the hardware prefetcher, a compute-heavy loop
        (GELU's tanh) stalls on memory it could have been loading meanwhile. None when the
        loop does not qualify."""
        size = self.k.outer[0]
        if size % 16:
            return None
        starts = []
        for name, rest in self._contiguous_loads(self.k.stages[0].nodes, "p0"):
            buf = self.buffers[name]
            if not rest.terms and _numel(buf.size) * buf.dtype.itemsize >= _PREFETCH_MIN_BYTES:
                starts.append((name, rest.const, buf.dtype.itemsize))
        if not starts:
            return None
        lines = ["#pragma omp parallel for num_threads(nthreads) if(nthreads > 1) schedule(static)"
                 ] if parallel else []
        lines.append(f"for (int64_t pb = 0; pb < {size}; pb += 16) {{")
        for name, const, itemsize in starts:
            ahead = _PREFETCH_AHEAD_BYTES // itemsize
            for line in range(0, 16, 64 // itemsize):
                lines.append(f"  if (pb + {ahead + line} < {size}) "
                             f"__builtin_prefetch({name} + {const} + pb + {ahead + line});")
        lines += ["  #pragma omp simd", "  for (int64_t rj = 0; rj < 16; rj++) {",
                  "    int64_t p0 = pb + rj;"]
        return lines + ["    " + line for line in body] + ["  }", "}"]

    # -- expressions -------------------------------------------------------------------------

    def _local(self, ld: Load) -> Optional[Tuple[str, int]]:
        if classify(self.k, self.stage_index, ld) != "local":
            self.reads.add(ld.buffer)
            return None
        if self.loop is not None and ld.buffer in self.loop.locals:
            return self.loop.locals[ld.buffer], 1
        return self.outer.locals[ld.buffer], 0

    def level(self, e: Expr) -> int:
        hit = self._levels.get(e)
        if hit is None:
            hit = self._levels[e] = self._level(e)
        return hit

    def _level(self, e: Expr) -> int:
        if isinstance(e, Load):
            local = self._local(e)
            if local is not None:
                return local[1]
            return int(any(v.startswith("r") for v in e.index.vars()))
        if isinstance(e, IndexValue):
            return int(any(v.startswith("r") for v in e.index.vars()))
        return max((self.level(c) for c in e.children()), default=0)

    def value(self, e: Expr) -> str:
        if isinstance(e, Const):
            return literal(e.value, e.dtype)
        if isinstance(e, Load):
            local = self._local(e)
            if local is not None:
                return local[0]
        scope = self.loop if (self.loop is not None and self.level(e) == 1) else self.outer
        hit = scope.cache.get(e)
        if hit is not None:
            return hit
        spill = self.spills.get(e) if self.loop is not None else None
        reuse = spill is not None and self.stage_index in spill[2]
        code = f"{spill[0]}[{self.flat}]" if reuse else self._code(e)
        name = self.new_var()
        scope.lines.append(f"{CTYPES[e.dtype]} {name} = {code};")
        if spill is not None and self.stage_index == spill[1]:
            scope.lines.append(f"{spill[0]}[{self.flat}] = {name};")
        scope.cache[e] = name
        return name

    def _code(self, e: Expr) -> str:
        t = CTYPES[e.dtype]
        if isinstance(e, Load):
            return f"{e.buffer}[{index_code(e.index)}]"
        if isinstance(e, IndexValue):
            return f"static_cast<{t}>({index_code(e.index)})"
        assert isinstance(e, Op)
        args = [self.value(a) for a in e.args]
        n = e.name
        if n == "cast":
            return f"static_cast<{t}>({args[0]})"
        if n == "where":
            return f"({args[0]} ? {args[1]} : {args[2]})"
        if n == "truediv" and e.dtype.is_floating_point and self.loop is not None \
                and not isinstance(e.args[1], Const) \
                and self.level(e.args[1]) == 0 and self.level(e.args[0]) == 1:
            # Loop-invariant divisor: one division per row, a multiply per element (as eager's
            # softmax does); differs from division by at most an ulp.
            recip = self.value(Op("truediv", (Const(1.0, e.dtype), e.args[1]), e.dtype))
            return f"({args[0]} * {recip})"
        if n in _BINARY_INFIX:
            return f"({args[0]} {_BINARY_INFIX[n]} {args[1]})"
        if n in _HELPERS:
            return f"{_HELPERS[n]}({args[0]}, {args[1]})"
        if n in _UNARY:
            return _UNARY[n].format(args[0], t=t)
        assert n in UNARY_MATH, n
        if e.dtype == torch.float32 and n in _FLOAT_INLINE:
            return _FLOAT_INLINE[n].format(args[0])
        return f"mdm::{n}({args[0]})"

    # -- kernel ------------------------------------------------------------------------------

    def emit(self) -> EmittedKernel:
        k = self.k
        has_loops = any(s.inner is not None for s in k.stages)
        work = _numel(k.outer) * max([_numel(s.inner) for s in k.stages if s.inner] + [1])
        parallel = work >= _PARALLEL_MIN_WORK
        for i, stage in enumerate(k.stages):
            self.stage_index = i
            self._levels = {}
            if stage.inner is None:
                for kn in stage.nodes:
                    self._pointwise(kn, self.outer)
            else:
                self._loop_stage(stage, parallel and not k.outer)
        body = self.outer.lines
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
                    pragma = (f"#pragma omp parallel for{collapse} num_threads(nthreads) "
                              "if(nthreads > 1) schedule(static)")
                if d == n - 1 and pure and not pragma:
                    pragma = "#pragma omp simd"
                loops.append((pragma, f"for (int64_t p{d} = 0; p{d} < {size}; p{d}++) {{"))
            body = _nest(loops, body)
        args = sorted(self.reads | k.stored)
        params = []
        for a in args:
            qual = "" if a in k.stored else "const "
            params.append(f"{qual}{CTYPES[self.buffers[a].dtype]}* __restrict__ {a}")
        params.append("int nthreads")
        src = f'static void {k.name}({", ".join(params)}) {{\n'
        src += "\n".join("  " + line for line in body) + "\n}\n"
        return EmittedKernel(k.name, src, args)

    def _pointwise(self, kn: KNode, scope: Scope) -> None:
        v = self.value(kn.body)
        scope.locals[kn.name] = v
        if kn.name in self.k.stored:
            line = f"{kn.name}[{index_code(kn.store)}] = {v};"
            if scope is self.loop and kn.name in self.stream \
                    and self.stage_index == len(self.k.stages) - 1:
                st = f"{kn.name}_st[rj] = {v};"
                self.stream_lines[st] = line
                line = st
            scope.lines.append(line)

    def _loop_stage(self, stage: Stage, parallel: bool) -> None:
        self.loop = Scope([], 1)
        self.flat = index_code(_flat_inner(stage.inner))
        for e, (name, first, _) in self.spills.items():
            if first == self.stage_index:
                if name in self.spill_into:
                    self.outer.lines.append(f"{CTYPES[e.dtype]}* {name} = {self.spill_into[name]};")
                else:
                    self.outer.lines.append(
                        f"alignas(64) {CTYPES[e.dtype]} {name}[{_numel(stage.inner)}];")
        reductions = [kn for kn in stage.nodes if kn.is_reduction]
        clauses, finals = [], []
        serial = False
        lanes = self._blocked_lanes(stage, reductions)
        for kn in reductions:
            # With `lanes` accumulators each sums numel/lanes values; _reduction_init's float
            # threshold is stated for 16 of them.
            length = _numel(stage.inner) * 16 // lanes if lanes else _numel(stage.inner)
            c, f, is_serial = self._reduction_init(kn, length)
            clauses += c
            finals.append((kn, f))
            serial |= is_serial
        self.blocked = {}
        if lanes:
            # Several independent vector accumulators per reduction (lanes / vector width of
            # them): one accumulator would make the loop latency-bound on the add/max chain.
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
        for kn in stage.nodes:
            if kn.is_reduction:
                self._reduction_update(kn, stage.inner)
            else:
                self._pointwise(kn, self.loop)
        if lanes:
            loops = [("", f"for (int64_t r{d} = 0; r{d} < {size}; r{d}++) {{")
                     for d, size in enumerate(stage.inner[:-1])]
            loops += [("", f"for (int64_t rb = 0; rb < {stage.inner[-1]}; rb += {lanes}) {{")]
            lines = _nest(loops, [])
            close = lines[len(loops):]
            lines = lines[:len(loops)]
            pad = "  " * len(loops)
            if self.stage_index == 0 and len(stage.inner) == 1 and self.prefetch \
                    and self.k.stages[-1].inner == stage.inner:
                for b, off in sorted(self.prefetch.items()):
                    for i in range(0, lanes, 16):
                        lines.append(f"{pad}__builtin_prefetch({b} + ({off}) + rb + {i}, 1);")
            if len(stage.inner) == 1 and not self.next_row:
                lines += [pad + ln for ln in self._page_ahead(stage, lanes)]
            if self.stage_index > 0 and len(stage.inner) == 1 and self.next_row \
                    and self.k.stages[0].inner == stage.inner:
                lines.append(f"{pad}if (p0 + 1 < {self.k.outer[0]}) {{")
                for start, line, write in self.next_row:
                    for i in range(0, lanes, line):
                        lines.append(f"{pad}  __builtin_prefetch({start} + rb + {i}, {write});")
                lines.append(f"{pad}}}")
            lines += _nest([("#pragma omp simd", f"for (int64_t rj = 0; rj < {lanes}; rj++) {{")],
                           self.loop.lines)
            lines = lines[:len(loops)] + [pad + ln if not ln.startswith(pad) else ln
                                          for ln in lines[len(loops):]] + close
            self.outer.lines.extend(lines)
            for kn in reductions:
                kind = kn.node.kind
                acc = f"{kn.name}_acc"
                # Tree combine (halving: vector ops, log-depth) instead of a serial chain.
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
            self.loop = None
            self._finish_reductions(finals)
            return
        if self.stream_lines:
            self._emit_streaming(stage)
            return
        loops = []
        clause = "".join(f" reduction({c})" for c in clauses)
        for d, size in enumerate(stage.inner):
            pragma = ""
            # Large full reductions were split into row reductions by the lowering, so only
            # pointwise stages of scalar-outer kernels run their inner loop in parallel.
            if d == 0 and parallel and not reductions:
                pragma = "#pragma omp parallel for num_threads(nthreads) if(nthreads > 1) schedule(static)"
            elif d == len(stage.inner) - 1 and not serial:
                pragma = f"#pragma omp simd{clause}"
            loops.append((pragma, f"for (int64_t r{d} = 0; r{d} < {size}; r{d}++) {{"))
        self.outer.lines.extend(_nest(loops, self.loop.lines))
        self.loop = None
        self._finish_reductions(finals)

    def _emit_streaming(self, stage: Stage) -> None:
        """Rows whose outputs are 64-byte aligned: 16 values at a time into a register-sized
        array, then one non-temporal store each; other rows: the plain loop."""
        names = sorted(self.stream)
        aligned = " && ".join(f"(reinterpret_cast<uintptr_t>({n} + ({self.stream[n]})) % 64 == 0)"
                              for n in names)
        out = [f"if ({aligned}) {{",
               f"  for (int64_t rb = 0; rb < {stage.inner[0]}; rb += 16) {{"]
        out += [f"    alignas(64) float {n}_st[16];" for n in names]
        out += ["    #pragma omp simd", "    for (int64_t rj = 0; rj < 16; rj++) {",
                "      int64_t r0 = rb + rj;"]
        out += ["      " + line for line in self.loop.lines]
        out += ["    }"]
        out += [f"    md_stream16({n} + ({self.stream[n]}) + rb, {n}_st);" for n in names]
        out += ["  }", "} else {"]
        plain = [self.stream_lines.get(line, line) for line in self.loop.lines]
        out += ["  " + line for line in _nest(
            [("#pragma omp simd", f"for (int64_t r0 = 0; r0 < {stage.inner[0]}; r0++) {{")],
            plain)]
        out += ["}"]
        self.outer.lines.extend(out)
        self.stream_lines = {}
        self.loop = None

    def _blocked_lanes(self, stage: Stage, reductions: List[KNode]) -> int:
        """Accumulators per reduction (4 vectors' worth) when the stage's reductions are all
        sum/max/min over a last inner dim they divide; 0 for the plain `omp simd reduction`."""
        if not reductions or stage.inner[-1] < 256:
            return 0
        widths = set()
        for kn in reductions:
            t = kn.node.dtype if kn.node.kind == "sum" else kn.body.dtype
            if kn.node.kind not in ("sum", "max", "min") or \
                    t not in (torch.float32, torch.float64, torch.int32, torch.int64):
                return 0
            widths.add(t.itemsize)
            if kn.node.kind == "sum" and t == torch.float32 \
                    and _numel(stage.inner) * 16 // 64 > _FLOAT_SUM_MAX:
                widths.add(8)  # double accumulator
        lanes = 256 // max(widths)
        return lanes if stage.inner[-1] % lanes == 0 else 0

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
        if kind in ("sum", "prod"):
            # float32 sums accumulate in double, except short rows (softmax, layernorm): there a
            # float vector accumulator sums at most length/16 values per lane (eager's own
            # vectorised sum is float too), and a single double chain would be latency-bound,
            # at half the vector width, twice as slow as memory.
            t_acc = ("double" if node.dtype == torch.float32 and length > _FLOAT_SUM_MAX
                     else t_out)
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
            flat = index_code(_flat_inner(inner))
            cond = f"{v} {cmp} {acc}"
            if floating:
                cond += f" || ({v} != {v} && {acc} == {acc})"
            lines.append(f"if ({cond}) {{ {acc} = {v}; {acc}_idx = {flat}; }}")


def _varies_inner(e: Expr) -> bool:
    return any(isinstance(n, (Load, IndexValue)) and any(v.startswith("r") for v in n.index.vars())
               for n in e.walk())


def _flat_inner(inner: Tuple[int, ...]) -> Index:
    out = Index()
    for d, size in enumerate(inner):
        out = out * size + Index.var(f"r{d}")
    return out


def _numel(sizes) -> int:
    n = 1
    for s in sizes or ():
        n *= s
    return n


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


_GROUP_LOCAL_BYTES = 16 << 10  # stack room a kernel group gives its intermediates


@dataclass
class KernelGroup:
    """A run of consecutive kernels called through one exported function. Intermediates that no
    other step reads and that are small live on its stack, so the wrapper neither allocates them
    nor makes a call per kernel."""

    name: str
    kernels: List[str]
    args: List[str]  # buffers the wrapper passes, in parameter order (nthreads follows)
    stored: List[str]  # the args the group writes: the wrapper allocates them
    local: List[str]


def _span_bytes(buf: Buffer) -> int:
    span = 1 + sum((s - 1) * st for s, st in zip(buf.size, buf.stride) if s > 0)
    return span * buf.dtype.itemsize


def group_kernels(steps: Sequence[Step], emitted: Dict[str, EmittedKernel],
                  buffers: Dict[str, Buffer], keep: Set[str]) -> List[KernelGroup]:
    runs: List[List[Kernel]] = []
    after_kernel = False
    for step in steps:
        if isinstance(step, Kernel):
            if after_kernel:
                runs[-1].append(step)
            else:
                runs.append([step])
        after_kernel = isinstance(step, Kernel)
    readers: Dict[str, Set[int]] = {b: {-1} for b in keep}  # -1: an extern call or the caller
    for step in steps:
        if isinstance(step, ExternNode):
            for b in step.reads:
                readers.setdefault(b, set()).add(-1)
    for i, run in enumerate(runs):
        for k in run:
            for b in emitted[k.name].args:
                readers.setdefault(b, set()).add(i)
    groups = []
    for i, run in enumerate(runs):
        stored = set().union(*(k.stored for k in run))
        local, room = [], _GROUP_LOCAL_BYTES
        for b in sorted(stored):
            nbytes = _span_bytes(buffers[b])
            if readers.get(b, set()) <= {i} and nbytes <= room:
                local.append(b)
                room -= nbytes
        args = sorted(set().union(*(emitted[k.name].args for k in run)) - set(local))
        groups.append(KernelGroup(f"group{i}", [k.name for k in run], args,
                                  [b for b in args if b in stored], local))
    return groups


def _group_source(group: KernelGroup, emitted: Dict[str, EmittedKernel],
                  buffers: Dict[str, Buffer]) -> str:
    params = [f"{'' if b in group.stored else 'const '}{CTYPES[buffers[b].dtype]}* __restrict__ {b}"
              for b in group.args] + ["int nthreads"]
    lines = [f'extern "C" void {group.name}({", ".join(params)}) {{']
    for b in group.local:
        lines.append(f"  alignas(64) {CTYPES[buffers[b].dtype]} "
                     f"{b}[{_span_bytes(buffers[b]) // buffers[b].dtype.itemsize}];")
    for name in group.kernels:
        lines.append(f"  {name}({', '.join(emitted[name].args + ['nthreads'])});")
    return "\n".join(lines) + "\n}\n"


def emit_source(steps: Sequence[Step], buffers: Dict[str, Buffer], keep: Set[str]
                ) -> Tuple[str, List[EmittedKernel], List[KernelGroup]]:
    emitted = [KernelEmitter(k, buffers).emit() for k in steps if isinstance(k, Kernel)]
    by_name = {e.name: e for e in emitted}
    groups = group_kernels(steps, by_name, buffers, keep)
    parts = [e.source for e in emitted] + [_group_source(g, by_name, buffers) for g in groups]
    return PRELUDE + "\n" + "\n".join(parts), emitted, groups
