"""A CUDA build of torch on a host without a GPU, as ``pip install torch`` gives on Linux.

This file makes whatever torch is installed look like such a build, in every
process that imports it (the controller, the template, the ranks): torch's
``current_accelerator()`` names ``cuda``, the accelerator the build was compiled
for, while ``torch.cuda.device_count()`` finds no device.  The bases must then
run on cpu and gloo, as on a CPU build; test_devices.py runs it.
"""
import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, run_tests

# A compile-time answer, as torch's is: it never looks for a device.
torch.accelerator.current_accelerator = lambda check_available=False: torch.device("cuda")
assert torch.cuda.device_count() == 0, "this scenario is for hosts without a GPU"


class DefaultDevice(MultiProcContinuousTest):
    world_size = 2

    def test_runs_on_cpu_and_gloo(self):
        self.assertEqual(self.device, torch.device("cpu"))
        self.assertEqual(type(self).device_type(), "cpu")
        self.assertEqual(dist.get_backend(), "gloo")
        t = torch.ones(2) * (self.rank + 1)
        dist.all_reduce(t)
        self.assertEqual(t, torch.full((2,), 3.0))


class DefaultFresh(MultiProcessTestCase):
    world_size = 2

    def test_init_pg_takes_gloo(self):
        self.init_pg()
        self.assertEqual(dist.get_backend(), "gloo")
        t = torch.ones(1)
        dist.all_reduce(t)
        self.assertEqual(t.item(), 2.0)


if __name__ == "__main__":
    run_tests()
