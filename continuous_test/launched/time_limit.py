"""The per-test time limit of a launched rank: report what it can, then end the rank.

When a test outlives its limit, the rank prints which test it was running and
publishes the stacks of all its threads and its records with the fact that it
timed out (so its peers stop waiting and report it), then exits with
:data:`EXIT_TIME_LIMIT`, so the launcher ends the job.  Rank 0 prints the
errors its peers published, every rank's stacks, labelled, the collective
timeline and unittest's summary.
A faulthandler backstop ends a rank whose main thread holds the GIL for good.

The same watch ends a rank that is still in the test the grace period after a
peer published that it skipped it (a skip decorator that reads ``RANK``): the
rank is then most likely waiting in a collective for the skipper.  It prints the
inconsistent skip and its stacks, publishes that it was stuck, and exits, so the
verdict comes within the grace period, not at the time limit.
"""
from __future__ import annotations

import faulthandler
import os
import pickle
import sys
import threading
import time
from datetime import timedelta
from typing import Any, Dict, Optional, Tuple

from continuous_test.launched import output
from continuous_test._launch import Launch
from continuous_test.launched.join import STORE_PREFIX
from continuous_test.rank import recorder
from continuous_test.rank.run import format_stacks
from continuous_test.verdict import timeline
from continuous_test.verdict.text import indent, prefix_lines
from continuous_test.wire import records
from continuous_test.wire.outcome import EventKind, FaultKind, RankFault, RankOutcome


TIME_LIMIT_EXCEEDED = (
    "continuous_test: {test} exceeded its time limit of {limit:g} s on rank {rank}; "
    "stacks of all threads follow, then this rank exits with code {code}"
)
PEER_ERROR = "continuous_test: rank {rank} had already failed {test} (rank {me} timed out):\n{error}"
PEER_MISSING = "continuous_test: rank {rank} had not finished {test} either"
STUCK_AFTER_SKIP = (
    "continuous_test: {test} was skipped on rank {skipper} ({reason}) but ran on rank {rank}, which had not "
    "finished it {grace:g} s later: a test must skip on every rank or on none, because peers may be blocked in a "
    "collective; decide the skip from facts that are the same on all ranks.  Stacks follow, then this rank exits "
    "with code {code}"
)
# How often a running test's watch looks for a peer that skipped it.
PEER_POLL = 0.1
EXIT_TIME_LIMIT = 75


# How long a rank whose time limit expired waits for its peers' collective records.
TIMELINE_WAIT = 2.0
BACKSTOP_MARGIN = 5.0


def _say(text: str) -> None:
    """Write ``text`` to the launcher's terminal (:func:`continuous_test.launched.output.say`)."""
    output.say(text)


def _own_output(rank: int) -> None:
    """Print what this rank printed in the test so far: it exits in it, and its report never comes."""
    text = output.so_far()
    if text.strip():
        _say(f"rank {rank} output:\n{prefix_lines(rank, output.tail(text)).rstrip()}")


class TimeLimit:
    """Context manager: if the test outlives ``limit``, report (see the module docstring) and exit."""

    def __init__(self, launch: Launch, key: str, test: str, limit: float, grace: float, report_wait: float) -> None:
        self.launch, self.key, self.test, self.limit = launch, key, test, limit
        self.grace, self.report_wait = grace, report_wait
        self.done = threading.Event()
        self.watcher = threading.Thread(target=self._watch, name="continuous_test-time-limit", daemon=True)

    def __enter__(self) -> "TimeLimit":
        self.watcher.start()
        # Backstop for a main thread that holds the GIL forever.
        faulthandler.dump_traceback_later(self.limit + self.grace + self.report_wait + BACKSTOP_MARGIN, exit=True,
                                          file=output.terminal[0] if output.terminal[0] is not None else sys.stderr)
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        faulthandler.cancel_dump_traceback_later()

    def _watch(self) -> None:
        """Until the test ends: the time limit, and a peer that skipped the test while this rank runs it."""
        start = time.monotonic()
        stuck_after: Optional[float] = None
        skipper: Optional[Tuple[int, str]] = None
        seen: set = set()
        while not self.done.wait(PEER_POLL):
            now = time.monotonic()
            if now - start >= self.limit:
                self._expired()
            if skipper is None:
                skipper = self._peer_that_skipped(seen)
                if skipper is not None:
                    stuck_after = now + self.grace
            elif stuck_after is not None and now >= stuck_after:
                self._stuck_after_skip(*skipper)

    def _peer_that_skipped(self, seen: set) -> Optional[Tuple[int, str]]:
        """(rank, reason) of a peer that published a skip of this test; None if none did (yet)."""
        try:
            store = _watch_store(self.launch, self.key)
            for rank in range(self.launch.world_size):
                if rank == self.launch.rank or rank in seen or not store.check([str(rank)]):
                    continue
                seen.add(rank)
                value = pickle.loads(store.get(str(rank)))
                if isinstance(value, RankOutcome) and value.events and all(
                        event.kind is EventKind.SKIP for event in value.events):
                    return rank, value.events[0].reason or ""
        except Exception:  # no store to ask: the time limit still holds
            return None
        return None

    def _stuck_after_skip(self, skipper: int, reason: str) -> None:
        rank = self.launch.rank
        _say(STUCK_AFTER_SKIP.format(test=self.test, skipper=skipper, rank=rank, grace=self.grace, reason=reason,
                                     code=EXIT_TIME_LIMIT))
        stacks = format_stacks()
        _say(stacks)
        _own_output(rank)
        try:
            run = self._own_client()
            store = _prefix(self.key, run)
            store.set(str(rank), pickle.dumps(RankFault(rank, FaultKind.STUCK, stacks=stacks)))
            if rank != 0:
                run.set_timeout(timedelta(seconds=self.report_wait))
                run.wait(["reported"])
        except Exception as exc:  # best effort: exiting is what matters now
            _say(f"continuous_test: rank {rank}: {exc}")
        finally:
            sys.stderr.flush()
            os._exit(EXIT_TIME_LIMIT)

    def _expired(self) -> None:
        rank = self.launch.rank
        _say(TIME_LIMIT_EXCEEDED.format(test=self.test, limit=self.limit, rank=rank, code=EXIT_TIME_LIMIT))
        stacks = format_stacks()
        _own_output(rank)
        # Rank 0 prints every rank's stacks, labelled (its own now, its peers' from their
        # published faults); another rank's reach rank 0's report through the store.
        if rank == 0:
            _say(f"rank 0 stacks ({FaultKind.TIMED_OUT.words}):\n{indent(stacks)}")
        try:
            import torch.distributed as dist

            run = self._own_client()
            store = dist.PrefixStore(self.key, run)
            own = recorder.snapshot()
            if own is not None:
                store.set(f"records/{rank}", own)  # type: ignore[arg-type]
            # Everything this rank prints comes before its fault is published: the
            # fault lets rank 0 go on to print its report, which must not interleave.
            if rank == 0:
                _print_peer_errors(store, self.launch, self.test, self.grace)
            if own is not None and rank == 0:  # the other ranks' records reach rank 0, which prints it once
                _say(_peers_timeline(store, self.launch, own))
            store.set(str(rank), pickle.dumps(RankFault(rank, FaultKind.TIMED_OUT, stacks=stacks)))  # type: ignore[arg-type]
            if rank != 0:  # give rank 0 the time to print its report, which holds this timeout
                run.set_timeout(timedelta(seconds=self.report_wait))
                run.wait(["reported"])
            else:  # the report of the launch: every rank's stacks, then a summary, then the peers may go
                _print_peer_stacks(store, self.launch, self.grace)
                _say(_summary(self.key, self.test))
                run.set("reported", "1")
        except Exception as exc:  # best effort: exiting is what matters now
            _say(f"continuous_test: rank {rank}: {exc}")
        finally:
            sys.stderr.flush()
            os._exit(EXIT_TIME_LIMIT)

    def _own_client(self):
        """A connection of this thread's own: the main thread may be using the process's one."""
        import torch.distributed as dist

        launch = self.launch
        assert launch.master_addr is not None and launch.master_port is not None, "a launch without MASTER_ADDR/PORT"
        raw = dist.TCPStore(launch.master_addr, launch.master_port, None, False, timedelta(seconds=self.grace))
        return dist.PrefixStore(f"{STORE_PREFIX}/{launch.run_id}", raw)


def _peers_timeline(store: Any, launch: Launch, own: bytes) -> str:
    """The collective timeline of every rank that can tell, for a rank whose time limit expired.

    Peers whose limit expired too publish their records; those that finished the
    test carry them in their outcome.  Waits at most ``TIMELINE_WAIT`` for them.
    """
    ranks: Dict[int, Optional[records.RankCalls]] = {launch.rank: records.parse(own)}
    pending = set(range(launch.world_size)) - {launch.rank}
    deadline = time.monotonic() + TIMELINE_WAIT
    while pending and time.monotonic() < deadline:
        for rank in sorted(pending):
            if store.check([f"records/{rank}"]):
                ranks[rank] = records.parse(store.get(f"records/{rank}"))
            elif store.check([str(rank)]):
                value = pickle.loads(store.get(str(rank)))
                ranks[rank] = records.parse(getattr(value, "records", None) or b"")
            else:
                continue
            pending.discard(rank)
        if pending:
            time.sleep(0.05)
    ranks.update((rank, None) for rank in pending)
    return timeline.HEADING + "\n" + timeline.build(ranks).text


def _print_peer_stacks(store: Any, launch: Launch, grace: float) -> None:
    """Rank 0, its own limit expired: the stacks its peers published with their faults, labelled."""
    deadline = time.monotonic() + grace
    for rank in range(1, launch.world_size):
        store.set_timeout(timedelta(seconds=max(0.01, deadline - time.monotonic())))
        try:
            value = pickle.loads(store.get(str(rank)))
        except Exception:
            _say(f"rank {rank} stacks: none published within {grace:g} s")
            continue
        if isinstance(value, RankFault) and value.stacks:
            _say(f"rank {rank} stacks ({value.kind.words}):\n{indent(value.stacks)}")


# When this launched process started: the summary's "Ran N tests in S".
_STARTED = time.monotonic()


def _summary(key: str, test: str) -> str:
    """unittest's summary lines for a launch that ends at ``test`` (its key ``test/<seq>``)."""
    try:
        ran = int(key.split("/")[1])
    except (IndexError, ValueError):
        ran = 0
    return (f"{'-' * 70}\nRan {ran} test{'s' if ran != 1 else ''} in {time.monotonic() - _STARTED:.3f}s\n\n"
            f"FAILED ({test} exceeded its time limit; the launch ends here)")


def _print_peer_errors(store, launch: Launch, test: str, grace: float) -> None:
    """Print the errors peers published for this test, waiting up to ``grace`` for the rest."""
    deadline = time.monotonic() + grace
    for rank in range(launch.world_size):
        if rank == launch.rank:
            continue
        store.set_timeout(timedelta(seconds=max(0.01, deadline - time.monotonic())))
        try:
            value = pickle.loads(store.get(str(rank)))
        except Exception:
            _say(PEER_MISSING.format(rank=rank, test=test))
            continue
        if isinstance(value, RankOutcome) and value.has_failure():
            error = "\n".join(rec.traceback.rstrip() for event in value.events for rec in event.errors)
            _say(PEER_ERROR.format(rank=rank, test=test, me=launch.rank, error=error))


def _prefix(key: str, store: Any) -> Any:
    import torch.distributed as dist

    return dist.PrefixStore(key, store)


# The watch threads' own store connection, made once per launch (they run one at a time).
_watch_client: Optional[Tuple[str, Any]] = None


def _watch_store(launch: Launch, key: str) -> Any:
    """A store connection of the watch thread's own (the main thread may be using the process's), under ``key``."""
    import torch.distributed as dist

    global _watch_client
    if _watch_client is None or _watch_client[0] != launch.run_id:
        assert launch.master_addr is not None and launch.master_port is not None, "a launch without MASTER_ADDR/PORT"
        raw = dist.TCPStore(launch.master_addr, launch.master_port, None, False, timedelta(seconds=5))
        _watch_client = (launch.run_id, dist.PrefixStore(f"{STORE_PREFIX}/{launch.run_id}", raw))
    return dist.PrefixStore(key, _watch_client[1])
