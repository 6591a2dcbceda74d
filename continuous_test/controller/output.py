"""A rank's output in a report: bounded, and kept whole on disk.

A test that prints megabytes would print them again in its report (twice under
pytest, and once more in a junit body).  A report shows at most
:data:`HEAD_LINES` lines from the start and :data:`TAIL_LINES` from the end of
each rank's output (each line cut to :data:`MAX_LINE` characters), with the
number of lines left out and the path of a file holding the whole output
(``continuous_test.wire.kept``: removed when the run ends, unless
``CONTINUOUS_TEST_KEEP_OUTPUT=1`` keeps it; the report names the path either way).

Controller side only.
"""
from __future__ import annotations

from continuous_test.wire import kept
from continuous_test.wire.env import ENV_KEEP_OUTPUT

__all__ = ["bounded", "HEAD_LINES", "TAIL_LINES", "MAX_LINE", "LEFT_OUT", "ENV_KEEP_OUTPUT"]

HEAD_LINES = 100
TAIL_LINES = 100
MAX_LINE = 2000
LEFT_OUT = "... {lines} line(s), {chars} character(s) left out; the whole output of rank {rank}: {path}\n"


def bounded(text: str, test: str, rank: int) -> str:
    """``text`` as a report shows it: whole when short, else its head and tail and where the rest is."""
    lines = text.splitlines(keepends=True)
    if len(lines) <= HEAD_LINES + TAIL_LINES and all(len(line.rstrip("\n")) <= MAX_LINE for line in lines):
        return text
    path = _save(text, test, rank)
    head, tail = lines[:HEAD_LINES], lines[HEAD_LINES:][-TAIL_LINES:]
    middle = lines[HEAD_LINES:len(lines) - len(tail)]
    shown = [_cut(line) for line in head] + [_cut(line) for line in tail]
    left_chars = len(text) - sum(len(line) for line in shown)
    note = LEFT_OUT.format(lines=len(middle), chars=left_chars, rank=rank, path=path)
    return "".join(shown[:len(head)]) + note + "".join(shown[len(head):])


def _cut(line: str) -> str:
    body = line.rstrip("\n")
    if len(body) <= MAX_LINE:
        return line
    return body[:MAX_LINE] + f" ... ({len(body) - MAX_LINE} characters more)" + line[len(body):]


def _save(text: str, test: str, rank: int) -> str:
    """Write the whole output to this run's directory of whole texts; its path."""
    return kept.save(text, test, f".rank{rank}.log")
