"""Faults outside a test's own body: deaths between and after tests, a killed template,
grandchildren, a replaced default group, a pipe held open by a grandchild.

Run under pytest (``-k`` picks one class); the tests in test/test_world_faults.py
read the outcomes, durations and pid files.  ``PID_DIR``, when set, receives
``<name>.pid`` files of the processes the tests start.
"""
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, run_tests


@pytest.fixture(autouse=True)
def slow_fixture():
    # A slow fixture widens the gap between two tests, as real suites do.
    yield
    time.sleep(float(os.environ.get("SLOW_FIXTURE", "0")))


def write_pid(name, pid=None):
    pid_dir = os.environ.get("PID_DIR")
    if pid_dir:
        with open(os.path.join(pid_dir, f"{name}.pid.tmp"), "w") as f:
            f.write(str(pid or os.getpid()))
        os.rename(os.path.join(pid_dir, f"{name}.pid.tmp"), os.path.join(pid_dir, f"{name}.pid"))


def exit_later(code, seconds):
    threading.Thread(target=lambda: (time.sleep(seconds), os._exit(code)), daemon=True).start()


def all_reduce_ones():
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()


class DeathBetweenTest(MultiProcContinuousTest):
    world_size = 2
    # The thread that ends the rank is a leak the check would report, restarting
    # the world before the death: off, so the rank dies between tests.
    leak_policy = "off"

    def test_a(self):
        self.assertEqual(all_reduce_ones(), 2.0)

    def test_b(self):
        if self.rank == 1:
            exit_later(7, 0.3)

    def test_c(self):
        self.assertEqual(all_reduce_ones(), 2.0)

    def test_d(self):
        self.assertEqual(all_reduce_ones(), 2.0)

    def test_e(self):
        self.assertEqual(all_reduce_ones(), 2.0)


class DeathAfterLastTest(MultiProcContinuousTest):
    world_size = 2
    # The thread that ends the rank is a leak the check would report, restarting
    # the world before the death: off, so the rank dies between tests.
    leak_policy = "off"

    def test_a(self):
        self.assertEqual(all_reduce_ones(), 2.0)

    def test_b_last(self):
        if self.rank == 1:
            exit_later(9, 0.05)


class TemplateKilledTest(MultiProcContinuousTest):
    world_size = 2

    def test_a_kills_the_template(self):
        if self.rank == 0:
            os.kill(os.getppid(), 9)
        time.sleep(30)

    def test_b_healthy(self):
        self.assertEqual(all_reduce_ones(), 2.0)


class AfterTemplateKilledTest(MultiProcContinuousTest):
    world_size = 2

    def test_healthy(self):
        self.assertEqual(all_reduce_ones(), 2.0)


class GrandchildrenTest(MultiProcContinuousTest):
    world_size = 2

    def test_starts_grandchildren(self):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        write_pid(f"popen{self.rank}", child.pid)
        pid = os.fork()
        if pid == 0:
            time.sleep(600)
            os._exit(0)
        write_pid(f"fork{self.rank}", pid)


class GilHolderTest(MultiProcContinuousTest):
    world_size = 2

    def test_holds_the_gil(self):
        import ctypes

        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        write_pid(f"popen{self.rank}", child.pid)
        write_pid(f"rank{self.rank}")
        if self.rank == 1:
            ctypes.PyDLL(None).sleep(600)  # a C call that never releases the GIL
        time.sleep(600)


class ReplacedGroupTest(MultiProcContinuousTest):
    world_size = 2

    def test_a_replaces_the_default_group(self):
        path = f"{self.rdvz_file}.alone.{self.rank}"
        dist.destroy_process_group()
        dist.init_process_group("gloo", store=dist.FileStore(path, 1), rank=0, world_size=1)
        self.assertEqual(dist.get_world_size(), 1)

    def test_b_sees_the_world(self):
        self.assertEqual(dist.get_world_size(), 2)
        self.assertEqual(all_reduce_ones(), 2.0)


class PipeHeldOpenTest(MultiProcContinuousTest):
    world_size = 2
    test_timeout = 60

    def test_a_dies_while_a_grandchild_holds_its_pipe(self):
        if self.rank == 1:
            if os.fork() == 0:  # inherits every fd of the rank, its pipe included
                time.sleep(600)
                os._exit(0)
            os._exit(3)
        time.sleep(600)

    def test_b_healthy(self):
        self.assertEqual(all_reduce_ones(), 2.0)


class GraceTest(MultiProcContinuousTest):
    world_size = 2
    grace_period = 1.0
    timeout = timedelta(seconds=120)

    def test_a_healthy(self):
        self.assertEqual(all_reduce_ones(), 2.0)

    def test_b_fails_while_peer_waits(self):
        if self.rank == 0:
            self.fail("rank 0 gave up")
        all_reduce_ones()


class FreshGraceTest(MultiProcessTestCase):
    world_size = 2
    grace_period = 1.0

    def tearDown(self):
        # Controller side: the verdict is in.  Starting fresh ranks on a loaded
        # machine takes a while, so the test measures from rank 0's failure to here.
        print(f"judged at {time.time():.3f}", flush=True)
        super().tearDown()

    def test_fails_while_peer_waits(self):
        if self.rank == 0:
            print(f"failed at {time.time():.3f}", flush=True)
            self.fail("rank 0 gave up")
        time.sleep(600)  # stuck in something of its own


class FreshExitCodeTest(MultiProcessTestCase):
    world_size = 2

    def tearDown(self):
        # Controller side, as in torch's class: every rank has ended by now.
        print("exit codes:", [p.exitcode for p in self.processes], flush=True)
        super().tearDown()

    def test_rank_1_fails(self):
        self.assertEqual(self.rank, 0)


class InitBarrierTest(MultiProcessTestCase):
    world_size = 2

    def test_init_pg_waits_for_every_rank(self):
        real = dist.init_process_group
        if self.rank == 1:
            def slow(*args, **kwargs):
                real(*args, **kwargs)
                time.sleep(1.0)
            dist.init_process_group = slow
        self.init_pg("gloo")
        done = time.time()
        dist.init_process_group = real
        # Every rank publishes when its init_pg returned; rank 0 must not have
        # returned before rank 1's init_process_group did.
        store = dist.distributed_c10d._get_default_store()
        store.set(f"returned/{self.rank}", repr(done))
        other = float(store.get(f"returned/{1 - self.rank}").decode())
        if self.rank == 0:
            self.assertGreaterEqual(done, other - 0.1, "init_pg returned before a peer's init finished")


if __name__ == "__main__":
    run_tests()
