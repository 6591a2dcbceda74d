"""Timelines in pytest: @distributed functions, fresh ranks, and recording turned off."""
import os
import signal
import threading
import time

import pytest
import torch
import torch.distributed as dist

import continuous_test
from continuous_test import MultiProcContinuousTest, MultiProcessTestCase


@continuous_test.distributed(world_size=2, timeout=3)
def test_fn_diverges():
    t = torch.ones(4)
    if dist.get_rank() == 0:
        dist.all_reduce(t)
    else:
        dist.broadcast(t, src=1)


@pytest.mark.ct_record(False)
@continuous_test.distributed(world_size=2, timeout=3)
def test_fn_marked_off():
    t = torch.ones(4)
    if dist.get_rank() == 0:
        dist.all_reduce(t)
    else:
        dist.broadcast(t, src=1)


class FreshTest(MultiProcessTestCase):
    world_size = 2

    def test_dies_inside(self):
        self.init_pg("gloo")
        dist.barrier()
        if self.rank == 1:
            threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGKILL)).start()
        else:
            time.sleep(1.5)
        dist.all_reduce(torch.ones(3, dtype=torch.int64))


class OffByAttribute(MultiProcContinuousTest):
    world_size = 2
    record_collectives = False

    @continuous_test.timeout(3)
    def test_diverges(self):
        if self.rank == 0:
            dist.all_reduce(torch.ones(4))
        else:
            dist.barrier()


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
