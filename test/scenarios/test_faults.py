"""A class where tests fail, crash and hang; the tests after each must still pass."""
import ctypes
import os
import signal
import time

import torch
import torch.distributed as dist

import continuous_test
from continuous_test import MultiProcContinuousTest, run_tests


def all_reduce_ones():
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()


class FaultTest(MultiProcContinuousTest):
    world_size = 2
    grace_period = 1.0

    def check_healthy(self):
        self.assertEqual(all_reduce_ones(), 2.0)

    def test_a_healthy(self):
        self.check_healthy()

    def test_b_assert_while_peer_waits(self):
        if self.rank == 0:
            self.fail("rank 0 gave up")
        all_reduce_ones()  # rank 1 waits here for a peer that never comes

    def test_c_healthy(self):
        self.check_healthy()

    def test_d_exit_code(self):
        if self.rank == 1:
            os._exit(3)
        all_reduce_ones()

    def test_e_healthy(self):
        self.check_healthy()

    def test_f_segfault(self):
        if self.rank == 1:
            os.kill(os.getpid(), signal.SIGSEGV)
        all_reduce_ones()

    def test_g_healthy(self):
        self.check_healthy()

    def test_h_abort(self):
        if self.rank == 0:
            os.abort()
        all_reduce_ones()

    def test_i_healthy(self):
        self.check_healthy()

    def test_j_sigkill(self):
        if self.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        all_reduce_ones()

    def test_k_healthy(self):
        self.check_healthy()

    @continuous_test.time_limit(3)
    def test_l_hang(self):
        if self.rank == 0:
            time.sleep(600)
        all_reduce_ones()

    def test_m_healthy(self):
        self.check_healthy()

    @continuous_test.time_limit(3)
    def test_n_hang_holding_the_gil(self):
        if self.rank == 1:
            ctypes.PyDLL(None).sleep(600)  # a C call that never releases the GIL
        all_reduce_ones()

    def test_o_healthy(self):
        self.check_healthy()


class ShutdownHangTest(MultiProcContinuousTest):
    world_size = 2
    shutdown_timeout = 1.0

    def test_teardown_hangs(self):
        # The rank's final destroy_process_group() now never returns.
        dist.destroy_process_group = lambda *args, **kwargs: time.sleep(600)


if __name__ == "__main__":
    run_tests()
