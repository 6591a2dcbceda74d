"""A test that warns and logs in its ranks, then fails: the report shows both, under every runner."""
import logging
import warnings

from continuous_test import MultiProcContinuousTest, run_tests


class WarnTest(MultiProcContinuousTest):
    world_size = 2

    def test_warns_logs_and_fails(self):
        warnings.warn("a warning from the rank", UserWarning)
        logging.getLogger("rank.logger").warning("a log record from the rank")
        self.fail("on purpose")


if __name__ == "__main__":
    run_tests()
