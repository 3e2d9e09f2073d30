"""Group IR nodes into kernels: dead-code elimination, fusion, loop collapsing.

A kernel is a loop nest over `outer` ranges (parallelised over the outermost), whose body is a
sequence of stages. A stage either runs at the outer level (one element per outer point) or is an
inner loop over its own ranges holding pointwise stores and reductions. So a softmax row is one
kernel: a loop for the max, a loop for the sum of exponentials, a loop writing the result, with the
two reduction results kept in registers instead of memory.

Fusion is greedy in topological order. A node joins the current kernel when its iteration space
fits and every value it reads from the kernel is available where it runs: a reduction result at
the same outer point (register), a pointwise value at the same element (register, or memory written
by an earlier stage of the same outer iteration). Otherwise the kernel is closed and a new one opens.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

from .ir import (
    Expr, ExternNode, Index, IndexValue, Load, Node, PointwiseNode, ReductionNode,
    contiguous_strides, inner_var, loads, node_outputs, node_reads, outer_var,
)


@dataclass
class KNode:
    """A node placed in a kernel; `body` and `store` use the kernel's loop variables."""

    node: Union[PointwiseNode, ReductionNode]
    body: Expr
    store: Index  # for reductions: position of the result in its contiguous output buffer
    stage: int

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.node, ReductionNode)


@dataclass
class Stage:
    inner: Optional[Tuple[int, ...]]  # None: runs once per outer point
    nodes: List[KNode] = field(default_factory=list)


@dataclass
class Kernel:
    name: str
    outer: Tuple[int, ...]
    stages: List[Stage] = field(default_factory=list)
    stored: Set[str] = field(default_factory=set)  # buffers written to memory

    # the first node storing each buffer, for the stages list `_indexed`: nodes join through
    # `append`, anything else (restaging, a trial kernel's stages taken) is a new list
    _producers: Dict[str, KNode] = field(default_factory=dict, repr=False, compare=False)
    _indexed: Optional[List[Stage]] = field(default=None, repr=False, compare=False)

    def knodes(self) -> Iterable[KNode]:
        for s in self.stages:
            yield from s.nodes

    def producer(self, buf: str) -> Optional[KNode]:
        """The first node of the kernel that stores `buf` (fusion asks once per load of every node
        it tries: an index, not a scan)."""
        if self._indexed is not self.stages:
            self._producers = {}
            for kn in self.knodes():
                self._producers.setdefault(kn.name, kn)
            self._indexed = self.stages
        return self._producers.get(buf)

    def append(self, stage: int, kn: KNode) -> None:
        """Add `kn` at the end of stage `stage`."""
        self.stages[stage].nodes.append(kn)
        if self._indexed is self.stages:
            self._producers.setdefault(kn.name, kn)

    def take(self, other: "Kernel") -> None:
        """Become `other` (a trial copy that fusion keeps), with its index."""
        self.outer, self.stages = other.outer, other.stages
        self._producers, self._indexed = other._producers, other._indexed


Step = Union[Kernel, ExternNode]


def step_reads(step: Step) -> Set[str]:
    """The buffers a step reads from memory."""
    if isinstance(step, ExternNode):
        return set(step.reads)
    return {ld.buffer for kn in step.knodes() for ld in loads(kn.body)}


def replace_externs(steps: Sequence[Step], convert: Callable[[ExternNode, int], Optional[Any]]) -> List[Any]:
    """`steps` with each extern call that `convert` (given the call and its position) can run in
    the generated code replaced by the step it returns."""
    return [(convert(s, i) if isinstance(s, ExternNode) else None) or s for i, s in enumerate(steps)]


def _rename(e: Expr, env: Dict[str, Index]) -> Expr:
    return e.map(lambda ix: ix.subst(env))


def _contiguous_index(sizes: Sequence[int], var) -> Index:
    out = Index()
    for k, st in enumerate(contiguous_strides(tuple(sizes))):
        out = out + Index.var(var(k)) * st
    return out


def classify(kernel: Kernel, stage: int, ld: Load) -> str:
    """How a load in `stage` of `kernel` is served: 'external' (memory written by an earlier
    step), 'local' (a register), 'memory' (written earlier in this outer iteration), 'conflict'."""
    prod = kernel.producer(ld.buffer)
    if prod is None:
        return "external"
    if ld.index != prod.store:
        return "conflict"
    target = kernel.stages[stage]
    if prod.is_reduction:
        return "local" if prod.stage < stage else "conflict"
    if kernel.stages[prod.stage].inner is None:
        return "local" if prod.stage <= stage else "conflict"
    if prod.stage == stage:
        return "local"
    if prod.stage < stage and target.inner == kernel.stages[prod.stage].inner:
        return "memory"
    return "conflict"


class Scheduler:
    def __init__(self, nodes: List[Node], keep: Set[str]):
        self.nodes = dead_code_elimination(nodes, keep)
        self.keep = keep
        self.steps: List[Step] = []
        self._kernel: Optional[Kernel] = None

    def run(self) -> List[Step]:
        for node in self.nodes:
            if isinstance(node, ExternNode):
                self._flush()
                self.steps.append(node)
            elif self._kernel is None or not self._try_add(self._kernel, node):
                self._flush()
                self._kernel = self._new_kernel(node)
        self._flush()
        mark_stored(self.steps, self.keep)
        for step in self.steps:
            if isinstance(step, Kernel):
                collapse_loops(step)
        return self.steps

    def _flush(self) -> None:
        if self._kernel is not None:
            self.steps.append(self._kernel)
            self._kernel = None

    def _new_kernel(self, node) -> Kernel:
        k = Kernel(f"kernel{sum(isinstance(s, Kernel) for s in self.steps)}",
                   node.outer if isinstance(node, ReductionNode) else node.ranges)
        assert self._try_add(k, node)
        return k

    def _try_add(self, k: Kernel, node) -> bool:
        placed = self._placement(k, node)
        if placed is None:
            return False
        stage_inner, body, store, restage = placed
        trial = _copy_kernel(k)
        if restage is not None:
            _restage(trial, *restage)
        last = trial.stages[-1] if trial.stages else None
        reads_reduction_of_last = last is not None and any(
            p is not None and p.is_reduction and p.stage == len(trial.stages) - 1
            for p in (trial.producer(ld.buffer) for ld in loads(body)))
        if last is not None and last.inner == stage_inner and not reads_reduction_of_last:
            stage = len(trial.stages) - 1
        else:
            trial.stages.append(Stage(stage_inner))
            stage = len(trial.stages) - 1
        kn = KNode(node, body, store, stage)
        trial.append(stage, kn)
        if any(classify(trial, stage, ld) == "conflict" for ld in loads(body)):
            return False
        k.take(trial)
        return True

    def _placement(self, k: Kernel, node):
        """(inner ranges or None, body, store, restage) placing `node` in kernel `k`, or None."""
        outer = k.outer
        pure_pointwise = all(s.inner is None for s in k.stages)
        if isinstance(node, ReductionNode):
            body = node.body
            store = _contiguous_index(node.outer, outer_var)
            if node.outer == outer:
                return node.inner, body, store, None
            if pure_pointwise and tuple(node.outer) + tuple(node.inner) == outer:
                # The pointwise nodes so far become the first inner-loop stage of a row kernel.
                return node.inner, body, store, (node.outer, node.inner)
            return None
        ranges = node.ranges
        if ranges == outer:
            return None, node.body, node.store, None
        n = len(outer)
        if ranges[:n] == outer and len(ranges) > n:
            env = {outer_var(n + j): Index.var(inner_var(j)) for j in range(len(ranges) - n)}
            return ranges[n:], _rename(node.body, env), node.store.subst(env), None
        return None


def _copy_kernel(k: Kernel) -> Kernel:
    copy = Kernel(k.name, k.outer, [Stage(s.inner, list(s.nodes)) for s in k.stages])
    if k._indexed is k.stages:
        copy._producers, copy._indexed = dict(k._producers), copy.stages
    return copy


def _restage(k: Kernel, outer: Tuple[int, ...], inner: Tuple[int, ...]) -> None:
    """Turn a pointwise kernel over outer+inner into a row kernel over outer."""
    n = len(outer)
    env = {outer_var(n + j): Index.var(inner_var(j)) for j in range(len(inner))}
    nodes = [KNode(kn.node, _rename(kn.body, env), kn.store.subst(env), 0) for kn in k.knodes()]
    k.outer = outer
    k.stages = [Stage(inner, nodes)]


def dead_code_elimination(nodes: List[Node], keep: Set[str]) -> List[Node]:
    live = set(keep)
    out = []
    for node in reversed(nodes):
        if any(name in live for name in node_outputs(node)):
            out.append(node)
            live.update(node_reads(node))
    return list(reversed(out))


def mark_stored(steps: List[Step], keep: Set[str]) -> None:
    needed = set(keep)
    for step in steps:
        if isinstance(step, ExternNode):
            needed.update(step.reads)
            continue
        for kn in step.knodes():
            for ld in loads(kn.body):
                c = classify(step, kn.stage, ld)
                if c in ("external", "memory"):
                    needed.add(ld.buffer)
    for step in steps:
        if isinstance(step, Kernel):
            step.stored = {kn.name for kn in step.knodes() if kn.name in needed}


# -- loop collapsing ------------------------------------------------------------------------------

def _mergeable(indices: List[Index], a: str, b: str, size_b: int) -> bool:
    for ix in indices:
        c = ix.coeffs()
        if c.get(a, 0) != c.get(b, 0) * size_b:
            return False
    return True


def _merge_plan(sizes: Sequence[int], var, indices: List[Index]) -> List[List[int]]:
    groups: List[List[int]] = []
    for d in range(len(sizes)):
        if groups and _mergeable(indices, var(groups[-1][-1]), var(d), sizes[d]):
            groups[-1].append(d)
        else:
            groups.append([d])
    return groups


def _apply_plan(sizes, var, groups) -> Tuple[Tuple[int, ...], Dict[str, Index]]:
    """New sizes, and a substitution taking each old var to its share of the merged var."""
    new_sizes, env = [], {}
    for g_idx, g in enumerate(groups):
        total = 1
        for d in g:
            total *= sizes[d]
        new_sizes.append(total)
        # Only the innermost var of a group keeps a term; the others have coefficients that are
        # multiples of it, which the merged var absorbs (valid because _mergeable held).
        for d in g[:-1]:
            env[var(d)] = Index()
        env[var(g[-1])] = Index.var("_" + var(g_idx))
    return tuple(new_sizes), env


def collapse_loops(k: Kernel) -> None:
    """Merge adjacent loop dims that every index walks with matching strides."""
    k.outer, env = _apply_plan(k.outer, outer_var, _merge_plan(k.outer, outer_var, _indices(k)))
    for stage in k.stages:
        stage_env = dict(env)
        if stage.inner is not None:
            idx = [ix for kn in stage.nodes for ix in _indices_of(kn)]
            stage.inner, inner_env = _apply_plan(
                stage.inner, inner_var, _merge_plan(stage.inner, inner_var, idx))
            stage_env.update(inner_env)
        for kn in stage.nodes:
            _rewrite(kn, stage_env)
            _rewrite(kn, {v: Index.var(v[1:]) for ix in _indices_of(kn) for v in ix.vars()
                          if v.startswith("_")})


def _indices(k: Kernel) -> List[Index]:
    return [ix for kn in k.knodes() for ix in _indices_of(kn)]


def _indices_of(kn: KNode) -> List[Index]:
    out = [kn.store]
    for e in kn.body.walk():
        if isinstance(e, (Load, IndexValue)):
            out.append(e.index)
    return out


def _rewrite(kn: KNode, env: Dict[str, Index]) -> None:
    kn.body = _rename(kn.body, env)
    kn.store = kn.store.subst(env)
