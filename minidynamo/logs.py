"""Logging channels, off by default: `MINIDYNAMO_LOGS=graph,guards` or `minidynamo.set_logs("graph,guards")`.

Each channel is the logger `minidynamo.<channel>`. Turning one on sets its level to DEBUG and puts a
stderr handler on the `minidynamo` logger; turning all off removes it. The per-frame channels are
written by a compile listener that is installed only while one of them is on, so logs cost nothing
when off. `recompiles` is written by the guard code itself.
"""
from __future__ import annotations

import dis
import logging
import os
import sys
from typing import Iterable, Set, Union

from . import convert_frame
from .explain import ExplainOutput

CHANNELS = ("graph", "guards", "recompiles", "breaks", "bytecode", "output_code")
ENV_VAR = "MINIDYNAMO_LOGS"
# The channels written from each converted frame's record.
_FRAME_CHANNELS = ("graph", "guards", "breaks", "bytecode", "output_code")

_parent = logging.getLogger("minidynamo")
_loggers = {name: logging.getLogger(f"minidynamo.{name}") for name in CHANNELS}


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
    frame_logs_on = any(name in enabled for name in _FRAME_CHANNELS)
    if frame_logs_on and log_frame not in convert_frame.compile_listeners:
        convert_frame.compile_listeners.append(log_frame)
    elif not frame_logs_on and log_frame in convert_frame.compile_listeners:
        convert_frame.compile_listeners.remove(log_frame)


def _kernel_sources(code) -> Iterable[str]:
    """Generated kernel source of the compiled graphs a transformed code calls, where the backend
    keeps it (the cpp and triton backends' compiled graphs have a `source`)."""
    for const in code.co_consts:
        source = getattr(getattr(const, "__wrapped__", None), "source", None)
        if isinstance(source, str):
            yield source


def log_frame(record: convert_frame.FrameRecord) -> None:
    """Write one converted frame to the channels that are on."""
    name = f"{record.code.co_name} ({record.code.co_filename}:{record.code.co_firstlineno})"
    graph, guards, breaks = _loggers["graph"], _loggers["guards"], _loggers["breaks"]
    if graph.isEnabledFor(logging.DEBUG):
        for i, gm in enumerate(record.graphs):
            graph.debug("graph %d of %s:\n%s", i, name, gm.code.strip())
    if guards.isEnabledFor(logging.DEBUG) and record.check is not None:
        guards.debug("guards of %s:\n%s\n%s", name, "\n".join(f"  {g}" for g in record.check.guards),
                     record.check.source_code.rstrip())
    if breaks.isEnabledFor(logging.DEBUG):
        for reason in ExplainOutput.from_frames([record]).break_reasons:
            breaks.debug("graph break in %s: %s", name, reason)
    if record.transformed_code is None:
        return
    bytecode = _loggers["bytecode"]
    if bytecode.isEnabledFor(logging.DEBUG):
        bytecode.debug("original bytecode of %s:\n%s\ntransformed bytecode:\n%s", name,
                       dis.Bytecode(record.code).dis(), dis.Bytecode(record.transformed_code).dis())
    output_code = _loggers["output_code"]
    if output_code.isEnabledFor(logging.DEBUG):
        report = ExplainOutput.from_frames([record]).frame_reports[0]
        output_code.debug("transformed code of %s:\n%s", name, report.transformed.source)
        for source in _kernel_sources(record.transformed_code):
            output_code.debug("kernel source for %s:\n%s", name, source)


set_logs(os.environ.get(ENV_VAR))
