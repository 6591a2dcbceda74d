"""The one wait loop over a set of ranks: every pipe and process sentinel, with a deadline.

:meth:`Watch.wait` blocks only in a selector over every rank's pipe *and* process
sentinel, so a message and a death are seen at once; every message a rank sends is
decoded in :meth:`Watch._dispatch`, and one the current wait does not expect is a
:class:`~continuous_test.errors.ProtocolError`, never dropped.  A rank that does not
answer in time gets its stacks taken: asked over its control pipe, else dumped by
faulthandler into its log.
"""
from __future__ import annotations

import os
import selectors
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from continuous_test.controller.processes import KILL_TIMEOUT, RankProcess
from continuous_test.errors import ProtocolError
from continuous_test.template import server as template
from continuous_test.wire import messages
from continuous_test.wire.messages import DumpStacks, InitFailed, Stacks, TestDone
from continuous_test.wire.outcome import FaultKind, RankFault


STACKS_TIMEOUT = 2.0


# How long a rank's end with no exit code may take to show as its template's death.
TEMPLATE_EXIT_WAIT = 1.0
UNEXPECTED_MESSAGE = "rank {rank} sent an unexpected {message} while the controller waited for {waiting}"
_PIPE, _SENTINEL = "pipe", "sentinel"


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
    # Heartbeats and live output (continuous_test.controller.progress.Progress); None: off.
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
        """Release the selector; no wait may follow."""
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
        """Ranks that ended since the last wait (or call), with their exit codes; never blocks."""
        found: Dict[int, Optional[int]] = {}
        for key, _ in self._selector.select(0):
            source, handle = key.data
            if source == _SENTINEL and handle.rank not in self._ended:
                self._mark_ended(handle)
                found[handle.rank] = handle.exitcode()
        return found

    def _read(self, handle: RankProcess, state: Waited, goal: Goal) -> None:
        try:
            message = messages.recv(handle.conn)
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
            raise ProtocolError(UNEXPECTED_MESSAGE.format(rank=handle.rank, message=_name(message), waiting=goal.describe()))
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
            if _is_failure(message) or (_is_skip(message) and state.pending and not goal.until_exit):
                # A rank that skipped while others run on: a peer may be waiting for it
                # in a collective, so they get the grace period too, as after a failure.
                self._failed(state, goal)
        elif kind in goal.accepts:
            state.others.setdefault(kind, {})[handle.rank] = message
        else:
            raise ProtocolError(UNEXPECTED_MESSAGE.format(rank=handle.rank, message=_name(message), waiting=goal.describe()))

    def _drain(self, handle: RankProcess, state: Waited, goal: Goal) -> None:
        # Read what the rank sent before it ended.
        if handle.rank in self._closed_pipes:
            return
        try:
            while handle.conn.poll(0):
                self._dispatch(handle, messages.recv(handle.conn), state, goal)
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
                messages.send(handle.control, DumpStacks())
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


def _name(message: Any) -> str:
    """A message as a report names it: its type, and its sequence number if it has one (not its payload)."""
    seq = getattr(message, "seq", None)
    return type(message).__name__ + (f" #{seq}" if seq is not None else "")


def _is_failure(message: Any) -> bool:
    return isinstance(message, InitFailed) or (isinstance(message, TestDone) and message.failed())


def _is_skip(message: Any) -> bool:
    return isinstance(message, TestDone) and message.skipped()


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
