"""The Python callable that runs a compiled graph: allocates buffers, calls kernels and externs in
order, and returns the outputs (as views where the graph returns views)."""
from __future__ import annotations

import ctypes
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch.utils._pytree import tree_map, tree_unflatten

from .cpp import EmittedKernel
from .ir import Buffer, ExternNode
from .lowering import ExternArg, GraphLowering, OutputSpec, is_dense
from .scheduler import Kernel, Step


def _strides_match(t: torch.Tensor, size, stride) -> bool:
    return all(a == b or s == 1 for a, b, s in zip(t.stride(), stride, size))


def _relayout(t: torch.Tensor, buf: Buffer) -> Optional[torch.Tensor]:
    """`t` with the strides the generated code assumes, copying only when they differ; None when
    the code assumes overlapping strides (broadcast inputs), which a copy cannot produce."""
    if _strides_match(t, buf.size, buf.stride):
        return t
    if not is_dense(buf.size, buf.stride):
        return None
    return torch.empty_strided(buf.size, buf.stride, dtype=buf.dtype, device=t.device).copy_(t)


class CompiledGraph:
    def __init__(self, lowering: GraphLowering, steps: List[Step], lib: ctypes.CDLL,
                 emitted: Sequence[EmittedKernel], source: str, fallback: Callable):
        self.source = source
        self.fallback = fallback  # for inputs laid out in a way the kernels cannot take
        self.steps = steps
        self.buffers = lowering.buffers
        self.inputs = [lowering.buffers[n] for n in lowering.input_names]
        self.constants = dict(lowering.constants)
        self.outputs: List[OutputSpec] = lowering.outputs
        self.out_spec = lowering.out_spec
        self._lib = lib  # keeps the library loaded as long as this graph lives
        by_name = {e.name: e for e in emitted}
        self._plan: List[Callable[[Dict[str, Any], int], None]] = []
        for step in steps:
            if isinstance(step, Kernel):
                self._plan.append(self._kernel_call(step, by_name[step.name]))
            else:
                self._plan.append(self._extern_call(step))

    @property
    def kernels(self) -> List[Kernel]:
        return [s for s in self.steps if isinstance(s, Kernel)]

    def _kernel_call(self, kernel: Kernel, em: EmittedKernel):
        fn = getattr(self._lib, em.name)
        fn.argtypes = [ctypes.c_void_p] * len(em.args) + [ctypes.c_int]
        fn.restype = None
        allocs = [self.buffers[b] for b in sorted(kernel.stored)]
        args = tuple(em.args)

        def call(env: Dict[str, Any], nthreads: int) -> None:
            for b in allocs:
                env[b.name] = torch.empty_strided(b.size, b.stride, dtype=b.dtype)
            fn(*[env[a].data_ptr() for a in args], nthreads)
        return call

    def _extern_call(self, node: ExternNode):
        outs = [self.buffers[n] if n is not None else None for n in node.names]

        def materialize(env, a):
            if not isinstance(a, ExternArg):
                return a
            t = env[a.buffer]
            if tuple(t.shape) == a.size and t.stride() == a.stride and a.offset == 0:
                return t
            return t.as_strided(a.size, a.stride, t.storage_offset() + a.offset)

        def call(env: Dict[str, Any], nthreads: int) -> None:
            args, kwargs = tree_map(lambda a: materialize(env, a), (node.args, node.kwargs))
            result = node.fn(*args, **kwargs)
            results = result if isinstance(result, (tuple, list)) else (result,)
            for buf, r in zip(outs, results):
                if buf is not None:
                    r = _relayout(r, buf)
                    if r is None:
                        raise RuntimeError(f"{node.fn} returned an unexpected layout")
                    env[buf.name] = r
        return call

    def __call__(self, *args: torch.Tensor) -> Any:
        env: Dict[str, Any] = dict(self.constants)
        for buf, t in zip(self.inputs, args):
            t = _relayout(t, buf)
            if t is None:
                return self.fallback(*args)
            env[buf.name] = t
        nthreads = torch.get_num_threads()
        for call in self._plan:
            call(env, nthreads)
        out = []
        for spec in self.outputs:
            if spec.kind == "constant":
                out.append(spec.constant)
                continue
            t = env[spec.buffer]
            if tuple(t.shape) != spec.size or t.stride() != spec.stride or spec.offset:
                t = t.as_strided(spec.size, spec.stride, t.storage_offset() + spec.offset)
            out.append(t)
        return tree_unflatten(out, self.out_spec)
