"""Feedback on long kernel builds: a g++ build that runs past `config.compile_progress_after`
seconds shows `kernels built / total` on stderr, live on a terminal, as one line at the end
otherwise; `config.compile_progress = False` turns it off."""
from __future__ import annotations

import sys
import time
from typing import Optional, TextIO

from .. import config


class BuildProgress:
    """Progress of one build of `total` kernels; `update` as units finish, `finish` at the end."""

    def __init__(self, total: int, units: int, stream: Optional[TextIO] = None):
        self.total, self.units = total, units
        self.built = 0
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.perf_counter()
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self._shown = False  # a live line is on the terminal

    def _due(self) -> bool:
        return config.compile_progress and time.perf_counter() - self.start >= config.compile_progress_after

    def update(self, built: int) -> None:
        """`built` kernels are done (called while the build runs, also with no change)."""
        self.built = built
        if self.live and self._due():
            self._write(f"\r[minidynamo] g++: {built}/{self.total} kernels built "
                        f"({time.perf_counter() - self.start:.1f} s)")
            self._shown = True

    def finish(self) -> None:
        elapsed = time.perf_counter() - self.start
        if not self._due():
            if self._shown:
                self._write("\n")
            return
        units = f" in {self.units} parallel units" if self.units > 1 else ""
        line = f"[minidynamo] g++: {self.total}/{self.total} kernels built{units} ({elapsed:.1f} s)"
        self._write(("\r" + line if self._shown else line) + "\n")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: feedback is optional
            pass
