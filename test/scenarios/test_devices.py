"""Worlds that lease devices: under CONTINUOUS_TEST_SIMULATE_DEVICES each rank records what it saw.

Each test writes, from every rank, one JSON line to ``$DEVICES_LOG_DIR``: its
``CUDA_VISIBLE_DEVICES``, ``LOCAL_RANK`` and the span of time the test ran in;
test_devices.py reads them back and checks that worlds running at the same time
never saw the same device.
"""
import json
import os
import time

import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, run_tests

HOLD = float(os.environ.get("DEVICES_HOLD", "0.2"))  # seconds each test keeps its devices busy


def record(test, rank):
    start = time.time()
    time.sleep(HOLD)
    line = {"test": test.id(), "pid": os.getpid(), "rank": rank, "local_rank": int(os.environ["LOCAL_RANK"]),
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "start": start, "end": time.time()}
    folder = os.environ.get("DEVICES_LOG_DIR")
    if folder:
        with open(os.path.join(folder, f"{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")


class _Recorded(MultiProcContinuousTest):
    def test_a(self):
        record(self, self.rank)
        dist.barrier()

    def test_b(self):
        record(self, self.rank)
        dist.barrier()


class One(_Recorded):
    world_size = 1


class Two(_Recorded):
    world_size = 2


class Three(_Recorded):
    world_size = 3


class TwoMore(_Recorded):
    world_size = 2


class OneMore(_Recorded):
    world_size = 1


class TwoFresh(MultiProcessTestCase):
    world_size = 2

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    def test_fresh(self):
        record(self, self.rank)


class TooBig(MultiProcContinuousTest):
    world_size = 5

    def test_never_runs(self):
        raise AssertionError("a world of 5 ran on a host of 4 simulated devices")


del _Recorded

if __name__ == "__main__":
    run_tests()
