"""Which process this is: the one answer every part of the package asks for.

A process of a run is one of three :class:`ProcessRole`\\ s:

* ``CONTROLLER``: it runs the test runner (``python test_x.py``, unittest, pytest)
  and starts the ranks of shared worlds and fresh ranks itself;
* ``RANK``: a rank a controller started (of a shared world, fresh, or a spare);
  it runs tests for real and reports their outcomes over its pipe;
* ``LAUNCHED``: started by a launcher (torchrun, srun): a rank that is also its
  own controller, running its tests in place.

A rank knows it is one from the :class:`RankContext` its main loop entered
(:func:`enter`); a launched process from its environment
(:mod:`continuous_test._launch`); every other process is a controller.
Also here: whether a test class (or a ``@distributed`` function) runs in ranks at
all, answered from attributes its bases set, so that asking imports nothing.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Optional

from continuous_test._launch import detect
from continuous_test.wire.messages import RankSpec

__all__ = [
    "ProcessRole",
    "RankContext",
    "current",
    "current_role",
    "rank",
    "enter",
    "RANK_CLASS_ATTR",
    "FUNCTION_CLASS_ATTR",
    "rank_class_of",
    "WORLD_NAME_ATTR",
    "world_name",
    "IN_PROCESS_ATTR",
    "runs_in_one_process",
    "skipped_by_unittest",
]

# Set to True by the bases whose tests run in ranks (MultiProcContinuousTest, MultiProcessTestCase).
RANK_CLASS_ATTR = "_ct_runs_in_ranks"
# Set to True, by this package's TestCase, on a class that derives from one of its
# bases and also from a torch base that runs every rank inside one process.
IN_PROCESS_ATTR = "_ct_in_process"
# The method torch's in-process bases define (LocalDTensorTestBase,
# LocalDTensorContinuousTestBase, LocalDTensorOpTestBase: ranks as LocalTensor
# shards on the ``fake`` backend), which tells them apart.
_IN_PROCESS_MARK = "_get_local_tensor_mode"
# On a @distributed function: the hidden class that runs it in ranks.
FUNCTION_CLASS_ATTR = "__continuous_test_class__"
# On that hidden class (``_DistributedFunctions_2``): what reports call its world instead.
WORLD_NAME_ATTR = "_ct_world_name"


class ProcessRole(enum.Enum):
    """What this process does in a run; see the module docstring."""

    CONTROLLER = "controller"
    RANK = "rank"
    LAUNCHED = "launched"


@dataclass(frozen=True)
class RankContext:
    """Where this rank sits in the world its controller started."""

    rank: int
    world_size: int
    spec: RankSpec
    # Forked ahead of need (a spare) and assigned this spec later.
    forked_ahead: bool = False


# This process's context once it became a rank; None in every other process.
_CURRENT: Optional[RankContext] = None


def current() -> Optional[RankContext]:
    """The rank context of this process, or None when it is not a controller's rank."""
    return _CURRENT


def current_role() -> ProcessRole:
    """This process's role; it does not change while the process runs."""
    if _CURRENT is not None:
        return ProcessRole.RANK
    return ProcessRole.LAUNCHED if detect().is_launcher else ProcessRole.CONTROLLER


def rank() -> Optional[int]:
    """This process's rank in a world or a launched job; None in a controller."""
    if _CURRENT is not None:
        return _CURRENT.rank
    launch = detect()
    return launch.rank if launch.is_launcher else None


def enter(context: RankContext) -> None:
    """Make this process the rank ``context`` describes, for the rest of its life."""
    global _CURRENT
    _CURRENT = context


def rank_class_of(obj: Any) -> Optional[type]:
    """The class whose tests run in ranks for a test class or ``@distributed`` function ``obj``, else None."""
    if isinstance(obj, type):
        return obj if getattr(obj, RANK_CLASS_ATTR, False) else None
    cls = getattr(obj, FUNCTION_CLASS_ATTR, None)
    return cls if isinstance(cls, type) else None


def world_name(cls: type) -> str:
    """What reports call the world of ``cls``: its name, or for the hidden class of a module's
    ``@distributed`` functions what the user wrote (``@distributed(world_size=2) functions of test_x``)."""
    return cls.__dict__.get(WORLD_NAME_ATTR) or cls.__qualname__


def runs_in_one_process(cls: type) -> bool:
    """Whether torch's bases run every rank of ``cls`` inside this process (a LocalTensor variant).

    ``create_local_tensor_test_class(X)`` (torch's ``common_dtensor``) copies a test
    class onto ``LocalDTensorTestBase`` (or the continuous or op kind), which runs
    every rank in one process on the ``fake`` backend under ``LocalTensorMode``.
    When ``X`` derives from this package's bases, the copy does too; it must still
    run as torch runs it, in the process that runs the test, with no ranks.
    """
    return any(_IN_PROCESS_MARK in vars(k) and not k.__module__.startswith("continuous_test.") for k in cls.__mro__)


def skipped_by_unittest(cls: type, method: str) -> bool:
    """Whether unittest (or pytest, for a unittest class) skips ``cls.method`` without running it.

    A ``@unittest.skip`` on the class or the method: no rank need run it (nothing is
    sent ahead of it; a launched rank skips it without waiting for the others).
    """
    return bool(getattr(cls, "__unittest_skip__", False) or getattr(getattr(cls, method, None), "__unittest_skip__", False))
