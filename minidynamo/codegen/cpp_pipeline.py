"""The C++ pipeline: trace -> lower -> schedule (shared with the Triton pipeline) -> render C++ ->
build -> a CppGraph calling the kernels."""
from __future__ import annotations

import collections
import ctypes
import functools
from typing import Callable, Dict, Sequence, Set, Union

import torch
import torch.fx

from .cpp_attention import use_attention
from .cpp_build import load_library_later
from .cpp_conv import generated_conv, use_convs
from .cpp_conv_backward import use_conv_backwards
from .cpp_copy import use_copies
from .cpp_gemm import bind_blas, use_gemms
from .cpp_indexed import use_indexed_steps
from .errors import CannotCompile
from .cpp_render import BLAS_STEPS, render_cpp
from .cpp_tuning import CppTuning
from .cpp_wrapper import CppGraph
from .graph_lowering import GraphLowering, is_dense
from .ir import Buffer, ExternNode, loads
from .pipeline import lower_and_schedule
from .scheduler import Kernel, Step, step_reads
from .sizes import hints_of


def compile_cpp_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor],
                      input_writes: bool = False) -> Union[CppGraph, "InputWriting"]:
    """`input_writes`: a graph changing its inputs in place is taken (see InputWriting)."""
    lowering, steps = lower_and_schedule(gm, example_inputs, input_writes=input_writes,
                                         generated_conv=None if input_writes else generated_conv)
    writes = lowering.gm.meta.get("input_writes")
    # buffers holding parameters (inputs or module constants): their layout may be prepacked
    parameters = {lowering.input_names[i] for i, t in enumerate(example_inputs)
                  if isinstance(t, torch.nn.Parameter)} | {
        n for n, t in lowering.constants.items() if isinstance(t, torch.nn.Parameter)}
    if not writes:
        steps = use_copies(use_gemms(steps, lowering.buffers, parameters), lowering.buffers)
        if lowering.size_vars is None:  # convolutions and indexed steps take static sizes only
            steps = use_indexed_steps(use_conv_backwards(use_convs(steps, lowering.buffers), lowering.buffers),
                                      lowering.buffers)
            steps = use_attention(steps, lowering.buffers)
    keep = {o.buffer for o in lowering.outputs if o.kind == "buffer"}
    symbols = [str(s) for s in lowering.size_vars.symbols] if lowering.size_vars is not None else []
    if not writes:
        with hints_of(lowering.size_vars):
            source, rendered, groups = render_cpp(steps, lowering.buffers, keep, symbols)
        return CppGraph(lowering, steps, _library(source, steps) if rendered else None, rendered, groups,
                        source, gm.forward, parameters=parameters)
    specs = lowering.outputs[-len(writes):]
    inputs = set(lowering.input_names) | set(lowering.constants)
    if any(o.kind == "buffer" and o.buffer in inputs for o in specs):
        raise CannotCompile("a changed input's new value is a view of an input")
    in_kernels = _writes_in_kernels(lowering, steps, writes, keep)
    source, rendered, groups = render_cpp(steps, lowering.buffers, keep - set(in_kernels), writeback=in_kernels,
                                          in_place=_stored_in_place(steps, in_kernels, lowering.buffers))
    done = {b for g in groups for b in g.writeback}
    for spec in specs:
        if spec.buffer in done:  # copied by its kernel group: the graph returns None for it
            spec.kind, spec.constant = "constant", None
    graph = CppGraph(lowering, steps, _library(source, steps) if rendered else None, rendered, groups, source,
                     lambda *args: (gm.forward(*args), None), written={in_kernels[b] for b in done})
    return InputWriting(graph, writes)


def _library(source: str, steps: Sequence[Step]) -> Callable[[], ctypes.CDLL]:
    """Waits for the library of `source`, built in the background, with the BLAS routines its
    products call bound once it is loaded."""
    wait = load_library_later(source)
    if not any(isinstance(s, BLAS_STEPS) for s in steps):
        return wait

    @functools.lru_cache(maxsize=None)
    def loaded() -> ctypes.CDLL:
        lib = wait()
        bind_blas(lib)
        return lib
    return loaded


def _writes_in_kernels(lowering: GraphLowering, steps: Sequence[Step], writes: Sequence[int],
                       keep: Set[str]) -> Dict[str, str]:
    """New values (buffer -> input) that their kernel group can copy into the input itself: laid
    out as the input, made by a kernel after which no extern call runs (so every later reader of
    the input is in the same group, which copies at its end, and nothing can raise once an input
    changed), and not otherwise returned."""
    buffers, specs = lowering.buffers, lowering.outputs[-len(writes):]
    last_extern = max((i for i, s in enumerate(steps) if isinstance(s, ExternNode)), default=-1)
    made_at = {b: i for i, s in enumerate(steps) if isinstance(s, Kernel) for b in s.stored}
    uses = collections.Counter(o.buffer for o in lowering.outputs if o.kind == "buffer")
    found = {}
    for pos, spec in zip(writes, specs):
        x, n = lowering.input_names[pos], spec.buffer
        bx, bn = buffers[x], buffers.get(n)
        if (spec.kind == "buffer" and uses[n] == 1 and made_at.get(n, -1) > last_extern
                and x not in keep and bn is not None and bn.dtype == bx.dtype
                and bn.size == bx.size == spec.size and bn.stride == bx.stride == spec.stride
                and not spec.offset and is_dense(bx.size, bx.stride)):
            found[n] = x
    return found


def _stored_in_place(steps: Sequence[Step], found: Dict[str, str], buffers: Dict[str, Buffer]) -> Set[str]:
    """The new values of `found` (see _writes_in_kernels) their kernel can store straight into
    the input's memory, sparing the copy: each load of the input in that kernel reads the element
    the store replaces, in the store's stage and loop iteration, before the store, and no later
    step reads the input or the new value, nor did an extern call read the input (what it
    returned may be a view of it). Nothing after the kernel can fail (no extern call follows it),
    so the inputs still change all or not at all."""
    made_at = {b: i for i, s in enumerate(steps) if isinstance(s, Kernel) for b in s.stored}
    out = set()
    for n, x in found.items():
        kernel = steps[made_at[n]]
        later = steps[made_at[n] + 1:]
        if all(isinstance(s, Kernel) and not {x, n} & step_reads(s) for s in later) \
                and not any(isinstance(s, ExternNode) and x in step_reads(s) for s in steps) \
                and _reads_only_what_it_replaces(kernel, n, x, buffers):
            out.add(n)
    return out


def _reads_only_what_it_replaces(kernel: Kernel, n: str, x: str, buffers: Dict[str, Buffer]) -> bool:
    """Whether every load of `x` in `kernel` reads the element the node storing `n` replaces, in
    its stage, before the store: in that node or one before it, or in a later pointwise node of
    the stage once one of those read it (the renderer loads an element once per iteration, so
    the later node gets the value read before the store). No spilled row lives in n's memory."""
    producer = kernel.producer(n)
    if any(t.startswith(n + " ") for t in CppTuning(kernel, buffers).spill_into.values()):
        return False
    read_before = False
    for number, stage in enumerate(kernel.stages):
        stored = False
        for kn in stage.nodes:
            mine = [ld for ld in loads(kn.body) if ld.buffer == x]
            if any(number != producer.stage or ld.index != producer.store for ld in mine):
                return False
            if mine and stored and (kn.is_reduction or not read_before):
                return False
            read_before = read_before or bool(mine) and not stored
            stored = stored or kn is producer
    return True


class InputWriting:
    """A compiled graph that changes inputs in place: its kernels write the new values to buffers
    of their own, copied into the inputs at the end of their kernel group (see _writes_in_kernels)
    or, for the others, with one foreach copy once the whole graph has run; so an error midway
    leaves the inputs as they were and eager can run the graph again. Its eager fallback changes
    the inputs itself and returns no new values."""

    def __init__(self, graph: CppGraph, writes: Sequence[int]):
        self.graph = graph
        graph.writes_inputs = self.writes = list(writes)
        self.times = graph.times
        run_graph, copy = graph.run, torch._foreach_copy_
        # the new values the kernel groups did not copy themselves (the graph returns None for those)
        rest = [k for k, spec in enumerate(graph.outputs[-len(writes):]) if spec.kind == "buffer"]
        positions = [self.writes[k] for k in rest]

        def run(*args):
            out, new = run_graph(*args)
            if new is not None and rest:
                copy([args[i] for i in positions], [new[k] for k in rest])
            return out
        run.compiled = self  # type: ignore[attr-defined]  # keeps the graph (and its profile) alive
        self.run = run

    def __call__(self, *args: torch.Tensor):
        return self.run(*args)
