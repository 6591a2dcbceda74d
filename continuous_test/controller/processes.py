"""Rank processes seen from the controller: starting them (or spares forked ahead), killing, reaping.

Every rank is a process of its own group, forked from the template
(:mod:`continuous_test.template.server`), started with its
:class:`~continuous_test.wire.messages.RankSpec` and two pipes.  What outlives a rank is
bounded: killing a rank's group also kills the processes its tests started
(``subprocess.Popen``, ``os.fork``); a rank asks the kernel to kill it when the
template dies, and the template kills every rank's group when it exits, which it
does as soon as the controller is gone.  The controller dying even by SIGKILL, or
while a rank holds the GIL in C code, leaves nothing behind.
"""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence

from continuous_test._procfs import running
from continuous_test.controller import coverage as controller_coverage
from continuous_test.template import server as template
from continuous_test.wire import kept, messages
from continuous_test.wire.messages import Assign, ClassSettings, RankKind, RankSpec

__all__ = [
    "RankProcess",
    "start_ranks",
    "rank_specs",
    "Spares",
    "SPARES",
    "kill_ranks",
    "retire",
    "reap_retired",
    "KILL_TIMEOUT",
]

KILL_TIMEOUT = 2.0


@dataclass
class RankProcess:
    """The controller's handle on one rank: its process, pipes and log file."""

    rank: int
    process: Any
    conn: Any
    log_file: str
    log_fd: int = -1
    control: Any = None  # the write end of the rank's control pipe
    # Bytes of the log already handed out by read_output().
    log_offset: int = 0
    # Output read early (before a faulthandler dump) and not yet reported.
    stash: str = ""
    # A directory removed when this handle closes (a spare set's, once they ended).
    own_dir: Optional[str] = None

    def log_size(self) -> int:
        """Bytes the rank has written to its log so far."""
        return os.fstat(self.log_fd).st_size

    def read_output(self) -> str:
        """What the rank wrote since the last call (or :meth:`mark_output`), output read early first."""
        size = self.log_size()
        data = os.pread(self.log_fd, size - self.log_offset, self.log_offset) if size > self.log_offset else b""
        self.log_offset += len(data)
        text, self.stash = self.stash + data.decode("utf-8", "replace"), ""
        return text

    def mark_output(self) -> None:
        """Forget output written so far."""
        self.log_offset = self.log_size()

    def exitcode(self) -> Optional[int]:
        """The rank's exit code once it ended (None while it runs)."""
        return self.process.exitcode

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the rank and every process its tests started (its process group)."""
        pid = self.process.pid
        if pid is None:
            return
        try:
            os.killpg(pid, signum)
        except (ProcessLookupError, PermissionError):
            # Not (yet) a group leader, or the group is gone: the rank alone.
            try:
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def assign(self, spec: RankSpec) -> None:
        """Hand a spare rank the spec it is to run; its output goes to the spec's log from now on."""
        log_fd = os.open(spec.log_file, os.O_RDONLY | os.O_CREAT, 0o600)
        os.close(self.log_fd)
        self.log_fd, self.log_file, self.log_offset, self.stash = log_fd, spec.log_file, 0, ""
        messages.send(self.conn, Assign(spec))

    def close(self) -> None:
        """Close the controller's ends: the pipes and the log."""
        self.conn.close()
        if self.control is not None:
            self.control.close()
        if self.log_fd >= 0:
            os.close(self.log_fd)
            self.log_fd = -1
        if self.own_dir is not None:
            shutil.rmtree(self.own_dir, ignore_errors=True)
            self.own_dir = None


def rank_specs(cls: type, settings: ClassSettings, world_dir: str, kind: RankKind = RankKind.SHARED,
               method: Optional[str] = None, rendezvous: Optional[str] = None,
               devices: Optional[Mapping[str, str]] = None) -> List[RankSpec]:
    """The specs of ``settings.world_size`` ranks of ``cls`` in ``world_dir``; creates the rendezvous file.

    ``devices`` is the world's device lease as environment variables
    (:meth:`continuous_test.controller.devices.Lease.env`): its ranks see only those devices.
    """
    module = sys.modules.get(cls.__module__)
    module_file = getattr(module, "__file__", None)
    rendezvous = rendezvous or os.path.join(world_dir, "rendezvous")
    os.close(os.open(rendezvous, os.O_WRONLY | os.O_CREAT, 0o600))
    env = controller_coverage.rank_environment()
    env.update(devices or {})
    private, parent, controller = template.private_dir(), template.parent_pid(), os.getpid()
    return [RankSpec(rank, settings.world_size, cls.__module__, cls.__qualname__, module_file,
                     world_dir, rendezvous, os.path.join(world_dir, f"rank{rank}.log"), env,
                     private, kind, method, controller_pid=controller, parent_pid=parent, settings=settings,
                     torch_settings=template.process_settings(), output_dir=kept.planned())
            for rank in range(settings.world_size)]


def start_ranks(cls: type, settings: ClassSettings, world_dir: str, kind: RankKind = RankKind.SHARED,
                method: Optional[str] = None, rendezvous: Optional[str] = None,
                devices: Optional[Mapping[str, str]] = None) -> List[RankProcess]:
    """Start ``settings.world_size`` ranks: spares forked ahead if there are, else forked now.

    Each rank starts as ``kind`` (shared or fresh); retired ranks that ended are reaped first.
    """
    reap_retired()
    specs = rank_specs(cls, settings, world_dir, kind, method, rendezvous, devices)
    ranks = SPARES.take(specs)
    return ranks if ranks is not None else _fork_ranks(specs, cls.__name__)


def _fork_ranks(specs: Sequence[RankSpec], name: str) -> List[RankProcess]:
    """Fork one rank per spec from the template."""
    from continuous_test.rank.main import rank_main

    ctx: Any = template.get_context()
    ranks = []
    for spec in specs:
        log_fd = os.open(spec.log_file, os.O_RDONLY | os.O_CREAT, 0o600)
        parent, child = ctx.Pipe()
        control_r, control_w = ctx.Pipe(duplex=False)
        process = ctx.Process(target=rank_main, args=(spec, child, control_r), name=f"{name}-rank{spec.rank}")
        try:
            process.start()
        finally:
            child.close()
            control_r.close()
        ranks.append(RankProcess(spec.rank, process, parent, spec.log_file, log_fd, control_w))
    return ranks


class Spares:
    """Ranks forked ahead of need, so that the next fresh world costs no fork.

    A fork of the template (and its page tables) is most of what starting a
    rank costs.  Right after a fresh test's ranks start, the next test's are
    forked, while the test runs: its ranks do not need the controller until they
    report, and they mostly wait on sockets, so the fork costs that test
    nothing.  A spare does at once what does not depend on its test (its process
    group, its tie to the template, the environment, coverage), then waits for
    :class:`~continuous_test.wire.messages.Assign` with the spec it is to run; any
    kind, any class, as long as the world size matches.  At most one set is
    kept; a set of the wrong size, or with a dead member, is killed.  Spares are
    killed when their class ends, and at exit (the template kills whatever is
    left if the controller dies).  No thread: the controller forks them itself.
    """

    def __init__(self) -> None:
        self._ranks: List[RankProcess] = []
        self._dir: Optional[str] = None
        self._owner: Optional[type] = None

    def refill(self, owner: type, settings: ClassSettings) -> None:
        """Fork ``settings.world_size`` spares now, for the next test of ``owner``."""
        if self._ranks and len(self._ranks) == settings.world_size and self._owner is owner:
            return
        self.discard()
        if template.template_kind() not in ("fork", "forkserver"):
            return  # spawn: nothing to fork from
        self._owner = owner
        self._dir = tempfile.mkdtemp(prefix="spares-", dir=template.private_dir())
        try:
            self._ranks = _fork_ranks(rank_specs(owner, settings, self._dir, kind=RankKind.SPARE), "spare")
        except Exception:  # noqa: BLE001 - no spares: the next test forks its own, and reports what fails
            self.discard()

    def take(self, specs: Sequence[RankSpec]) -> Optional[List[RankProcess]]:
        """The spares, each assigned its spec; None if there is no usable set."""
        ranks = self._ranks
        if not ranks or len(ranks) != len(specs) or not all(h.exitcode() is None for h in ranks):
            self.discard()
            return None
        self._ranks, self._owner = [], None
        # A spare may still be on its way to its first log: the directory goes with the ranks.
        ranks[0].own_dir, self._dir = self._dir, None
        try:
            for handle, spec in zip(ranks, specs):
                handle.assign(spec)
        except OSError:  # a spare died just now
            kill_ranks(ranks)
            return None
        return ranks

    def discard(self, owner: Optional[type] = None) -> None:
        """Kill the spares (only ``owner``'s, if given) and remove their directory."""
        if owner is not None and owner is not self._owner:
            return
        ranks, self._ranks, self._owner = self._ranks, [], None
        if ranks:
            kill_ranks(ranks)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


SPARES = Spares()


@atexit.register
def _at_exit() -> None:
    SPARES.discard()
    reap_retired(KILL_TIMEOUT)


def kill_ranks(ranks: Sequence[RankProcess], timeout: float = KILL_TIMEOUT) -> None:
    """Terminate, then kill, every rank with what its tests started, and reap them all."""
    for handle in ranks:
        if _alive(handle):
            handle.signal_group(signal.SIGTERM)
    _join_all(ranks, timeout)
    for handle in ranks:
        # Always: a rank that ended may have left processes in its group.
        handle.signal_group(signal.SIGKILL)
    _join_all(ranks, timeout)
    for handle in ranks:
        handle.close()
    controller_coverage.merge_rank_data()


def _alive(handle: RankProcess) -> bool:
    # exitcode alone is not enough: when the template dies, the process handle
    # reports exit code 255 for ranks that may still be running.
    return handle.exitcode() is None or (handle.process.pid is not None and running(handle.process.pid))


def _join_all(ranks: Sequence[RankProcess], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for handle in ranks:
        handle.process.join(max(0.0, deadline - time.monotonic()))
        while handle.process.pid is not None and running(handle.process.pid) and time.monotonic() < deadline:
            time.sleep(0.01)  # a rank orphaned by a dead template: no sentinel left to wait on


# Ranks killed and not yet reaped.
_RETIRED: List[RankProcess] = []


def retire(ranks: Sequence[RankProcess]) -> None:
    """Kill ``ranks`` (ending on their own) with what they started, and leave the reaping for later."""
    for handle in ranks:
        handle.signal_group(signal.SIGKILL)
    _RETIRED.extend(ranks)


def reap_retired(timeout: Optional[float] = None) -> None:
    """Reap the retired ranks that ended; with ``timeout``, all of them, waiting that long at most.

    Without a timeout it never waits.
    """
    if timeout is not None:
        _join_all(_RETIRED, timeout)
    done = [h for h in _RETIRED if timeout is not None or h.exitcode() is not None]
    for handle in done:
        handle.process.join(0)
        handle.close()
        _RETIRED.remove(handle)
    if done:
        controller_coverage.merge_rank_data()
