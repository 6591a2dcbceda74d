"""Scenario on torch's ``MultiProcContinuousTest``: the suite, or one fault.

Settings come from ``BENCH_*`` environment variables (see ``scenario_common``).
gloo on cpu; ``timeout`` (torch's process-group timeout) comes from
``BENCH_PG_TIMEOUT``.  torch's class has no per-test time limit, so the hang
test gets none.
"""
from datetime import timedelta

import scenario_common as common
from scenario_common import SETTINGS
from torch.testing._internal.common_distributed import MultiProcContinuousTest
from torch.testing._internal.common_utils import run_tests


class Bench(common.StampedRun, MultiProcContinuousTest):
    world_size = SETTINGS.world_size
    timeout = timedelta(seconds=SETTINGS.pg_timeout)

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
    common.add_fault_tests(Bench, SETTINGS.kind, lambda fn: fn)


if __name__ == "__main__":
    common.mark_controller()
    run_tests()
