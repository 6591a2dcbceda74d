"""Live progress of a running distributed test: heartbeats, and the ranks' output as it comes.

* **Heartbeat.**  In verbose mode (unittest's ``-v``, pytest's ``-v``) a test still
  running after ``CONTINUOUS_TEST_HEARTBEAT`` seconds (default 10; 0 turns it off)
  prints one line, and again at that interval: the test, the seconds so far and its
  time limit, and the ranks that have not finished it.  None is printed in the
  last second before the time limit, whose report comes then.
* **Live output.**  ``CONTINUOUS_TEST_LIVE_OUTPUT=1`` (or pytest's
  ``--ct-live-output``) prints every rank's output while the test runs, each line
  prefixed ``[rankN]``, instead of only in the report.

The controller's one wait loop (:meth:`continuous_test.controller.watch.Watch.wait`) calls a
:class:`Progress` when one is due; with both off there is no ``Progress`` and the
wait is unchanged.  Lines go where the runner prints: unittest's result stream,
or pytest's terminal (past its output capture).
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Optional

from continuous_test import config
from continuous_test.wire.env import ENV_HEARTBEAT, ENV_LIVE_OUTPUT, ENV_TB_LOCALS, parse_switch

__all__ = [
    "Progress",
    "observe",
    "use_pytest",
    "use_unittest",
    "for_test",
    "note_waiting",
    "heartbeat_seconds",
    "under_pytest",
    "stop_after_this_test",
    "take_stop",
    "live_output",
    "ENV_HEARTBEAT",
    "ENV_LIVE_OUTPUT",
    "DEFAULT_HEARTBEAT",
    "HEARTBEAT",
    "LIVE_POLL",
]

DEFAULT_HEARTBEAT = 10.0
# How often the rank logs are checked for new output when it is shown live:
# nothing signals that a file grew, and a quarter second reads as live.
LIVE_POLL = 0.25
HEARTBEAT = "continuous_test: {test} still running after {elapsed:.0f} s (time limit {limit:g} s); {ranks} not done"
# No heartbeat this close to the time limit: the time limit's own report follows.
HEARTBEAT_QUIET = 1.0

Emit = Callable[[str, bool], None]


@dataclass
class _Where:
    """Where progress lines go and whether heartbeats are wanted; set by the runner in use."""

    verbose: bool = False
    emit: Optional[Emit] = None
    # pytest's --ct-live-output; None defers to the environment.
    live: Optional[bool] = None
    # Set by the pytest plugin: unittest results seen afterwards are pytest's, not a runner's.
    pytest: bool = False
    # Why pytest's session is to stop after the test that runs now (None: it goes on).
    stop: Optional[str] = None


_where = _Where()


def observe(result: Any) -> None:
    """Note how verbose a unittest ``result`` is and where it prints; ignored while pytest's terminal is used."""
    if _where.pytest:
        return
    stream = getattr(result, "stream", None)
    _where.verbose = bool(getattr(result, "showAll", False))
    if getattr(result, "tb_locals", False):  # --locals: the ranks' tracebacks show them too
        os.environ[ENV_TB_LOCALS] = "1"
    _where.emit = _stream_emitter(stream) if stream is not None else None


def use_pytest(verbose: bool, emit: Optional[Emit], live: Optional[bool]) -> None:
    """Print progress through pytest's terminal (``emit``) from now on, until :func:`use_unittest`."""
    _where.verbose, _where.emit, _where.live, _where.pytest = verbose, emit, live, True


def under_pytest() -> bool:
    """Whether pytest runs the tests (its plugin called :func:`use_pytest`)."""
    return _where.pytest


def stop_after_this_test(why: str) -> None:
    """Ask pytest to stop its session after the test that runs now (a Ctrl-C during its rerun), saying ``why``."""
    _where.stop = why


def take_stop() -> Optional[str]:
    """Why pytest's session should stop after the test that just ran (None: it goes on); asked once per test."""
    why, _where.stop = _where.stop, None
    return why


def use_unittest() -> None:
    """Forget pytest's terminal and options: progress goes to unittest results again."""
    global _where
    _where = _Where()


def _stream_emitter(stream: Any) -> Emit:
    def emit(line: str, first: bool) -> None:
        # unittest -v left "test_x (...) ... " open on this line.
        stream.write(("\n" if first else "") + line + "\n")
        stream.flush()

    return emit


def heartbeat_seconds(env=os.environ) -> float:
    """Seconds between heartbeats from ``CONTINUOUS_TEST_HEARTBEAT`` (0: off); bad values raise ConfigError."""
    raw = env.get(ENV_HEARTBEAT, "").strip()
    if not raw:
        return DEFAULT_HEARTBEAT
    if raw in ("0", "0.0"):
        return 0.0
    return config.parse_seconds(raw, "heartbeat", f"{ENV_HEARTBEAT} environment variable")


def live_output(env=os.environ) -> bool:
    """True when rank output is shown live (pytest's option, else ``CONTINUOUS_TEST_LIVE_OUTPUT``)."""
    if _where.live is not None:
        return _where.live
    return parse_switch(ENV_LIVE_OUTPUT, env)


def for_test(test: str, limit: float, ranks: Iterable[Any], start: Optional[float] = None) -> Optional["Progress"]:
    """The progress of one test sent to ``ranks`` (RankProcess handles) at ``start`` (default now), or None when off.

    Live output starts where each rank's output was marked when the test was sent.
    """
    beat = heartbeat_seconds() if _where.verbose else 0.0
    live = live_output()
    if not beat and not live:
        return None
    return Progress(test, limit, {h.rank: h for h in ranks}, beat, live, _where.emit or _stderr, start)


def say_verbose(text: str) -> None:
    """In verbose mode only, one line where progress lines go (a world's choice: why a class has one of its own)."""
    if _where.verbose:
        (_where.emit or _stderr)(text, True)


def note_waiting() -> Optional[Callable[[str], None]]:
    """Where a world waiting for devices says what it waits for (:mod:`continuous_test.controller.devices`):
    heartbeat lines, printed as the heartbeats of a running test are; None when those are off."""
    if not _where.verbose:
        return None
    emit = _where.emit or _stderr
    state = {"first": True}

    def line(text: str) -> None:
        emit(text, state["first"])
        state["first"] = False

    return line


def _stderr(line: str, first: bool) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class Progress:
    """Heartbeats and live output of one test: :meth:`tick` prints what is due at :meth:`next_due`."""

    def __init__(self, test: str, limit: float, handles: Dict[int, Any], beat: float, live: bool, emit: Emit,
                 start: Optional[float] = None) -> None:
        self.test, self.limit, self.beat, self.emit = test, limit, beat, emit
        self.start = time.monotonic() if start is None else start
        self.next_beat = self.start + beat if beat else float("inf")
        self.next_poll = self.start + LIVE_POLL if live else float("inf")
        self.handles = handles if live else {}
        # Per rank: how far its log was shown, and a line it has not finished yet.
        self.offsets = {rank: h.log_offset for rank, h in self.handles.items()}
        self.partial: Dict[int, str] = {rank: "" for rank in self.handles}
        self.emitted = False

    def next_due(self) -> float:
        """When this progress next needs the wait loop to wake up."""
        return min(self.next_beat, self.next_poll)

    def tick(self, pending: Iterable[int]) -> None:
        """Print what is due now: new rank output, then a heartbeat naming the ``pending`` ranks."""
        now = time.monotonic()
        if now >= self.next_poll:
            self._show_output(final=False)
            self.next_poll = now + LIVE_POLL
        if now >= self.next_beat:
            from continuous_test.verdict.text import rank_list

            if self.start + self.limit - now > HEARTBEAT_QUIET:
                ranks = sorted(pending)
                self._line(HEARTBEAT.format(test=self.test, elapsed=now - self.start, limit=self.limit,
                                            ranks=rank_list(ranks) if ranks else "no rank"))
            self.next_beat = now + self.beat

    def finish(self) -> None:
        """Show the last of the ranks' output, unfinished lines included."""
        if self.handles:
            self._show_output(final=True)

    def _show_output(self, final: bool) -> None:
        for rank, handle in self.handles.items():
            if handle.log_fd < 0:
                continue
            size = handle.log_size()
            if size > self.offsets[rank]:
                data = os.pread(handle.log_fd, size - self.offsets[rank], self.offsets[rank])
                self.offsets[rank] += len(data)
                self.partial[rank] += data.decode("utf-8", "replace")
            lines = self.partial[rank].split("\n")
            self.partial[rank] = "" if final else lines.pop()
            for line in lines if not final else [text for text in lines if text]:
                self._line(f"[rank{rank}] {line}")

    def _line(self, text: str) -> None:
        self.emit(text, not self.emitted)
        self.emitted = True
