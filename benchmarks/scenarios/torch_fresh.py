"""Scenario on torch's ``MultiProcessTestCase``: fresh ranks for every test.

As in torch's own tests, ``setUp`` spawns the ranks and each test creates the
process group on a ``FileStore`` on ``self.file_name``, runs the body and
destroys the group.  Settings come from ``BENCH_*`` environment variables.
"""
import scenario_common as common
import torch.distributed as dist
from scenario_common import SETTINGS
from torch.testing._internal.common_distributed import MultiProcessTestCase
from torch.testing._internal.common_utils import run_tests


class Bench(common.StampedRun, MultiProcessTestCase):
    @property
    def world_size(self):
        return SETTINGS.world_size

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    def init(self):
        store = dist.FileStore(self.file_name, self.world_size)
        dist.init_process_group("gloo", rank=self.rank, world_size=self.world_size, store=store)


def _fresh_test(name):
    def test(self):
        common.fresh_body(self.init)

    test.__name__ = name
    return test


common.add_tests(Bench, SETTINGS.n, _fresh_test)


if __name__ == "__main__":
    common.mark_controller()
    run_tests()
