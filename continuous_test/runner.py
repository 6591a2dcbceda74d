"""``run_tests()``: the entry point of ``if __name__ == "__main__": run_tests()``.

It passes unittest's command line through (``-k``, ``-v``, ``Class.test``, ...),
detects torchrun, srun and mpiexec, and exits non-zero on any failure.  Under a launcher
only rank 0 prints the report, which already holds every rank's outcome; the
other ranks run silently and exit with the same status.  With
``CONTINUOUS_TEST_SHUFFLE=SEED`` the tests of each class, and the classes of the
module, run in an order shuffled by that seed (:mod:`continuous_test.session.shuffle`),
which is printed at the start and after every failure's traceback.
"""
from __future__ import annotations

import os
import sys
import unittest
from typing import Any, Callable, Dict, List, Optional, Sequence

from continuous_test import config, session, sizes
from continuous_test._role import rank_class_of
from continuous_test.session import shuffle, unittest_program
from continuous_test._launch import detect, export_env
from continuous_test.wire.env import ENV_REPORT, ENV_REPORT_HTML

__all__ = ["run_tests", "write_reports", "ContinuousTestRunner", "ContinuousTestResult", "EXIT_INTERRUPTED",
           "INTERRUPTED", "INTERRUPTED_DIAGNOSIS"]

EXIT_INTERRUPTED = 130
INTERRUPTED = "Interrupted (Ctrl-C) while running {test}; the ranks were stopped. {ran}"
INTERRUPTED_DIAGNOSIS = ("Interrupted (Ctrl-C) during the rerun and bisect of the failure of {test} (reported "
                         "above); the ranks were stopped. {ran}")


def _error_seen(err: Any) -> None:
    """Tell the run log the ranks of a failure (under a launcher, no world's run says them)."""
    from continuous_test.controller import run_log

    if err is not None:
        run_log.log().error_seen(err[1])


class ContinuousTestResult(unittest.TextTestResult):
    """unittest's text result that remembers the running test (for the interrupt line), ends
    each failure's report with the shuffle seed, if any, and tells the run log how each test ended."""

    # The test last started: the one Ctrl-C interrupted, if it comes.
    current: Optional[unittest.TestCase] = None
    # How the running test ended so far, in the run report's words (controller/run_log.py's, set at its start).
    _ct_outcome: Optional[str] = None
    # Between a test's start and its stopTest (a skipped subtest's addSkip comes inside).
    _ct_open = False

    def startTest(self, test: unittest.TestCase) -> None:  # noqa: N802 - unittest's name
        self._begin(test)
        super().startTest(test)

    def _begin(self, test: unittest.TestCase) -> None:
        from continuous_test.controller import run_log

        self.current = test
        self._ct_outcome = run_log.PASSED
        self._ct_open = True
        run_log.log().begin(test.id())

    def stopTest(self, test: unittest.TestCase) -> None:  # noqa: N802 - unittest's name
        from continuous_test.controller import run_log

        super().stopTest(test)
        self._ct_open = False
        run_log.log().end(test.id(), self._ct_outcome or run_log.PASSED)

    def _ended(self, word: str) -> None:
        """The test ended as run_log's outcome ``word`` (``"FAILED"``): imported here, as ranks run this
        result under a launcher and load no controller code at import."""
        from continuous_test.controller import run_log

        # A failure or error outranks the rest (a subtest's failure, then the test's success).
        self._ct_outcome = run_log.outcome_after(self._ct_outcome, getattr(run_log, word))

    def addFailure(self, test, err) -> None:  # noqa: N802 - unittest's name
        self._ended("FAILED")
        _error_seen(err)
        super().addFailure(test, err)

    def addError(self, test, err) -> None:  # noqa: N802 - unittest's name
        self._ended("ERROR")
        _error_seen(err)
        super().addError(test, err)

    def addSkip(self, test, reason) -> None:  # noqa: N802 - unittest's name
        if not self._ct_open:
            # Python 3.12.1's TestCase.run skips a test that @unittest.skip marks (the method or its
            # class) without startTest, yet calls stopTest: begin it here, or the run report loses it
            # and it takes the outcome of the test before.  unittest's count ("Ran N") stays its own.
            self._begin(test)
        self._ended("SKIPPED")
        super().addSkip(test, reason)

    def addExpectedFailure(self, test, err) -> None:  # noqa: N802 - unittest's name
        self._ended("XFAILED")
        super().addExpectedFailure(test, err)

    def addUnexpectedSuccess(self, test) -> None:  # noqa: N802 - unittest's name
        self._ended("XPASSED")
        super().addUnexpectedSuccess(test)

    def addSubTest(self, test, subtest, err) -> None:  # noqa: N802 - unittest's name
        if err is not None:
            self._ended("FAILED" if issubclass(err[0], test.failureException) else "ERROR")
            _error_seen(err)
        super().addSubTest(test, subtest, err)

    def _exc_info_to_string(self, err, test) -> str:  # noqa: N802 - unittest's name
        text = super()._exc_info_to_string(err, test)  # type: ignore[misc]
        line = config.shuffle_failure_line()
        return text if line is None or line in text else f"{text}{line}\n"


class ContinuousTestRunner(unittest.TextTestRunner):
    """A TextTestRunner that answers Ctrl-C with one line: the interrupted test and what ran."""

    resultclass = ContinuousTestResult  # type: ignore[assignment]

    def _makeResult(self) -> unittest.TextTestResult:  # noqa: N802 - unittest's name
        self.last_result = super()._makeResult()
        return self.last_result

    def run(self, test):
        """Run ``test``; on KeyboardInterrupt print earlier failures and one line, then re-raise."""
        try:
            return super().run(test)
        except KeyboardInterrupt:
            result = getattr(self, "last_result", None)
            if result is not None:
                if result.failures or result.errors:
                    result.printErrors()
                self.stream.writeln("\n" + interrupted_line(result))
                self.stream.flush()
            raise


def interrupted_line(result: unittest.TestResult) -> str:
    """The line printed on Ctrl-C: which test was running and how the tests before it ended."""
    current = getattr(result, "current", None)
    name = current.id() if current is not None else "the test run"
    # A failure already recorded, whose rerun or bisect Ctrl-C cut short: it ran.
    diagnosed = current is not None and _recorded(result, current)
    before = max(0, result.testsRun - (1 if current is not None and not diagnosed else 0))
    counts = {"failed": len(result.failures), "errors": len(result.errors), "skipped": len(result.skipped),
              "expected failures": len(result.expectedFailures),
              "unexpected successes": len(result.unexpectedSuccesses)}
    counts = {"passed": max(0, before - sum(counts.values())), **counts}
    detail = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
    ran = (f"{before} test{'s' if before != 1 else ''} ran" + ("" if diagnosed else " before it")
           + (f" ({detail})." if detail else "."))
    return (INTERRUPTED_DIAGNOSIS if diagnosed else INTERRUPTED).format(test=name, ran=ran)


def _recorded(result: unittest.TestResult, test: unittest.TestCase) -> bool:
    """Whether ``result`` holds an outcome other than a pass for ``test``."""
    listed = [*result.failures, *result.errors, *result.skipped, *result.expectedFailures]
    return any(entry[0] is test for entry in listed) or test in result.unexpectedSuccesses


class _Loader(unittest.TestLoader):
    """unittest's loader, but the unsized name of a sized test (``Class.test_x`` of ``world_size = [1, 2]``)
    loads it at every size; unittest's own loader (``python -m unittest``) names the sized names instead."""

    def loadTestsFromName(self, name: str, module: Any = None) -> unittest.TestSuite:  # noqa: N802 - unittest's
        try:
            return super().loadTestsFromName(name, module)
        except TypeError:
            found = _sized_test(name, module)
            if found is None:
                raise
            cls, sized = found
            return self.suiteClass([cls(sizes.name(sized.method, size)) for size in sized.sizes])


def _sized_test(name: str, module: Any) -> Optional[tuple]:
    """The class and :class:`~continuous_test.sizes.SizedTest` that ``name`` (relative to ``module``) names, or None."""
    parent, obj = None, module
    for part in name.split(".") if module is not None else ():
        parent, obj = obj, getattr(obj, part, None)
    if isinstance(obj, sizes.SizedTest) and isinstance(parent, type):
        return parent, obj
    return None


def run_tests(argv: Optional[List[str]] = None, module: str = "__main__") -> None:
    """Run the tests of ``module`` (the test file) with unittest's command line; never returns."""
    launch = detect()
    export_env(launch)
    silent = launch.is_launcher and launch.rank != 0
    session.tests_loaded(_runs_in_ranks(sys.modules.get(module)))  # the rank template, before any test ran
    runner = unittest_program.quiet(ContinuousTestRunner) if silent else ContinuousTestRunner  # rank 0 prints
    # Checked and made absolute now: a bad path is a usage error before any test runs, and a test
    # that changes the working directory does not move the report.
    reports = {} if silent else _report_paths()
    loader = _Loader()
    seed = config.shuffle_seed()
    if seed is not None:
        shuffle.install(loader, seed, announce=not silent)
    program = None
    try:
        program = unittest.main(module=module, argv=argv if argv is not None else sys.argv,
                                testRunner=runner, testLoader=loader, exit=False)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    finally:
        if not silent:
            repeats = getattr(getattr(program, "result", None), "repeat_reports", None)  # CONTINUOUS_TEST_REPEAT
            write_reports(reports.get(ENV_REPORT), reports.get(ENV_REPORT_HTML), repeats=repeats, sources=_SOURCES,
                          on_error=_warn)
    if not silent:
        _say_if_all_skipped()
    sys.exit(0 if program.result.wasSuccessful() else 1)


# Where run_tests() takes each report's path from, as a message names it.
_SOURCES = (f"the {ENV_REPORT} environment variable", f"the {ENV_REPORT_HTML} environment variable")
# The message of a report that could not be written at the end; the run's verdicts stand.
NOT_WRITTEN = "continuous_test: the run report for {source} was not written to {path!r}: {why}"
USAGE = "continuous_test: usage error: {error}"


def _report_paths() -> Dict[str, str]:
    """CONTINUOUS_TEST_REPORT and CONTINUOUS_TEST_REPORT_HTML, checked and absolute; a bad one exits 2."""
    from continuous_test.errors import ConfigError
    from continuous_test.wire import files

    found = {}
    for variable, source in zip((ENV_REPORT, ENV_REPORT_HTML), _SOURCES):
        value = os.environ.get(variable)
        if value:
            try:
                found[variable] = files.check(value, source)
            except ConfigError as exc:
                print(USAGE.format(error=exc), file=sys.stderr)
                sys.exit(2)
    return found


def _warn(message: str) -> None:
    print(message, file=sys.stderr)


def _say_if_all_skipped() -> None:
    """End the output with why, when every distributed test skipped for want of devices or a backend."""
    from continuous_test.controller import run_log

    line = run_log.all_skipped_line([run_log.log().device_tally()])
    if line is not None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def write_reports(json_path: Optional[str], html_path: Optional[str], parts: Sequence[dict] = (),
                  repeats: Optional[Dict[str, dict]] = None, sources: Sequence[str] = ("the JSON report",
                                                                                     "the HTML report"),
                  on_error: Optional[Callable[[str], None]] = None) -> None:
    """Write this process's run report (merged with ``parts``, xdist's workers') as JSON and/or HTML.

    ``repeats`` gives each repeated run's test counts (test id -> ``{"runs", "passed"}``, ``--ct-repeat``).
    With ``on_error``, a file that cannot be written is a message to it (naming the file's source,
    from ``sources``: the option or variable it came from), and the other file is still written;
    without, the ``OSError`` is raised.

    Called at the end of a run by ``run_tests()`` (``CONTINUOUS_TEST_REPORT``,
    ``CONTINUOUS_TEST_REPORT_HTML``) and by the pytest plugin (``--ct-report``,
    ``--ct-report-html``); an empty path writes nothing.
    """
    if not json_path and not html_path:
        return
    from continuous_test.controller import run_log

    report = run_log.merge([run_log.log().as_dict(), *parts])
    for test in report["tests"]:
        test["repeat"] = (repeats or {}).get(test["id"], test["repeat"])
    from continuous_test import report_html

    for path, source, write in ((json_path, sources[0], run_log.write), (html_path, sources[1], report_html.write)):
        if not path:
            continue
        try:
            write(report, path)
        except OSError as exc:
            if on_error is None:
                raise
            on_error(NOT_WRITTEN.format(source=source, path=path, why=exc.strerror or exc))


def _runs_in_ranks(module: Any) -> bool:
    """Whether ``module`` defines a test class whose tests run in ranks (then the template is worth starting)."""
    return module is not None and any(rank_class_of(value) is not None for value in vars(module).values()
                                      if isinstance(value, type))
