"""torch's distributed test helpers and threaded bases, exported under their own names.

These work on continuous_test's bases as they are, so ``continuous_test`` exports
torch's own objects; a migrated file imports every name it used from one place::

    from continuous_test import DTensorTestBase, run_subtests, requires_world_size

* ``run_subtests`` runs ``subTest`` blocks and a barrier, which the ranks of both
  engines report; ``requires_world_size``/``get_required_world_size`` mark a test
  and read the mark back (a ``world_size`` property that calls it sizes each fresh
  world); ``skip_if_lt_x_gpu`` exits with torch's skip codes, which are skips here.
* ``MultiThreadedTestCase`` and ``spawn_threads_and_init_comms`` run their threads
  in one process on torch's fake threaded process group, as they are: why, and what
  it would cost on processes, is in ``docs/migration-derived.rst``.
"""
from __future__ import annotations

from torch.testing._internal.common_distributed import (  # noqa: F401 - re-exported
    MultiThreadedTestCase,
    get_required_world_size,
    requires_world_size,
    run_subtests,
    skip_if_lt_x_gpu,
    spawn_threads_and_init_comms,
)

__all__ = [
    "MultiThreadedTestCase",
    "get_required_world_size",
    "requires_world_size",
    "run_subtests",
    "skip_if_lt_x_gpu",
    "spawn_threads_and_init_comms",
]
