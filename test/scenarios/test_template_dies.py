"""The template dies between two classes: the next world starts from a new template.

``A_KillsTheTemplate`` kills the template (SIGKILL) from the controller once its own
world stopped, and prints ``killed template <pid>``; ``B_AfterTheTemplateDied``
needs a world next: its ranks print ``forked from <pid>`` and its test must pass
on its first run, without a rerun.
"""
import os
import signal

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, _role, run_tests
from continuous_test.template import server as template


def all_reduce_ones():
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()


class A_KillsTheTemplate(MultiProcContinuousTest):
    world_size = 2

    def test_a(self):
        self.assertEqual(all_reduce_ones(), 2.0)

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()  # the class's world stops first
        if _role.current() is None:  # the controller
            pid = template.parent_pid()
            assert pid != os.getpid(), "no template: ranks were not forked from one"
            os.kill(pid, signal.SIGKILL)
            assert template.died(wait=10.0), "the template outlived SIGKILL"
            print(f"killed template {pid}", flush=True)


class B_AfterTheTemplateDied(MultiProcContinuousTest):
    world_size = 2

    def test_b(self):
        print(f"forked from {os.getppid()}", flush=True)
        self.assertEqual(all_reduce_ones(), 2.0)


if __name__ == "__main__":
    run_tests()
