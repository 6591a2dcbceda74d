"""The controller's one wait loop (controller.watch.Watch), on small forked stand-ins for ranks.

Each stand-in is a real process with the two pipes a rank has; it sends what the
test scripts and ends as told, so every branch of the loop (a reply, an unexpected
message, a death before or after replying, an expiry) is reached in milliseconds.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time

import pytest

from continuous_test.controller.processes import RankProcess, kill_ranks
from continuous_test.controller.watch import Goal, Watch
from continuous_test.errors import ProtocolError
from continuous_test.wire import messages
from continuous_test.wire.messages import Ready, TestDone
from continuous_test.wire.outcome import ErrorRecord, Event, EventKind, FaultKind, RankOutcome

CTX = multiprocessing.get_context("fork")


def _stand_in(conn, control, script):
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # no faulthandler here: stacks come back empty
    for step in script:
        if step == "sleep":
            time.sleep(60)
        elif isinstance(step, tuple) and step[0] == "exit":
            os._exit(step[1])
        elif isinstance(step, float):
            time.sleep(step)
        else:
            messages.send(conn, step)
    time.sleep(60)


@pytest.fixture
def start(tmp_path):
    started = []

    def start(*scripts):
        ranks = []
        for rank, script in enumerate(scripts):
            parent, child = CTX.Pipe()
            control_r, control_w = CTX.Pipe(duplex=False)
            process = CTX.Process(target=_stand_in, args=(child, control_r, script), daemon=True)
            process.start()
            child.close()
            control_r.close()
            log = str(tmp_path / f"rank{rank}.log")
            fd = os.open(log, os.O_RDONLY | os.O_CREAT, 0o600)
            ranks.append(RankProcess(rank, process, parent, log, fd, control_w))
        started.extend(ranks)
        return Watch(ranks), ranks

    yield start
    kill_ranks(started, timeout=5)


@contextlib.contextmanager
def bounded(seconds):
    """Fail, not hang, when a wait never ends (a selector event the loop ignores spins it forever)."""
    def on_alarm(signum, frame):
        raise TimeoutError(f"the wait did not end within {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def done(rank, seq=1, failed=False):
    if not failed:
        return TestDone(rank, seq)
    record = ErrorRecord("builtins", "AssertionError", "no", "Traceback...\nAssertionError: no\n", True)
    return TestDone(rank, seq, RankOutcome(rank, [Event(EventKind.FAILURE, errors=(record,))]))


def goal(**kwargs):
    kwargs.setdefault("deadline", time.monotonic() + 30)
    return Goal(replies=(TestDone,), seq=1, **kwargs)


def test_every_rank_replies(start):
    watch, _ = start([done(0)], [done(1)])
    waited = watch.wait(goal())
    assert sorted(waited.replies) == [0, 1] and waited.faults == [] and not waited.pending


def test_an_unexpected_message_is_an_error_not_dropped(start):
    watch, _ = start([Ready(0)], [done(1)])
    with pytest.raises(ProtocolError, match=r"rank 0 sent an unexpected Ready while the controller "
                                            r"waited for TestDone #1"):
        watch.wait(goal())


def test_a_reply_for_another_test_is_an_error(start):
    watch, _ = start([done(0, seq=7)], [done(1)])
    with pytest.raises(ProtocolError, match="TestDone"):
        watch.wait(goal())


def test_a_death_is_seen_at_once_and_the_peer_gets_the_grace(start):
    watch, _ = start([("exit", 3)], ["sleep"])
    began = time.monotonic()
    with bounded(20):  # seen only through the pipe, the death would never end the wait
        waited = watch.wait(goal(grace=0.5))
    elapsed = time.monotonic() - began
    kinds = {f.rank: (f.kind, f.exitcode) for f in waited.faults}
    assert kinds == {0: (FaultKind.DIED, 3), 1: (FaultKind.INTERRUPTED, None)}
    assert 0.5 <= elapsed < 10, elapsed  # the grace, then at most the stacks' bounds


def test_a_failure_starts_the_grace_and_the_silent_rank_is_stuck(start):
    watch, _ = start([done(0, failed=True)], ["sleep"])
    began = time.monotonic()
    waited = watch.wait(goal(grace=0.3))
    assert 0.3 <= time.monotonic() - began < 10
    assert [(f.rank, f.kind) for f in waited.faults] == [(1, FaultKind.STUCK)]
    assert waited.replies[0].outcome.has_failure()


def test_the_deadline_bounds_the_wait(start):
    watch, _ = start(["sleep"], [done(1)])
    waited = watch.wait(Goal(replies=(TestDone,), seq=1, deadline=time.monotonic() + 0.3))
    assert [(f.rank, f.kind) for f in waited.faults] == [(0, FaultKind.TIMED_OUT)]


def test_a_death_after_replying_is_not_this_tests_fault(start):
    watch, _ = start([done(0), ("exit", 7)], [0.3, done(1)])
    waited = watch.wait(goal())
    assert waited.faults == [] and sorted(waited.replies) == [0, 1]
    deaths = waited.died_after_reply or watch.deaths()
    assert deaths == {0: 7}


def test_deaths_between_waits_are_found_without_blocking(start):
    watch, _ = start([done(0), 0.2, ("exit", 5)], [done(1)])
    watch.wait(goal())
    deadline = time.monotonic() + 10
    found = {}
    while not found and time.monotonic() < deadline:
        found = watch.deaths()
        time.sleep(0.02)
    assert found == {0: 5}


def test_fresh_ranks_wait_for_the_exit_after_the_reply(start):
    watch, _ = start([done(0, seq=0), ("exit", 0)], [done(1, seq=0), 0.2, ("exit", 10)])
    waited = watch.wait(Goal(replies=(TestDone,), deadline=time.monotonic() + 30, until_exit=True))
    assert waited.exits == {0: 0, 1: 10} and waited.faults == [] and sorted(waited.replies) == [0, 1]


def test_a_ranks_prints_reach_its_log_when_it_was_forked_with_a_replaced_sys_stdout(tmp_path):
    # A rank forked from a process whose runner had put sys.stdout on a descriptor of
    # its own (pytest's capture) printed there, not into the rank's log.
    import sys

    from continuous_test.rank import main as rank_main

    log, elsewhere = tmp_path / "rank.log", tmp_path / "runner's capture"
    pid = os.fork()
    if pid == 0:
        try:
            sys.stdout = sys.stderr = open(elsewhere, "w")
            rank_main._redirect_output(str(log))
            print("to the log", flush=True)
            print("also to the log", file=sys.stderr, flush=True)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert log.read_text().split("\n")[:2] == ["to the log", "also to the log"], log.read_text()
    assert elsewhere.read_text() == ""


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
