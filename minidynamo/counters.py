"""The counters behind `minidynamo.stats()`, the C hook's and the frame callback's, read and reset together."""
from __future__ import annotations

import collections
from typing import Dict

from . import _C

# Bumped by the frame callback (convert_frame); the C hook keeps its own.
counters: "collections.Counter[str]" = collections.Counter()


def stats() -> Dict[str, int]:
    """Counters since the last reset(): frames seen by the hook, frames compiled, cache hits and
    misses, recompiles, graph breaks, frames left unconverted, frames run eagerly because their
    compiled graph raised."""
    hook = _C.stats()
    return {
        "frames_seen": hook["frames"],
        "compiled": counters["compiled"],
        "cache_hits": hook["hits"],
        "cache_misses": hook["misses"],
        "recompiles": counters["recompiles"],
        "graph_breaks": counters["graph_breaks"],
        "unconverted": counters["unconverted"],
        "eager_reruns": hook["reruns"],
    }


def entries_installed() -> int:
    """Cache entries the C hook has installed since the last reset."""
    return _C.stats()["compiles"]


def reset_counters() -> None:
    _C.reset_stats()
    counters.clear()
