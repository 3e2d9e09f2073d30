"""Gather along a dim, accumulating index_put (an embedding's backward) and max pooling's
backward as C++ steps (concatenation and row gathers are cpp_copy's) inside a kernel group instead of torch calls: each is a loop
over its operands' strides in the group's exported function, so its result needs no tensor made
by torch and, when only the group reads it, lives on the group's stack or scratch block. Indices are checked as eager checks
them; one out of range makes the group return nonzero, and the graph then runs eagerly, which
raises eager's error."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

import torch

from .cpp_tuning import PARALLEL_FOR, PARALLEL_MIN_WORK
from .graph_lowering import ExternArg
from .ir import Buffer, ExternNode, numel
from .scheduler import Step, replace_externs
from .sizes import any_symbolic

aten = torch.ops.aten
_CTYPES = {torch.float32: "float", torch.float64: "double", torch.int8: "int8_t", torch.uint8: "uint8_t",
           torch.int16: "int16_t", torch.int32: "int32_t", torch.int64: "int64_t"}
_INDEX_DTYPES = (torch.int64, torch.int32)


@dataclass
class IndexedStep:
    """A step of a kernel group computing `out` from `operands` (buffer views) by index loops."""

    name: str
    out: str
    operands: Tuple[ExternArg, ...]
    stored: Set[str] = field(default_factory=set)
    checked = False  # whether it checks indices (and may make its group return nonzero)

    def args(self) -> List[str]:
        """Parameter buffers: the result, then each operand's buffer once."""
        seen = [self.out]
        for a in self.operands:
            if a.buffer not in seen:
                seen.append(a.buffer)
        return seen

    def body(self, buffers: Dict[str, Buffer]) -> List[str]:
        raise NotImplementedError

    def render(self, buffers: Dict[str, Buffer]) -> Tuple[str, List[str]]:
        """The C++ function (returning 0, or 1 for an index out of range) and its parameters."""
        args = self.args()
        params = [f"{'' if b == self.out else 'const '}{_CTYPES[buffers[b].dtype]}* __restrict__ {b}"
                  for b in args]
        lines = [f"static int {self.name}({', '.join(params)}, int nthreads) {{"]
        lines += ["  " + line for line in self.body(buffers)] + ["  return 0;", "}"]
        return "\n".join(lines) + "\n", args

    def work(self, buffers: Dict[str, Buffer]) -> int:
        return numel(buffers[self.out].size)

    def describe(self, buffers: Dict[str, Buffer]) -> str:
        return f"[{'x'.join(map(str, buffers[self.out].size))}: {type(self).__name__.lower()}]"


def _at(name: str, offset, stride: Sequence[int], var: str, dims: Sequence[int]) -> str:
    """`name[offset + sum(var_d * stride_k)]` for loop variables var_d, d in `dims` (one per stride)."""
    terms = [str(offset)] + [f"{var}{d} * {st}" for d, st in zip(dims, stride) if st != 0]
    return f"{name}[{' + '.join(terms)}]"


def _loops(size: Sequence[int], body: List[str], first: int = 0, simd: bool = True,
           parallel_work: int = 0) -> List[str]:
    """`body` inside loops over `size` (variables i{first}, ...): the innermost vectorised
    (`simd`: the body neither returns nor loops), the outermost split over the threads when the
    whole nest's `parallel_work` (elements) is enough (the body must not return)."""
    if not size:
        return list(body)
    heads = [f"for (int64_t i{first + d} = 0; i{first + d} < {s}; i{first + d}++) {{" for d, s in enumerate(size)]
    if simd:
        heads[-1:] = ["#pragma omp simd", heads[-1]]
    if parallel_work >= PARALLEL_MIN_WORK:
        heads.insert(0, PARALLEL_FOR.format("", "nthreads > 1"))
    return heads + ["  " + line for line in body] + ["}"] * len(size)


def _copy(dst: str, dst_stride: Sequence[int], dst_offset, src: ExternArg) -> List[str]:
    dims = range(len(src.size))
    return _loops(src.size, [f"{_at(dst, dst_offset, dst_stride, 'i', dims)} = "
                             f"{_at(src.buffer, src.offset, src.stride, 'i', dims)};"], parallel_work=numel(src.size))


def _check_rows(indices: ExternArg, rows: int, wrap: bool) -> List[str]:
    """Return 1 where an index is out of range (`wrap`: negative ones count from the end)."""
    n = len(indices.size)
    row = _at(indices.buffer, indices.offset, indices.stride, "i", range(n))
    low = -rows if wrap else 0
    return _loops(indices.size, [f"if ({row} < {low} || {row} >= {rows}) return 1;"], simd=False)


def _row(indices: ExternArg, rows: int, wrap: bool) -> str:
    row = _at(indices.buffer, indices.offset, indices.stride, "i", range(len(indices.size)))
    if wrap:
        return f"const int64_t row = {row} < 0 ? {row} + {rows} : {row};"
    return f"const int64_t row = {row};"


@dataclass
class GatherAlongDim(IndexedStep):
    """out[i] = source[i with i[dim] replaced by indices[i]] (operands: source, indices)."""

    checked = True
    dim: int = 0

    def body(self, buffers: Dict[str, Buffer]) -> List[str]:
        source, indices = self.operands
        out, n = buffers[self.out], len(indices.size)
        at = _at(indices.buffer, indices.offset, indices.stride, "i", range(n))
        others = [d for d in range(n) if d != self.dim]
        read = _at(source.buffer, f"{source.offset} + {at} * {source.stride[self.dim]}",
                   [source.stride[d] for d in others], "i", others)
        return _check_rows(indices, source.size[self.dim], False) + _loops(
            indices.size, [f"{_at(self.out, 0, out.stride, 'i', range(n))} = {read};"], parallel_work=numel(out.size))


@dataclass
class IndexPutAccumulate(IndexedStep):
    """out = self with values[i..., j...] added at out[indices[i...], j...] (operands: self, indices,
    values), in index order as eager's serial loop; negative indices count from the end."""

    checked = True

    def body(self, buffers: Dict[str, Buffer]) -> List[str]:
        base, indices, values = self.operands
        out, n, rest, rows = buffers[self.out], len(indices.size), len(base.size) - 1, base.size[0]
        target = _at(self.out, f"row * {out.stride[0]}", out.stride[1:], "i", range(n, n + rest))
        add = _loops(base.size[1:], [
            f"{target} += {_at(values.buffer, values.offset, values.stride, 'i', range(n + rest))};"], n)
        return _check_rows(indices, rows, True) + _copy(self.out, out.stride, 0, base) + _loops(
            indices.size, [_row(indices, rows, True)] + add, simd=False)

    def work(self, buffers: Dict[str, Buffer]) -> int:
        return numel(buffers[self.out].size) + numel(self.operands[2].size)


@dataclass
class MaxPoolBackward(IndexedStep):
    """out = zeros shaped as the pooled input with each gradient added at the position its
    window's maximum came from (operands: grad_output, indices flat in the input plane), planes
    in order and positions in order within a plane, as eager's loop."""

    checked = True

    def body(self, buffers: Dict[str, Buffer]) -> List[str]:
        grad, indices = self.operands
        out, n = buffers[self.out], len(grad.size)
        height, width = out.size[-2:]
        zero = _loops(out.size, [f"{_at(self.out, 0, out.stride, 'i', range(n))} = 0;"], parallel_work=numel(out.size))
        at = _at(indices.buffer, indices.offset, indices.stride, "i", range(n))
        rows_dense = out.stride[-2] == width * out.stride[-1]  # the plane's position is `at` itself
        where = f"at * {out.stride[-1]}" if rows_dense else \
            f"(at / {width}) * {out.stride[-2]} + (at % {width}) * {out.stride[-1]}"
        plane = _at(self.out, where, out.stride[:-2], "i", range(n - 2))
        # a bad index returns midway: `out` is this call's own, and eager runs the graph again
        add = _loops(grad.size, [f"const int64_t at = {at};", f"if (at < 0 || at >= {height * width}) return 1;",
                                 f"{plane} += {_at(grad.buffer, grad.offset, grad.stride, 'i', range(n))};"],
                     simd=False)
        return zero + add

    def work(self, buffers: Dict[str, Buffer]) -> int:
        return numel(buffers[self.out].size) + numel(self.operands[0].size)


def use_indexed_steps(steps: Sequence[Step], buffers: Dict[str, Buffer]) -> List[Step]:
    """`steps` with each gather, accumulating index_put and max pooling backward
    that the loops can take (static sizes, one dtype, plain arguments) as an IndexedStep."""
    return replace_externs(steps, lambda node, i: _as_indexed(node, buffers, i))


def _as_indexed(node: ExternNode, buffers: Dict[str, Buffer], index: int) -> Optional[IndexedStep]:
    if len(node.names) != 1 or node.names[0] is None:
        return None
    out = buffers[node.names[0]]
    if out.dtype not in _CTYPES or any_symbolic(tuple(out.size) + tuple(out.stride)):
        return None
    make = _MAKERS.get(node.fn)
    found = make(node, buffers, out) if make is not None else None
    if found is None:
        return None
    cls, operands, extra = found
    return cls(f"indexed{index}", out.name, tuple(operands), {out.name}, **extra)


def _gather(node: ExternNode, buffers: Dict[str, Buffer], out: Buffer):
    source, dim, indices = (node.args + (None, None, None))[:3]
    if not (isinstance(source, ExternArg) and isinstance(indices, ExternArg) and isinstance(dim, int)) \
            or set(node.kwargs) - {"sparse_grad"} or len(node.args) > 3 or not source.size \
            or len(source.size) != len(indices.size) or buffers[source.buffer].dtype != out.dtype \
            or buffers[indices.buffer].dtype != torch.int64:
        return None
    dim %= len(source.size)
    if any(i > s for d, (i, s) in enumerate(zip(indices.size, source.size)) if d != dim):
        return None  # eager raises
    return GatherAlongDim, (source, indices), {"dim": dim}


def _index_put(node: ExternNode, buffers: Dict[str, Buffer], out: Buffer):
    args = list(node.args) + [node.kwargs.get("accumulate", False)] * (len(node.args) == 3)
    if len(args) != 4 or args[3] is not True or set(node.kwargs) - {"accumulate"}:
        return None
    base, index_list, values = args[:3]
    if not (isinstance(base, ExternArg) and isinstance(values, ExternArg) and isinstance(index_list, (list, tuple))
            and len(index_list) == 1 and isinstance(index_list[0], ExternArg)) or not base.size:
        return None
    indices = index_list[0]
    if buffers[indices.buffer].dtype not in _INDEX_DTYPES or out.dtype == torch.bool \
            or {buffers[base.buffer].dtype, buffers[values.buffer].dtype} != {out.dtype} \
            or tuple(values.size) != tuple(indices.size) + tuple(base.size[1:]) or tuple(out.size) != tuple(base.size):
        return None  # broadcast values, masks and several index tensors stay torch calls
    return IndexPutAccumulate, (base, indices, values), {}


def _max_pool_backward(node: ExternNode, buffers: Dict[str, Buffer], out: Buffer):
    if len(node.args) != 8 or node.kwargs:
        return None
    grad, source, indices = node.args[0], node.args[1], node.args[7]
    if not all(isinstance(a, ExternArg) for a in (grad, source, indices)) or len(grad.size) not in (3, 4) \
            or tuple(out.size) != tuple(source.size) or len(grad.size) != len(out.size) \
            or tuple(indices.size) != tuple(grad.size) or tuple(grad.size[:-2]) != tuple(out.size[:-2]) \
            or not out.dtype.is_floating_point or buffers[grad.buffer].dtype != out.dtype \
            or buffers[indices.buffer].dtype != torch.int64:
        return None
    return MaxPoolBackward, (grad, indices), {}


_MAKERS = {aten.max_pool2d_with_indices_backward.default: _max_pool_backward, aten.gather.default: _gather,
           aten.index_put.default: _index_put}
