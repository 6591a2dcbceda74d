"""Every exception a user may catch or see printed, in one place; imports nothing.

Each is also importable as ``continuous_test.<Name>``.  The report a failed test
raises is the failing rank's own exception when it travelled (see
:mod:`continuous_test.verdict.report`); these are the types the harness itself
raises, or that stand in for an exception that could not travel.
"""
from __future__ import annotations

__all__ = [
    "ConfigError",
    "RemoteTraceback",
    "RemoteError",
    "RemoteAssertionError",
    "RankDiedError",
    "RankFailedError",
    "RankTimeoutError",
    "RankStuckError",
    "InconsistentSkipError",
    "UnexpectedEndingError",
    "ExpectMismatchError",
    "LeakWarning",
    "LeakError",
    "WorldStartError",
    "DeviceWaitError",
    "RendezvousError",
    "ProtocolError",
    "RebindError",
    "NotDDPError",
    "UnsupportedTorchError",
    "InvalidProcessGroupError",
    "BackwardInFlightError",
]


class RemoteTraceback(Exception):
    """Carries a rank's formatted traceback as the ``__cause__`` of a merged error."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


class RemoteError(Exception):
    """A rank's exception that could not travel (it does not pickle); the report names its type."""


class RemoteAssertionError(RemoteError, AssertionError):
    """A rank's failed assertion that could not travel: still a unittest failure, not an error."""


class RankFailedError(RuntimeError):
    """A rank's failed assertion in a class that keeps torch's counts: an error, as torch's harness reports it."""


class RankDiedError(RuntimeError):
    """A rank process ended while a test was running."""


class RankTimeoutError(RuntimeError):
    """A test exceeded its per-test time limit."""


class RankStuckError(RuntimeError):
    """Some ranks never finished a test after a peer failed it."""


class InconsistentSkipError(AssertionError):
    """A test skipped on some ranks and ran on others."""


class UnexpectedEndingError(AssertionError):
    """A rank of a MultiProcessTestCase ended differently from what the test declared."""


class ExpectMismatchError(AssertionError):
    """Under ``EXPECTTEST_ACCEPT=1``, ranks produced different values for one expectation."""


class LeakWarning(UserWarning):
    """A test left process-global state changed; the test's warning under the ``restore`` policy."""


class LeakError(AssertionError):
    """A test left process-global state changed under the ``fail`` policy."""


class WorldStartError(RuntimeError):
    """A world could not be started; the message names the class and the rank."""


class DeviceWaitError(WorldStartError):
    """A world waited longer than its bound for the devices it needs; the message says who holds them."""


class RendezvousError(RuntimeError):
    """Launched ranks could not all meet; the message names the ranks that never arrived."""


class ProtocolError(RuntimeError):
    """A message arrived that its receiver did not expect: a bug, never dropped silently."""


class ConfigError(ValueError):
    """A setting has a value that cannot be used; the message says where it came from."""


class RebindError(Exception):
    """Base class for every error update_process_group() raises."""


class NotDDPError(RebindError, TypeError):
    """The model is not a DistributedDataParallel module (nor a compiled one)."""


class UnsupportedTorchError(RebindError, RuntimeError):
    """The installed torch has no DistributedDataParallel._update_process_group."""


class InvalidProcessGroupError(RebindError, ValueError):
    """The group is None, not a ProcessGroup, unknown, or lacks this rank."""


class BackwardInFlightError(RebindError, RuntimeError):
    """A backward pass is running on the calling thread."""
