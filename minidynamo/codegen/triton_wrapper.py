"""The call of a compiled Triton graph: kernel launches on the graph's device.

Launch configs (XBLOCK, RBLOCK for looped reductions, num_warps) are chosen on a kernel's first
run by timing a few candidates on the GPU, and remembered per device in the module's tune file;
under the interpreter there is one candidate (the largest blocks: fewest Python-level programs).
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Sequence

import numpy as np
import torch

from .graph_lowering import GraphLowering, is_dense
from .runtime import SIZES, STATIC, CompiledGraph, Sizes, same_layout
from .sizes import is_symbolic
from .scheduler import Kernel, Step
from .triton_cache import TuneStore, interpreting
from .triton_render import TritonKernel, next_power_of_2

log = logging.getLogger(__name__)

_INTERPRET_MAX_BLOCK = 1 << 16


@dataclass(frozen=True)
class LaunchConfig:
    XBLOCK: int
    RBLOCK: int = 0  # looped kernels only
    num_warps: int = 4


def _warps(elements: int, per_thread: int) -> int:
    return max(1, min(16, elements // (32 * per_thread)))


def candidate_configs(k: TritonKernel) -> List[LaunchConfig]:
    """Configs worth timing for `k` (one when interpreting)."""
    xcap = next_power_of_2(max(k.xhint, 1))
    rb = next_power_of_2(max(k.rhint, 1))
    if interpreting():
        if k.kind == "pointwise":
            return [LaunchConfig(min(xcap, _INTERPRET_MAX_BLOCK))]
        if k.kind == "persistent":
            return [LaunchConfig(max(1, min(xcap, _INTERPRET_MAX_BLOCK // rb)))]
        # Several chunks per row, the last one partial, so the loop really loops.
        rblock = min(max(2, rb // 4), _INTERPRET_MAX_BLOCK)
        return [LaunchConfig(max(1, min(xcap, _INTERPRET_MAX_BLOCK // rblock)), rblock)]
    if k.kind == "pointwise":
        sizes = sorted({min(b, xcap) for b in (512, 1024, 2048, 4096)})
        return [LaunchConfig(b, 0, _warps(b, 4)) for b in sizes]
    if k.kind == "persistent":
        found = []
        for total, per_thread in ((1024, 4), (4096, 8), (8192, 8), (rb, 16)):
            xb = min(max(1, total // rb), xcap)
            c = LaunchConfig(xb, 0, _warps(xb * rb, per_thread))
            if c not in found:
                found.append(c)
        return found
    shapes = ((1, 2048, 8), (1, 1024, 4), (2, 1024, 8), (4, 512, 8))
    return list(dict.fromkeys(LaunchConfig(min(x, xcap), r, w) for x, r, w in shapes))


def bench(run: Callable[[], None]) -> float:
    """Milliseconds per call of `run` on the GPU."""
    import triton.testing

    return triton.testing.do_bench(run, warmup=5, rep=25)


class Launcher:
    """Runs one kernel; picks (and remembers) its launch config on the first call."""

    def __init__(self, fn, kernel: TritonKernel, store: TuneStore, device: torch.device):
        self.fn = fn
        self.kernel = kernel
        self.store = store
        self.entry = f"{_device_name(device)}/{kernel.name}"
        self.interpret = interpreting()
        self.config: LaunchConfig = None  # type: ignore[assignment]
        self._launch = None  # the chosen config's bound launch
        self.symbolic = is_symbolic(kernel.xnumel)

    def bind(self, config: LaunchConfig, xnumel: int) -> Callable[..., None]:
        """The launch with `config` over `xnumel` points (any xnumel when the sizes are symbolic)."""
        k = self.kernel
        meta: Dict[str, int] = {"XBLOCK": config.XBLOCK, "num_warps": config.num_warps}
        if k.kind == "looped":
            meta["RBLOCK"] = config.RBLOCK
        fn, grid = self.fn, lambda n: ((n + config.XBLOCK - 1) // config.XBLOCK,)
        fixed = fn[grid(xnumel)]

        def launch(*args, xnumel=None):
            (fixed if xnumel is None else fn[grid(xnumel)])(*args, **meta)
        if not self.interpret:
            return launch

        def quiet(*args, xnumel=None):
            # Masked-off lanes compute on zeros (1 / 0 and the like); numpy would warn.
            with np.errstate(all="ignore"):
                launch(*args, xnumel=xnumel)
        return quiet

    def __call__(self, args: Sequence[Any], sizes: Sizes = STATIC) -> None:
        """Launch over `args` (tensors, then the size symbols' values) with this call's `sizes`."""
        xnumel = sizes.scalar(self.kernel.xnumel)
        if xnumel == 0:
            return
        if self._launch is None:
            self.config = self._choose(args, xnumel)
            self._launch = self.bind(self.config, xnumel)
        self._launch(*args, xnumel=xnumel if self.symbolic else None)

    def _choose(self, tensors: Sequence[Any], xnumel: int) -> LaunchConfig:
        candidates = candidate_configs(self.kernel)
        if len(candidates) == 1:
            return candidates[0]
        saved = self.store.get(self.entry)
        if saved is not None:
            return LaunchConfig(**saved)
        # Kernels never write their inputs, so running one repeatedly is harmless.
        timings = [(bench(lambda f=self.bind(c, xnumel): f(*tensors)), i) for i, c in enumerate(candidates)]
        best = candidates[min(timings)[1]]
        log.debug("triton autotune %s: %s -> %s", self.entry, timings, best)
        self.store.put(self.entry, asdict(best))
        return best


def _device_name(device: torch.device) -> str:
    if device.type == "cuda" and not interpreting():
        return torch.cuda.get_device_name(device)
    return "interpreter"


class TritonGraph(CompiledGraph):
    """A compiled graph whose kernels are Triton launches on `device`."""

    backend = "triton"

    def __init__(self, lowering: GraphLowering, steps: List[Step], module, rendered: List[TritonKernel],
                 source: str, fallback: Callable, device: torch.device):
        self.device = device
        self.module = module
        self.rendered = rendered
        self.store = TuneStore(module.cache_key) if module is not None else None
        super().__init__(lowering, steps, rendered, source, fallback)

    def _kernel_call(self, kernel: Kernel, em: TritonKernel):
        launcher = Launcher(getattr(self.module, em.name), em, self.store, self.device)
        allocs = [self.buffers[b] for b in sorted(kernel.stored)]
        args = tuple(em.args)
        device = self.device

        def call(env: Dict[str, Any], nthreads: int) -> None:
            sizes = env[SIZES]
            for b in allocs:
                b = sizes.buffer(b)
                env[b.name] = torch.empty_strided(b.size, b.stride, dtype=b.dtype, device=device)
            launcher([env[a] for a in args] + list(sizes.values), sizes)
        return call

    def __call__(self, *args: torch.Tensor) -> Any:
        # The base class copies inputs whose strides differ from the compiled ones into fresh
        # (host) memory; make those copies on the graph's device first.
        fixed = []
        sizes = self.sizes(args)
        for buf, t in zip(self.inputs, args):
            if buf is None:
                fixed.append(t)
                continue
            buf = sizes.buffer(buf)
            if not same_layout(buf.size, t.stride(), buf.stride) and is_dense(buf.size, buf.stride):
                if buf.name in self.aliased:
                    return self.fallback(*args)
                t = torch.empty_strided(buf.size, buf.stride, dtype=buf.dtype, device=t.device).copy_(t)
            fixed.append(t)
        return super().__call__(*fixed)
