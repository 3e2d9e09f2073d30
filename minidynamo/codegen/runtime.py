"""The Python callable that runs a compiled graph: allocates buffers, calls kernels and externs in
order, and returns the outputs (as views where the graph returns views). CompiledGraph interprets
its steps; the Triton graphs build on it, the C++ graphs (cpp_wrapper) generate their call."""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch.utils._pytree import tree_map, tree_unflatten

from .. import config
from ..counters import record_fallback
from .graph_lowering import ExternArg, GraphLowering, OutputSpec, is_non_overlapping
from .ir import Buffer, ExternNode
from .scheduler import Kernel, Step
from .sizes import any_symbolic, evaluator, is_symbolic

SIZES = "_sizes"  # the environment's entry holding the call's Sizes (no buffer has this name)


class Sizes:
    """One call's values of a graph's size symbols, and the ints the IR's sizes are for them
    (each expression tuple compiled once per graph, in `cache`)."""

    __slots__ = ("values", "_symbols", "_cache")

    def __init__(self, symbols: Sequence[Any] = (), values: Sequence[int] = (), cache: Optional[Dict] = None):
        self.values, self._symbols, self._cache = tuple(values), symbols, {} if cache is None else cache

    def __call__(self, xs: Sequence[Any]) -> tuple:
        xs = tuple(xs)
        if not any_symbolic(xs):
            return xs
        fn = self._cache.get(xs)
        if fn is None:
            fn = self._cache[xs] = evaluator(xs, self._symbols)
        return fn(self.values)

    def scalar(self, x: Any) -> Any:
        return self((x,))[0] if is_symbolic(x) else x

    def buffer(self, buf: Buffer) -> Buffer:
        if not any_symbolic(buf.size + buf.stride):
            return buf
        return Buffer(buf.name, self(buf.size), self(buf.stride), buf.dtype)


STATIC = Sizes()


def same_layout(size, stride_a, stride_b) -> bool:
    """Equal strides wherever the size makes them matter."""
    return all(a == b or s == 1 for a, b, s in zip(stride_a, stride_b, size))


def relayout(t: torch.Tensor, buf: Buffer) -> Optional[torch.Tensor]:
    """`t` with the strides the generated code assumes, copying only when they differ; None when
    the code assumes overlapping strides (broadcast inputs), which a copy cannot produce."""
    if same_layout(buf.size, t.stride(), buf.stride):
        return t
    if not is_non_overlapping(buf.size, buf.stride):
        return None
    return torch.empty_strided(buf.size, buf.stride, dtype=buf.dtype, device=t.device).copy_(t)


log = logging.getLogger(__name__)


def run_eagerly_after(error: Exception, fallback: Callable, args: Sequence[Any], backend: str) -> Any:
    """A compiled graph raised: the graph is pure, so eager runs it again and decides. If eager
    raises too, the error is the user's and is raised as eager raises it; if not, it is ours:
    eager's result is returned with a warning (in strict mode the error is raised)."""
    result = fallback(*args)
    if config.strict:
        raise error
    record_fallback(backend, f"the compiled graph raised {type(error).__name__}: {error}")
    log.warning("compiled graph raised %s: %s; ran it eagerly", type(error).__name__, error,
                exc_info=error)
    return result


def materialize(env: Dict[str, Any], a: Any) -> Any:
    """An extern call's argument: the tensor (view) an ExternArg stands for, anything else as is."""
    sizes = env.get(SIZES, STATIC)
    if not isinstance(a, ExternArg):
        return sizes.scalar(a)
    t = env[a.buffer]
    size, stride, offset = sizes(a.size), sizes(a.stride), sizes.scalar(a.offset)
    if tuple(t.shape) == size and t.stride() == stride and offset == 0:
        return t
    return t.as_strided(size, stride, t.storage_offset() + offset)


class CompiledGraph:
    """Runs a graph's steps in order over an environment of buffers; subclasses say how a kernel
    is called (`_kernel_call`)."""

    backend = "codegen"  # the backend's name, for fallback counts

    def __init__(self, lowering: GraphLowering, steps: List[Step], rendered: Sequence[Any],
                 source: str, fallback: Callable):
        self.source = source
        self.eager = fallback
        backend = self.backend

        def relaid_out_eagerly(*args: Any) -> Any:
            record_fallback(backend, "inputs laid out in a way the kernels cannot take")
            return fallback(*args)

        self.fallback = relaid_out_eagerly
        self.steps = steps
        self.buffers = lowering.buffers
        self.size_vars = lowering.size_vars
        # None for an input that is a size (an int)
        self.inputs = [lowering.buffers[n] if n is not None else None for n in lowering.input_names]
        self.constants = dict(lowering.constants)
        self.outputs: List[OutputSpec] = lowering.outputs
        self.out_spec = lowering.out_spec
        # Inputs some output is a view of: a relayout copy would make that output a view of
        # the copy, so inputs laid out otherwise than compiled for run eagerly.
        self.aliased = {o.buffer for o in self.outputs if o.kind == "buffer"} & {b.name for b in self.inputs if b}
        self._size_cache: Dict = {}
        self._plan = self._build_plan(rendered)

    @property
    def kernels(self) -> List[Kernel]:
        return [s for s in self.steps if isinstance(s, Kernel)]

    def _build_plan(self, rendered: Sequence[Any]) -> List[Callable[[Dict[str, Any], int], None]]:
        by_name = {e.name: e for e in rendered}
        return [self._kernel_call(s, by_name[s.name]) if isinstance(s, Kernel) else self._extern_call(s)
                for s in self.steps]

    def _kernel_call(self, kernel: Kernel, em: Any) -> Callable[[Dict[str, Any], int], None]:
        raise NotImplementedError

    def _extern_call(self, node: ExternNode):
        outs = [self.buffers[n] if n is not None else None for n in node.names]

        def call(env: Dict[str, Any], nthreads: int) -> None:
            args, kwargs = tree_map(lambda a: materialize(env, a), (node.args, node.kwargs))
            result = node.fn(*args, **kwargs)
            results = result if isinstance(result, (tuple, list)) else (result,)
            for buf, r in zip(outs, results):
                # an extern op may return None for an output the graph never reads (lstm's reserve)
                if buf is not None and r is not None:
                    r = relayout(r, env.get(SIZES, STATIC).buffer(buf))
                    if r is None:
                        raise RuntimeError(f"{node.fn} returned an unexpected layout")
                    env[buf.name] = r
        return call

    def sizes(self, args: Sequence[Any]) -> Sizes:
        """This call's sizes (the symbols read from the arguments)."""
        if self.size_vars is None:
            return STATIC
        return Sizes(self.size_vars.symbols, self.size_vars.values(args), self._size_cache)

    def __call__(self, *args: torch.Tensor) -> Any:
        try:
            return self._run(args)
        except Exception as e:
            return run_eagerly_after(e, self.eager, args, self.backend)

    def _run(self, args: Sequence[torch.Tensor]) -> Any:
        env: Dict[str, Any] = dict(self.constants)
        sizes = self.sizes(args)
        env[SIZES] = sizes
        for buf, t in zip(self.inputs, args):
            if buf is None:
                continue
            fixed = relayout(t, sizes.buffer(buf))
            if fixed is None or (fixed is not t and buf.name in self.aliased):
                return self.fallback(*args)
            env[buf.name] = fixed
        nthreads = torch.get_num_threads()
        for call in self._plan:
            call(env, nthreads)
        out = []
        for spec in self.outputs:
            if spec.kind == "constant":
                out.append(spec.constant)
                continue
            t = env[spec.buffer]
            size, stride, offset = sizes(spec.size), sizes(spec.stride), sizes.scalar(spec.offset)
            if tuple(t.shape) != size or t.stride() != stride or offset or spec.fresh:
                t = t.as_strided(size, stride, t.storage_offset() + offset)
            out.append(t)
        return tree_unflatten(out, self.out_spec)
