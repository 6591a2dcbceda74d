"""continuous_test: unittest base classes for fast, reliable ``torch.distributed`` tests.

Public names are imported lazily, so tools such as ``python -m continuous_test.lint``
do not pay for importing torch.  Where each part of the package runs is in its path:
``docs/design.rst`` draws the layout.
"""
from __future__ import annotations

import importlib
import re
from typing import Any

from continuous_test import errors

__all__ = [
    "TestCase",
    "MultiProcContinuousTest",
    "MultiProcessTestCase",
    "DistributedTestBase",
    "DynamoDistributedMultiProcTestCase",
    "C10dTorchCommsTestBase",
    "ShardedTensorTestBase",
    "DTensorTestBase",
    "DTensorContinuousTestBase",
    "DTensorOpTestBase",
    "with_comms",
    "FSDPTest",
    "FSDPTestContinuous",
    "FSDPTestMultiThread",
    "MultiThreadedTestCase",
    "spawn_threads_and_init_comms",
    "run_subtests",
    "requires_world_size",
    "get_required_world_size",
    "skip_if_lt_x_gpu",
    "expect_exit",
    "fresh_world",
    "fresh_group",
    "changes_its_world",
    "distributed",
    "distributed_fixture",
    "run_tests",
    "time_limit",
    "timeout",
    "update_process_group",
    *errors.__all__,  # every exception a user may catch or see
]
__version__ = "0.1.0"

_WHERE = {
    "TestCase": "continuous_test.case",
    "MultiProcContinuousTest": "continuous_test.case",
    "MultiProcessTestCase": "continuous_test.multiprocess",
    "DistributedTestBase": "continuous_test.torch_compat.distributed",
    "DynamoDistributedMultiProcTestCase": "continuous_test.torch_compat.derived",
    "C10dTorchCommsTestBase": "continuous_test.torch_compat.derived",
    "ShardedTensorTestBase": "continuous_test.torch_compat.derived",
    "DTensorTestBase": "continuous_test.torch_compat.dtensor",
    "DTensorContinuousTestBase": "continuous_test.torch_compat.dtensor",
    "DTensorOpTestBase": "continuous_test.torch_compat.dtensor",
    "with_comms": "continuous_test.torch_compat.dtensor",
    "FSDPTest": "continuous_test.torch_compat.fsdp",
    "FSDPTestContinuous": "continuous_test.torch_compat.fsdp",
    "FSDPTestMultiThread": "continuous_test.torch_compat.fsdp",
    "MultiThreadedTestCase": "continuous_test.torch_compat.helpers",
    "spawn_threads_and_init_comms": "continuous_test.torch_compat.helpers",
    "run_subtests": "continuous_test.torch_compat.helpers",
    "requires_world_size": "continuous_test.torch_compat.helpers",
    "get_required_world_size": "continuous_test.torch_compat.helpers",
    "skip_if_lt_x_gpu": "continuous_test.torch_compat.helpers",
    "expect_exit": "continuous_test.multiprocess",
    "fresh_world": "continuous_test.fresh_worlds",
    "fresh_group": "continuous_test.fresh_worlds",
    "changes_its_world": "continuous_test.fresh_worlds",
    "distributed": "continuous_test.functions",
    "distributed_fixture": "continuous_test.functions",
    "run_tests": "continuous_test.runner",
    "time_limit": "continuous_test.config",
    "timeout": "continuous_test.config",
    "update_process_group": "continuous_test.ddp",
}


# The oldest torch this package supports: setup.py's install_requires bound (test_config.py checks they agree).
MIN_TORCH = (2, 12)
TORCH_TOO_OLD = "continuous_test needs torch {need} or newer (found torch {found}); upgrade torch"


# The public names' modules that import no torch (a decorator, the exceptions).
_TORCH_FREE = frozenset({"continuous_test.errors", "continuous_test.config", "continuous_test.fresh_worlds"})


def check_torch(torch: Any) -> None:
    """Raise ImportError, in one line naming both releases, when ``torch`` is older than :data:`MIN_TORCH`."""
    found = str(getattr(torch, "__version__", ""))
    match = re.match(r"(\d+)\.(\d+)", found)
    if match is not None and (int(match.group(1)), int(match.group(2))) < MIN_TORCH:
        raise ImportError(TORCH_TOO_OLD.format(need=".".join(map(str, MIN_TORCH)), found=found))


def __getattr__(name: str) -> Any:
    module = "continuous_test.errors" if name in errors.__all__ else _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'continuous_test' has no attribute {name!r}")
    if module not in _TORCH_FREE:
        import torch  # checked before any module that needs it runs

        check_torch(torch)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(list(globals()) + __all__)


def _export_launch() -> None:
    """Under srun or mpiexec, export torchrun's variables (``RANK``, ``LOCAL_RANK``, ...) as the test file imports us.

    Its class bodies and skip decorators may read them, as they can under torchrun.
    A bad launcher setting is left for the runner (``run_tests()``, the pytest
    plugin, the first test) to report; importing never fails for it.
    """
    from continuous_test._launch import detect, export_env

    try:
        export_env(detect())
    except (ValueError, RuntimeError):
        pass


_export_launch()
