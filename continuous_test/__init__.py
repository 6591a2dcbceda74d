"""continuous_test: unittest base classes for fast, reliable ``torch.distributed`` tests.

Public names are imported lazily, so tools such as ``python -m continuous_test.lint``
do not pay for importing torch.
"""
from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "TestCase",
    "MultiProcContinuousTest",
    "MultiProcessTestCase",
    "DistributedTestBase",
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
    "distributed",
    "run_tests",
    "time_limit",
    "timeout",
    "ConfigError",
    "RankDiedError",
    "RankTimeoutError",
    "RankStuckError",
    "InconsistentSkipError",
    "UnexpectedEndingError",
    "WorldStartError",
    "update_process_group",
]
__version__ = "0.1.0"

_WHERE = {
    "TestCase": "continuous_test.case",
    "MultiProcContinuousTest": "continuous_test.case",
    "MultiProcessTestCase": "continuous_test.multiprocess",
    "DistributedTestBase": "continuous_test.compat",
    "DTensorTestBase": "continuous_test.compat_dtensor",
    "DTensorContinuousTestBase": "continuous_test.compat_dtensor",
    "DTensorOpTestBase": "continuous_test.compat_dtensor",
    "with_comms": "continuous_test.compat_dtensor",
    "FSDPTest": "continuous_test.compat_fsdp",
    "FSDPTestContinuous": "continuous_test.compat_fsdp",
    "FSDPTestMultiThread": "continuous_test.compat_fsdp",
    "MultiThreadedTestCase": "continuous_test.compat_helpers",
    "spawn_threads_and_init_comms": "continuous_test.compat_helpers",
    "run_subtests": "continuous_test.compat_helpers",
    "requires_world_size": "continuous_test.compat_helpers",
    "get_required_world_size": "continuous_test.compat_helpers",
    "skip_if_lt_x_gpu": "continuous_test.compat_helpers",
    "expect_exit": "continuous_test.multiprocess",
    "distributed": "continuous_test.functions",
    "run_tests": "continuous_test.runner",
    "time_limit": "continuous_test.config",
    "timeout": "continuous_test.config",
    "ConfigError": "continuous_test.config",
    "RankDiedError": "continuous_test.report",
    "RankTimeoutError": "continuous_test.report",
    "RankStuckError": "continuous_test.report",
    "InconsistentSkipError": "continuous_test.report",
    "UnexpectedEndingError": "continuous_test.report",
    "WorldStartError": "continuous_test.world",
    "update_process_group": "continuous_test.ddp",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'continuous_test' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(list(globals()) + __all__)
