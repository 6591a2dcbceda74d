"""``run_tests()``: the entry point of ``if __name__ == "__main__": run_tests()``.

It passes unittest's command line through (``-k``, ``-v``, ``Class.test``, ...),
detects torchrun, srun and mpiexec, and exits non-zero on any failure.  Under a launcher
only rank 0 prints the report, which already holds every rank's outcome; the
other ranks run silently and exit with the same status.  With
``CONTINUOUS_TEST_SHUFFLE=SEED`` the tests of each class, and the classes of the
module, run in an order shuffled by that seed (:mod:`continuous_test.controller.shuffle`),
which is printed at the start and after every failure's traceback.
"""
from __future__ import annotations

import os
import sys
import unittest
from typing import Any, Dict, List, Optional, Sequence

from continuous_test import config
from continuous_test._role import rank_class_of
from continuous_test.controller import shuffle
from continuous_test.launched.detect import detect, export_env
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
    # How the running test ended so far, in the run report's words.
    _ct_outcome = "passed"

    def startTest(self, test: unittest.TestCase) -> None:  # noqa: N802 - unittest's name
        from continuous_test.controller import run_log

        self.current = test
        self._ct_outcome = "passed"
        run_log.log().begin(test.id())
        super().startTest(test)

    def stopTest(self, test: unittest.TestCase) -> None:  # noqa: N802 - unittest's name
        from continuous_test.controller import run_log

        super().stopTest(test)
        run_log.log().end(test.id(), self._ct_outcome)

    def _ended(self, outcome: str) -> None:
        # A failure or error outranks the rest (a subtest's failure, then the test's success).
        if self._ct_outcome not in ("failed", "error"):
            self._ct_outcome = outcome

    def addFailure(self, test, err) -> None:  # noqa: N802 - unittest's name
        self._ended("failed")
        _error_seen(err)
        super().addFailure(test, err)

    def addError(self, test, err) -> None:  # noqa: N802 - unittest's name
        self._ended("error")
        _error_seen(err)
        super().addError(test, err)

    def addSkip(self, test, reason) -> None:  # noqa: N802 - unittest's name
        self._ended("skipped")
        super().addSkip(test, reason)

    def addExpectedFailure(self, test, err) -> None:  # noqa: N802 - unittest's name
        self._ended("xfailed")
        super().addExpectedFailure(test, err)

    def addUnexpectedSuccess(self, test) -> None:  # noqa: N802 - unittest's name
        self._ended("xpassed")
        super().addUnexpectedSuccess(test)

    def addSubTest(self, test, subtest, err) -> None:  # noqa: N802 - unittest's name
        if err is not None:
            self._ended("failed" if issubclass(err[0], test.failureException) else "error")
            _error_seen(err)
        super().addSubTest(test, subtest, err)

    def _exc_info_to_string(self, err, test) -> str:  # noqa: N802 - unittest's name
        text = super()._exc_info_to_string(err, test)  # type: ignore[misc]
        line = shuffle.failure_line()
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


class _SilentRunner(ContinuousTestRunner):
    """The runner of launched ranks other than 0: rank 0 prints the merged report."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["stream"] = open(os.devnull, "w")
        super().__init__(*args, **kwargs)


def run_tests(argv: Optional[List[str]] = None, module: str = "__main__") -> None:
    """Run the tests of ``module`` (the test file) with unittest's command line; never returns."""
    launch = detect()
    export_env(launch)
    silent = launch.is_launcher and launch.rank != 0
    if not launch.is_launcher and _runs_in_ranks(sys.modules.get(module)):
        from continuous_test.controller import dispatch  # noqa: F401 - loaded before the first test, not in it
        from continuous_test.template import server

        server.prepare()  # fork the rank template now, before any test ran
    runner = _SilentRunner if silent else ContinuousTestRunner
    loader = unittest.TestLoader()
    seed = config.shuffle_seed()
    if seed is not None:
        shuffle.install(loader, seed, announce=not silent)
    try:
        program = unittest.main(module=module, argv=argv if argv is not None else sys.argv,
                                testRunner=runner, testLoader=loader, exit=False)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    finally:
        if not silent:
            write_reports(os.environ.get(ENV_REPORT), os.environ.get(ENV_REPORT_HTML))
    sys.exit(0 if program.result.wasSuccessful() else 1)


def write_reports(json_path: Optional[str], html_path: Optional[str], parts: Sequence[dict] = (),
                  repeats: Optional[Dict[str, dict]] = None) -> None:
    """Write this process's run report (merged with ``parts``, xdist's workers') as JSON and/or HTML.

    ``repeats`` gives each repeated run's test counts (test id -> ``{"runs", "passed"}``, ``--ct-repeat``).

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
    if json_path:
        run_log.write(report, json_path)
    if html_path:
        from continuous_test import report_html

        report_html.write(report, html_path)


def _runs_in_ranks(module: Any) -> bool:
    """Whether ``module`` defines a test class whose tests run in ranks (then the template is worth starting)."""
    return module is not None and any(rank_class_of(value) is not None for value in vars(module).values()
                                      if isinstance(value, type))
