"""Data movement done by the generated C++ instead of a torch call: an aten.cat becomes a Copy step
(strided loops writing each input into its slice of the result), an embedding or a gather of rows
(`x[idx]`) a Gather step, inside the kernel group's function. Decoders make several per generated
token (rotary embeddings' rotate_half, the KV cache growing by one position, token and position
embeddings, a mixture of experts' routing), each a torch call costing far more than its few hundred
elements. A Gather checks its indices: one out of range makes the group return 1, and the graph
raises, so eager runs it again and raises its own error."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Set, Tuple

import torch

from .graph_lowering import ExternArg
from .ir import Buffer, ExternNode, numel
from .scheduler import Step, replace_externs
from .sizes import is_symbolic, norm, size_code


class _Moving:
    """A step moving elements of its inputs (`read_args`) into one new buffer `out`."""

    out: str

    def read_args(self) -> List[ExternArg]:
        raise NotImplementedError

    def work(self, buffers: Dict[str, Buffer]) -> int:
        return numel(buffers[self.out].size)

    @property
    def reads(self) -> Tuple[str, ...]:
        """The buffers read, each once, in order (the generated function's parameters)."""
        return tuple(dict.fromkeys(a.buffer for a in self.read_args()))


@dataclass
class Copy(_Moving):
    """out = cat(sources, dim): each source written at `starts[j]` along `dim` of `out`."""

    name: str
    out: str
    sources: List[ExternArg]
    dim: int
    starts: List[object]  # ints or size expressions
    dtype: torch.dtype
    stored: Set[str] = field(default_factory=set)

    def read_args(self) -> List[ExternArg]:
        return self.sources


@dataclass
class Gather(_Moving):
    """out[i..., rest...] = src[index[i...], rest...]; negative indices count from the end (`wrap`,
    as x[idx] does) or are out of range (as embedding's are)."""

    name: str
    out: str
    src: ExternArg
    index: ExternArg
    wrap: bool
    dtype: torch.dtype
    stored: Set[str] = field(default_factory=set)

    def read_args(self) -> List[ExternArg]:
        return [self.src, self.index]


_INDEX_DTYPES = (torch.int64, torch.int32)


def use_copies(steps: Sequence[Step], buffers: Dict[str, Buffer]) -> List[Step]:
    """`steps` with each concatenation of same-dtype, same-rank inputs turned into a Copy step and
    each embedding or single-index row gather into a Gather step."""
    return replace_externs(steps, lambda node, i: _as_copy(node, buffers, i) or _as_gather(node, buffers, i))


def _as_gather(node: ExternNode, buffers: Dict[str, Buffer], index: int):
    if len(node.names) != 1 or node.names[0] is None or node.kwargs:
        return None
    if node.fn is torch.ops.aten.embedding.default and len(node.args) >= 2:
        src, idx, wrap = node.args[0], node.args[1], False
    elif node.fn is torch.ops.aten.index.Tensor and len(node.args) == 2 and isinstance(node.args[1], (list, tuple)) \
            and len(node.args[1]) == 1:
        src, idx, wrap = node.args[0], node.args[1][0], True
    else:
        return None
    out = buffers[node.names[0]]
    if not (isinstance(src, ExternArg) and isinstance(idx, ExternArg)) or buffers[idx.buffer].dtype not in _INDEX_DTYPES \
            or buffers[src.buffer].dtype != out.dtype or len(out.size) != len(idx.size) + len(src.size) - 1:
        return None
    return Gather(f"gather{index}", out.name, src, idx, wrap, out.dtype, {out.name})


def render_gather(g: Gather, buffers: Dict[str, Buffer], ctypes_: Dict[torch.dtype, str],
                  symbols: Sequence[str] = ()) -> Tuple[str, List[str]]:
    """The C++ function for `g` (returning 1 for an index out of range) and its parameters in order."""
    out, ctype, itype = buffers[g.out], ctypes_[g.dtype], ctypes_[buffers[g.index.buffer].dtype]
    args = [g.out] + list(g.reads)
    params = [f"{ctype}* __restrict__ {g.out}", f"const {ctype}* {g.src.buffer}"]
    params += [f"const {itype}* {g.index.buffer}"] if g.index.buffer != g.src.buffer else []
    params += [f"int64_t {s}" for s in symbols] + ["int nthreads"]
    k = len(g.index.size)
    lead = [d for d, n in enumerate(g.index.size) if is_symbolic(n) or n != 1]
    rest = [e for e, n in enumerate(g.src.size[1:]) if is_symbolic(n) or n != 1]
    rows = size_code(g.src.size[0])

    def terms(dims, var, strides):
        return "".join(f" + {var}{d} * {size_code(strides[d])}" for d in dims)
    loops = [f"for (int64_t i{d} = 0; i{d} < {size_code(g.index.size[d])}; i{d}++)" for d in lead]
    inner = [f"for (int64_t r{e} = 0; r{e} < {size_code(g.src.size[1 + e])}; r{e}++)" for e in rest]
    body = [f"int64_t j = {g.index.buffer}[{size_code(g.index.offset)}{terms(lead, 'i', g.index.stride)}];"]
    body += [f"if (j < 0) j += {rows};"] if g.wrap else []
    body += [f"if (j < 0 || j >= {rows}) return 1;",
             *inner, f"  {g.out}[0{terms(lead, 'i', out.stride)}{terms(rest, 'r', out.stride[k:])}] = "
             f"{g.src.buffer}[{size_code(g.src.offset)} + j * {size_code(g.src.stride[0])}"
             f"{terms(rest, 'r', g.src.stride[1:])}];"]
    lines = [f"static int {g.name}({', '.join(params)}) {{"] + [f"  {line}" for line in loops] + \
        ["  {"] + [f"    {line}" for line in body] + ["  }", "  return 0;", "}"]
    return "\n".join(lines) + "\n", args


def _as_copy(node: ExternNode, buffers: Dict[str, Buffer], index: int):
    if node.fn is not torch.ops.aten.cat.default or node.kwargs or len(node.names) != 1 or node.names[0] is None:
        return None
    tensors, dim = node.args[0], node.args[1] if len(node.args) > 1 else 0
    out = buffers[node.names[0]]
    if not isinstance(tensors, (list, tuple)) or not tensors or not all(isinstance(t, ExternArg) for t in tensors):
        return None
    dim %= len(out.size) if out.size else 1
    starts, at = [], 0
    for t in tensors:
        if buffers[t.buffer].dtype != out.dtype or len(t.size) != len(out.size) or any(
                norm(a - b) != 0 for d, (a, b) in enumerate(zip(t.size, out.size)) if d != dim):
            return None  # type promotion, or the legacy empty 1-d inputs cat skips: torch's call
        starts.append(at)
        at = norm(at + t.size[dim])
    if norm(at - out.size[dim]) != 0:
        return None
    return Copy(f"copy{index}", out.name, list(tensors), dim, starts, out.dtype, {out.name})


def render_copy(c: Copy, buffers: Dict[str, Buffer], ctype: str, symbols: Sequence[str] = ()) -> Tuple[str, List[str]]:
    """The C++ function for `c` and its parameters in order (the size symbols and nthreads follow)."""
    out = buffers[c.out]
    args = [c.out] + list(c.reads)
    params = [f"{ctype}* __restrict__ {c.out}"] + [f"const {ctype}* {b}" for b in c.reads]
    params += [f"int64_t {s}" for s in symbols] + ["int nthreads"]
    lines = [f"static void {c.name}({', '.join(params)}) {{"]
    for src, start in zip(c.sources, c.starts):
        dims = [d for d, n in enumerate(src.size) if is_symbolic(n) or n != 1]
        if any(not is_symbolic(src.size[d]) and src.size[d] == 0 for d in range(len(src.size))):
            continue  # an empty input
        dst = size_code(norm(start * out.stride[c.dim]))
        body = " " * (2 * len(dims) + 2) + (
            f"{c.out}[{dst}{''.join(f' + i{d} * {size_code(out.stride[d])}' for d in dims)}] = "
            f"{src.buffer}[{size_code(src.offset)}{''.join(f' + i{d} * {size_code(src.stride[d])}' for d in dims)}];")
        loops = [" " * (2 * k + 2) + f"for (int64_t i{d} = 0; i{d} < {size_code(src.size[d])}; i{d}++)"
                 for k, d in enumerate(dims)]
        lines += ["  {"] + ["  " + line for line in loops + [body]] + ["  }"]
    lines.append("}")
    return "\n".join(lines) + "\n", args
