"""Ranks are forked from a template; the template must not have initialized CUDA."""
import os

import torch

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, run_tests
from continuous_test.rank import run as rank_run

if os.environ.get("FAKE_CUDA_INIT_IN_TEMPLATE"):
    # Stands in for module-level code that initializes CUDA where the template imports it.
    torch.cuda.is_initialized = lambda: True

EXPECTED = bool(os.environ.get("FAKE_CUDA_INIT_IN_TEMPLATE"))


class TemplateContinuousTest(MultiProcContinuousTest):
    world_size = 2

    def test_template_cuda_flag(self):
        self.assertEqual(rank_run.template_cuda_initialized(), EXPECTED)

    def test_ranks_are_not_children_of_the_controller(self):
        controller = int(os.environ["CONTROLLER_PID"])
        if os.environ.get("CONTINUOUS_TEST_START_METHOD") != "spawn":
            self.assertNotEqual(os.getppid(), controller)


class TemplateFreshTest(MultiProcessTestCase):
    world_size = 2

    def test_template_cuda_flag(self):
        self.assertEqual(rank_run.template_cuda_initialized(), EXPECTED)


if __name__ == "__main__":
    os.environ["CONTROLLER_PID"] = str(os.getpid())
    run_tests()
