"""pytest's reports of distributed tests: a plugin object the pytest plugin registers at configure.

::

    a test's phase ends ─► pytest's unittest support puts the exception on the call
      ─► RankReports.pytest_runtest_makereport_hide_frames: a rank's failure shows the ranks' tracebacks,
         not this process's frames
      ─► pytest makes the report
      ─► RankReports.pytest_runtest_makereport: one section per way ranks did not pass, the other ranks,
         the failing and raising ranks and every other diagnosis as properties (junitxml writes them),
         the shuffle seed, the short summary's message, and how the test ended so far (:data:`OUTCOME`)

Touches: the test's reports and its ``user_properties``, nothing else.
"""
from __future__ import annotations

from typing import Any, Optional

import pytest

from continuous_test._role import rank_class_of
from continuous_test.session.pytest_shards import REPEAT

__all__ = ["RankReports", "OUTCOME", "NO_GROUP_IN_A_FIXTURE", "NO_DEFAULT_GROUP"]

NAME = "continuous_test.reports"
OUTCOME = pytest.StashKey[str]()  # how a test ended so far, in the run report's words

NO_GROUP_IN_A_FIXTURE = (
    "continuous_test: {fixture} of {test} ran in the pytest process (the controller), not in the ranks: "
    "pytest runs a distributed test's fixtures there, once, before the test runs on every rank, and that "
    "process has no process group. Call torch.distributed in the test itself (or in a helper it calls); "
    "let the fixture return plain values, which reach every rank (see README.rst, Test functions)"
)
NO_DEFAULT_GROUP = "Default process group has not been initialized"  # torch's ValueError, from every dist call


def _test_class(item: pytest.Item) -> Optional[type]:
    return rank_class_of(getattr(item, "cls", None)) or rank_class_of(getattr(item, "function", None))


class RankReports:
    """Registered in every process that runs tests: shapes each distributed test's reports."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        """Add one section per rank that did not pass, and the failing ranks as a property; at teardown, every
        other diagnosis of the test as a property (junitxml reads the teardown report's)."""
        if call.when == "teardown":
            self._add_properties(item)
        if call.when == "setup" and call.excinfo is not None:
            _note_where_fixtures_run(item, call.excinfo)
        outcome = yield
        report = outcome.get_result()
        _note_outcome(item, call.when, report)
        if call.excinfo is not None and report.failed:
            _add_seed_section(report)
        ranks = getattr(call.excinfo.value, "ct_ranks", None) if call.when == "call" and call.excinfo else None
        if ranks:
            _add_rank_sections(item, report, call.excinfo)

    # pytest reads hooks only from names that start with pytest_ (specname names the hook this one is).
    @pytest.hookimpl(specname="pytest_runtest_makereport")
    def pytest_runtest_makereport_hide_frames(self, item: pytest.Item, call: pytest.CallInfo) -> None:
        """Show a rank failure as the ranks' tracebacks alone, without this process's frames.

        Runs after pytest's unittest support put the test's exception on ``call``
        (its hook is ``tryfirst``) and before the report is made.  The frames here are
        unittest's run and the replay, all hidden; pytest shows unittest's frames when
        nothing else is left, so none is kept.
        """
        from continuous_test.verdict.replay import VERDICT_ATTR

        excinfo = call.excinfo if call.when == "call" else None
        value = excinfo.value if excinfo is not None else None
        if excinfo is not None and (getattr(value, "ct_ranks", None) or getattr(value, VERDICT_ATTR, False)):
            # A rank's failure, or another verdict (a leak under the 'fail' policy, an
            # inconsistent skip, a time limit): none of the frames here is the test's.
            excinfo.traceback = excinfo.traceback.filter(lambda entry: False)
            if value is not None and getattr(value, "ct_ranks", None) and getattr(value, "ct_head", None):
                _print_once(value)

    def _add_properties(self, item: pytest.Item) -> None:
        from continuous_test.controller import run_log

        have = {name for name, _ in item.user_properties}
        item.user_properties.extend(p for p in run_log.log().properties(item.nodeid) if p[0] not in have)
        run = item.stash.get(REPEAT, None)
        if run is not None and "repeat" not in have:  # --ct-repeat: which run this is (the counts: the JSON report)
            from continuous_test.session.repeat import run_tag

            item.user_properties.append(("repeat", run_tag(run.mode, run.number, run.count)))


def _add_rank_sections(item: pytest.Item, report: pytest.TestReport, excinfo: Any) -> None:
    """One section per way ranks did not pass (ranks alike share one), one for the other ranks, the error's own."""
    from continuous_test.controller import run_log
    from continuous_test.verdict.report import failing_ranks, raising_ranks
    from continuous_test.verdict.text import rank_list

    error = excinfo.value
    ranks = error.ct_ranks
    others = []
    alike: dict = {}  # ranks that did not pass in the same way share one section
    for rank, info in sorted(ranks.items()):
        if not info.status.is_problem:
            others.append(f"rank {rank}: {info.status.value}")
            continue
        alike.setdefault((info.status, info.detail.rstrip(), info.output.rstrip()), []).append(rank)
    for (status, detail, output), same in alike.items():
        body = detail + (f"\n--- output of {rank_list(same)} ---\n{output}" if output.strip() else "")
        report.sections.append((f"{rank_list(same)}: {status.value}", body + "\n"))
    if others:
        report.sections.append(("other ranks", "\n".join(others) + "\n"))
    for section in getattr(error, "ct_sections", ()):
        report.sections.append((section.title, section.text.rstrip() + "\n"))
    run_log.log().error_seen(error)  # under a launcher, no world's run gave the ranks
    item.user_properties.append(("failing_ranks", ",".join(map(str, failing_ranks(ranks)))))
    item.user_properties.append(("raising_ranks", ",".join(map(str, raising_ranks(ranks)))))
    _summary_message(item, report, excinfo)


def _note_where_fixtures_run(item: pytest.Item, excinfo: Any) -> None:
    """A distributed test's fixture that called torch.distributed in the controller: say where fixtures run.

    Under a launcher each rank runs its own fixtures, in a process that has the group.
    """
    if NO_DEFAULT_GROUP not in str(excinfo.value) or _test_class(item) is None:
        return
    from continuous_test._launch import detect
    from continuous_test.verdict.report import add_note  # Python 3.10 has no BaseException.add_note

    if detect().is_launcher:
        return
    add_note(excinfo.value, NO_GROUP_IN_A_FIXTURE.format(fixture=_raising_fixture(item, excinfo), test=item.nodeid))


def _raising_fixture(item: pytest.Item, excinfo: Any) -> str:
    """``the fixture 'name'`` whose function the traceback passed through last, else ``a fixture``."""
    info = getattr(item, "_fixtureinfo", None)
    codes = {}
    for name, defs in (getattr(info, "name2fixturedefs", None) or {}).items():
        for fixturedef in defs:
            code = getattr(getattr(fixturedef, "func", None), "__code__", None)
            if code is not None:
                codes[code] = name
    tb = excinfo.value.__traceback__
    found = None
    while tb is not None:
        found = codes.get(tb.tb_frame.f_code, found)
        tb = tb.tb_next
    return f"the fixture {found!r}" if found else "a fixture"


def _note_outcome(item: pytest.Item, when: str, report: pytest.TestReport) -> None:
    """Keep how the test ended so far, as the run report says it (a failure outranks the rest)."""
    from continuous_test.controller import run_log

    if hasattr(report, "wasxfail"):
        outcome: Optional[str] = run_log.XFAILED if report.skipped else run_log.XPASSED
    elif report.failed:
        outcome = run_log.FAILED if when == "call" else run_log.ERROR
    elif report.skipped:
        outcome = run_log.SKIPPED
    else:
        outcome = run_log.PASSED if when == "call" else None
    if outcome is not None:
        item.stash[OUTCOME] = run_log.outcome_after(item.stash.get(OUTCOME, None), outcome)


def _print_once(error: BaseException) -> None:
    """Keep out of the exception what the rank sections show (tracebacks, outputs, stacks, the timeline).

    pytest prints the exception, its chained causes (each rank's traceback) and
    then the report's sections (:meth:`RankReports.pytest_runtest_makereport`), which hold
    the same: the exception keeps only the report's head and notes.
    """
    from continuous_test.verdict.report import JOINED_NOTES

    # Python 3.10 has no __notes__: there the notes joined the report (verdict.report.join_note).
    head = getattr(error, "ct_head") + "".join(f"\n{note}" for note in getattr(error, JOINED_NOTES, ()))
    if "ct_report" in vars(error):  # a rank's own exception type, headed by the report
        error.ct_report = head  # type: ignore[attr-defined]
    else:
        error.args = (head,)
    error.__cause__ = None
    error.__suppress_context__ = True


def _summary_message(item: pytest.Item, report: pytest.TestReport, excinfo: Any) -> None:
    """Give the short test summary (``FAILED x.py::T::test - ...``) the first line of the report.

    With no frame of this process shown, pytest finds no line to take it from.
    """
    longrepr: Any = report.longrepr
    if getattr(longrepr, "reprcrash", False) is not None:
        return
    try:
        from _pytest._code.code import ReprFileLocation
    except ImportError:  # a pytest without it: the summary stays without a message
        return
    path, lineno, _ = item.location
    crash = ReprFileLocation(path, (lineno or 0) + 1, excinfo.exconly(tryshort=True))
    longrepr.reprcrash = crash
    chain = getattr(longrepr, "chain", None)
    if chain:  # what xdist sends to its controller, which rebuilds reprcrash from the chain's last entry
        chain[-1] = (chain[-1][0], crash, chain[-1][2])


def _add_seed_section(report: pytest.TestReport) -> None:
    from continuous_test import config as ct_config

    line = ct_config.shuffle_failure_line()
    if line is not None and line not in str(report.longrepr):  # distributed tests carry it as a note
        report.sections.append(("continuous_test shuffle", line + "\n"))
