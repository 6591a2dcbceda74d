"""The per-rank data a rank reports: events, error records, skips (no processes)."""
from __future__ import annotations

import unittest

import pytest

from continuous_test.rank.result import RankResult
from continuous_test.wire.outcome import ErrorRecord, EventKind, SubTestId, exit_description


def test_exit_description():
    assert exit_description(3) == "exit code 3"
    assert exit_description(-9) == "signal SIGKILL"


def test_a_long_first_line_is_cut_to_500_characters_in_the_headline():
    # The headline is the one-line summary a report groups ranks by; its limit is a
    # number of the design (docs/reports.rst), not whatever MAX_HEADLINE says.
    long = ErrorRecord("builtins", "ValueError", "x" * 20_000 + "\nsecond line", "Traceback...", True)
    assert long.headline() == "ValueError: " + "x" * 500 + " ... (19500 characters more)"
    whole = ErrorRecord("builtins", "ValueError", "y" * 500 + "\nsecond line", "Traceback...", True)
    assert whole.headline() == "ValueError: " + "y" * 500


def test_rank_result_records_unittest_events():
    class Case(unittest.TestCase):
        def test_sub(self):
            with self.subTest(i=1):
                self.fail("x")

        @unittest.expectedFailure
        def test_xfail(self):
            raise ValueError

    result = RankResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(Case).run(result)
    kinds = [(e.kind, e.subtest) for e in result.events]
    assert (EventKind.FAILURE, SubTestId(None, (("i", "1"),))) in kinds
    assert (EventKind.EXPECTED_FAILURE, None) in kinds


def test_torch_skip_exit_codes_become_skips():
    from continuous_test.torch_compat.dtensor import too_few_devices

    class Case(unittest.TestCase):
        def test_exit(self):
            raise SystemExit(too_few_devices(2).exit_code)

    result = RankResult()
    Case("test_exit").run(result)
    assert [(e.kind, e.reason) for e in result.events] == [(EventKind.SKIP, too_few_devices(2).message)]


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
