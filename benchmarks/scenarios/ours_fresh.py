"""Scenario on ``continuous_test.MultiProcessTestCase``: fresh ranks for every test.

Each test creates the process group on its own rendezvous, runs the body and
destroys the group.  Settings come from ``BENCH_*`` environment variables; with
``BENCH_KIND=negative`` the controller stamps every test, not only the first and
last (what one user's negative test costs, test by test).
"""
import scenario_common as common
from scenario_common import SETTINGS

from continuous_test import MultiProcessTestCase, run_tests


class Bench(common.StampedRun, MultiProcessTestCase):
    world_size = SETTINGS.world_size
    STAMP_ALL = SETTINGS.kind == "negative"  # each test's own cost: its median is the figure


def _fresh_test(name):
    def test(self):
        common.fresh_body(lambda: self.init_pg("gloo"))

    test.__name__ = name
    return test


common.add_tests(Bench, SETTINGS.n, _fresh_test)


if __name__ == "__main__":
    common.mark_controller()
    run_tests()
