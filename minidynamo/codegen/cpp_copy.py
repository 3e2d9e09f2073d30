"""Concatenations copied by the generated C++ instead of a torch call: an aten.cat becomes a Copy
step, strided loops writing each input into its slice of the result inside the kernel group's
function. Decoders make several per step (rotary embeddings' rotate_half, a KV cache growing by one
position), each a Python-level torch call costing far more than its few hundred elements."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Set, Tuple

import torch

from .graph_lowering import ExternArg
from .ir import Buffer, ExternNode, numel
from .scheduler import Step
from .sizes import is_symbolic, norm, size_code


@dataclass
class Copy:
    """out = cat(sources, dim): each source written at `starts[j]` along `dim` of `out`."""

    name: str
    out: str
    sources: List[ExternArg]
    dim: int
    starts: List[object]  # ints or size expressions
    dtype: torch.dtype
    stored: Set[str] = field(default_factory=set)

    def work(self, buffers: Dict[str, Buffer]) -> int:
        return numel(buffers[self.out].size)

    @property
    def reads(self) -> Tuple[str, ...]:
        return tuple(dict.fromkeys(s.buffer for s in self.sources))


def use_copies(steps: Sequence[Step], buffers: Dict[str, Buffer]) -> List[Step]:
    """`steps` with each concatenation of same-dtype, same-rank inputs turned into a Copy step."""
    return [(_as_copy(s, buffers, i) if isinstance(s, ExternNode) else None) or s for i, s in enumerate(steps)]


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
