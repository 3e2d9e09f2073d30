"""Compile C++ source into a shared library, with an in-memory and an on-disk cache.

Disk entries live in `<cache_dir>/cpp/<key>.so` with a `<key>.json` sidecar holding the library's
size and sha256; the key hashes the source, the compiler's identity and the flags. Both files are
written to temporaries and renamed into place, so readers never see partial files; an entry whose
checksum does not match, that fails to load, or whose marker symbol names another key is rebuilt.
A large library builds as several translation units in parallel; a long build shows its progress
(build_progress).
"""
from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import hashlib
import json
import os
import subprocess
import tempfile
import threading
from typing import Callable, Dict, List, Optional, Tuple

from . import disk_cache
from .build_progress import BuildProgress

FLAGS = ("-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp", "-shared", "-fPIC",
         "-std=c++17",
         # torch never sets errno or traps; dropping both lets gcc vectorise sqrt and selects.
         "-fno-math-errno", "-fno-trapping-math",
         # torch integer arithmetic wraps on overflow; make that defined behaviour in C++ too.
         "-fwrapv")
LIBS = ("-lmvec", "-lm")
MARKER = "minidynamo_cache_key"
UNIT_BREAK = "\n// minidynamo: a translation unit may start here\n"  # see translation_units
KERNEL_DEF = "static void kernel"
UNIT_MIN_KERNELS = 16

stats: Dict[str, int] = {"compiles": 0, "disk_hits": 0, "memory_hits": 0, "rejected": 0}
_loaded = disk_cache.Loaded(stats)
_builder = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="minidynamo-build")
_building: Dict[str, "concurrent.futures.Future[ctypes.CDLL]"] = {}  # by key, until built
_building_lock = threading.Lock()


def compiler() -> str:
    return os.environ.get("CXX", "g++")


@functools.lru_cache(maxsize=None)
def compiler_id(cxx: str) -> str:
    """Version text plus the CPU that -march=native resolves to (a cached .so must not be loaded
    on a machine whose CPU lacks its instructions)."""
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True).stdout
    target = subprocess.run([cxx, "-march=native", "-Q", "--help=target"], capture_output=True,
                            text=True).stdout
    march = [line.split()[-1] for line in target.splitlines() if line.strip().startswith("-march=")]
    return version.splitlines()[0] + " " + " ".join(march)


def cache_key(source: str) -> str:
    return disk_cache.entry_key(source, compiler_id(compiler()), " ".join(FLAGS + LIBS))


def load_library(source: str) -> ctypes.CDLL:
    """Return the loaded library for `source`, compiling it only if no valid cache entry exists."""
    directory = disk_cache.directory("cpp")
    return _loaded.get(cache_key(source), lambda key: _load_or_build(source, key, directory))


def load_library_later(source: str) -> Callable[[], ctypes.CDLL]:
    """Start loading (or building) the library for `source` in the background; returns the
    function that waits for it and returns it, or raises what its build raised. Libraries of
    graphs compiled one after another (a forward and its backward) so build in parallel, and
    while the compiler goes on with Python work."""
    directory, key = disk_cache.directory("cpp"), cache_key(source)
    loaded = _loaded.cached(key)
    if loaded is not None:
        return lambda: loaded
    with _building_lock:
        future = _building.get(key)
        if future is not None:  # another graph's library, being built
            stats["memory_hits"] += 1
            return future.result
        future = _building[key] = _builder.submit(_loaded.get, key, lambda key: _load_or_build(source, key, directory))
    future.add_done_callback(lambda _: _done_building(key))
    return future.result


def _done_building(key: str) -> None:
    with _building_lock:
        del _building[key]


def _load_or_build(source: str, key: str, directory: str) -> ctypes.CDLL:
    so_path = os.path.join(directory, key + ".so")
    lib = _load_cached(so_path, key)
    if lib is not None:
        stats["disk_hits"] += 1
        return lib
    _compile(source + _marker(key), so_path)
    lib = _open(so_path, key)
    if lib is None:
        raise RuntimeError(f"freshly built {so_path} failed to load")
    return lib


def _marker(key: str) -> str:
    return f'\nextern "C" const char* {MARKER}() {{ return "{key}"; }}\n'


def _digest(path: str) -> Dict[str, object]:
    with open(path, "rb") as f:
        data = f.read()
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _load_cached(so_path: str, key: str):
    meta_path = so_path[:-3] + ".json"
    if not (os.path.exists(so_path) and os.path.exists(meta_path)):
        return None
    try:
        with open(meta_path) as f:
            expected = json.load(f)
        valid = _digest(so_path) == expected
    except (OSError, ValueError):
        valid = False
    lib = _open(so_path, key) if valid else None
    if lib is None:
        stats["rejected"] += 1
    return lib


def _open(so_path: str, key: str):
    try:
        lib = ctypes.CDLL(so_path)
        marker = getattr(lib, MARKER)
    except (OSError, AttributeError):
        return None
    marker.restype = ctypes.c_char_p
    return lib if marker() == key.encode() else None


def _compile(source: str, so_path: str) -> None:
    directory = os.path.dirname(so_path)
    with tempfile.TemporaryDirectory(dir=directory, prefix="build-") as tmp:
        src = os.path.join(tmp, "kernels.cpp")
        out = os.path.join(tmp, "kernels.so")
        with open(src, "w") as f:
            f.write(source)
        stats["compiles"] += 1
        units = translation_units(source, _jobs())
        progress = BuildProgress(sum(n for _, n in units), len(units))
        if len(units) == 1:
            error = _run([[compiler(), *FLAGS, src, "-o", out, *LIBS]], [units[0][1]], progress)
        else:
            error = _build_units(units, tmp, out, progress)
        progress.finish()
        if error is not None:
            failed = so_path[:-3] + ".failed.cpp"
            os.replace(src, failed)
            raise RuntimeError(f"g++ failed:\n{error[-4000:]}\n--- source kept in {failed}")
        digest = _digest(out)
        # Library first, then the sidecar that vouches for it: a reader that finds a sidecar
        # always finds the library it describes (or a newer identical build).
        disk_cache.move_in(out, so_path)
        disk_cache.write(so_path[:-3] + ".json", json.dumps(digest))
        disk_cache.move_in(src, so_path[:-3] + ".cpp")  # for reading only; never used to load


def _jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def translation_units(source: str, jobs: int) -> List[Tuple[str, int]]:
    """The source as translation units built in parallel, with their kernel counts: the part
    before the first UNIT_BREAK (the prelude) heads every unit, the parts after it (a kernel group
    each) are dealt out in order. One unit for small libraries, where a unit's fixed cost (the
    prelude, a process) outweighs the parallel build."""
    head, *bodies = source.split(UNIT_BREAK)
    counts = [b.count(KERNEL_DEF) for b in bodies]
    if jobs < 2 or sum(counts) < UNIT_MIN_KERNELS * 2:
        return [(source, sum(counts))]
    n = min(jobs * 2, sum(counts) // UNIT_MIN_KERNELS, len(bodies))
    per_unit = -(-sum(counts) // n)
    units: List[Tuple[List[str], int]] = []
    for body, count in zip(bodies, counts):
        if not units or units[-1][1] >= per_unit:
            units.append(([], 0))
        units[-1][0].append(body)
        units[-1] = (units[-1][0], units[-1][1] + count)
    return [(head + "\n".join(parts), count) for parts, count in units]


def _build_units(units: List[Tuple[str, int]], tmp: str, out: str, progress: BuildProgress) -> Optional[str]:
    """Compile each unit to an object file (at most _jobs() at once), then link them."""
    commands, objects = [], []
    for i, (text, _) in enumerate(units):
        path, obj = os.path.join(tmp, f"unit{i}.cpp"), os.path.join(tmp, f"unit{i}.o")
        with open(path, "w") as f:
            f.write(text)
        commands.append([compiler(), *[f for f in FLAGS if f != "-shared"], "-c", path, "-o", obj])
        objects.append(obj)
    error = _run(commands, [n for _, n in units], progress)
    if error is not None:
        return error
    return _run([[compiler(), "-shared", "-fopenmp", *objects, "-o", out, *LIBS]], [0], progress)


def _run(commands: List[List[str]], kernels: List[int], progress: BuildProgress) -> Optional[str]:
    """Run the commands, _jobs() at a time, telling `progress` the kernels of those done; the
    first failure's stderr, or None."""
    pending = list(zip(commands, kernels))
    running: List[Tuple[subprocess.Popen, int]] = []
    built = progress.built
    while pending or running:
        while pending and len(running) < _jobs():
            cmd, count = pending.pop(0)
            running.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True), count))
        proc, count = running[0]
        try:
            _, err = proc.communicate(timeout=0.2)
        except subprocess.TimeoutExpired:
            progress.update(built)
            running.append(running.pop(0))
            continue
        running.pop(0)
        if proc.returncode != 0:
            for other, _ in running:
                other.kill()
                other.wait()
            return err
        built += count
        progress.update(built)
    return None
