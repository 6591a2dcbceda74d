"""A launched rank's output while its test runs: captured for the merged report, as without a launcher.

Without a launcher a rank's output goes to its log, and a failure's report shows
it after ``rank N output:``, each line prefixed ``[rankN]``.  A launched rank is
its own process on the launcher's terminal: while a test runs, its file
descriptors 1 and 2 go to a temporary file instead (:class:`Output`), whose text
travels with the rank's outcome through the store, so the report rank 0 prints
shows every rank's output under its rank, rather than the ranks' lines raw and
mixed above it.  ``CONTINUOUS_TEST_LIVE_OUTPUT=1`` leaves the output on the
terminal as it comes.

What must reach the terminal meanwhile goes to the descriptor kept in
:data:`terminal`: the time limit's report (:func:`say`), with what the rank
printed in the test so far when the rank exits in it, and faulthandler's dumps
(a crash, the time limit's backstop).
"""
from __future__ import annotations

import faulthandler
import os
import sys
import tempfile
from typing import Any, List, Optional

from continuous_test.wire.env import ENV_LIVE_OUTPUT, parse_switch

__all__ = ["Output", "say", "so_far", "terminal", "MAX_LINES"]

MAX_LINES = 200  # of a rank's output in a launched test's report: its tail (the store carries it to every rank)
# The launcher's stderr while a test's output is captured, else None.
terminal: List[Optional[int]] = [None]
# The file the running test's output goes to, while it is captured.
_current: List[Any] = [None]


def say(text: str) -> None:
    """Write ``text`` and its newline to the terminal's stderr in one write: ranks share the launcher's
    terminal, and a stream that writes through (``PYTHONUNBUFFERED``) would let another rank's line in between."""
    fd = terminal[0]
    if fd is not None:
        os.write(fd, (text + "\n").encode("utf-8", "replace"))
        return
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def so_far() -> str:
    """What the running test printed so far ("" when its output is not captured)."""
    file = _current[0]
    if file is None:
        return ""
    _flush()
    try:
        return os.pread(file.fileno(), 1 << 20, 0).decode("utf-8", "replace")
    except OSError:
        return ""


class Output:
    """Context manager: the rank's file descriptors 1 and 2 go to a temporary file; ``text`` is what came."""

    def __init__(self) -> None:
        self.text: Optional[str] = None
        self._file: Any = None
        self._saved: List[int] = []
        self._faulthandler = False

    def __enter__(self) -> "Output":
        if parse_switch(ENV_LIVE_OUTPUT):
            return self
        _flush()
        self._file = tempfile.TemporaryFile()  # unlinked at once: nothing is left behind
        self._saved = [os.dup(1), os.dup(2)]
        os.dup2(self._file.fileno(), 1)
        os.dup2(self._file.fileno(), 2)
        terminal[0], _current[0] = self._saved[1], self._file
        self._faulthandler = faulthandler.is_enabled()
        if self._faulthandler:  # a crash's traceback still reaches the terminal
            faulthandler.enable(file=self._saved[1], all_threads=True)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._file is None:
            return
        _flush()
        if self._faulthandler:
            faulthandler.enable(file=sys.stderr, all_threads=True)
        terminal[0] = _current[0] = None
        for fd, saved in zip((1, 2), self._saved):
            os.dup2(saved, fd)
            os.close(saved)
        self._file.seek(0)
        text = self._file.read().decode("utf-8", "replace")
        self._file.close()
        self.text = tail(text) or None


def tail(text: str) -> str:
    """``text`` cut to its last :data:`MAX_LINES` lines, saying how many were left out."""
    lines = text.splitlines(keepends=True)
    if len(lines) <= MAX_LINES:
        return text
    return f"... {len(lines) - MAX_LINES} line(s) left out\n" + "".join(lines[-MAX_LINES:])


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a stream a test replaced and closed
            pass
