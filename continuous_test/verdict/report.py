"""The failure report a person reads, and the exception that carries it.

The error of a failed verdict is the rank's exception itself when it travelled
(see :class:`~continuous_test.wire.outcome.ErrorRecord`), so ``except
CalledProcessError`` still catches it and ``returncode`` is still there; its
``str()`` is the report, whose first line names the test and the failing ranks
whatever the exception's own ``__str__`` does.  When the exception did not
travel, a :class:`~continuous_test.errors.RemoteError` carries the same report.

Every error also carries ``ct_ranks`` (one :class:`RankReport` per rank) and
``ct_sections`` (extra :class:`ReportSection` blocks), which the pytest plugin
turns into report sections.  To add a block to a report, append a
``ReportSection`` to ``Report.sections`` where the report is built
(:mod:`continuous_test.verdict.merge`): it is printed at the end of the message
and becomes its own pytest section.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from continuous_test.errors import RemoteAssertionError, RemoteError, RemoteTraceback
from continuous_test.verdict.text import indent, prefix_lines, rank_list
from continuous_test.verdict.timeline import HEADING, Timeline
from continuous_test.wire.outcome import ErrorRecord


class RankStatus(enum.Enum):
    """One rank's part in a report, as the pytest plugin titles its section."""

    PASSED = "passed"
    SKIPPED = "skipped"
    ENDED_AS_EXPECTED = "ended as expected"
    FAILED = "failed"
    UNEXPECTED_ENDING = "unexpected ending"
    DIED = "died"
    TEMPLATE_DIED = "template died"
    STUCK = "stuck"
    TIMED_OUT = "timed out"
    NO_REPORT = "no report"
    INTERRUPTED = "interrupted"

    @property
    def is_problem(self) -> bool:
        """True for a rank that did not pass, skip or end as declared."""
        return self not in (RankStatus.PASSED, RankStatus.SKIPPED, RankStatus.ENDED_AS_EXPECTED)


@dataclass(frozen=True)
class RankReport:
    """One rank's part of a failure report; merged errors carry them as ``ct_ranks``."""

    status: RankStatus
    detail: str = ""
    output: str = ""


# Statuses of a rank whose own code raised or ended its process; the others did not pass by waiting.
_OWN_FAILURES = (RankStatus.FAILED, RankStatus.DIED, RankStatus.UNEXPECTED_ENDING)
# How a collective reads that failed only because a peer never came or went away
# (gloo's and NCCL's timeouts, a peer's closed connection).
WAITED_FOR_A_PEER = re.compile(r"Timed out waiting \d+ ?ms for \w+ operation|Watchdog caught collective operation timeout"
                               r"|Connection closed by peer|Connection reset by peer")


def failing_ranks(statuses: Dict[int, RankReport]) -> List[int]:
    """Every rank that did not pass (nor skip, nor end as declared), sorted."""
    return sorted(rank for rank, report in statuses.items() if report.status.is_problem)


def raising_ranks(statuses: Dict[int, RankReport]) -> List[int]:
    """The ranks whose own code raised (or ended its process), apart from the ranks that only waited for them.

    A rank stuck, timed out or silent waited; so did one whose error is a
    collective a peer broke (:data:`WAITED_FOR_A_PEER`), when another rank failed
    in its own code.  Empty when no rank's code raised (a hang on every rank).
    """
    own = {rank: report for rank, report in statuses.items() if report.status in _OWN_FAILURES}
    first = [rank for rank, report in own.items()
             if report.status is not RankStatus.FAILED or not WAITED_FOR_A_PEER.search(report.detail)]
    return sorted(first or own)


@dataclass(frozen=True)
class ReportSection:
    """An extra titled block of a report: appended to the message, and its own pytest section."""

    title: str
    text: str
    # The line that introduces it in the message (default: the title and a colon).
    heading: Optional[str] = None


# The collective timeline's section (continuous_test.verdict.timeline writes its text).
TIMELINE_TITLE = "collective timeline"


@dataclass
class Report:
    """One failure report as it is built: its lines, the rank errors behind it, and its extras."""

    lines: List[str]
    records: List[Tuple[int, ErrorRecord]] = field(default_factory=list)
    statuses: Dict[int, RankReport] = field(default_factory=dict)
    sections: List[ReportSection] = field(default_factory=list)
    note: Optional[str] = None

    def add_errors(self, records: List[Tuple[int, ErrorRecord]]) -> None:
        """One line per group of ranks that failed with the same type, message and test-file line."""
        self.records.extend(records)
        groups: Dict[Tuple[str, str, str], List[int]] = {}
        for rank, record in records:
            groups.setdefault((record.headline(), record.message, record.location), []).append(rank)
        for (headline, _, location), ranks in groups.items():
            self.lines.append(f"{rank_list(ranks)}: {headline}" + (f" ({location})" if location else ""))

    def add_timeline(self, timeline: Optional[Callable[[], Optional[Timeline]]], always: bool) -> None:
        """The collective timeline as a section, when it belongs in this report (always, or when ranks diverged)."""
        built = timeline() if timeline is not None else None
        if built is not None and (always or built.divergent):
            self.sections.append(ReportSection(TIMELINE_TITLE, built.text, HEADING))

    def add_outputs(self, outputs: Dict[int, str]) -> None:
        """Each rank's output, prefixed ``[rankN]``."""
        for rank in sorted(outputs):
            if outputs[rank].strip():
                self.lines += [f"rank {rank} output:", prefix_lines(rank, outputs[rank]).rstrip("\n")]

    def head(self) -> str:
        """The message without what a runner shows in sections of its own: outputs, stacks, the timeline."""
        kept: List[str] = []
        skip_next = False
        for line in self.lines:
            if skip_next:
                skip_next = False
                continue
            if re.fullmatch(r"rank \d+ output:", line):
                skip_next = True  # its output follows, as one line of the report
                continue
            if re.match(r"rank \d+ stacks \(", line):
                continue
            kept.append(line)
        return "\n".join(kept + ([self.note] if self.note else []))

    def text(self) -> str:
        """The message: lines, extra sections, then the note."""
        parts = list(self.lines)
        parts += [f"{s.heading or s.title + ':'}\n{indent(s.text.rstrip())}" for s in self.sections]
        return "\n".join(parts + ([self.note] if self.note else []))

    def error(self, etype: Optional[type] = None) -> BaseException:
        """The exception to raise: ``etype``'s, else the first failing rank's own, headed by this report."""
        text = self.text()
        error = etype(text) if etype is not None else _headed(self.records[0][1], text)
        _chain_causes(error, self.records)
        error.ct_ranks = dict(sorted(self.statuses.items()))  # type: ignore[union-attr]
        error.ct_sections = list(self.sections)  # type: ignore[union-attr]
        error.ct_head = self.head()  # type: ignore[union-attr]
        for section in self.sections:
            if section.title == TIMELINE_TITLE:  # also on its own, for callers of the API
                error.ct_timeline = section.text  # type: ignore[union-attr]
        return error


def _chain_causes(error: BaseException, records: List[Tuple[int, ErrorRecord]]) -> None:
    """Chain each distinct rank traceback (once for all ranks that share it) as ``__cause__``."""
    groups: Dict[str, List[int]] = {}
    for rank, record in records:
        groups.setdefault(record.traceback.rstrip("\n"), []).append(rank)
    top = error
    for tb, ranks in groups.items():
        cause = RemoteTraceback(f"\n[{rank_list(ranks)}] {tb}")
        top.__cause__ = cause
        top = cause


# Exceptions that must not be raised again where the verdict is replayed: they would end that process.
_NOT_RERAISED = (SystemExit, KeyboardInterrupt, GeneratorExit)


def _headed(record: ErrorRecord, text: str) -> BaseException:
    """The rank's own exception whose ``str()`` is ``text``; a :class:`RemoteError` if it did not travel."""
    original = record.exception()
    if original is not None and not isinstance(original, _NOT_RERAISED):
        return _with_report(original, text)
    return (RemoteAssertionError if record.is_failure else RemoteError)(text)


def _with_report(exc: BaseException, text: str) -> BaseException:
    """``exc`` (or, for a builtin type, a copy of it) as a subclass of its type whose ``str()`` is the report."""
    exc.ct_report = text  # type: ignore[attr-defined]
    try:
        headed = _headed_type(type(exc))
    except Exception:  # a type that cannot be subclassed: the report goes in a note
        add_note(exc, text)
        return exc
    try:
        exc.__class__ = headed  # the very object the rank raised
        return exc
    except TypeError:  # builtin types refuse a new __class__: rebuild it as pickle does
        pass
    try:
        copy = headed(*exc.args)
        copy.__dict__.update(vars(exc))
        return copy
    except Exception:
        add_note(exc, text)
        return exc


_HEADED: Dict[type, type] = {}


def _headed_type(etype: type) -> type:
    """A subclass of ``etype``, named as it is, whose ``str()`` is the report (made once per type)."""
    headed = _HEADED.get(etype)
    if headed is None:
        namespace = {"__slots__": (), "__module__": etype.__module__, "__qualname__": etype.__qualname__,
                     "__doc__": etype.__doc__, "__str__": _report_str, "__reduce__": _plain_reduce}
        headed = _HEADED[etype] = type(etype.__name__, (etype,), namespace)
    return headed


def _report_str(self: BaseException) -> str:
    return self.__dict__["ct_report"]


def _plain_reduce(self: BaseException):
    # Pickles as the rank's own type: the headed subclass exists only in this process.
    base = type(self).__bases__[0]
    reduced = list(base.__reduce__(self))  # type: ignore[call-arg]
    if reduced[0] is type(self):
        reduced[0] = base
    return tuple(reduced)


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)``, which Python 3.10 lacks: there the note joins the message."""
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:
        join_note(error, note)


# The notes join_note added, in order: pytest's short report of a rank's failure keeps the head and these.
JOINED_NOTES = "ct_joined_notes"


def join_note(error: BaseException, note: str) -> None:
    """Python 3.10's note: appended to what ``str(error)`` shows (a merged report's text, else its message)."""
    try:
        setattr(error, JOINED_NOTES, [*getattr(error, JOINED_NOTES, ()), note])
    except AttributeError:  # an exception without a __dict__: only its message carries the note
        pass
    if isinstance(getattr(error, "__dict__", {}).get("ct_report"), str) and type(error).__str__ is _report_str:
        error.__dict__["ct_report"] += f"\n{note}"  # str() of a merged report is its text, not its args
    elif error.args and isinstance(error.args[0], str):
        error.args = (f"{error.args[0]}\n{note}",) + error.args[1:]
    else:
        error.args = error.args + (note,)
