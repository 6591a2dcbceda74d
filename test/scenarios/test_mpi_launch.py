"""Runs alike under mpiexec and torchrun (test_mpi.py compares the two); run with explicit class names.

* ``Pair`` passes: its ranks see torchrun's variables (``RANK``, ``WORLD_SIZE``,
  ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) whatever
  launched them, from the time this file is imported.  ``FreshPair`` is a ``MultiProcessTestCase``: once per launch.
* ``Rank1Fails``: rank 1 raises while rank 0 waits in ``all_reduce``; the next
  test must pass on a rebuilt group.  Rank 0 then takes its time in
  ``tearDownClass``: rank 1, done and about to exit non-zero, must wait for rank 0's
  report (Open MPI's mpiexec ends the job when a rank exits non-zero).
* ``LoopbackStore`` (mpiexec only: torchrun's agent hosts its own store): on one
  host, rank 0's rendezvous store listens on loopback only, never on every interface.
"""
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, run_tests

RANK_AT_IMPORT = os.environ.get("RANK")  # a skip decorator may read it as early as this


class Pair(MultiProcContinuousTest):
    world_size = 2

    def test_all_reduce(self):
        t = torch.ones(1)
        dist.all_reduce(t)
        self.assertEqual(t.item(), 2.0)

    def test_env_is_torchruns(self):
        self.assertEqual(os.environ["RANK"], str(self.rank))
        self.assertEqual(RANK_AT_IMPORT, str(self.rank))
        self.assertEqual(os.environ["WORLD_SIZE"], "2")
        self.assertEqual(os.environ["LOCAL_RANK"], str(self.rank))
        self.assertEqual(os.environ["LOCAL_WORLD_SIZE"], "2")
        self.assertTrue(os.environ["MASTER_ADDR"] and os.environ["MASTER_PORT"])
        self.assertEqual(self.device, torch.device("cpu"))


class FreshPair(MultiProcessTestCase):
    world_size = 2

    def test_fresh_ranks(self):
        self.assertIn(self.rank, (0, 1))


class Rank1Fails(MultiProcContinuousTest):
    world_size = 2
    timeout = timedelta(seconds=3)

    def test_a_rank_1_raises_while_rank_0_waits(self):
        if self.rank == 1:
            raise RuntimeError("rank 1 fails on purpose")
        dist.all_reduce(torch.ones(1))

    def test_b_healthy(self):
        t = torch.ones(1)
        dist.all_reduce(t)
        self.assertEqual(t.item(), 2.0)

    @classmethod
    def tearDownClass(cls):
        if os.environ["RANK"] == "0":
            time.sleep(2)
        super().tearDownClass()


def listening(port):
    """The local addresses of the sockets that listen on ``port``, as /proc/net/tcp{,6} write them (hex)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                    found.append(local.rsplit(":", 1)[0])
    return found


class LoopbackStore(MultiProcContinuousTest):
    world_size = 2

    def test_store_listens_on_loopback_only(self):
        if self.rank == 0:
            self.assertEqual(listening(int(os.environ["MASTER_PORT"])), ["0100007F"])  # 127.0.0.1, not ::


if __name__ == "__main__":
    run_tests()
