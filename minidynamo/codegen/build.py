"""Compile C++ source into a shared library, with an in-memory and an on-disk cache.

Disk entries live in `<cache_dir>/cpp/<key>.so` with a `<key>.json` sidecar holding the library's
size and sha256; the key hashes the source, the compiler's identity and the flags. Both files are
written to temporaries and renamed into place, so readers never see partial files; an entry whose
checksum does not match, that fails to load, or whose marker symbol names another key is rebuilt.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import subprocess
import tempfile
import threading
from typing import Dict

from .. import config

FLAGS = ("-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp", "-shared", "-fPIC",
         "-std=c++17",
         # torch never sets errno or traps; dropping both lets gcc vectorise sqrt and selects.
         "-fno-math-errno", "-fno-trapping-math",
         # torch integer arithmetic wraps on overflow; make that defined behaviour in C++ too.
         "-fwrapv")
LIBS = ("-lmvec", "-lm")
MARKER = "minidynamo_cache_key"

stats: Dict[str, int] = {"compiles": 0, "disk_hits": 0, "memory_hits": 0, "rejected": 0}
_loaded: Dict[str, ctypes.CDLL] = {}
_lock = threading.Lock()


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
    cxx = compiler()
    h = hashlib.sha256()
    for part in (source, compiler_id(cxx), " ".join(FLAGS + LIBS)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def cache_directory() -> str:
    # Read at call time so tests (and users) can redirect it after import.
    path = os.path.join(config.cache_dir, "cpp")
    os.makedirs(path, exist_ok=True)
    return path


def load_library(source: str) -> ctypes.CDLL:
    """Return the loaded library for `source`, compiling it only if no valid cache entry exists."""
    key = cache_key(source)
    with _lock:
        lib = _loaded.get(key)
        if lib is not None:
            stats["memory_hits"] += 1
            return lib
        directory = cache_directory()
        so_path = os.path.join(directory, key + ".so")
        lib = _load_cached(so_path, key)
        if lib is None:
            _compile(source + _marker(key), so_path)
            lib = _open(so_path, key)
            if lib is None:
                raise RuntimeError(f"freshly built {so_path} failed to load")
        else:
            stats["disk_hits"] += 1
        _loaded[key] = lib
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
        cmd = [compiler(), *FLAGS, src, "-o", out, *LIBS]
        stats["compiles"] += 1
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            failed = so_path[:-3] + ".failed.cpp"
            os.replace(src, failed)
            raise RuntimeError(f"g++ failed:\n{proc.stderr[-4000:]}\n--- source kept in {failed}")
        digest = _digest(out)
        meta_tmp = os.path.join(tmp, "meta.json")
        with open(meta_tmp, "w") as f:
            json.dump(digest, f)
        # Library first, then the sidecar that vouches for it: a reader that finds a sidecar
        # always finds the library it describes (or a newer identical build).
        os.replace(out, so_path)
        os.replace(meta_tmp, so_path[:-3] + ".json")
        os.replace(src, so_path[:-3] + ".cpp")  # for reading only; never used to load
