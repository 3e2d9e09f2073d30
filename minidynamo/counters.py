"""The counters behind `minidynamo.stats()`, the C hook's and the frame callback's, read and reset together."""
from __future__ import annotations

import collections
import logging
from dataclasses import dataclass
from typing import Deque, Dict

from . import _C

# Bumped by the frame callback (convert_frame); the C hook keeps its own.
counters: "collections.Counter[str]" = collections.Counter()


@dataclass(frozen=True)
class Fallback:
    """A graph given to a code generator that ran (or runs on a call) as plain torch instead."""

    backend: str
    reason: str

    def __str__(self) -> str:
        return f"{self.backend}: {self.reason}"


# The most recent fallbacks, for explain() and tests; the count in stats() has them all.
fallbacks: Deque[Fallback] = collections.deque(maxlen=256)
_fallback_log = logging.getLogger("minidynamo.fallbacks")


def record_fallback(backend: str, reason: str) -> None:
    """Count a graph (or one call of it) that a code generator left to eager torch, and say why."""
    counters["backend_fallbacks"] += 1
    fallbacks.append(Fallback(backend, reason))
    _fallback_log.info("%s backend ran a graph eagerly: %s", backend, reason)


def stats() -> Dict[str, int]:
    """Counters since the last reset(): frames seen by the hook, frames compiled, cache hits and
    misses, recompiles, graph breaks, frames left unconverted, frames run eagerly because their
    compiled graph raised, and graphs or calls a code generator (cpp, triton) left to eager torch
    (`backend_fallbacks`; the latest reasons are in `counters.fallbacks` and in explain())."""
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
        "backend_fallbacks": counters["backend_fallbacks"],
    }


def entries_installed() -> int:
    """Cache entries the C hook has installed since the last reset."""
    return _C.stats()["compiles"]


def reset_counters() -> None:
    _C.reset_stats()
    counters.clear()
    fallbacks.clear()
