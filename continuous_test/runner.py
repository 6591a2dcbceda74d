"""``run_tests()``: the entry point of ``if __name__ == "__main__": run_tests()``.

It passes unittest's command line through (``-k``, ``-v``, ``Class.test``, ...),
detects torchrun and srun, and exits non-zero on any failure.  Under a launcher
only rank 0 prints the report, which already holds every rank's outcome; the
other ranks run silently and exit with the same status.  With
``CONTINUOUS_TEST_SHUFFLE=SEED`` the tests of each class, and the classes of the
module, run in an order shuffled by that seed (:mod:`continuous_test.shuffle`),
which is printed at the start and after every failure's traceback.
"""
from __future__ import annotations

import os
import sys
import unittest
from typing import List, Optional

from continuous_test import config, shuffle
from continuous_test.launch import detect, export_env

__all__ = ["run_tests", "ContinuousTestRunner", "EXIT_INTERRUPTED"]

EXIT_INTERRUPTED = 130


class _Result(unittest.TextTestResult):
    """unittest's result; a failure's report ends with the shuffle seed, if any."""

    def _exc_info_to_string(self, err, test) -> str:  # noqa: N802 - unittest's name
        text = super()._exc_info_to_string(err, test)
        line = shuffle.failure_line()
        return text if line is None or line in text else f"{text}{line}\n"


class ContinuousTestRunner(unittest.TextTestRunner):
    """A TextTestRunner that still prints what ran when Ctrl-C stops the run."""

    resultclass = _Result

    def _makeResult(self) -> unittest.TestResult:  # noqa: N802 - unittest's name
        self.last_result = super()._makeResult()
        return self.last_result

    def run(self, test):
        """Run ``test``; on KeyboardInterrupt report the tests that ran, then re-raise."""
        try:
            return super().run(test)
        except KeyboardInterrupt:
            result = getattr(self, "last_result", None)
            if result is not None:
                self.stream.writeln("\nInterrupted (Ctrl-C): the ranks were stopped.")
                result.printErrors()
                self.stream.writeln(f"Ran {result.testsRun} test(s) before the interrupt")
                self.stream.flush()
            raise


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
    if not launch.is_launcher:
        from continuous_test import template

        template.prepare_for(module)  # fork the rank template now, before any test ran
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
    sys.exit(0 if program.result.wasSuccessful() else 1)
