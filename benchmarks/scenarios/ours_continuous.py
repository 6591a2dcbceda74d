"""Scenario on ``continuous_test.MultiProcContinuousTest``: the suite, or one fault.

Settings come from ``BENCH_*`` environment variables (see ``scenario_common``).
Tests just run the body: the process group already exists in every rank.
"""
import scenario_common as common
from scenario_common import SETTINGS

import continuous_test
from continuous_test import MultiProcContinuousTest, run_tests


class Bench(common.StampedRun, MultiProcContinuousTest):
    world_size = SETTINGS.world_size

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"


def _suite_test(name):
    def test(self):
        common.body()

    test.__name__ = name
    return test


if SETTINGS.kind == "suite":
    common.add_tests(Bench, SETTINGS.n, _suite_test)
else:
    common.add_fault_tests(Bench, SETTINGS.kind, continuous_test.timeout(SETTINGS.hang_limit))


if __name__ == "__main__":
    common.mark_controller()
    run_tests()
