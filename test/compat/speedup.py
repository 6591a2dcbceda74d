"""The same test bodies run two ways, to measure what dropping per-test init saves.

* ``CT_SPEEDUP_SHAPE=per-test``: a torch-style ``MultiProcessTestCase``; ranks start
  in ``setUp`` and every test creates its process group (``_per_test_init``).
* ``CT_SPEEDUP_SHAPE=continuous``: a ``MultiProcContinuousTest``; one world and one
  process group for the class, and ``_per_test_init`` does nothing.

``CT_COMPAT_BASE=torch|ours`` picks torch's classes or continuous_test's, as in the
compat tests.  Not a test file (it is not named ``test_*``): run it by hand, e.g.::

    CT_COMPAT_BASE=ours CT_SPEEDUP_SHAPE=continuous python test/compat/speedup.py
"""
import os
from copy import deepcopy

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.testing._internal.common_distributed import MultiProcContinuousTest, MultiProcessTestCase
from torch.testing._internal.common_utils import run_tests

if os.environ.get("CT_COMPAT_BASE", "ours") == "ours":
    from continuous_test import MultiProcContinuousTest, MultiProcessTestCase  # noqa: F811

SHAPE = os.environ.get("CT_SPEEDUP_SHAPE", "continuous")


class Bodies:
    """Ten ordinary collective tests; each starts with ``self._per_test_init()``."""

    def test_all_reduce(self):
        self._per_test_init()
        t = torch.ones(4) * (self.rank + 1)
        dist.all_reduce(t)
        self.assertEqual(t, torch.full((4,), 3.0))

    def test_broadcast(self):
        self._per_test_init()
        t = torch.arange(4.0) if self.rank == 0 else torch.zeros(4)
        dist.broadcast(t, src=0)
        self.assertEqual(t, torch.arange(4.0))

    def test_all_gather(self):
        self._per_test_init()
        out = [torch.zeros(2) for _ in range(2)]
        dist.all_gather(out, torch.full((2,), float(self.rank)))
        self.assertEqual(out, [torch.zeros(2), torch.ones(2)])

    def test_reduce(self):
        self._per_test_init()
        t = torch.ones(3)
        dist.reduce(t, dst=0)
        if self.rank == 0:
            self.assertEqual(t, torch.full((3,), 2.0))

    def test_send_recv(self):
        self._per_test_init()
        if self.rank == 0:
            dist.send(torch.tensor([42.0]), dst=1)
        else:
            t = torch.zeros(1)
            dist.recv(t, src=0)
            self.assertEqual(t.item(), 42.0)

    def test_barrier(self):
        self._per_test_init()
        dist.barrier()

    def test_all_gather_object(self):
        self._per_test_init()
        out = [None, None]
        dist.all_gather_object(out, {"rank": self.rank})
        self.assertEqual(out, [{"rank": 0}, {"rank": 1}])

    def test_broadcast_object_list(self):
        self._per_test_init()
        objs = ["config", 3] if self.rank == 0 else [None, None]
        dist.broadcast_object_list(objs, src=0)
        self.assertEqual(objs, ["config", 3])

    def test_subgroup(self):
        self._per_test_init()
        group = dist.new_group([0, 1])
        t = torch.ones(1)
        dist.all_reduce(t, group=group)
        self.assertEqual(t.item(), 2.0)

    def test_ddp_step(self):
        self._per_test_init()
        torch.manual_seed(0)
        model = nn.Linear(4, 2)
        ddp = DDP(deepcopy(model))
        ddp(torch.randn(3, 4) + self.rank).sum().backward()
        grads = [p.grad.clone() for p in ddp.parameters()]
        for g in grads:
            other = g.clone()
            dist.broadcast(other, src=0)
            self.assertEqual(g, other)


if SHAPE == "per-test":

    class SpeedupTest(Bodies, MultiProcessTestCase):
        @property
        def world_size(self) -> int:
            return 2

        def setUp(self):
            super().setUp()
            self._spawn_processes()

        def _per_test_init(self):
            dist.init_process_group("gloo", rank=self.rank, world_size=self.world_size,
                                    store=dist.FileStore(self.file_name, self.world_size))

else:

    class SpeedupTest(Bodies, MultiProcContinuousTest):
        world_size = 2

        @classmethod
        def backend_str(cls):
            return "gloo"

        def _per_test_init(self):
            pass


if __name__ == "__main__":
    run_tests()
