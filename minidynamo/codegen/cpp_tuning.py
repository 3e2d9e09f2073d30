"""How the C++ renderer tunes a kernel for the CPU, apart from how it spells it: when loops run in
parallel, which expensive row values are computed once and spilled to a row array (or into an
output row), which outputs are written with streaming stores, what is prefetched ahead of the
loops, and how many independent accumulators a reduction keeps."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch

from .cpp_conv import Conv
from .graph_lowering import ExternArg
from .ir import Buffer, Expr, ExternNode, Index, Load, Op, UNARY_MATH, numel
from .render import flat_inner, index_code, is_inner_var, varies_inner
from .scheduler import Kernel, KNode, Stage
from .sizes import SizeExpr, any_symbolic, hint, is_symbolic, size_code

PARALLEL_MIN_WORK = 32768
# Parallel loops hand out shrinking chunks (guided), not one fixed half per thread (static): on a
# shared machine a thread whose vCPU is descheduled then leaves its work to the running one
# instead of stalling the loop until it is back. Every element (or row) is still computed by one
# thread, so results do not depend on the split. Fields: a collapse clause, the if condition.
PARALLEL_FOR = "#pragma omp parallel for{} num_threads(nthreads) if({}) schedule(guided)"
EXPENSIVE = frozenset(UNARY_MATH) - {"floor", "ceil", "trunc", "round", "frac", "reciprocal"} | {"pow", "atan2"}
FLOAT_SUM_MAX = 4096
SPILL_MAX = 16384  # elements of a row array (64 KiB of float32), kept on the thread's stack
STREAM_MIN_BYTES = 32 << 20  # outputs this large go to memory: non-temporal stores
PREFETCH_MIN_BYTES = 4 << 20  # flat pointwise inputs this large stream from memory
PREFETCH_AHEAD_BYTES = 4096
PAGE_AHEAD_MIN_ROW_BYTES = 32 << 10


def _work(kernel: Kernel) -> SizeExpr:
    longest = max([numel(s.inner) for s in kernel.stages if s.inner] + [1], key=hint)  # a heuristic
    return numel(kernel.outer) * longest


def runs_in_parallel(kernel: Kernel) -> bool:
    """Whether the kernel's loops get a parallel pragma (with symbolic sizes: whether they may;
    `parallel_if` then decides on each call)."""
    work = _work(kernel)
    return is_symbolic(work) or work >= PARALLEL_MIN_WORK


def parallel_if(kernel: Kernel) -> str:
    """The condition of a parallel pragma's `if` clause."""
    work = _work(kernel)
    if is_symbolic(work):
        return f"nthreads > 1 && {size_code(work)} >= {PARALLEL_MIN_WORK}"
    return "nthreads > 1"


# A whole graph with less work than this (multiply-adds of products and convolutions, elements of
# everything else) runs on the calling thread, torch's extern calls included: a second thread
# gains a few microseconds at best, and on a shared machine one whose vCPU is descheduled stalls
# each parallel step until it runs again (milliseconds: 2 threads ran tiny models 10-50x slower).
SERIAL_GRAPH_MAX_WORK = 1 << 24


def runs_serially(steps: Sequence, buffers: Dict[str, Buffer]) -> bool:
    """Whether the graph's steps (static sizes) together are too little work for more than one thread."""
    work = 0
    for step in steps:
        if isinstance(step, Kernel):
            work += _work(step)
        elif isinstance(step, ExternNode):
            out = buffers[step.names[0]] if step.names and step.names[0] else None
            per_element = 1
            if step.fn is torch.ops.aten.convolution.default and isinstance(step.args[1], ExternArg):
                per_element = numel(step.args[1].size[1:])  # in-channels (per group) x window
            work += (numel(out.size) if out is not None else 0) * per_element
        elif isinstance(step, Conv):  # a convolution in the generated code
            work += step.macs
        else:  # a product, copy or indexed step in the generated code
            work += step.work(buffers)
    return work < SERIAL_GRAPH_MAX_WORK


def double_accumulator(dtype: torch.dtype, length: int) -> bool:
    """float32 sums accumulate in double, except short rows (softmax, layernorm): there a float
    vector accumulator sums at most length/16 values per lane (eager's own vectorised sum is
    float too), and a single double chain would be latency-bound, at half the vector width,
    twice as slow as memory."""
    return dtype == torch.float32 and (is_symbolic(length) or length > FLOAT_SUM_MAX)


class CppTuning:
    """The tuning decisions for one kernel."""

    def __init__(self, kernel: Kernel, buffers: Dict[str, Buffer]):
        self.k = kernel
        self.buffers = buffers
        # An output too large for the cache is streamed; a smaller one may hold a spilled row
        # (see _spill_target), which the kernel then re-reads from the cache.
        self.stream: Dict[str, str] = self._plan_stream(STREAM_MIN_BYTES)
        self.spills = self._plan_spills()
        rows = {b: off for b, off in self._plan_stream().items()
                if not any(t.startswith(b + " ") for t in self.spill_into.values())}
        # Output rows the last (store-only) pass writes: prefetched for writing during the first,
        # load-bound, pass so the stores do not stall on cache misses with nothing to overlap.
        self.prefetch: Dict[str, str] = {b: off for b, off in rows.items() if b not in self.stream}
        self.next_row = self._next_row_loads()

    def _plan_spills(self) -> Dict[Expr, Tuple[str, int, set]]:
        """Expensive values needed by several inner loops of one row (softmax's exp) are computed
        once into a thread-local row array instead of being recomputed."""
        stages_of: Dict[Expr, List[int]] = {}
        for i, st in enumerate(self.k.stages):
            if st.inner is None or (not any_symbolic(st.inner) and numel(st.inner) > SPILL_MAX):
                continue
            # In walk order, not a set's: the source (and so its cache key) must not depend on
            # the process's string hash seed.
            found = dict.fromkeys(e for kn in st.nodes for e in kn.body.walk()
                                  if isinstance(e, Op) and e.name in EXPENSIVE and varies_inner(e))
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
                target = self._spill_target(e, later)
                if target is None and any_symbolic(self.k.stages[first].inner):
                    continue  # a row array on the stack needs a fixed size; an output row has one
                spills[e] = (name, first, later)
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
        if stage.inner is None or len(stage.inner) != 1 or any_symbolic(stage.inner) or stage.inner[0] % 16 \
                or any(kn.is_reduction for kn in stage.nodes):
            return {}
        loaded = {n.buffer for st in self.k.stages for kn in st.nodes for n in kn.body.walk()
                  if isinstance(n, Load)}
        out = {}
        for kn in stage.nodes:
            buf = self.buffers.get(kn.name)
            if kn.name not in self.k.stored or kn.name in loaded or buf is None \
                    or buf.dtype != torch.float32 or any_symbolic(buf.size) or numel(buf.size) * 4 < min_bytes:
                continue
            if {n: c for n, c in kn.store.terms if is_inner_var(n)} != {"r0": 1}:
                continue
            outer = Index(tuple((n, c) for n, c in kn.store.terms if not is_inner_var(n)),
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
        flat = dict(flat_inner(stage.inner).terms)
        used = set(self.spill_into.values())
        loaded = {n.buffer for st in self.k.stages for kn in st.nodes for n in kn.body.walk()
                  if isinstance(n, Load)}
        readers = [kn for kn in stage.nodes if any(x == e for x in kn.body.walk())]
        for kn in readers[-1:]:
            if kn.is_reduction or kn.name not in self.k.stored or kn.name in loaded \
                    or self.buffers[kn.name].dtype != e.dtype:
                continue
            inner = {n: c for n, c in kn.store.terms if is_inner_var(n)}
            if inner != flat or kn.name in self.stream:
                continue
            outer = Index(tuple((n, c) for n, c in kn.store.terms if not is_inner_var(n)),
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
        rows = [(buf, row, 0) for buf, row in self.contiguous_loads(self.k.stages[0].nodes, "r0")]
        rows += [(buf, row, 1) for buf, row in self.spill_rows]
        starts = set()
        for buf, row, write in rows:
            step = row.coeffs()
            if set(step) == {"p0"}:
                starts.add((f"{buf} + ({index_code(row)} + {size_code(step['p0'])})",
                            64 // self.buffers[buf].dtype.itemsize, write))
        return sorted(starts)

    def contiguous_loads(self, nodes: List[KNode], var: str) -> List[Tuple[str, Index]]:
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

    def page_ahead(self, stage: Stage, lanes: int) -> List[Tuple[str, Index, int]]:
        """For a blocked reduction over long rows (a split full sum): once per page, touch the
        page after next of each contiguous input, so its address translation is ready when the
        loop gets there instead of stalling it (pages are 4 KiB; the hardware prefetcher stops
        at page boundaries). (buffer, row, itemsize) of each such input."""
        size = stage.inner[0]
        out = []
        if is_symbolic(size):
            return out
        for name, row in self.contiguous_loads(stage.nodes, "r0"):
            itemsize = self.buffers[name].dtype.itemsize
            if size * itemsize >= PAGE_AHEAD_MIN_ROW_BYTES and (4096 // itemsize) % lanes == 0:
                out.append((name, row, itemsize))
        return out

    def prefetched_inputs(self) -> List[Tuple[str, int, int]]:
        """A flat pointwise loop over large inputs runs in blocks of 16, each prefetching its
        contiguous inputs a page ahead: left to the hardware prefetcher, a compute-heavy loop
        (GELU's tanh) stalls on memory it could have been loading meanwhile. (buffer, offset,
        itemsize) of each input to prefetch; none when the loop does not qualify."""
        if any_symbolic(self.k.outer) or self.k.outer[0] % 16:
            return []
        starts = []
        for name, rest in self.contiguous_loads(self.k.stages[0].nodes, "p0"):
            buf = self.buffers[name]
            if not rest.terms and numel(buf.size) * buf.dtype.itemsize >= PREFETCH_MIN_BYTES:
                starts.append((name, rest.const, buf.dtype.itemsize))
        return starts

    def chunked_sums(self, stage: Stage, reductions: List[KNode]) -> List[str]:
        """float32 sums over one inner dim of symbolic length: accumulated in float over chunks of
        FLOAT_SUM_MAX elements, each chunk's sum added to a double. Exactly the float sum of short
        rows (one chunk), and as accurate as a double sum for long ones, whatever the length."""
        if len(stage.inner) != 1 or not any_symbolic(stage.inner):
            return []
        return [kn.name for kn in reductions if kn.node.kind == "sum" and kn.node.dtype == torch.float32]

    def blocked_lanes(self, stage: Stage, reductions: List[KNode]) -> int:
        """Accumulators per reduction (4 vectors' worth) when the stage's reductions are all
        sum/max/min over a last inner dim they divide (or over one inner dim of symbolic length,
        whose tail the lanes take one by one); 0 for the plain `omp simd reduction`."""
        symbolic = any_symbolic(stage.inner)
        if not reductions or (symbolic and len(stage.inner) != 1) or hint(stage.inner[-1]) < 256:
            return 0
        widths = set()
        for kn in reductions:
            t = kn.node.dtype if kn.node.kind == "sum" else kn.body.dtype
            if kn.node.kind not in ("sum", "max", "min") or \
                    t not in (torch.float32, torch.float64, torch.int32, torch.int64):
                return 0
            widths.add(t.itemsize)
            if kn.node.kind == "sum" and t == torch.float32 \
                    and (symbolic or numel(stage.inner) * 16 // 64 > FLOAT_SUM_MAX):
                widths.add(8)  # double accumulator
        lanes = 256 // max(widths)
        return lanes if symbolic or stage.inner[-1] % lanes == 0 else 0

