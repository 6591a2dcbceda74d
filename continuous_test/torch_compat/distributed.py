"""torch's ``DistributedTestBase``, on :class:`~continuous_test.MultiProcessTestCase`.

A test file written against ``torch.testing._internal.common_distributed`` keeps
working when its base classes come from ``continuous_test`` instead; this module
holds what only such files need.  ``DistributedTestBase`` starts the ranks in
``setUp`` and lets each test create the default process group for a device type
(``self.create_pg(device)``), usually together with torch's
``instantiate_device_type_tests``.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

from continuous_test import config
from continuous_test.multiprocess import MultiProcessTestCase

__all__ = ["DistributedTestBase"]

# Hide this module's frames from unittest tracebacks.
__unittest = True

_BACKENDS = (("cuda", "nccl"), ("hpu", "hccl"), ("xpu", "xccl"))


class DistributedTestBase(MultiProcessTestCase):
    """torch's ``DistributedTestBase``: ranks start in ``setUp``, tests call ``create_pg(device)``."""

    _ct_torch_defaults = True  # config.keeps_torch_defaults: torch's default world size, rank failures as errors

    def setUp(self) -> None:
        """Start this test's ranks (controller side), as torch's class does."""
        super().setUp()
        self._spawn_processes()

    def backend(self, device: str) -> str:
        """The process-group backend for a device type: nccl, hccl, xccl, else gloo."""
        for kind, name in _BACKENDS:
            if kind in device:
                return name
        return "gloo"

    def create_pg(self, device: str, world_size: Optional[int] = None) -> Any:
        """Create the default process group for ``device`` on this test's rendezvous; in a rank only."""
        import torch.distributed as dist

        world_size = self.world_size if world_size is None else world_size
        backend = self.backend(device)
        assert self.file_name is not None, "create_pg() runs in a rank, after the ranks were started"
        store = dist.FileStore(self.file_name, world_size)
        dist.init_process_group(backend=backend, world_size=world_size, rank=self.rank, store=store)
        if backend in ("nccl", "xccl"):
            _use_accelerator(self.rank, backend)
        return dist.distributed_c10d._get_default_group()

    def rank_to_device(self, device: str) -> Dict[int, List[int]]:
        """Rank to device indices, round-robin over the visible devices of ``device``'s type."""
        count = config.device_count(device)
        return {i: [i % count] for i in range(self.world_size)}


def _use_accelerator(rank: int, backend: str) -> None:
    # As torch's create_pg: the rank's own accelerator becomes its default device.
    accelerator = config.accelerator()
    if accelerator is None:
        raise RuntimeError(f"Expected to find an accelerator when initializing process group "
                           f"with {backend} backend, but got None")
    device = torch.device(accelerator, rank)
    torch.set_default_device(device)
    torch.accelerator.set_device_index(device)
