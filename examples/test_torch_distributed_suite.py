"""torch's own distributed suite, ``distributed_test.py`` from the torch wheel, on continuous_test's engine.

PyTorch runs ``DistributedTest._DistTestBase`` (about 285 tests: collectives,
groups, point-to-point and batched isend/irecv, object collectives, DDP in many
forms, SyncBatchNorm, monitored barrier, join) through
``test/distributed/test_distributed_spawn.py``: the glue below, which combines it
with ``TestDistBackend`` (a ``MultiProcessTestCase``) and spawns fresh interpreters
for every test.  Here the glue is the same but for one block: while
``distributed_test.py`` is imported, torch's distributed test bases are
continuous_test's (:func:`continuous_test.migrate.replaced`), so each test runs
in fresh ranks forked from a warm template, through ``TestDistBackend``'s own
``_run`` (its process group, its file barrier, its ``TEMP_DIR``).

Run it as torch's CI does on CPU (``BACKEND``, ``WORLD_SIZE`` and ``TEMP_DIR`` are
read from the environment; the defaults are gloo, 3 and a private directory)::

    python examples/test_torch_distributed_suite.py -k test_all_reduce
    BACKEND=gloo WORLD_SIZE=3 python -m pytest examples/test_torch_distributed_suite.py

``CT_SUITE_ENGINE=torch`` keeps torch's bases: the same file on torch's spawn
runner, which ``benchmarks/torch_suite.py`` compares with this one.
"""
import atexit
import os
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist

if not dist.is_available():
    print("Distributed not available, skipping tests", file=sys.stderr)
    sys.exit(0)

os.environ.setdefault("BACKEND", "gloo")
os.environ.setdefault("WORLD_SIZE", "3")
if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="torch-dist-suite-")
    atexit.register(shutil.rmtree, os.environ["TEMP_DIR"], True)

torch.backends.cuda.matmul.allow_tf32 = False

if os.environ.get("CT_SUITE_ENGINE", "ours") == "ours":
    from datetime import timedelta

    from torch.testing._internal.distributed.distributed_test import (
        CUSTOM_PG_TIMEOUT,
        Barrier,
        DistributedTest,
        default_pg_timeout,
    )

    from continuous_test import MultiProcContinuousTest, changes_its_world, run_tests
    from continuous_test.fresh_worlds import either

    class TestDistBackendWithSpawn(MultiProcContinuousTest, DistributedTest._DistTestBase):
        """torch's suite in one world of ``WORLD_SIZE`` ranks, but for the tests that change their world."""

        world_size = int(os.environ["WORLD_SIZE"])
        timeout = timedelta(seconds=default_pg_timeout)
        # A world of their own: tests that make or destroy the default group, change a
        # variable the rendezvous reads or end a rank (read from their source), and those
        # torch gives a process-group timeout of their own.
        fresh_world_tests = either(changes_its_world, CUSTOM_PG_TIMEOUT)

        @classmethod
        def backend_str(cls):
            return os.environ["BACKEND"]

        def setUp(self):
            # TestDistBackend.setUp's directories, per test and shared by the ranks: the
            # file barrier (Barrier), test_get_rank's files and the lock file live there.
            super().setUp()
            temp = self.shared_temp_dir
            for name in ("barrier", "test_dir", "init_dir"):
                os.makedirs(os.path.join(temp, name), exist_ok=True)
            self.addCleanup(os.environ.__setitem__, "TEMP_DIR", os.environ["TEMP_DIR"])
            os.environ["TEMP_DIR"] = temp
            Barrier.barrier_id = 0
else:
    from torch.testing._internal.common_utils import run_tests
    from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend

    class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
        def setUp(self):
            super().setUp()
            self._spawn_processes()
            torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


if __name__ == "__main__":
    run_tests()
