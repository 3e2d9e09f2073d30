"""Load generated Triton modules through an on-disk cache, and remember tuned launch configs.

`triton.jit` reads its function's source file, so each generated module is written to
`<cache_dir>/triton/<key>.py` (key: hash of the source and Triton's version; written to a
temporary and renamed into place) and imported from there; Triton then caches the compiled
binaries under its own cache directory. Tuned configs live beside the module in `<key>.tune.json`,
keyed by device name and kernel; sizes are baked into the source, so a key is one shape.

Under TRITON_INTERPRET=1 kernels run on CPU tensors in Triton's numpy interpreter, which has no
`libdevice`; the loaded module's `libdevice` is then replaced by numpy equivalents (the kernels'
code is unchanged).
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import threading
import types
from typing import Dict, Optional

import numpy as np

from . import disk_cache

stats: Dict[str, int] = {"writes": 0, "disk_hits": 0, "memory_hits": 0, "tunes": 0, "tune_hits": 0}
_modules = disk_cache.Loaded(stats)


def interpreting() -> bool:
    import triton

    return bool(triton.knobs.runtime.interpret)


def cache_key(source: str) -> str:
    import triton

    return disk_cache.entry_key(triton.__version__, source)


def load_module(source: str) -> types.ModuleType:
    """The imported module for `source`, writing its file only if no identical one exists."""
    return _modules.get(cache_key(source), lambda key: _import(source, key))


def _import(source: str, key: str) -> types.ModuleType:
    path = os.path.join(disk_cache.directory("triton"), key + ".py")
    try:
        with open(path) as f:
            valid = f.read() == source
    except OSError:
        valid = False
    if valid:
        stats["disk_hits"] += 1
    else:
        disk_cache.write(path, source)
        stats["writes"] += 1
    spec = importlib.util.spec_from_file_location(f"minidynamo_triton_{key}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.cache_key = key
    if interpreting():
        module.libdevice = _InterpretedLibdevice
    return module


class TuneStore:
    """Chosen launch configs of one module's kernels, persisted in `<key>.tune.json`."""

    def __init__(self, key: str):
        self.path = os.path.join(disk_cache.directory("triton"), key + ".tune.json")
        self._lock = threading.Lock()

    def _read(self) -> Dict[str, dict]:
        try:
            with open(self.path) as f:
                data = json.load(f)
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def get(self, entry: str) -> Optional[dict]:
        found = self._read().get(entry)
        if found is not None:
            stats["tune_hits"] += 1
        return found

    def put(self, entry: str, chosen: dict) -> None:
        with self._lock:
            data = self._read()
            data[entry] = chosen
            disk_cache.write(self.path, json.dumps(data, indent=1, sort_keys=True))
        stats["tunes"] += 1


def _elementwise(fn):
    """A numpy function applied to interpreter tensors, with the interpreter's types."""

    def apply(*args):
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        first = args[0]
        data = fn(*(a.handle.data for a in args)).astype(first.handle.data.dtype)
        shape = list(data.shape)
        ty = tl.block_type(first.dtype, shape) if shape else first.dtype
        return tl.tensor(TensorHandle(data, first.dtype.scalar), ty)
    return apply


def _lgamma_scalar(x: float) -> float:
    try:
        return math.lgamma(x)
    except ValueError:  # the poles at 0, -1, -2, ...
        return math.inf


_lgamma = np.vectorize(_lgamma_scalar, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])

_InterpretedLibdevice = types.SimpleNamespace(**{
    name: _elementwise(fn) for name, fn in {
        "expm1": np.expm1, "log10": np.log10, "log1p": np.log1p, "tan": np.tan, "asin": np.arcsin,
        "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
        "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "erfc": _erfc,
        "lgamma": _lgamma, "trunc": np.trunc, "nearbyint": np.rint, "pow": np.power,
        "atan2": np.arctan2,
    }.items()
})
