"""torch's FSDP test bases (``common_fsdp``), on continuous_test's engine.

A file built on ``torch.testing._internal.common_fsdp`` moves here by importing the
same names from ``continuous_test`` after torch's imports::

    from torch.testing._internal.common_fsdp import FSDPTest
    from continuous_test import FSDPTest      # the migration

* :class:`FSDPTest`: fresh ranks for every test, forked from the template.  Each
  rank enters through torch's own ``FSDPTest._run``: skip when there are fewer
  accelerators than ranks, create the default group on ``init_method``, barrier,
  reset dynamo, seed, ``run_test``; then barrier and destroy the group.
* :class:`FSDPTestContinuous`: one world per class.  Its ``setUp`` and ``tearDown``
  (barrier, dynamo reset, seeding) run on every rank; torch's run them only in the
  process that runs the test runner, where the barrier is skipped, so they never ran
  in its ranks.
* ``FSDPTestMultiThread`` is torch's own class: threaded tests run as they are.

torch skips every ``FSDPTest`` and ``FSDPTestContinuous`` test on a machine without
accelerators (its preamble compares ``torch.accelerator.device_count()`` with the
world size), and so do these classes: the counts stay torch's.
"""
from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch.testing._internal import common_fsdp as _torch_fsdp
from torch.testing._internal.common_fsdp import FSDPTestMixin, FSDPTestMultiThread  # noqa: F401 - re-exported
from torch.testing._internal.common_utils import set_rng_seed

from continuous_test import config
from continuous_test.case import MultiProcContinuousTest
from continuous_test.multiprocess import MultiProcessTestCase
from continuous_test.torch_compat.dtensor import borrow, too_few_devices

__all__ = ["FSDPTest", "FSDPTestContinuous", "FSDPTestMultiThread"]

# Hide this module's frames from unittest tracebacks.
__unittest = True

_TORCH_TEST = _torch_fsdp.FSDPTest


class FSDPTest(FSDPTestMixin, MultiProcessTestCase):
    """torch's ``FSDPTest``: fresh ranks per test, each entering through torch's own ``FSDPTest._run``."""

    _ct_torch_defaults = True  # config.keeps_torch_defaults: torch's default world size, rank failures as errors

    world_size = borrow(_TORCH_TEST, "world_size")
    process_group = borrow(_TORCH_TEST, "process_group")
    destroy_pg_upon_exit = borrow(_TORCH_TEST, "destroy_pg_upon_exit")
    init_method = borrow(_TORCH_TEST, "init_method")
    # The rank's entry: torch's preamble (skip without enough accelerators, the
    # group on init_method, barrier, dynamo reset, seed), run_test, its epilogue.
    _run = borrow(_TORCH_TEST, "_run")

    def setUp(self) -> None:
        """Start this test's ranks (controller side), as torch's class does."""
        super().setUp()
        # As torch: keep NCCL's workCleanupLoop quiet (pytorch/pytorch#90848); ranks inherit it.
        os.environ["TORCH_NCCL_DESYNC_DEBUG"] = "0"
        self._spawn_processes()


def _bind_device(rank: int) -> list:
    """The rank's device index, made current on CUDA and XPU, as torch's ``FSDPTest._run`` does."""
    device_id = rank % _torch_fsdp.DEVICE_COUNT
    if _torch_fsdp.TEST_CUDA or _torch_fsdp.TEST_XPU:
        torch.accelerator.set_device_index(device_id)
    return [device_id]


class FSDPTestContinuous(FSDPTestMixin, MultiProcContinuousTest):
    """torch's ``FSDPTestContinuous``: one world per class; setUp/tearDown run on every rank."""

    _ct_torch_defaults = True  # config.keeps_torch_defaults: torch's default world size, rank failures as errors

    world_size: int = _torch_fsdp.DEVICE_COUNT
    backend_str = borrow(_torch_fsdp.FSDPTestContinuous, "backend_str")
    device_type = borrow(_torch_fsdp.FSDPTestContinuous, "device_type")
    process_group = borrow(_torch_fsdp.FSDPTestContinuous, "process_group")

    @classmethod
    def _init_pg(cls, rank: int, world_size: int, rdvz_file: str) -> None:
        """Skip the class without enough accelerators, as torch does, else bind the device and join."""
        os.environ["TORCH_NCCL_DESYNC_DEBUG"] = "0"  # as torch (pytorch/pytorch#90848)
        accelerator = config.accelerator()
        if accelerator is None or config.device_count(accelerator) < world_size:
            sys.exit(too_few_devices(world_size).exit_code)
        _bind_device(rank)
        super()._init_pg(rank, world_size, rdvz_file)

    def setUp(self) -> None:
        """On every rank: wait for the others, reset dynamo and seed (torch ran this in its runner's process only)."""
        super().setUp()
        if self.rank != self.MAIN_PROCESS_RANK:
            dist.barrier()
        torch._dynamo.reset()
        set_rng_seed()

    def tearDown(self) -> None:
        """On every rank: wait for the others, then reset dynamo."""
        if self.rank != self.MAIN_PROCESS_RANK:
            dist.barrier()
        super().tearDown()
        torch._dynamo.reset()
