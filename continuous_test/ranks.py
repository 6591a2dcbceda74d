"""Rank processes seen from the controller: starting, waiting, stacks and killing.

Three paths start ranks, and all of them wait on their ranks through one loop,
:meth:`Watch.wait`, which blocks only in a selector over every rank's pipe *and*
process sentinel, so a message and a death are seen at once, and every wait has
a deadline::

    shared world (MultiProcContinuousTest, world.World)

        start_ranks ─► wait(Ready) ─► READY ─► RunTest ─► wait(TestDone) ─► READY ─► … ─► Shutdown ─► wait(exit)
                           │                                 │                                  │
                           │                     failure, death, time limit ─► ranks killed     └─ deaths after the
                           └─ InitFailed / death / start timeout ─► WorldStartError                last test reported

    fresh ranks (MultiProcessTestCase, FreshRanks)

        start_ranks (each rank runs one test at once) ─► wait(TestDone with its exit code, or exit) ─► judge endings
            │                                                                                             │
            └─ Spares.refill: the next test's ranks forked meanwhile        kill groups, reap later ◄─────┘

    spares (Spares): forked while a fresh test runs, they wait for Assign;
    start_ranks hands them their specs instead of forking, so the next test's
    ranks start without a fork.

    launcher (torchrun, srun: continuous_test.in_place)

        no controller: every launched process is a rank and runs its tests in place;
        outcomes are exchanged through the launcher's store.

Every message a rank sends is decoded in :meth:`Watch._dispatch`; a message the
current wait does not expect is a :class:`ProtocolError`, never dropped.

What outlives a rank is bounded too.  Each rank leads its own process group, so
killing a rank's group also kills the processes its tests started
(``subprocess.Popen``, ``os.fork``).  Forked from the template (the forkserver), a
rank asks the kernel to kill it when the template dies, and the template kills
every rank's group when it exits, which it does as soon as the controller is gone:
the controller dying even by SIGKILL, or while a rank holds the GIL in C code,
leaves nothing behind (see :mod:`continuous_test.worker` and
:mod:`continuous_test.template`).
"""
from __future__ import annotations

import atexit
import os
import selectors
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from continuous_test import coverage_support, protocol, template
from continuous_test.config import ClassSettings
from continuous_test.outcome import FaultKind, RankFault
from continuous_test.protocol import SPARE_ROLE, Assign, DumpStacks, InitFailed, ProtocolError, RankSpec, Stacks, TestDone

__all__ = [
    "RankProcess",
    "Goal",
    "Waited",
    "Watch",
    "ProtocolError",
    "FreshRanks",
    "RankView",
    "start_ranks",
    "rank_specs",
    "Spares",
    "SPARES",
    "kill_ranks",
    "retire",
    "reap_retired",
    "running",
    "STACKS_TIMEOUT",
    "KILL_TIMEOUT",
    "UNEXPECTED_MESSAGE",
]

STACKS_TIMEOUT = 2.0
# How long a rank's end with no exit code may take to show as its template's death.
TEMPLATE_EXIT_WAIT = 1.0
KILL_TIMEOUT = 2.0
UNEXPECTED_MESSAGE = "rank {rank} sent an unexpected {message!r} while the controller waited for {waiting}"
_PIPE, _SENTINEL = "pipe", "sentinel"


def running(pid: int) -> bool:
    """True if process ``pid`` exists and is not a zombie (used for ranks that are not our children)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except OSError:  # no /proc: ask the kernel, which cannot tell a zombie
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True


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
        """What the rank wrote since the last call; the controller calls this per test."""
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
        protocol.send(self.conn, Assign(spec))

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


def rank_specs(cls: type, settings: ClassSettings, world_dir: str, role: str = "continuous",
               method: Optional[str] = None, rendezvous: Optional[str] = None) -> List[RankSpec]:
    """The specs of ``settings.world_size`` ranks of ``cls`` in ``world_dir``; creates the rendezvous file."""
    module = sys.modules.get(cls.__module__)
    module_file = getattr(module, "__file__", None)
    rendezvous = rendezvous or os.path.join(world_dir, "rendezvous")
    os.close(os.open(rendezvous, os.O_WRONLY | os.O_CREAT, 0o600))
    env = coverage_support.rank_environment()
    private, parent, controller = template.private_dir(), template.parent_pid(), os.getpid()
    return [RankSpec(rank, settings.world_size, cls.__module__, cls.__qualname__, module_file,
                     world_dir, rendezvous, os.path.join(world_dir, f"rank{rank}.log"), env,
                     private, role, method, controller_pid=controller, parent_pid=parent, settings=settings)
            for rank in range(settings.world_size)]


def start_ranks(cls: type, settings: ClassSettings, world_dir: str, role: str = "continuous",
                method: Optional[str] = None, rendezvous: Optional[str] = None) -> List[RankProcess]:
    """Start ``settings.world_size`` ranks: spares forked ahead if there are, else forked now.

    Worlds and fresh ranks call this; each rank starts with its spec's role.
    """
    reap_retired()
    specs = rank_specs(cls, settings, world_dir, role, method, rendezvous)
    ranks = SPARES.take(specs)
    return ranks if ranks is not None else _fork_ranks(specs, cls.__name__)


def _fork_ranks(specs: Sequence[RankSpec], name: str) -> List[RankProcess]:
    """Fork one rank per spec from the template."""
    from continuous_test.worker import rank_main

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
    :class:`~continuous_test.protocol.Assign` with the spec it is to run; any
    role, any class, as long as the world size matches.  At most one set is
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
            self._ranks = _fork_ranks(rank_specs(owner, settings, self._dir, role=SPARE_ROLE), "spare")
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
        """Kill the spares (only ``owner``'s, if given); a class's end and interpreter exit call this."""
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
    coverage_support.merge_rank_data()


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


@dataclass(frozen=True)
class Goal:
    """What one wait is for: the reply each rank owes, and how long to wait for it."""

    # Message types that complete a rank, and other types accepted meanwhile.
    replies: Tuple[type, ...]
    accepts: Tuple[type, ...] = ()
    # TestDone messages must carry this sequence number.
    seq: int = 0
    deadline: float = float("inf")
    # After a first failure or death, the others get this long to reply.
    grace: float = 0.0
    # Stop at the first failure instead (starting a world).
    fail_fast: bool = False
    # Also wait until each rank's process ended (fresh ranks, shutdown).
    until_exit: bool = False
    # Heartbeats and live output (continuous_test.progress.Progress); None: off.
    progress: Any = None

    def describe(self) -> str:
        """``TestDone #3`` or ``Ready``, for error messages."""
        names = "/".join(t.__name__ for t in self.replies) or "the ranks to exit"
        return f"{names} #{self.seq}" if TestDone in self.replies else names


@dataclass
class Waited:
    """What one wait saw: replies, other messages, faults and endings, per rank."""

    pending: set
    replies: Dict[int, Any] = field(default_factory=dict)
    # Accepted messages other than replies (stacks, a late TestDone), by type.
    others: Dict[type, Dict[int, Any]] = field(default_factory=dict)
    faults: List[RankFault] = field(default_factory=list)
    # Ranks whose process ended during the wait, with their exit codes.
    exits: Dict[int, Optional[int]] = field(default_factory=dict)
    # Ranks that died after they had replied (between tests, for a shared world).
    died_after_reply: Dict[int, Optional[int]] = field(default_factory=dict)
    grace_deadline: Optional[float] = None
    # True once a rank failed or died: a fail-fast wait ends there.
    failed: bool = False

    def other(self, kind: type, rank: int) -> Any:
        """The accepted message of type ``kind`` from ``rank``, if one came."""
        return self.others.get(kind, {}).get(rank)


class Watch:
    """One selector over a set of ranks' pipes and sentinels, alive as long as the ranks."""

    def __init__(self, ranks: Sequence[RankProcess]) -> None:
        self.ranks = {h.rank: h for h in ranks}
        self._selector: selectors.BaseSelector = selectors.DefaultSelector()
        for handle in ranks:
            self._selector.register(handle.conn, selectors.EVENT_READ, (_PIPE, handle))
            self._selector.register(handle.process.sentinel, selectors.EVENT_READ, (_SENTINEL, handle))
        # Ranks whose sentinel fired (their process ended) or whose pipe closed.
        self._ended: set = set()
        self._closed_pipes: set = set()
        # Ranks that declared the exit code they end with (fresh ranks), before ending.
        self.declared: set = set()

    def close(self) -> None:
        """Release the selector; the world calls this before killing its ranks."""
        self._selector.close()

    # -- the one wait loop -----------------------------------------------------------

    def wait(self, goal: Goal) -> Waited:
        """Wait until every rank replied as ``goal`` says, or a deadline passed."""
        state = Waited(pending=set(self.ranks) - self._ended)
        for rank in self._ended:
            state.exits[rank] = self.ranks[rank].exitcode()
        progress = goal.progress
        while state.pending and not (goal.fail_fast and state.failed):
            until = min(goal.deadline, state.grace_deadline or goal.deadline)
            wake = until if progress is None else min(until, progress.next_due())
            events = self._selector.select(max(0.0, wake - time.monotonic()))
            if progress is not None:
                progress.tick(state.pending)
                if not events and time.monotonic() < until:
                    continue  # woken for the progress, not by a deadline
            if not events:
                self._expire(state, goal, timed_out=until >= goal.deadline)
                break
            for key, _ in events:
                self._event(key.data, state, goal)
        if progress is not None:
            progress.finish()
        return state

    def _event(self, data: Tuple[str, RankProcess], state: Waited, goal: Goal) -> None:
        source, handle = data
        if handle.rank in (self._closed_pipes if source == _PIPE else self._ended):
            return  # handled by an earlier event of this batch
        if source == _PIPE:
            self._read(handle, state, goal)
        elif handle.rank in state.pending:
            self._ended_now(handle, state, goal)
        else:
            self._ended_early(handle, state, goal)

    def deaths(self) -> Dict[int, Optional[int]]:
        """Ranks that ended since the last wait, without blocking; checked before each test."""
        found: Dict[int, Optional[int]] = {}
        for key, _ in self._selector.select(0):
            source, handle = key.data
            if source == _SENTINEL and handle.rank not in self._ended:
                self._mark_ended(handle)
                found[handle.rank] = handle.exitcode()
        return found

    def _read(self, handle: RankProcess, state: Waited, goal: Goal) -> None:
        try:
            message = protocol.recv(handle.conn)
        except (EOFError, OSError):
            # The pipe closed: the sentinel says how the process ended.
            self._selector.unregister(handle.conn)
            self._closed_pipes.add(handle.rank)
            return
        self._dispatch(handle, message, state, goal)

    def _dispatch(self, handle: RankProcess, message: Any, state: Waited, goal: Goal) -> None:
        """Decode one message from a rank: every message from every rank passes here."""
        kind = type(message)
        if kind is TestDone and message.seq != goal.seq:
            raise ProtocolError(UNEXPECTED_MESSAGE.format(rank=handle.rank, message=message, waiting=goal.describe()))
        if kind in goal.replies:
            state.replies[handle.rank] = message
            declared = getattr(message, "exit_code", None)
            if not goal.until_exit:
                state.pending.discard(handle.rank)
            elif declared is not None and handle.rank not in self._ended:
                # Nothing but os._exit(declared) follows: the rank's ending, as the
                # kernel will report it (if it does so during this wait, that wins).
                state.exits[handle.rank] = declared
                state.pending.discard(handle.rank)
                self.declared.add(handle.rank)
            if _is_failure(message):
                self._failed(state, goal)
        elif kind in goal.accepts:
            state.others.setdefault(kind, {})[handle.rank] = message
        else:
            raise ProtocolError(UNEXPECTED_MESSAGE.format(rank=handle.rank, message=message, waiting=goal.describe()))

    def _drain(self, handle: RankProcess, state: Waited, goal: Goal) -> None:
        # Read what the rank sent before it ended.
        if handle.rank in self._closed_pipes:
            return
        try:
            while handle.conn.poll(0):
                self._dispatch(handle, protocol.recv(handle.conn), state, goal)
        except (EOFError, OSError):
            pass

    def _ended_now(self, handle: RankProcess, state: Waited, goal: Goal) -> None:
        """A pending rank's process ended: a normal end for fresh ranks, else a death."""
        self._drain(handle, state, goal)
        self._mark_ended(handle)
        state.pending.discard(handle.rank)
        code = state.exits[handle.rank] = handle.exitcode()
        if goal.until_exit:
            return  # an ending, which the caller judges (fresh ranks may exit as they please)
        if handle.rank in state.replies:
            state.died_after_reply[handle.rank] = code
            return
        # multiprocessing reports 255 when the template's status pipe closed without a code.
        dead_template = template.died(wait=TEMPLATE_EXIT_WAIT if code == 255 else 0.0)
        kind = FaultKind.TEMPLATE_DIED if dead_template else FaultKind.DIED
        state.faults.append(RankFault(handle.rank, kind, exitcode=code))
        self._failed(state, goal)

    def _ended_early(self, handle: RankProcess, state: Waited, goal: Goal) -> None:
        # A rank that already replied ended while others had not: it died between tests.
        self._drain(handle, state, goal)
        self._mark_ended(handle)
        code = handle.exitcode()
        state.exits[handle.rank] = code
        if not goal.until_exit:
            state.died_after_reply[handle.rank] = code

    def _mark_ended(self, handle: RankProcess) -> None:
        self._ended.add(handle.rank)
        self._selector.unregister(handle.process.sentinel)
        if handle.rank not in self._closed_pipes:
            self._selector.unregister(handle.conn)
            self._closed_pipes.add(handle.rank)
        # The sentinel fires as the process exits; under spawn, its status may take
        # a moment more to be reaped.
        handle.process.join(KILL_TIMEOUT)

    @staticmethod
    def _failed(state: Waited, goal: Goal) -> None:
        # After a first failure or death the others get a grace period to report
        # (peers of a dead rank usually fail fast); who has not by then is stuck.
        state.failed = True
        if state.grace_deadline is None:
            state.grace_deadline = time.monotonic() + goal.grace

    def _expire(self, state: Waited, goal: Goal, timed_out: bool) -> None:
        if timed_out:
            kind = FaultKind.TIMED_OUT
        else:
            died = any(f.kind in (FaultKind.DIED, FaultKind.TEMPLATE_DIED) for f in state.faults)
            kind = FaultKind.INTERRUPTED if died else FaultKind.STUCK
        stuck = sorted(state.pending)
        stacks = self.stacks(stuck, state, goal)
        for rank in stuck:
            late = state.other(TestDone, rank)
            if late is not None and TestDone in goal.replies:
                state.replies[rank] = late  # it answered while its stacks were taken
                continue
            state.faults.append(RankFault(rank, kind, stacks=stacks.get(rank)))
        state.pending.clear()

    # -- stacks ----------------------------------------------------------------------

    def stacks(self, ranks: Sequence[int], state: Optional[Waited] = None, goal: Optional[Goal] = None,
               timeout: float = STACKS_TIMEOUT) -> Dict[int, str]:
        """Python stacks of ``ranks``: asked over the control pipe, else dumped by faulthandler."""
        asked = []
        for rank in ranks:
            handle = self.ranks[rank]
            if rank in self._ended:
                continue
            try:
                protocol.send(handle.control, DumpStacks())
                asked.append(rank)
            except OSError:
                pass
        accepts = (goal.replies + goal.accepts) if goal is not None else ()
        request = Goal(replies=(Stacks,), accepts=tuple(t for t in accepts if t is not Stacks),
                       seq=goal.seq if goal is not None else 0, deadline=time.monotonic() + timeout)
        answered = self._wait_stacks(request, asked)
        if state is not None:
            for kind, per_rank in answered.others.items():
                state.others.setdefault(kind, {}).update(per_rank)
            for rank, message in answered.replies.items():
                state.others.setdefault(Stacks, {})[rank] = message
        found = {rank: message.text for rank, message in answered.replies.items()}
        for rank in asked:
            if rank not in found:
                found[rank] = _faulthandler_stacks(self.ranks[rank])
        return found

    def _wait_stacks(self, request: Goal, asked: List[int]) -> Waited:
        result = Waited(pending=set(asked))
        while result.pending:
            events = self._selector.select(max(0.0, request.deadline - time.monotonic()))
            if not events:
                break
            for key, _ in events:
                source, handle = key.data
                if handle.rank in (self._closed_pipes if source == _PIPE else self._ended):
                    continue
                if source == _PIPE:
                    self._read(handle, result, request)
                else:  # it ended while asked: no stacks to take
                    self._drain(handle, result, request)
                    self._mark_ended(handle)
                    result.pending.discard(handle.rank)
        return result


def _is_failure(message: Any) -> bool:
    if isinstance(message, InitFailed):
        return True
    if isinstance(message, TestDone):
        return message.outcome is not None and message.outcome.has_failure()
    return False


def _faulthandler_stacks(handle: RankProcess) -> str:
    # The listener thread could not answer (the GIL is held by C code): ask
    # faulthandler, which dumps every thread without the GIL, into the rank's log.
    handle.stash += handle.read_output()
    try:
        size_before = handle.log_size()
        os.kill(handle.process.pid, signal.SIGUSR1)
    except OSError:
        return "(no stacks: the rank did not answer)"
    deadline = time.monotonic() + 1.0
    # Nothing signals that the dump was written but the file growing: poll it,
    # briefly, on this rare path only.
    while time.monotonic() < deadline and handle.log_size() == size_before:
        time.sleep(0.02)
    time.sleep(0.05)  # let faulthandler finish writing
    stash, handle.stash = handle.stash, ""
    dump = handle.read_output()
    handle.stash = stash
    return "(dumped by faulthandler)\n" + dump if dump else "(no stacks: the rank did not answer)"


class FreshRanks:
    """The ranks of one MultiProcessTestCase test: started, awaited until they end, reaped."""

    def __init__(self, cls: type, settings: ClassSettings, method: str, world_dir: str, rendezvous: str) -> None:
        self.cls, self.settings, self.method = cls, settings, method
        self.world_dir, self.rendezvous = world_dir, rendezvous
        self.ranks: List[RankProcess] = []
        self._watch: Optional[Watch] = None
        # How each rank ended, as wait() saw it (exit codes declared or reported).
        self.exits: Dict[int, Optional[int]] = {}

    def start(self) -> None:
        """Fork the ranks; each starts running the test at once."""
        self.ranks = start_ranks(self.cls, self.settings, self.world_dir, "single", self.method, self.rendezvous)
        self._watch = Watch(self.ranks)

    def wait(self, time_limit: float, grace: float, progress: Any = None) -> Tuple[Waited, Dict[int, str]]:
        """Wait until every rank ended, or the time limit (or the grace after a failure) expired."""
        assert self._watch is not None, "FreshRanks.wait() before start()"
        goal = Goal(replies=(TestDone,), deadline=time.monotonic() + time_limit, grace=grace, until_exit=True,
                    progress=progress)
        waited = self._watch.wait(goal)
        self.exits.update(waited.exits)
        return waited, {h.rank: h.read_output() for h in self.ranks}

    def processes(self) -> List["RankView"]:
        """The ranks' processes as torch's ``self.processes`` holds them."""
        return [RankView(h.process, h.rank, self.exits) for h in self.ranks]

    def stop(self) -> None:
        """Kill whatever still runs, with what its tests started, and reap it.

        Ranks that declared their exit are only killed (with their groups) here,
        and reaped later by :func:`reap_retired`: their test is over, and
        waiting for the kernel to tear them down would cost every test that much.
        """
        declared: set = set()
        if self._watch is not None:
            self._watch.close()
            declared, self._watch = self._watch.declared, None
        retire([h for h in self.ranks if h.rank in declared])
        kill_ranks([h for h in self.ranks if h.rank not in declared])
        self.ranks = []


class RankView:
    """A rank's ``multiprocessing`` process whose ``exitcode`` is known as soon as the rank declared it.

    torch's idiom reads ``self.processes[i].exitcode`` in ``tearDown``; a rank that
    declared its exit may not have been reaped yet (:func:`retire`).
    """

    def __init__(self, process: Any, rank: int, exits: Dict[int, Optional[int]]) -> None:
        self._process, self._rank, self._exits = process, rank, exits

    @property
    def exitcode(self) -> Optional[int]:
        """The process's exit code, or the one it declared before ending."""
        code = self._process.exitcode
        return code if code is not None else self._exits.get(self._rank)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._process, name)

    def __repr__(self) -> str:
        return f"<rank {self._rank}: {self._process!r}>"


# Ranks killed and not yet reaped.
_RETIRED: List[RankProcess] = []


def retire(ranks: Sequence[RankProcess]) -> None:
    """Kill ``ranks`` (ending on their own) with what they started, and leave the reaping for later."""
    for handle in ranks:
        handle.signal_group(signal.SIGKILL)
    _RETIRED.extend(ranks)


def reap_retired(timeout: Optional[float] = None) -> None:
    """Reap the retired ranks that ended; with ``timeout``, all of them, waiting that long at most.

    Rank starts call this without a timeout; a class's end and interpreter exit with one.
    """
    if timeout is not None:
        _join_all(_RETIRED, timeout)
    done = [h for h in _RETIRED if timeout is not None or h.exitcode() is not None]
    for handle in done:
        handle.process.join(0)
        handle.close()
        _RETIRED.remove(handle)
    if done:
        coverage_support.merge_rank_data()
