"""Rewriting the benchmark section of docs/benchmarks.rst from a run: never figures typed by hand.

Only the text between the ``.. benchmark-results-start`` and
``.. benchmark-results-end`` comment lines is replaced.  If the markers are
missing, a "Benchmarks" heading and the two markers are appended at the end.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["START", "END", "HEADING", "update", "replace_between"]

START = ".. benchmark-results-start"
END = ".. benchmark-results-end"
HEADING = "Benchmarks\n----------\n"
MARKERS_BROKEN = "{path}: found {start} {n_start} time(s) and {end} {n_end} time(s); expected once each, start first"


def replace_between(text: str, content: str, path: str = "docs/benchmarks.rst") -> str:
    """``text`` with everything between the markers replaced by ``content``."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.rstrip() == START]
    ends = [i for i, line in enumerate(lines) if line.rstrip() == END]
    if not starts and not ends:
        text = text.rstrip("\n") + f"\n\n{HEADING}\n{START}\n{END}\n"
        return replace_between(text, content, path)
    if len(starts) != 1 or len(ends) != 1 or starts[0] > ends[0]:
        raise ValueError(MARKERS_BROKEN.format(path=path, start=START, n_start=len(starts),
                                               end=END, n_end=len(ends)))
    head, tail = lines[: starts[0] + 1], lines[ends[0]:]
    return "".join(head) + "\n" + content.strip("\n") + "\n\n" + "".join(tail)


def update(path: Path, content: str) -> None:
    """Rewrite the benchmark section of ``path``; run.py calls this with --update-readme."""
    text = path.read_text(encoding="utf-8")
    path.write_text(replace_between(text, content, str(path)), encoding="utf-8")
