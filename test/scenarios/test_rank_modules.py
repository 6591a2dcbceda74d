"""Each rank writes down the package modules it has loaded that belong to the controller, the verdict or a
launcher, in ``$RANK_MODULES_DIR/<kind>-<rank>``.

Run with ``CONTINUOUS_TEST_START_METHOD=forkserver`` (test/test_layout.py): the ranks' template is then a
fresh interpreter holding only what ranks import, so a rank's ``sys.modules`` shows what ranks load.
"""
import os
import sys

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, run_tests

ROOMS = ("continuous_test.controller", "continuous_test.verdict", "continuous_test.launched")


def report(kind: str, rank: int) -> None:
    loaded = sorted(m for m in sys.modules if m.startswith(ROOMS))
    with open(os.path.join(os.environ["RANK_MODULES_DIR"], f"{kind}-{rank}"), "w") as f:
        f.write(" ".join(loaded))


class SharedWorld(MultiProcContinuousTest):
    world_size = 2

    def test_modules(self):
        report("shared", self.rank)


class FreshRanks(MultiProcessTestCase):
    world_size = 2

    def test_modules(self):
        report("fresh", self.rank)


if __name__ == "__main__":
    run_tests()
