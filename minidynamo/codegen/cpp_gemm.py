"""Matrix products called from the generated C++ instead of through torch: aten.mm/bmm become Gemm
steps that call the BLAS torch itself uses (MKL's sgemm_/dgemm_ in libtorch_cpu), so a product
and the kernels after it (bias, activation, residual add) run in one exported function: no call
back into Python, no output tensor made by torch, and a small product's result stays on that
function's stack, read by its epilogue while it is still in cache."""
from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

import torch

from .graph_lowering import ExternArg
from .ir import Buffer, ExternNode, contiguous_strides, numel
from .scheduler import Step, replace_externs, step_reads
from .sizes import any_symbolic

_ROUTINES = {torch.float32: ("sgemm_", "float"), torch.float64: ("dgemm_", "double")}
_THREADS = "MKL_Set_Num_Threads_Local"  # the calling thread's MKL thread count; returns the previous
_INT_MAX = (1 << 31) - 1  # LP64 BLAS: int dimensions
# Products with fewer multiply-adds run on the calling thread: splitting them gains a few
# microseconds at best, and on a shared machine a helper thread whose vCPU is descheduled stalls
# the product until it runs again (milliseconds).
GEMM_PARALLEL_MIN_MACS = 1 << 22


@dataclass
class Gemm:
    """out[b] = a[b] @ b[b] for each batch b (one batch for mm), `out` contiguous."""

    name: str
    out: str
    a: ExternArg
    b: ExternArg
    dtype: torch.dtype
    stored: Set[str] = field(default_factory=set)
    packed_b: bool = False  # `b` is read from the prepacked contiguous copy of its transpose

    def work(self, buffers: Dict[str, Buffer]) -> int:
        return numel(buffers[self.out].size) * self.a.size[-1]


def blas_type(dtype: torch.dtype) -> Tuple[str, str]:
    """(BLAS routine, C type) of a float dtype's matrix product."""
    return _ROUTINES[dtype]


@functools.lru_cache(maxsize=None)
def blas_routines() -> Optional[Tuple[int, ...]]:
    """Addresses of torch's sgemm_, dgemm_ and MKL's thread-local thread count, or None where
    libtorch_cpu exports no MKL."""
    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    try:
        lib = ctypes.CDLL(path)
        return tuple(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                     for name in [name for name, _ in _ROUTINES.values()] + [_THREADS])
    except (OSError, AttributeError):
        return None


def prepackable(a: object, buffers: Dict[str, Buffer], parameters: Set[str]) -> bool:
    """`a` is the whole transpose of a contiguous 2-d parameter (an nn.Linear weight's .t()),
    which BLAS reads about 25% faster as a contiguous copy (rows of (K,N)) kept across calls."""
    if not isinstance(a, ExternArg) or a.buffer not in parameters or len(a.size) != 2:
        return False
    buf = buffers[a.buffer]
    return (tuple(buf.size) == a.size[::-1] and tuple(buf.stride) == (a.size[0], 1)
            and a.stride == (1, a.size[0]) and a.offset == 0)


def use_gemms(steps: Sequence[Step], buffers: Dict[str, Buffer], parameters: Set[str]) -> List[Step]:
    """`steps` with each mm/bmm the BLAS can run as it is laid out turned into a Gemm step; a
    parameter's transpose that nothing else reads is read prepacked."""
    if blas_routines() is None:
        return list(steps)
    out = replace_externs(steps, lambda node, i: _as_gemm(node, buffers, i))
    other_reads = set().union(*(step_reads(s) for s in out if not isinstance(s, Gemm)), set())
    for g in out:
        if isinstance(g, Gemm) and g.b.buffer not in other_reads and g.a.buffer != g.b.buffer:
            g.packed_b = prepackable(g.b, buffers, parameters)
    return out


def _as_gemm(node: ExternNode, buffers: Dict[str, Buffer], index: int) -> Optional[Gemm]:
    if node.fn not in (torch.ops.aten.mm.default, torch.ops.aten.bmm.default) or node.kwargs \
            or len(node.args) != 2 or len(node.names) != 1:
        return None
    a, b = node.args
    out = buffers[node.names[0]]
    if not (isinstance(a, ExternArg) and isinstance(b, ExternArg)) or any_symbolic(
            (*out.size, *out.stride, *a.size, *a.stride, a.offset, *b.size, *b.stride, b.offset)):
        return None  # a product with symbolic sizes stays a torch call
    if out.dtype not in _ROUTINES \
            or {buffers[a.buffer].dtype, buffers[b.buffer].dtype} != {out.dtype} \
            or tuple(out.stride) != contiguous_strides(out.size) or min(out.size + a.size[-1:]) < 1 \
            or max(out.size + a.size[-1:]) > _INT_MAX:
        return None
    if _leading(a) is None or _leading(b) is None:
        return None
    return Gemm(f"gemm{index}", out.name, a, b, out.dtype, {out.name})


def _leading(x: ExternArg) -> Optional[Tuple[bool, int]]:
    """(transposed, leading dimension) of the last two dims of `x` as BLAS reads a matrix:
    rows (row-major: False) or columns (True) unit-strided; None when neither is."""
    rows, cols = x.size[-2:]
    s_row, s_col = x.stride[-2:]
    if s_col == 1 or cols == 1:
        ld = s_row if rows > 1 else cols
        if ld >= max(1, cols) and ld <= _INT_MAX:
            return False, ld
    if s_row == 1 or rows == 1:
        ld = s_col if cols > 1 else rows
        if ld >= max(1, rows) and ld <= _INT_MAX:
            return True, ld
    return None


def blas_declarations() -> str:
    """The BLAS routines' pointer types and the pointers, as every translation unit sees them."""
    lines = []
    for name, ctype in _ROUTINES.values():
        lines.append(f"typedef void (*md_{name}t)(const char*, const char*, const int*, const int*, const int*, "
                     f"const {ctype}*, const {ctype}*, const int*, const {ctype}*, const int*, const {ctype}*, "
                     f"{ctype}*, const int*);")
        lines.append(f'extern "C" md_{name}t md_{name};')
    lines += ["typedef int (*md_threads_t)(int);", 'extern "C" md_threads_t md_threads;']
    return "\n".join(lines) + "\n"


def blas_definitions() -> str:
    """The pointers themselves (in one translation unit) and md_bind_blas, which sets them once
    the library is loaded (bind_blas)."""
    names = [name for name, _ in _ROUTINES.values()]
    lines = [f"md_{name}t md_{name};" for name in names] + ["md_threads_t md_threads;"]
    setters = ", ".join([f"void* {name}" for name in names] + ["void* threads"])
    body = " ".join([f"md_{name} = (md_{name}t){name};" for name in names] + ["md_threads = (md_threads_t)threads;"])
    lines.append(f'extern "C" void md_bind_blas({setters}) {{ {body} }}')
    return "\n".join(lines) + "\n"


def bind_blas(lib: ctypes.CDLL) -> None:
    lib.md_bind_blas(*(ctypes.c_void_p(address) for address in blas_routines()))


def render_gemm(g: Gemm, buffers: Dict[str, Buffer], symbols: Sequence[str] = ()) -> Tuple[str, List[str]]:
    """The C++ function for `g` and its parameters in order (the size symbols, unused, and nthreads
    follow, as every kernel of a group takes them). Row-major C = A B is column-major C^T = B^T A^T:
    the BLAS gets B as its first operand."""
    out = buffers[g.out]
    rows, cols = out.size[-2:]
    inner = g.a.size[-1]
    batches = out.size[0] if len(out.size) == 3 else 1
    ta, lda = _leading(g.a)
    tb, ldb = (False, cols) if g.packed_b else _leading(g.b)
    name, ctype = _ROUTINES[g.dtype]
    args = [g.out, g.a.buffer, g.b.buffer]
    a_batch = g.a.stride[0] if len(g.a.size) == 3 else 0
    b_batch = g.b.stride[0] if len(g.b.size) == 3 else 0
    params = [f"{ctype}* __restrict__ {g.out}", f"const {ctype}* {g.a.buffer}",
              f"const {ctype}* {g.b.buffer}"]
    if g.a.buffer == g.b.buffer:  # one buffer read as both operands
        args, params = args[:2], params[:2]
    lines = [f"static void {g.name}({', '.join(params + ['int64_t'] * len(symbols))}, int nthreads) {{",
             f"  const int m = {cols}, n = {rows}, k = {inner}, lda = {ldb}, ldb = {lda}, ldc = {cols};",
             f"  const {ctype} one = 1, zero = 0;",
             f"  const int before = md_threads({1 if batches * rows * cols * inner < GEMM_PARALLEL_MIN_MACS else 'nthreads'});",
             f"  for (int64_t i = 0; i < {batches}; i++) {{",
             f'    md_{name}("{"T" if tb else "N"}", "{"T" if ta else "N"}", &m, &n, &k, &one, '
             f"{g.b.buffer} + {g.b.offset} + i * {b_batch}, &lda, {g.a.buffer} + {g.a.offset} + i * {a_batch}, "
             f"&ldb, &zero, {g.out} + i * {rows * cols}, &ldc);",
             "  }", "  md_threads(before);", "}"]
    return "\n".join(lines) + "\n", args
