"""Logging channels, off by default: `MINIDYNAMO_LOGS=graph,guards` or `minidynamo.set_logs("graph,guards")`.

Each channel is the logger `minidynamo.<channel>`. Turning one on sets its level to DEBUG and puts a
stderr handler on the `minidynamo` logger; turning all off removes it. The per-frame channels are
written by a compile listener (explain.log_frame) that is installed only while one of them is on
(see `watch`), so logs cost nothing when off. `recompiles` is written by the guard code itself,
`fallbacks` by the code generators' backends (counters.record_fallback), `perf` by
profiled cpp graphs (perf.py: per-step times, logged at exit).
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Callable, Iterable, List, Set, Union

CHANNELS = ("graph", "guards", "recompiles", "breaks", "bytecode", "output_code", "fallbacks", "perf")
ENV_VAR = "MINIDYNAMO_LOGS"
# The channels written from each converted frame's record.
FRAME_CHANNELS = ("graph", "guards", "breaks", "bytecode", "output_code")

_parent = logging.getLogger("minidynamo")
_loggers = {name: logging.getLogger(f"minidynamo.{name}") for name in CHANNELS}
_enabled: Set[str] = set()
_watchers: List[Callable[[Set[str]], None]] = []


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (pytest and notebooks swap it)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("[%(name)s] %(message)s"))

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


_handler = _StderrHandler()


def _parse(channels: Union[None, str, Iterable[str]]) -> Set[str]:
    if channels is None:
        return set()
    names = channels.split(",") if isinstance(channels, str) else channels
    wanted = {name.strip() for name in names if name.strip()}
    if "all" in wanted:
        return set(CHANNELS)
    unknown = wanted - set(CHANNELS)
    if unknown:
        raise ValueError(f"unknown log channel(s) {', '.join(sorted(unknown))}; known: {', '.join(CHANNELS)}, all")
    return wanted


def set_logs(channels: Union[None, str, Iterable[str]] = None, **flags: bool) -> None:
    """Turn log channels on: `set_logs("graph,guards")`, `set_logs(["breaks"])`, `set_logs(graph=True)`
    or "all"; every channel not named is turned off, so `set_logs()` turns logging off."""
    enabled = _parse(channels) | _parse(name for name, on in flags.items() if on)
    for name, logger in _loggers.items():
        logger.setLevel(logging.DEBUG if name in enabled else logging.NOTSET)
    if enabled:
        if _handler not in _parent.handlers:
            _parent.addHandler(_handler)
        _parent.propagate = False  # or a root handler the user configured prints everything twice
    elif _handler in _parent.handlers:
        _parent.removeHandler(_handler)
        _parent.propagate = True
    _enabled.clear()
    _enabled.update(enabled)
    for watcher in _watchers:
        watcher(set(enabled))


def watch(watcher: Callable[[Set[str]], None]) -> None:
    """Call `watcher` with the channels on, now and after each `set_logs`."""
    _watchers.append(watcher)
    watcher(set(_enabled))


def channel(name: str) -> logging.Logger:
    return _loggers[name]


set_logs(os.environ.get(ENV_VAR))
