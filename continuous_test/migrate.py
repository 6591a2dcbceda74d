"""Migrate a whole directory of torch-style test files by one line in its ``conftest.py``::

    from continuous_test.migrate import pytest_pycollect_makemodule  # noqa: F401 - the migration

While pytest imports a test module under that directory, torch's distributed test
bases and decorators (:data:`REPLACED`) are continuous_test's, so the module's
``from torch.testing._internal... import DTensorTestBase`` gets ours; the same
module imported anywhere else keeps torch's.  The rank processes import the
module too: when a migrated module was collected, the template that ranks are
forked from installs the same replacement for good
(:mod:`continuous_test.template.preload_migration`), so a rank defines the class exactly
as the controller did.  Outside pytest (``python file.py``) a file migrates by its
own import line instead.

The bases torch derives in its own helper modules (``DynamoDistributedMultiProcTestCase``,
``C10dTorchCommsTestBase``, ``ShardedTensorTestBase``) are names in :data:`REPLACED`
too.  :func:`install` imports every module of :data:`REPLACED`, and every replacement,
before it changes any name: a helper module is therefore always defined on torch's
bases, whichever directory pytest collects first, and only the migrated modules'
imports see continuous_test's classes in it.
"""
from __future__ import annotations

import contextlib
import importlib
from typing import Any, Iterator, List, Tuple

import continuous_test

__all__ = ["REPLACED", "install", "restore", "replaced", "in_use", "pytest_pycollect_makemodule"]

_COMMON_DISTRIBUTED = "torch.testing._internal.common_distributed"
_COMMON_DTENSOR = "torch.testing._internal.distributed._tensor.common_dtensor"
_COMMON_FSDP = "torch.testing._internal.common_fsdp"
_SHARDED_TENSOR = "torch.testing._internal.distributed._shard.sharded_tensor"

# torch's module -> the names in it that continuous_test exports an engine version of.
# Helpers continuous_test re-exports as torch's own objects (run_subtests,
# with_comms, the threaded bases) are the same objects either way and are left out.
REPLACED = {
    _COMMON_DISTRIBUTED: ("MultiProcessTestCase", "MultiProcContinuousTest", "DistributedTestBase",
                          "DynamoDistributedMultiProcTestCase", "C10dTorchCommsTestBase"),
    _COMMON_DTENSOR: ("DTensorTestBase", "DTensorContinuousTestBase"),
    _COMMON_FSDP: ("FSDPTest", "FSDPTestContinuous"),
    _SHARDED_TENSOR: ("ShardedTensorTestBase",),
}

Saved = List[Tuple[Any, str, Any]]
_used = False  # set once a migrated module was imported: the template then installs the replacement


def install() -> Saved:
    """Make torch's names (:data:`REPLACED`) continuous_test's; returns what :func:`restore` puts back."""
    # First every import, then every change: a torch module imported for the first time
    # while another one's names were ours would define its classes on ours, for good.
    swaps = [(importlib.import_module(module_name), name) for module_name, names in REPLACED.items()
             for name in names]
    ours = [getattr(continuous_test, name) for _, name in swaps]
    saved: Saved = []
    for (module, name), value in zip(swaps, ours):
        saved.append((module, name, getattr(module, name)))
        setattr(module, name, value)
    return saved


def restore(saved: Saved) -> None:
    """Put torch's own names back: what :func:`install` replaced, as it returned them in ``saved``."""
    for module, name, value in reversed(saved):
        setattr(module, name, value)


@contextlib.contextmanager
def replaced() -> Iterator[None]:
    """Within the block, importing torch's bases gives continuous_test's."""
    global _used
    _used = True
    saved = install()
    try:
        yield
    finally:
        restore(saved)


def in_use() -> bool:
    """Whether a migrated module was imported in this process (then a template must install the migration too)."""
    return _used


def pytest_pycollect_makemodule(module_path: Any, parent: Any) -> Any:
    """pytest hook, active for the conftest's directory: collect its modules as migrated ones."""
    return _migrated_module_class().from_parent(parent, path=module_path)


_module_class: Any = None


def _migrated_module_class() -> Any:
    global _module_class
    if _module_class is None:
        import pytest

        class MigratedModule(pytest.Module):
            """A test module imported with torch's distributed bases replaced by continuous_test's."""

            def _getobj(self) -> Any:
                with replaced():
                    return super()._getobj()

        _module_class = MigratedModule
    return _module_class
