"""torch's DTensor test bases (``common_dtensor``), on continuous_test's engine.

A file built on ``torch.testing._internal.distributed._tensor.common_dtensor`` moves
here by importing the same names from ``continuous_test`` after torch's imports::

    from torch.testing._internal.distributed._tensor.common_dtensor import DTensorTestBase, with_comms
    from continuous_test import DTensorTestBase, with_comms      # the migration

* :class:`DTensorTestBase`: fresh ranks for every test, forked from the template
  (:class:`~continuous_test.MultiProcessTestCase`); ``with_comms`` creates and
  destroys the process group around each test body, as in torch.
* :class:`DTensorContinuousTestBase`: one world per class
  (:class:`~continuous_test.MultiProcContinuousTest`); ``setUp`` and ``tearDown`` run
  on every rank.
* ``DTensorOpTestBase`` and ``with_comms`` are torch's own objects: threaded tests
  run as they are (see ``docs/migration-derived.rst``), and ``with_comms`` only
  calls ``init_pg``/``destroy_pg``, which the bases here provide.

The methods torch defines on its classes (``init_pg``, ``destroy_pg``, the
``world_size`` and ``backend`` properties) are torch's own function objects, taken
from its class, so their checks and skip exit codes stay torch's.  Only the methods
that call ``super()`` (which binds to torch's class) are written again here.
"""
from __future__ import annotations

import sys
from typing import Any

import torch
from torch.testing._internal.common_distributed import TEST_SKIPS
from torch.testing._internal.distributed._tensor import common_dtensor as _torch_dtensor
from torch.testing._internal.distributed._tensor.common_dtensor import (  # noqa: F401 - re-exported
    DTensorOpTestBase,
    DTensorTestMixin,
    with_comms,
)

from continuous_test import config
from continuous_test.case import MultiProcContinuousTest
from continuous_test.multiprocess import MultiProcessTestCase

__all__ = ["DTensorTestBase", "DTensorContinuousTestBase", "DTensorOpTestBase", "with_comms", "borrow"]

# Hide this module's frames from unittest tracebacks.
__unittest = True


def borrow(torch_cls: type, name: str):
    """The attribute ``name`` as defined in ``torch_cls``'s own body (the raw function, property or classmethod)."""
    return torch_cls.__dict__[name]


_TORCH_BASE = _torch_dtensor.DTensorTestBase


def too_few_devices(world_size: int) -> Any:
    """torch's ``TEST_SKIPS`` entry for fewer than ``world_size`` accelerators: ``multi-device-N`` (torch 2.15 on), else ``multi-gpu-N``."""
    return TEST_SKIPS.get(f"multi-device-{world_size}") or TEST_SKIPS[f"multi-gpu-{world_size}"]


class DTensorTestBase(DTensorTestMixin, MultiProcessTestCase):
    """torch's ``DTensorTestBase``: fresh ranks per test; ``@with_comms`` builds the process group."""

    _ct_torch_defaults = True  # config.keeps_torch_defaults: torch's default world size, rank failures as errors

    world_size = borrow(_TORCH_BASE, "world_size")
    backend = borrow(_TORCH_BASE, "backend")
    init_pg = borrow(_TORCH_BASE, "init_pg")
    destroy_pg = borrow(_TORCH_BASE, "destroy_pg")

    def setUp(self) -> None:
        """Start this test's ranks (controller side), as torch's class does."""
        super().setUp()
        self._spawn_processes()


class DTensorContinuousTestBase(DTensorTestMixin, MultiProcContinuousTest):  # type: ignore[misc]  # device_type: torch's property
    """torch's ``DTensorContinuousTestBase``: one world per class; setUp/tearDown run on every rank."""

    _ct_torch_defaults = True  # config.keeps_torch_defaults: torch's default world size, rank failures as errors

    world_size = -2  # torch's "unset": the default world size
    backend_str = borrow(_torch_dtensor.DTensorContinuousTestBase, "backend_str")

    @classmethod
    def _init_pg(cls, rank: int, world_size: int, rdvz_file: str) -> None:
        """Bind the rank's accelerator, or skip the class as torch does, then create the default group."""
        accelerator = config.accelerator()
        if accelerator is not None:
            if world_size > config.device_count(accelerator):
                sys.exit(too_few_devices(world_size).exit_code)
            torch.accelerator.set_device_index(rank)
        super()._init_pg(rank, world_size, rdvz_file)
