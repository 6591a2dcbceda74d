"""Judging the leaks ranks report: one line per change, a warning or a failure."""
from __future__ import annotations

import sys
import warnings
from typing import Any, Dict, List, Optional

from continuous_test.errors import LeakError, LeakWarning
from continuous_test.verdict.text import rank_list
from continuous_test.wire.outcome import Leak, LeakReport


LEAK_HEADER = "{test} left process-global state changed (leak policy '{policy}'):"
LEAK_LINE = "  left {item} changed: {before} \u2192 {after} ({ranks})"
RESTORED = "  put back before the next test"
NOT_RESTORED = "  could not be put back ({items}): the world is restarted before the next test"
# Under a launcher the ranks are the launched processes: they go on.
NOT_RESTORED_LAUNCHED = (
    "  could not be put back ({items}): under a launcher the ranks cannot be restarted, so the tests after it "
    "run with it"
)
FAILED_BY_POLICY = "(the test fails because its leak policy is 'fail'; 'restore' would only warn)"


def format_report(test: str, reports: Dict[int, LeakReport], restartable: bool = True) -> str:
    """The text of a leak report: one line per change, with the ranks that made it, and what happens next."""
    policy = next(iter(reports.values())).policy
    by_change: Dict[Leak, List[int]] = {}
    for rank, report in sorted(reports.items()):
        for leak in report.leaks:
            by_change.setdefault(leak, []).append(rank)
    lines = [LEAK_HEADER.format(test=test, policy=policy)]
    for leak, ranks in by_change.items():
        lines.append(LEAK_LINE.format(item=leak.item, before=leak.before, after=leak.after, ranks=rank_list(ranks)))
    stuck = sorted({leak.item for leak in by_change if not leak.restored})
    if stuck:
        lines.append((NOT_RESTORED if restartable else NOT_RESTORED_LAUNCHED).format(items=", ".join(stuck)))
    else:
        lines.append(RESTORED)
    return "\n".join(lines)


def unrestored(reports: Dict[int, LeakReport]) -> bool:
    """True when some change could not be put back: the world must restart before the next test."""
    return any(not leak.restored for report in reports.values() for leak in report.leaks)


def failing(test: str, reports: Dict[int, LeakReport], restartable: bool = True) -> Optional[LeakError]:
    """The failure of a test whose leak policy is ``fail``; None under ``restore``."""
    if not any(report.policy == "fail" for report in reports.values()):
        return None
    return LeakError(f"{format_report(test, reports, restartable)}\n{FAILED_BY_POLICY}")


def warn(verdict: Any, test_function: Any) -> None:
    """Issue the restore policy's warning for ``verdict``, located at the test (``test_function``)."""
    text = getattr(verdict, "leak_report", None)
    if not text:
        return
    code = getattr(getattr(test_function, "__func__", test_function), "__code__", None)
    filename = code.co_filename if code is not None else "<unknown>"
    lineno = code.co_firstlineno if code is not None else 0
    module = getattr(test_function, "__module__", None) or "<unknown>"
    warnings.warn_explicit(LeakWarning(text), LeakWarning, filename, lineno, module=module,
                           registry=sys.modules[module].__dict__.setdefault("__warningregistry__", {})
                           if module in sys.modules else None)
