"""Messages between the controller and its rank processes.

Every message is a small frozen dataclass sent over one of the rank's two
inherited pipes.  On the main pipe the controller sends ``RunTest`` and
``Shutdown``; a rank answers with ``Ready`` or ``InitFailed`` once, then one
``TestDone`` per ``RunTest``.  A rank forked ahead of need (a spare,
:attr:`RankKind.SPARE`) first waits for ``Assign``, which hands it the spec it then
runs as if it had been started with it.  On the one-way control pipe the controller
sends ``DumpStacks``, which the rank answers with ``Stacks`` on the main pipe; that
the control pipe closed is how a rank learns its controller died.

Stdlib only (and :mod:`continuous_test.wire.outcome`): both sides import it.
"""
from __future__ import annotations

import enum
import os
import pickle
from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

from continuous_test.wire.outcome import ErrorRecord, Event, EventKind, RankOutcome

__all__ = [
    "RankKind",
    "shared_temp_dir",
    "ClassSettings",
    "send",
    "recv",
    "RankSpec",
    "RunTest",
    "Assign",
    "DumpStacks",
    "Shutdown",
    "Ready",
    "InitFailed",
    "TestDone",
    "Stopped",
    "Stacks",
]


class RankKind(str, enum.Enum):
    """What a rank process is started for."""

    # A rank of a shared world: join the default process group, then run tests until Shutdown.
    SHARED = "shared"
    # A fresh rank: run one test of a MultiProcessTestCase, then exit.
    FRESH = "fresh"
    # Forked ahead of need: wait for Assign, then become the rank its spec describes.
    SPARE = "spare"


@dataclass(frozen=True)
class ClassSettings:
    """One test class's settings, resolved once; the controller keeps it and its ranks receive it."""

    qualname: str
    world_size: int
    device_type: str
    backend: Optional[str]
    grace: float
    start_timeout: float
    shutdown_timeout: float


@dataclass(frozen=True)
class RankSpec:
    """Everything a rank process needs to join a world; pickled once at start."""

    rank: int
    world_size: int
    module: str
    qualname: str
    module_file: Optional[str]
    world_dir: str
    rendezvous_file: str
    log_file: str
    env: dict = field(default_factory=dict)
    # The controller's private directory, removed by the rank if the controller
    # dies without cleaning up.
    private_dir: Optional[str] = None
    kind: RankKind = RankKind.SHARED
    method: Optional[str] = None
    controller_pid: int = 0
    # The process that forks this rank (the template, or the controller under spawn).
    parent_pid: int = 0
    # The class's settings, resolved once by the controller.
    settings: Optional[ClassSettings] = None
    # torch's process-wide settings as the controller had them when the tests were
    # imported and none had run (template.server.process_settings): name -> value.
    torch_settings: dict = field(default_factory=dict)
    # Where the rank keeps the whole text of an exception message a report cuts
    # (the controller's directory of whole texts, continuous_test.wire.kept).
    output_dir: Optional[str] = None


@dataclass(frozen=True)
class RunTest:
    """Controller -> rank: run one test method; ``reinit`` asks for a fresh default group first."""

    method: str
    seq: int
    reinit: Optional[int] = None
    # Arguments for the test (parametrized pytest functions); None for unittest methods.
    kwargs: Optional[dict] = None
    # The test's leak policy (restore, fail, off), resolved by the controller.
    leak_policy: str = "restore"
    # (module, qualname, module file) of the test's class where it is not the world's first class
    # (classes sharing a world: world_scope); None: the class the rank started with.
    owner: Optional[Tuple[str, str, Optional[str]]] = None


@dataclass(frozen=True)
class Assign:
    """Controller -> spare rank: become the rank ``spec`` describes (its first and only message)."""

    spec: RankSpec


@dataclass(frozen=True)
class DumpStacks:
    """Controller -> rank: reply at once with the Python stacks of all threads."""


@dataclass(frozen=True)
class Shutdown:
    """Controller -> rank: destroy the process group and exit."""


@dataclass(frozen=True)
class Stopped:
    """Rank -> controller, after ``Shutdown``: the rank left its world, and nothing but ``os._exit(exit_code)`` follows.

    Its output is flushed and its coverage saved: the controller takes this as the
    rank's ending and reaps the process later, so that no world's stop waits for
    the kernel to tear a torch-sized process down.
    """

    rank: int
    exit_code: int = 0


@dataclass(frozen=True)
class Ready:
    """Rank -> controller: the rank joined the world and waits for tests."""

    rank: int


@dataclass(frozen=True)
class InitFailed:
    """Rank -> controller: importing the class or joining the world raised."""

    rank: int
    error: ErrorRecord
    skip_reason: Optional[str] = None


@dataclass(frozen=True)
class TestDone:
    """Rank -> controller: the outcome of one ``RunTest``.

    The common case, a plain pass, travels as ``outcome=None``: unpickling a full
    outcome costs more than the rest of a trivial test's bookkeeping.
    """

    __test__ = False  # not a pytest test class

    rank: int
    seq: int
    outcome: Optional[RankOutcome] = None
    # Fresh ranks: the code this rank exits with right after this message.
    exit_code: Optional[int] = None

    @classmethod
    def of(cls, rank: int, seq: int, outcome: RankOutcome) -> "TestDone":
        """The message for ``outcome``, compact when it is a plain pass."""
        return cls(rank, seq, None if outcome.is_plain_pass() else outcome)

    def is_plain_pass(self) -> bool:
        """True when the rank passed with nothing else to report (:meth:`RankOutcome.is_plain_pass`)."""
        return self.outcome is None

    def failed(self) -> bool:
        """True when the rank reported a failure or error (an expected one included)."""
        return self.outcome is not None and self.outcome.has_failure()

    def skipped(self) -> bool:
        """True when the rank reported the whole test skipped (not one of its subtests)."""
        return self.outcome is not None and any(
            e.kind is EventKind.SKIP and e.subtest is None for e in self.outcome.events)

    def full_outcome(self) -> RankOutcome:
        """The rank's outcome, expanded from the compact form."""
        return self.outcome if self.outcome is not None else RankOutcome(self.rank, [Event(EventKind.SUCCESS)])


@dataclass(frozen=True)
class Stacks:
    """Rank -> controller: answer to ``DumpStacks``."""

    rank: int
    text: str


def send(conn: Any, message: Any) -> None:
    """Send one message over a pipe (plain pickle: messages hold only plain data)."""
    conn.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))


def recv(conn: Any) -> Any:
    """Receive one message; raises EOFError when the other end has gone."""
    return pickle.loads(conn.recv_bytes())


def shared_temp_dir(world_dir: str, seq: int) -> str:
    """The path of the ``shared_temp_dir`` of test ``seq`` of the world in ``world_dir``.

    A rank makes it on first use (every rank of the world sees the same path); the
    controller removes it once every rank reported the test.
    """
    return os.path.join(world_dir, "shared", str(seq))
