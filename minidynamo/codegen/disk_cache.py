"""The on-disk cache both code generators keep their generated files in: entries under
`<config.cache_dir>/<kind>/`, named by a hash of everything that determines them, each file
written to a temporary beside it and renamed into place, so readers never see a partial file."""
from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from typing import Any, Callable, Dict, Union

from .. import config


def directory(kind: str) -> str:
    # Read at call time so tests (and users) can redirect it after import.
    path = os.path.join(config.cache_dir, kind)
    os.makedirs(path, exist_ok=True)
    return path


def entry_key(*parts: str) -> str:
    """The name of the entry that `parts` determine."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def write(path: str, content: Union[str, bytes]) -> None:
    """Put `content` at `path` atomically."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    with os.fdopen(fd, "wb" if isinstance(content, bytes) else "w") as f:
        f.write(content)
    os.replace(tmp, path)


def move_in(finished: str, path: str) -> None:
    """Put the finished file `finished` (built in a temporary directory of the same cache
    directory) at `path` atomically."""
    os.replace(finished, path)


class Loaded:
    """The entries this process has loaded, by key: each is loaded once (`load(key)`, under a
    lock, as loading may write to the cache), later requests count as memory hits."""

    def __init__(self, stats: Dict[str, int]):
        self.stats = stats
        self._items: Dict[str, Any] = {}
        self._lock = threading.Lock()
        self._loading: Dict[str, threading.Lock] = {}  # one per key: builds of other keys run meanwhile

    def cached(self, key: str) -> Any:
        """The entry if it is loaded (a memory hit), else None."""
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self.stats["memory_hits"] += 1
            return hit

    def get(self, key: str, load: Callable[[str], Any]) -> Any:
        hit = self.cached(key)
        if hit is not None:
            return hit
        with self._lock:
            loading = self._loading.setdefault(key, threading.Lock())
        with loading:
            hit = self.cached(key)
            if hit is None:
                hit = load(key)
                with self._lock:
                    self._items[key] = hit
            return hit

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
