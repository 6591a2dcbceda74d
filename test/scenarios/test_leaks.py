"""Leak detection: a leaking test before a sensitive one, in one shared world.

``test_1_leaks`` changes the default dtype, an environment variable, the current
directory, sys.path, a global module hook and the warnings filters, and leaves a
new process group; ``test_2_sensitive`` needs all of them as they were.  With
LEAK_THREAD=1, ``test_3_thread`` leaves a non-daemon thread running, which cannot
be put back: the world is restarted before ``test_4_after_thread``.
"""
import os
import sys
import tempfile
import threading
import warnings

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from continuous_test import MultiProcContinuousTest, run_tests

PIDS = []
STOP = threading.Event()


def _hook(module, args, output):
    return output


class LeakTest(MultiProcContinuousTest):
    world_size = 2

    def test_1_leaks(self):
        PIDS.append(os.getpid())
        torch.set_default_dtype(torch.float64)
        os.environ["LEAKED_VAR"] = "1"
        os.chdir(tempfile.gettempdir())
        sys.path.append("/leaked/path")
        torch.nn.modules.module.register_module_forward_hook(_hook)
        warnings.simplefilter("error", DeprecationWarning)
        dist.barrier(group=dist.new_group([0, 1]))  # used, so no rank leaves while another connects

    def test_2_sensitive(self):
        self.assertEqual(torch.get_default_dtype(), torch.float32)
        self.assertNotIn("LEAKED_VAR", os.environ)
        self.assertNotEqual(os.getcwd(), tempfile.gettempdir())
        self.assertNotIn("/leaked/path", sys.path)
        self.assertEqual(len(torch.nn.modules.module._global_forward_hooks), 0)
        self.assertEqual(len(c10d._world.pg_names), 1)
        warnings.warn("only a warning", DeprecationWarning)

    def test_3_thread(self):
        PIDS.append(os.getpid())
        if os.environ.get("LEAK_THREAD"):
            threading.Thread(target=STOP.wait, args=(60,), name="leaked-spinner").start()

    def test_4_after_thread(self):
        restarted = PIDS[-1:] != [os.getpid()]
        self.assertEqual(restarted, bool(os.environ.get("LEAK_THREAD")),
                         "the world should be restarted after a leaked thread, and only then")


if __name__ == "__main__":
    run_tests()
