"""A fresh world's ranks inherit torch.distributed instrumented from their template.

Each test of this ``MultiProcessTestCase`` runs in new ranks (the second in
spares forked ahead); neither may instrument torch itself (the template did,
before forking them), and its calls are still recorded.  Run under each start
method (``CONTINUOUS_TEST_START_METHOD``) by ``test_recorder.py``.
"""
import torch
import torch.distributed as dist

from continuous_test import MultiProcessTestCase, run_tests
from continuous_test.rank import recorder


class FreshRanks(MultiProcessTestCase):
    world_size = 2

    def _check(self):
        self.assertEqual(recorder.instrumented_here(), 0, f"functions rank {self.rank} instrumented itself")
        self.init_pg("gloo")
        dist.all_reduce(torch.ones(2))
        calls = recorder.current_calls()
        self.assertIsNotNone(calls, "this rank does not record")
        self.assertEqual([c.op for c in calls.calls], ["all_reduce"])
        dist.destroy_process_group()

    def test_first_world(self):
        self._check()

    def test_second_world(self):
        self._check()


if __name__ == "__main__":
    run_tests()
