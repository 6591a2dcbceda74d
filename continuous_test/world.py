"""The controller: one persistent world of rank processes per test class.

How data flows::

    runner (unittest / pytest)
        │  TestCase.run(result)
        ▼
    case.MultiProcContinuousTest ──► World.run_test(method) ──RunTest──►  rank 0 … rank N-1
        ▲                                  │  wait(pipes + sentinels)      (worker.rank_main,
        │                                  ◄──────TestDone / Stacks──────   forked from the
        │                                  │                                template process)
        │                          outcome.merge(outcomes, faults)
        └──────── Verdict (pass / skip / fail + report naming ranks) ◄─┘

Lifecycle of a :class:`World`::

    NEW ──start()──► READY ──run_test()──► READY ──stop()──► STOPPED
              │                 │
              │                 └─ fault or failed test ─► BROKEN (ranks killed)
              │                                               │ next run_test(): start() again
              └─ a rank cannot import the class / join ─► WorldStartError (or SkipTest)

The controller only ever blocks in :func:`multiprocessing.connection.wait` on the
ranks' pipes and process sentinels together, so a rank's death is seen at once,
and every wait has a deadline: the per-test time limit, the grace period after a
first failure, the start timeout, or the shutdown timeout.  Ranks talk to the
controller only over inherited pipes.  Worlds are kept in a registry keyed by
test class (never on the class itself) and all are stopped at interpreter exit.
"""
from __future__ import annotations

import atexit
import enum
import os
import pickle
import selectors
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any, Dict, List, Optional, Sequence, Tuple

from continuous_test import config, protocol, template, timeline
from continuous_test.outcome import (
    ErrorRecord,
    FaultKind,
    RankEnding,
    RankFault,
    RankOutcome,
    Verdict,
    exit_description,
    merge,
    prefix_lines,
)
from continuous_test.protocol import (
    DumpStacks,
    InitFailed,
    Ready,
    RankSpec,
    RunTest,
    Shutdown,
    Stacks,
    TestDone,
)

__all__ = [
    "World",
    "WorldState",
    "WorldStartError",
    "RankProcess",
    "FreshRanks",
    "start_ranks",
    "kill_ranks",
    "collect_stacks",
    "world_for",
    "start_world_for",
    "stop_world",
    "stop_all",
]

STACKS_TIMEOUT = 2.0
KILL_TIMEOUT = 2.0

RESTART_NOTE = "(the world of {n} ranks is restarted before the next test)"
START_FAILED = "{cls}: rank {rank} could not join the world of {world_size}: {error}"
START_DIED = "{cls}: rank {rank} {how} while starting the world of {world_size}"
START_TIMEOUT = (
    "{cls}: rank(s) {ranks} did not join the world of {world_size} within {seconds:g} s "
    "(set start_timeout on the class or CONTINUOUS_TEST_START_TIMEOUT to wait longer)"
)


class WorldState(enum.Enum):
    """Where a :class:`World` is in its lifecycle."""

    NEW = "new"
    READY = "ready"
    BROKEN = "broken"
    STOPPED = "stopped"


class WorldStartError(RuntimeError):
    """A world could not be started; the message names the class and the rank."""


@dataclass
class RankProcess:
    """The controller's handle on one rank: its process, pipe and log file."""

    rank: int
    process: Any
    conn: Any
    log_file: str
    log_fd: int = -1
    control: Any = None  # the write end of the rank's control pipe
    log_offset: int = 0
    ready: Optional[Ready] = None
    # Output read early (before a faulthandler dump) and not yet reported.
    stash: str = ""

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

    def close(self) -> None:
        """Close the controller's ends: the pipes and the log."""
        self.conn.close()
        if self.control is not None:
            self.control.close()
        if self.log_fd >= 0:
            os.close(self.log_fd)
            self.log_fd = -1


@dataclass
class _Wait:
    """Bookkeeping of one ``run_test`` wait loop."""

    pending: set
    outcomes: Dict[int, RankOutcome] = field(default_factory=dict)
    faults: List[RankFault] = field(default_factory=list)
    dead: set = field(default_factory=set)
    grace_deadline: Optional[float] = None


def start_ranks(
    cls: type,
    world_size: int,
    world_dir: str,
    role: str = "continuous",
    method: Optional[str] = None,
    rendezvous: Optional[str] = None,
) -> List[RankProcess]:
    """Fork ``world_size`` ranks from the template; used by worlds and by MultiProcessTestCase."""
    from continuous_test.worker import rank_main

    ctx = template.get_context()
    module = sys.modules.get(cls.__module__)
    module_file = getattr(module, "__file__", None)
    rendezvous = rendezvous or os.path.join(world_dir, "rendezvous")
    os.close(os.open(rendezvous, os.O_WRONLY | os.O_CREAT, 0o600))
    env = dict(os.environ)
    # The forkserver's socket lives in multiprocessing's temp dir: if the
    # controller is killed, the ranks remove it along with the world's own.
    from multiprocessing import util

    cleanup = (world_dir, util.get_temp_dir())
    ranks = []
    for rank in range(world_size):
        log_file = os.path.join(world_dir, f"rank{rank}.log")
        log_fd = os.open(log_file, os.O_RDONLY | os.O_CREAT, 0o600)
        spec = RankSpec(rank, world_size, cls.__module__, cls.__qualname__, module_file,
                        world_dir, rendezvous, log_file, env, cleanup, role, method)
        parent, child = ctx.Pipe()
        control_r, control_w = ctx.Pipe(duplex=False)
        process = ctx.Process(target=rank_main, args=(spec, child, control_r), name=f"{cls.__name__}-rank{rank}")
        process.start()
        child.close()
        control_r.close()
        ranks.append(RankProcess(rank, process, parent, log_file, log_fd, control_w))
    return ranks


def kill_ranks(ranks: Sequence[RankProcess], timeout: float = KILL_TIMEOUT) -> None:
    """Terminate, then kill, every rank still alive, and reap them all."""
    for handle in ranks:
        if handle.process.exitcode is None:
            handle.process.terminate()
    _join_all(ranks, timeout)
    for handle in ranks:
        if handle.process.exitcode is None:
            handle.process.kill()
    _join_all(ranks, timeout)
    for handle in ranks:
        handle.close()


def _join_all(ranks: Sequence[RankProcess], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for handle in ranks:
        handle.process.join(max(0.0, deadline - time.monotonic()))


def collect_stacks(ranks: Sequence[RankProcess], timeout: float = STACKS_TIMEOUT) -> Tuple[Dict[int, str], Dict[int, Any]]:
    """Ask ranks for their Python stacks; returns stacks and any other messages that arrived."""
    stacks: Dict[int, str] = {}
    late: Dict[int, Any] = {}
    asked = {}
    for handle in ranks:
        if handle.process.exitcode is None:
            try:
                protocol.send(handle.control, DumpStacks())
                asked[handle.conn] = handle
            except OSError:
                pass
    deadline = time.monotonic() + timeout
    while asked and time.monotonic() < deadline:
        for conn in wait(list(asked), deadline - time.monotonic()):
            handle = asked[conn]
            try:
                message = protocol.recv(conn)
            except (EOFError, OSError):
                del asked[conn]
                continue
            if isinstance(message, Stacks):
                stacks[handle.rank] = message.text
                del asked[conn]
            else:
                late[handle.rank] = message
    for handle in asked.values():
        stacks[handle.rank] = _faulthandler_stacks(handle)
    return stacks, late


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


class World:
    """A persistent world of ranks for one test class; see the module docstring."""

    def __init__(self, cls: type, world_size: int) -> None:
        self.cls = cls
        self.world_size = world_size
        self.grace = config.grace_period(cls)
        self.start_timeout = config.start_timeout(cls)
        self.shutdown_timeout = config.shutdown_timeout(cls)
        self.state = WorldState.NEW
        self.ranks: List[RankProcess] = []
        self.dir: Optional[str] = None
        self._seq = 0
        self._reinit: Optional[int] = None
        self._reinit_count = 0
        self.start_error: Optional[BaseException] = None
        self._selector: Optional[selectors.BaseSelector] = None

    # -- starting -----------------------------------------------------------------

    def ensure_started(self) -> None:
        """Start the world unless it is READY; the test case calls this before each test."""
        if self.state is WorldState.READY:
            return
        self.stop()
        self.start()

    def start(self) -> None:
        """Start all ranks and wait until each joined the process group."""
        self.dir = tempfile.mkdtemp(prefix=f"continuous_test-{self.cls.__name__}-")
        self._reinit = None
        try:
            self.ranks = start_ranks(self.cls, self.world_size, self.dir)
            self._await_ready()
        except BaseException:
            self.stop(graceful=False)
            raise
        self._watch()
        self.state = WorldState.READY

    def _watch(self) -> None:
        # One selector for the world's life: registering pipes and sentinels anew
        # for every wait would cost more than the rest of a trivial test.
        self._selector = selectors.DefaultSelector()
        for handle in self.ranks:
            self._selector.register(handle.conn, selectors.EVENT_READ, ("pipe", handle))
            self._selector.register(handle.process.sentinel, selectors.EVENT_READ, ("sentinel", handle))

    def _await_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        waiting = {h.conn: h for h in self.ranks}
        sentinels = {h.process.sentinel: h for h in self.ranks}
        while waiting:
            remaining = deadline - time.monotonic()
            ready = wait(list(waiting) + list(sentinels), max(0.0, remaining))
            if not ready:
                self._start_timed_out(sorted(h.rank for h in waiting.values()))
            for obj in ready:
                if obj in sentinels:
                    self._start_died(sentinels[obj])
                handle = waiting.pop(obj)
                try:
                    message = protocol.recv(obj)
                except (EOFError, OSError):
                    self._start_died(handle)
                if isinstance(message, InitFailed):
                    self._start_failed(message, handle)
                handle.ready = message

    def _start_failed(self, message: InitFailed, handle: RankProcess) -> None:
        output = handle.read_output()
        if message.skip_reason is not None:
            import unittest

            raise unittest.SkipTest(message.skip_reason)
        error = message.error
        text = START_FAILED.format(cls=self.cls.__qualname__, rank=handle.rank,
                                   world_size=self.world_size, error=error.headline())
        raise WorldStartError(_with_details(text, error.traceback, handle.rank, output))

    def _start_died(self, handle: RankProcess) -> None:
        handle.process.join(1.0)
        text = START_DIED.format(cls=self.cls.__qualname__, rank=handle.rank, world_size=self.world_size,
                                 how="died with " + exit_description(handle.process.exitcode))
        raise WorldStartError(_with_details(text, None, handle.rank, handle.read_output()))

    def _start_timed_out(self, missing: List[int]) -> None:
        stacks, _ = collect_stacks([h for h in self.ranks if h.rank in missing])
        text = START_TIMEOUT.format(cls=self.cls.__qualname__, ranks=", ".join(map(str, missing)),
                                    world_size=self.world_size, seconds=self.start_timeout)
        for rank, stack in sorted(stacks.items()):
            text += f"\nrank {rank} stacks:\n{stack}"
        raise WorldStartError(text)

    # -- running tests ------------------------------------------------------------

    def run_test(self, method: str, test_id: str, time_limit: float, kwargs: Optional[dict] = None) -> Verdict:
        """Run one test on every rank and merge the outcomes into a verdict."""
        self._seq += 1
        payload = pickle.dumps(RunTest(method, self._seq, self._reinit, kwargs), pickle.HIGHEST_PROTOCOL)
        for handle in self.ranks:
            handle.mark_output()
            handle.conn.send_bytes(payload)  # pickled once for every rank
        self._reinit = None
        state = _Wait(pending=set(range(self.world_size)))
        try:
            self._collect(state, time.monotonic() + time_limit)
        except KeyboardInterrupt:
            self.stop(graceful=False)
            raise
        outputs = {h.rank: h.read_output() for h in self.ranks}
        verdict = merge(test_id, self.world_size, state.outcomes, state.faults, outputs,
                        grace=self.grace, time_limit=time_limit, note=RESTART_NOTE.format(n=self.world_size),
                        timeline=self._timeline(state.faults))
        self._after_test(state, verdict, outputs)
        return verdict

    def _collect(self, state: _Wait, deadline: float) -> None:
        while state.pending:
            until = min(deadline, state.grace_deadline or deadline)
            ready = self._selector.select(max(0.0, until - time.monotonic()))
            if not ready:
                if until >= deadline:
                    kind = FaultKind.TIMED_OUT
                else:
                    kind = FaultKind.INTERRUPTED if state.dead else FaultKind.STUCK
                self._fault_pending(state, kind)
                return
            for key, _ in ready:
                kind, handle = key.data
                if handle.rank in state.dead:
                    continue
                if kind == "sentinel" or not self._receive(handle, state):
                    self._rank_died(handle, state)

    def _receive(self, handle: RankProcess, state: _Wait) -> bool:
        try:
            message = protocol.recv(handle.conn)
        except (EOFError, OSError):
            return False
        if isinstance(message, TestDone) and message.seq == self._seq:
            outcome = state.outcomes[handle.rank] = message.full_outcome()
            state.pending.discard(handle.rank)
            if outcome.has_failure():
                self._start_grace(state)
        return True

    def _start_grace(self, state: _Wait) -> None:
        # After a first failure or death, the others get a grace period to report
        # (peers of a dead rank usually fail fast); who has not by then is stuck.
        if state.grace_deadline is None:
            state.grace_deadline = time.monotonic() + self.grace

    def _fault_pending(self, state: _Wait, kind: FaultKind) -> None:
        handles = [h for h in self.ranks if h.rank in state.pending]
        stacks, late = collect_stacks(handles)
        for handle in handles:
            message = late.get(handle.rank)
            if isinstance(message, TestDone) and message.seq == self._seq:
                state.outcomes[handle.rank] = message.full_outcome()
                continue
            state.faults.append(RankFault(handle.rank, kind, stacks=stacks.get(handle.rank)))
        state.pending.clear()

    def _rank_died(self, dead: RankProcess, state: _Wait) -> None:
        self._selector.unregister(dead.conn)
        self._selector.unregister(dead.process.sentinel)
        dead.process.join(1.0)
        state.faults.append(RankFault(dead.rank, FaultKind.DIED, exitcode=dead.process.exitcode))
        state.dead.add(dead.rank)
        state.pending.discard(dead.rank)
        self._start_grace(state)

    def _timeline(self, faults: Sequence[RankFault]):
        """Builds the collective timeline from the ranks' records files, when a report needs it."""
        dead = [f.rank for f in faults if f.kind is FaultKind.DIED]
        world_dir, ranks = self.dir, range(self.world_size)
        return timeline.lazy(lambda: timeline.for_world(world_dir, ranks, dead))

    def _after_test(self, state: _Wait, verdict: Verdict, outputs: Dict[int, str]) -> None:
        if verdict.restart_world:
            # The world is discarded: killing is as clean as a graceful shutdown
            # (the ranks hold nothing else) and never waits on a broken group.
            self.stop(graceful=False)
            self.state = WorldState.BROKEN
            return
        if any(o.pg_destroyed for o in state.outcomes.values()):
            self._reinit_count += 1
            self._reinit = self._reinit_count
        if not verdict.failed:
            _forward_output(outputs)

    # -- stopping -----------------------------------------------------------------

    def stop(self, graceful: bool = True) -> None:
        """Stop every rank (bounded) and remove the world's files; safe to call twice."""
        if self._selector is not None:
            self._selector.close()
            self._selector = None
        if self.ranks:
            if graceful and self.state is WorldState.READY:
                self._shutdown_gracefully()
            kill_ranks(self.ranks)
            self.ranks = []
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        self.state = WorldState.STOPPED

    def _shutdown_gracefully(self) -> None:
        for handle in self.ranks:
            try:
                protocol.send(handle.conn, Shutdown())
            except OSError:
                pass
        _join_all(self.ranks, self.shutdown_timeout)


def _forward_output(outputs: Dict[int, str]) -> None:
    # Output of passing tests goes to the controller's stderr, where the runner's
    # own capture (pytest's, or unittest's -b) decides whether it is shown.
    for rank, text in sorted(outputs.items()):
        if text:
            sys.stderr.write(prefix_lines(rank, text))


def _with_details(text: str, tb: Optional[str], rank: int, output: str) -> str:
    if tb:
        text += f"\n[rank {rank}] {tb.rstrip()}"
    if output.strip():
        text += "\n" + prefix_lines(rank, output).rstrip("\n")
    return text


class FreshRanks:
    """The ranks of one MultiProcessTestCase test: started, awaited until they end, reaped."""

    def __init__(self, cls: type, world_size: int, method: str, world_dir: str, rendezvous: str) -> None:
        self.cls, self.world_size, self.method = cls, world_size, method
        self.world_dir, self.rendezvous = world_dir, rendezvous
        self.ranks: List[RankProcess] = []

    def start(self) -> None:
        """Fork the ranks; each starts running the test at once."""
        self.ranks = start_ranks(self.cls, self.world_size, self.world_dir, "single", self.method, self.rendezvous)

    def wait(self, time_limit: float, grace: float) -> Tuple[Dict[int, RankEnding], List[RankFault], Dict[int, str]]:
        """Wait until every rank ended, or the time limit (or the grace after a failure) expired."""
        deadline = time.monotonic() + time_limit
        grace_deadline: Optional[float] = None
        outcomes: Dict[int, RankOutcome] = {}
        exited: Dict[int, Optional[int]] = {}
        open_conns = {h.conn: h for h in self.ranks}
        sentinels = {h.process.sentinel: h for h in self.ranks}
        faults: List[RankFault] = []
        while len(exited) < len(self.ranks):
            until = min(deadline, grace_deadline or deadline)
            watched = list(open_conns) + [s for s, h in sentinels.items() if h.rank not in exited]
            ready = wait(watched, max(0.0, until - time.monotonic()))
            if not ready:
                kind = FaultKind.TIMED_OUT if until >= deadline else FaultKind.STUCK
                faults = self._fault_alive(exited, outcomes, kind)
                break
            for obj in ready:
                if obj in sentinels:
                    handle = sentinels[obj]
                    handle.process.join()
                    self._drain(handle, outcomes)
                    open_conns.pop(handle.conn, None)
                    exited[handle.rank] = handle.process.exitcode
                elif obj in open_conns and not self._drain(open_conns[obj], outcomes):
                    del open_conns[obj]
                if grace_deadline is None and any(o.has_failure() for o in outcomes.values()):
                    grace_deadline = time.monotonic() + grace
        endings = {h.rank: RankEnding(h.rank, exited.get(h.rank), outcomes.get(h.rank)) for h in self.ranks}
        return endings, faults, {h.rank: h.read_output() for h in self.ranks}

    @staticmethod
    def _drain(handle: RankProcess, outcomes: Dict[int, RankOutcome]) -> bool:
        """Read what the rank sent; False once its pipe is closed."""
        try:
            while handle.conn.poll(0):
                message = protocol.recv(handle.conn)
                if isinstance(message, TestDone):
                    outcomes[handle.rank] = message.full_outcome()
        except (EOFError, OSError):
            return False
        return True

    def _fault_alive(self, exited, outcomes, kind: FaultKind) -> List[RankFault]:
        alive = [h for h in self.ranks if h.rank not in exited]
        stacks, late = collect_stacks(alive)
        for rank, message in late.items():
            if isinstance(message, TestDone):
                outcomes[rank] = message.full_outcome()
        return [RankFault(h.rank, kind, stacks=stacks.get(h.rank)) for h in alive]

    def stop(self) -> None:
        """Kill whatever still runs and reap it."""
        kill_ranks(self.ranks)
        self.ranks = []


# -- registry -----------------------------------------------------------------------

_WORLDS: Dict[type, World] = {}


def world_for(cls: type, world_size: int) -> World:
    """The world of ``cls``, created on first use; the test case calls this."""
    world = _WORLDS.get(cls)
    if world is None or world.world_size != world_size:
        if world is not None:
            world.stop()
        world = _WORLDS[cls] = World(cls, world_size)
    return world


def start_world_for(cls: type) -> World:
    """Check ``cls``'s configuration and return its started world; called before each test.

    A world that failed to start is not retried for the rest of the class: every
    later test reports the same error (or skip) at once.
    """
    world = _WORLDS.get(cls)
    if world is not None and world.state is WorldState.READY:
        return world  # checked when it started
    cls._check_importable()
    world_size = cls._resolve_world_size()
    cls._check_backend(world_size)
    world = world_for(cls, world_size)
    if world.start_error is not None:
        raise _again(world.start_error, cls)
    try:
        world.ensure_started()
    except Exception as exc:  # SkipTest included
        world.start_error = exc
        raise
    return world


NOT_RETRIED = "(the world of {cls} failed to start for an earlier test and is not retried)"


def _again(error: BaseException, cls: type) -> BaseException:
    import unittest

    if isinstance(error, unittest.SkipTest):
        return unittest.SkipTest(*error.args)
    copy = type(error)(f"{error}\n{NOT_RETRIED.format(cls=cls.__qualname__)}")
    copy.__cause__ = error.__cause__
    return copy


def stop_world(cls: type) -> None:
    """Stop the world of ``cls`` if it has one; called from ``tearDownClass``."""
    world = _WORLDS.pop(cls, None)
    if world is not None:
        world.stop()


@atexit.register
def stop_all() -> None:
    """Stop every world; runs at interpreter exit so no rank outlives the controller."""
    for cls in list(_WORLDS):
        stop_world(cls)
