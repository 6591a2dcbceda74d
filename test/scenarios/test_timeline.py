"""Ranks whose collectives diverge: every report shows the collective timeline."""
import ctypes
import os
import signal
import threading
import time

import torch
import torch.distributed as dist
from torch.distributed import barrier  # imported before any rank starts: still recorded

import continuous_test
from continuous_test import MultiProcContinuousTest, run_tests


class DivergeTest(MultiProcContinuousTest):
    world_size = 2
    grace_period = 1.0

    @continuous_test.timeout(3)
    def test_a_different_collectives(self):
        t = torch.ones(8)
        dist.all_reduce(t)
        if self.rank == 0:
            dist.all_reduce(t)
        else:
            dist.broadcast(t, src=1)
        dist.barrier()

    @continuous_test.timeout(3)
    def test_b_different_shapes(self):
        dist.all_reduce(torch.ones(8 if self.rank == 0 else 4))

    @continuous_test.timeout(3)
    def test_c_skipped_barrier(self):
        dist.barrier()
        if self.rank == 0:
            barrier()
        dist.all_reduce(torch.ones(2, 3))

    def test_d_dies_inside(self):
        if self.rank == 1:
            threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGKILL)).start()
        else:
            time.sleep(1.5)
        dist.all_reduce(torch.ones(8))

    def test_e_fails_on_one_rank(self):
        dist.all_reduce(torch.ones(8))
        self.assertEqual(self.rank, 1)

    def test_f_fails_everywhere_alike(self):
        dist.all_reduce(torch.ones(8))
        self.fail("the same on every rank")

    @continuous_test.timeout(3)
    def test_g_holds_the_gil(self):
        dist.all_reduce(torch.ones(8))
        if self.rank == 1:
            while True:  # C calls that never release the GIL (a signal ends one sleep)
                ctypes.PyDLL(None).sleep(600)
        dist.barrier()

    def test_h_healthy(self):
        dist.all_reduce(torch.ones(8))

    def test_j_only_ddps_reducer_communicates(self):
        # DDP's reducer (and its constructor's broadcast) call the process group from C++: nothing is recorded.
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
        model(torch.ones(3, 4)).sum().backward()
        self.assertEqual(self.rank, 0)

    def test_i_point_to_point_after_a_collective(self):
        # Point-to-point calls have numbers of their own: send #1 and recv #1 after all_reduce #1.
        t = torch.ones(4)
        dist.all_reduce(t)
        if self.rank == 0:
            dist.send(t, dst=1)
        else:
            dist.recv(t, src=0)
        self.assertEqual(self.rank, 1)


if __name__ == "__main__":
    run_tests()
