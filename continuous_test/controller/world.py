"""A shared world: one persistent set of rank processes per test class, and the registry of worlds.

Lifecycle of a :class:`World` (the controller's package docstring draws it with
the other ways ranks start)::

    NEW ──start()──► READY ──run_test()──► READY ──stop()──► STOPPED
              │        ▲         │
              │        │         ├─ fault or failed test ─► BROKEN (ranks killed)
              │        │         │                            │ next run_test(): start() again
              │        └─────────┴─ a rank died between tests: reported, start() again
              └─ a rank cannot import the class / join ─► WorldStartError (or SkipTest)

``stop()`` sends ``Shutdown``; a rank that left its world says ``Stopped`` (its output
flushed, its coverage saved) and nothing but its exit follows, so its group is killed
and it is reaped later: no stop waits for the kernel to tear a torch-sized process down.

A death between two tests (a thread the earlier test left behind, say) or after
the last test is not blamed on any test: the next test runs in a restarted world,
and :func:`stop_world` (``tearDownClass``) raises :class:`RankDiedError` naming
the rank, how it ended and the test after which it happened, so the run fails.

Sending ahead (:mod:`continuous_test.controller.ahead`): when every rank passed
test *k* plainly and the runner's next test *k + 1* of this class is known,
``run_test(k)`` sends *k + 1* right after the wait, before merging *k*::

    run_test(k): send k ─ wait (all TestDone k) ─ send k+1 ─ merge k ─► verdict k
    run_test(k+1):                         (no send) ─ wait (all TestDone k+1) ─ ...
    run_test(j), j != k+1, or stop():  k+1 is stopped with the world (killed), start() again

A rank that dies once *k + 1* was sent fails *k + 1*, not "between tests".
Worlds are kept in a registry keyed by test class and size (never on the class itself)
and all are stopped at interpreter exit.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import enum
import pickle
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, NoReturn, Optional, Sequence, Tuple

from continuous_test import config
from continuous_test._role import world_name
from continuous_test.controller import device_needs, devices, output as rank_output, progress, run_log
from continuous_test.controller.processes import RankProcess, kill_ranks, retire, start_ranks
from continuous_test.controller.watch import Goal, Waited, Watch
from continuous_test.errors import ConfigError, RankDiedError, WorldStartError
from continuous_test.template import server as template
from continuous_test.verdict import timeline
from continuous_test.verdict.merge import Verdict, merge
from continuous_test.verdict.text import prefix_lines, short_test_name
from continuous_test.wire import files, messages
from continuous_test.wire.messages import InitFailed, Ready, RunTest, Shutdown, Stacks, Stopped, TestDone, shared_temp_dir
from continuous_test.wire.outcome import FaultKind, RankFault, RankOutcome, exit_description

__all__ = [
    "World",
    "TestPlan",
    "WorldState",
    "LateDeath",
    "world_for",
    "start_world_for",
    "stop_world",
    "stop_all",
    "park_idle_worlds",
    "start_seconds",
]

RESTART_NOTE = "(the world of {ranks} is restarted before the next test)"
# For a world that runs this one test and is stopped after it: nothing is restarted.
ONE_TEST_NOTE = "(this world of {ranks} was started for this test alone and is stopped after it)"
START_FAILED = "{cls}: rank {rank} could not join the world of {world_size}: {error}"
START_DIED = "{cls}: rank {rank} {how} while starting the world of {world_size}"
START_TIMEOUT = (
    "{cls}: rank(s) {ranks} did not join the world of {world_size} within {seconds:g} s "
    "(set start_timeout on the class or CONTINUOUS_TEST_START_TIMEOUT to wait longer)"
)
DIED_BETWEEN = "rank {rank} of {cls} died with {how} after {test}, before the next test"
DIED_AFTER_LAST = "rank {rank} of {cls} died with {how} after {test}, the last test of the class"
DIED_BETWEEN_NOTE = "continuous_test: {what}; the world is restarted and the run will fail"
NOT_STOPPED = "continuous_test: rank(s) {ranks} of {cls} did not stop within {seconds:g} s and were killed"
WRONG_STATE = "{cls}: World.{action}() needs a {wanted} world, but it is {state}"


class WorldState(enum.Enum):
    """Where a :class:`World` is in its lifecycle."""

    NEW = "new"
    READY = "ready"
    BROKEN = "broken"
    STOPPED = "stopped"


@dataclass(frozen=True)
class LateDeath:
    """A rank that died outside any test: after ``test`` returned, before the next (or the end)."""

    rank: int
    exitcode: Optional[int]
    test: str
    last: bool = False

    def describe(self, cls: type) -> str:
        """The sentence that reports it."""
        text = DIED_AFTER_LAST if self.last else DIED_BETWEEN
        return text.format(rank=self.rank, cls=world_name(cls), how=exit_description(self.exitcode), test=self.test)


@dataclass(frozen=True)
class TestPlan:
    """One test as the controller sends it: resolved once, before anything is sent."""

    __test__ = False  # not a pytest test class

    method: str
    # ``Class.test_method`` (with its arguments, for a parametrized function): what reports name.
    test_id: str
    time_limit: float
    leak_policy: str
    # Arguments of a @distributed function's call; None for unittest methods.
    kwargs: Optional[dict] = None
    # Whether the test runs on a default group made again for it (continuous_test.fresh_worlds.fresh_group).
    fresh_group: bool = False
    # The test's class, where it may differ from its world's first class (a world_scope of module or session).
    cls: Optional[type] = None

    def short(self) -> str:
        """The test's name without its class, as the rerun-and-bisect note names it."""
        return short_test_name(self.test_id)


class World:
    """A persistent world of ranks for one test class; see the module docstring."""

    def __init__(self, cls: type, settings: config.ClassSettings) -> None:
        self.cls = cls
        self.settings = settings
        self.world_size = settings.world_size
        self.grace = settings.grace
        self.start_timeout = settings.start_timeout
        self.shutdown_timeout = settings.shutdown_timeout
        self.state = WorldState.NEW
        self.ranks: List[RankProcess] = []
        # The world's private directory (rendezvous and log files), below the controller's.
        self.dir: Optional[str] = None
        # Sequence number of the last RunTest, and the test it ran.
        self._seq = 0
        self._last_test: Optional[str] = None
        # Set when a rank's default group changed: the next RunTest asks every rank
        # for a fresh group, on a rendezvous file of this generation.
        self._reinit: Optional[int] = None
        self._reinit_count = 0
        # The error of a failed start, repeated for every later test of the class.
        self.start_error: Optional[BaseException] = None
        # Ranks that died outside any test, reported when the world stops.
        self.late_deaths: List[LateDeath] = []
        self._watch: Optional[Watch] = None
        # The test sent ahead (continuous_test.controller.ahead): (plan, (sequence number, send time)),
        # until run_test takes it.
        self._ahead: Optional[Tuple[TestPlan, Tuple[int, float]]] = None
        self.sent_ahead = 0  # how many tests were sent ahead (test_ahead's scenarios read it)
        self.starts = 0  # how many times the ranks were started
        # The tests these ranks ran since they started, that a failure's bisect replays
        # (continuous_test.controller.bisect): new ranks ran none of it.
        self.history: List[TestPlan] = []
        # What the run log says this world's starts are for: tests, or a rerun or bisect (set by bisect).
        self.purpose = "tests"
        # Whether this world runs one test and is stopped after it (a world of its own, a
        # rerun or bisect replay, a fresh repeat): a failure's note then restarts nothing.
        self.for_one_test = False
        # The devices the running ranks use (continuous_test.controller.devices), held from
        # start() until the ranks are killed.
        self.lease: Optional[devices.Lease] = None
        # The classes whose tests ran in this world (one, unless its world_scope is module or session).
        self.members: List[type] = [cls]

    def _require(self, action: str, *wanted: WorldState) -> None:
        if self.state not in wanted:
            raise RuntimeError(WRONG_STATE.format(cls=world_name(self.cls), action=action,
                                                  wanted=" or ".join(w.value for w in wanted), state=self.state.value))

    # -- starting -----------------------------------------------------------------

    def ensure_started(self) -> None:
        """Start the world unless it is READY, after stopping what is left of it."""
        if self.state is WorldState.READY:
            return
        self.stop(graceful=False)
        self.start()

    def start(self) -> None:
        """Start all ranks and wait until each joined the process group."""
        self._require("start", WorldState.NEW, WorldState.STOPPED, WorldState.BROKEN)
        if self.cls in _ONE_TEST:  # a fresh repeat run's world: one lane for them all, not a shared lane each
            run_log.log().use_own_world_lane(self)
        self.dir = tempfile.mkdtemp(prefix=f"world-{files.name_part(self.cls.__name__, 100)}-", dir=template.private_dir())
        self._reinit = None
        self.starts += 1
        self.history = []
        began = time.monotonic()
        try:
            self.lease = self._lease()
            self.ranks = start_ranks(self.cls, self.settings, self.dir,
                                     devices=self.lease.env() if self.lease is not None else None)
            self._watch = Watch(self.ranks)
            self._await_ready()
        except BaseException as exc:
            self._discard()
            import unittest

            if not isinstance(exc, unittest.SkipTest):  # a skip is the tests' outcome, not a failed start
                run_log.log().world_started(self, began, self.purpose, failed=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            _START_SECONDS[self.cls] = _START_SECONDS.get(self.cls, 0.0) + time.monotonic() - began
        self.state = WorldState.READY
        run_log.log().world_started(self, began, self.purpose)

    def _lease(self) -> Optional[devices.Lease]:
        """Lease the devices this world needs (waiting for them if other worlds hold them); None if none."""
        import unittest

        s, cls = self.settings, self.cls
        # The class's tests are listed only where there is a pool to lease from (not on a CPU-only host).
        return devices.lease_for(
            s.device_type, lambda size: device_needs.class_need(cls, s.world_size, s.device_type, s.backend,
                                                           unittest.defaultTestLoader.getTestCaseNames(cls), size),
            f"{world_name(cls)} (world of {s.world_size})", make_room=lambda: park_idle_worlds(self))

    def park(self) -> None:
        """Stop an idle world to give its devices to another world of this process; it starts again when needed."""
        deaths = self.stop()
        self.late_deaths = deaths  # still reported when the class ends

    def _await_ready(self) -> None:
        assert self._watch is not None
        goal = Goal(replies=(Ready, InitFailed), deadline=time.monotonic() + self.start_timeout, fail_fast=True)
        waited = self._watch.wait(goal)
        for rank, message in sorted(waited.replies.items()):
            if isinstance(message, InitFailed):
                self._start_failed(message, self.ranks[rank])
        for fault in waited.faults:
            if fault.kind is not FaultKind.TIMED_OUT:
                self._start_died(self.ranks[fault.rank])
        if waited.faults:
            self._start_timed_out(sorted(f.rank for f in waited.faults), {f.rank: f.stacks or "" for f in waited.faults})

    def _start_failed(self, message: InitFailed, handle: RankProcess) -> NoReturn:
        output = handle.read_output()
        if message.skip_reason is not None:
            import unittest

            raise unittest.SkipTest(message.skip_reason)
        error = message.error
        text = START_FAILED.format(cls=world_name(self.cls), rank=handle.rank,
                                   world_size=self.world_size, error=error.headline())
        raise WorldStartError(_with_details(text, error.traceback, handle.rank, output))

    def _start_died(self, handle: RankProcess) -> NoReturn:
        text = START_DIED.format(cls=world_name(self.cls), rank=handle.rank, world_size=self.world_size,
                                 how="died with " + exit_description(handle.exitcode()))
        raise WorldStartError(_with_details(text, None, handle.rank, handle.read_output()))

    def _start_timed_out(self, missing: List[int], stacks: Dict[int, str]) -> NoReturn:
        text = START_TIMEOUT.format(cls=world_name(self.cls), ranks=", ".join(map(str, missing)),
                                    world_size=self.world_size, seconds=self.start_timeout)
        for rank, stack in sorted(stacks.items()):
            text += f"\nrank {rank} stacks:\n{stack}"
        raise WorldStartError(text)

    # -- running tests ------------------------------------------------------------

    def run_test(self, plan: TestPlan, then: Optional[Callable[[], Optional[TestPlan]]] = None,
                 meanwhile: Optional[Callable[[], None]] = None) -> Verdict:
        """Run one test on every rank and merge the outcomes into a verdict.

        ``then`` gives the plan of the test the runner runs next, or None; when every
        rank passed plainly it is sent before the merge
        (:mod:`continuous_test.controller.ahead`), and the next ``run_test`` only waits for it.
        ``meanwhile`` is called once the test is sent, while the ranks run it.
        """
        sent = self._ahead_sent(plan)
        if sent is None:
            self._restart_after_late_deaths()
            self._require("run_test", WorldState.READY)
            sent = self._send_test(plan)
        if meanwhile is not None:
            meanwhile()
        seq, sent_at = sent
        assert self._watch is not None
        test_id, time_limit = plan.test_id, plan.time_limit
        self._last_test = test_id
        # The time limit counts from the send: a test sent ahead has run since then.
        goal = Goal(replies=(TestDone,), seq=seq, deadline=sent_at + time_limit, grace=self.grace,
                    progress=progress.for_test(test_id, time_limit, self.ranks, sent_at))
        try:
            waited = self._watch.wait(goal)
        except BaseException:
            # Ctrl-C, a protocol error, or whatever a runner raises in this process
            # (pytest-timeout's signal method): the ranks may still run this test,
            # so the world goes with it; the next test starts a new one.
            self._discard()
            raise
        outputs = {h.rank: rank_output.bounded(h.read_output(), test_id, h.rank) for h in self.ranks}
        if self.dir is not None:
            # The test's shared_temp_dir, if a rank made it: removed before any rank starts the next test,
            # never while ranks run (what the test left alive may still use a file of it, as a
            # FileStore does when it is destroyed in the next test).
            shutil.rmtree(shared_temp_dir(self.dir, seq), ignore_errors=True)
        if then is not None and self._all_passed_plainly(waited):
            following = then()
            if following is not None:
                self._ahead = (following, self._send_test(following))
                self.sent_ahead += 1
        outcomes: Dict[int, RankOutcome] = {r: m.full_outcome() for r, m in waited.replies.items()}
        verdict = merge(test_id, self.world_size, outcomes, waited.faults, outputs,
                        grace=self.grace, time_limit=time_limit, note=self._note(),
                        timeline=self._timeline(waited.faults), ranks_died=bool(waited.died_after_reply))
        verdict.duration = time.monotonic() - sent_at
        run_log.log().test_ran(run_log.log().lane_of(self), test_id, sent_at, verdict, outcomes)
        self._after_test(waited, verdict, outcomes, outputs)
        return verdict

    def _note(self) -> str:
        """What a failure's report says happens to this world next."""
        ranks = f"{self.world_size} rank{'' if self.world_size == 1 else 's'}"
        return (ONE_TEST_NOTE if self.for_one_test or self.cls in _ONE_TEST else RESTART_NOTE).format(ranks=ranks)

    def _send_test(self, plan: TestPlan) -> Tuple[int, float]:
        """Send the test of ``plan`` to every rank; returns its sequence number and when it was sent."""
        sent_at = time.monotonic()
        self._seq += 1
        if plan.fresh_group:  # every rank destroys its groups and makes the default one again, on a new file
            self._reinit_count += 1
            self._reinit = self._reinit_count
        owner = None
        if plan.cls is not None and plan.cls is not self.cls:  # a class sharing this world (world_scope)
            owner = (plan.cls.__module__, plan.cls.__qualname__, _module_file(plan.cls))
        message = RunTest(plan.method, self._seq, self._reinit, plan.kwargs, plan.leak_policy, owner)
        payload = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        try:
            for handle in self.ranks:
                handle.mark_output()
            for handle in self.ranks:  # nothing else in this loop: a woken rank may preempt the controller
                _send_bytes(handle, payload)  # pickled once for every rank
        except BaseException:  # part of the world has the test and part has not
            self._discard()
            raise
        self._reinit = None
        return self._seq, sent_at

    def _all_passed_plainly(self, waited: Waited) -> bool:
        """Every rank passed with nothing to report (no leak, no group change): the next test may go ahead."""
        return (self.state is WorldState.READY and not waited.faults and not waited.died_after_reply
                and len(waited.replies) == self.world_size and self._reinit is None
                and all(m.is_plain_pass() for m in waited.replies.values()))

    def _ahead_sent(self, plan: TestPlan) -> Optional[Tuple[int, float]]:
        """``plan``'s sequence number and send time if it was sent ahead; a different test sent ahead is stopped.

        A death since the last test is then the running test's fault, not a
        death between tests: the rank was already in it.
        """
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        if ahead[0] == plan and plan.kwargs is None and self.state is WorldState.READY:
            return ahead[1]
        # The runner did not run the test sent ahead: stop it with its world.
        self._discard()
        self.start()
        return None

    def _restart_after_late_deaths(self) -> None:
        """Before a test: a rank that died since the last one is reported, and the world restarted."""
        if self.state is not WorldState.READY or self._watch is None:
            return
        deaths = self._watch.deaths()
        if deaths:
            self._record_late_deaths(deaths)
            self._discard()
            self.start()

    def _record_late_deaths(self, deaths: Dict[int, Optional[int]], last: bool = False) -> None:
        for rank, code in sorted(deaths.items()):
            death = LateDeath(rank, code, self._last_test or "the world started", last)
            self.late_deaths.append(death)
            sys.stderr.write(DIED_BETWEEN_NOTE.format(what=death.describe(self.cls)) + "\n")

    def _timeline(self, faults: Sequence[RankFault]) -> Any:
        """Builds the collective timeline from the ranks' records files, when a report needs it."""
        dead = [f.rank for f in faults if f.kind in (FaultKind.DIED, FaultKind.TEMPLATE_DIED)]
        world_dir, ranks = self.dir, range(self.world_size)
        return timeline.lazy(lambda: timeline.for_world(world_dir, ranks, dead))

    def _after_test(self, waited: Waited, verdict: Verdict, outcomes: Dict[int, RankOutcome],
                    outputs: Dict[int, str]) -> None:
        if waited.died_after_reply:
            self._record_late_deaths(waited.died_after_reply)
        if verdict.restart_world:  # the merge's one decision (verdict/merge.py)
            # The world is discarded: killing is as clean as a graceful shutdown
            # (the ranks hold nothing else) and never waits on a broken group.
            self._discard()
        elif any(o.group_changed for o in outcomes.values()):
            self._reinit_count += 1
            self._reinit = self._reinit_count
        if not verdict.failed and not progress.live_output():  # shown live already
            _forward_output(outputs)

    # -- stopping -----------------------------------------------------------------

    def stop(self, graceful: bool = True) -> List[LateDeath]:
        """Stop every rank (bounded), remove the world's files, and return the late deaths; safe twice."""
        if self._ahead is not None:  # a test sent ahead that the runner did not run: stopped, not awaited
            self._ahead, graceful = None, False
        if self.ranks and graceful and self.state is WorldState.READY:
            self._shutdown_gracefully()
        if self.state is not WorldState.STOPPED:
            run_log.log().world_stopped(self)
        self._discard()
        self.state = WorldState.STOPPED
        deaths, self.late_deaths = self.late_deaths, []
        return deaths

    def _discard(self) -> None:
        """Kill the ranks and remove the world's files; the world is BROKEN until it starts again."""
        self._ahead = None
        self._kill()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        self.state = WorldState.BROKEN

    def _kill(self) -> None:
        """Kill the ranks, with what their tests started; those that said ``Stopped`` are reaped later.

        A rank that stopped has nothing left but its exit (``rank/main.py``): waiting
        for the kernel to tear it down would cost every world's stop that much.
        Where devices are leased, every rank is waited for: one still ending may
        hold memory on them.
        """
        declared: set = set()
        if self._watch is not None:
            self._watch.close()
            declared, self._watch = self._watch.declared, None
        if self.lease is not None:
            declared = set()
        retire([h for h in self.ranks if h.rank in declared])
        kill_ranks([h for h in self.ranks if h.rank not in declared])
        self.ranks = []
        if self.lease is not None:  # after the ranks are gone: nothing of theirs is left on the devices
            self.lease.release()
            self.lease = None

    def _shutdown_gracefully(self) -> None:
        assert self._watch is not None
        dead = self._watch.deaths()
        if dead:
            self._record_late_deaths(dead, last=True)
        for handle in self.ranks:
            try:
                messages.send(handle.conn, Shutdown())
            except OSError:
                pass
        waited = self._watch.wait(Goal(replies=(Stopped,), accepts=(Stacks,),
                                       deadline=time.monotonic() + self.shutdown_timeout, until_exit=True))
        failed = {r: c for r, c in waited.exits.items() if c != 0 and r not in dead}
        if failed:
            self._record_late_deaths(failed, last=True)
        if waited.faults:
            sys.stderr.write(NOT_STOPPED.format(ranks=", ".join(str(f.rank) for f in waited.faults),
                                                cls=world_name(self.cls), seconds=self.shutdown_timeout) + "\n")


def _module_file(cls: type) -> Optional[str]:
    return getattr(sys.modules.get(cls.__module__), "__file__", None)


def _send_bytes(handle: RankProcess, payload: bytes) -> None:
    try:
        handle.conn.send_bytes(payload)
    except OSError:
        # The rank died just now; its sentinel reports it in the wait that follows.
        pass


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


# -- registry -----------------------------------------------------------------------

# (world key, size): the key is the test class itself for a world of its class, or a
# scope key (_scope_key) that the classes sharing a module's or session's world have in
# common; size is None for a class of one size.
_WORLDS: Dict[Tuple[Any, Optional[int]], World] = {}
# (class, size) -> its world key, resolved when its world first started.
_KEYS: Dict[Tuple[type, Optional[int]], Any] = {}
# (scope, module, size) -> the world keys seen in it, each with the first class of its world.
_SEEN: Dict[Tuple[Any, Optional[int]], Dict[Any, type]] = {}
# Seconds spent starting the worlds of each class in this process, all starts together
# (continuous_test.session.shard charges them to the world, not to the test that started it).
_START_SECONDS: Dict[type, float] = {}


# Classes whose worlds each run one test now (continuous_test.session.repeat's fresh runs).
_ONE_TEST: set = set()

OWN_WORLD_NOTE = ("continuous_test: {cls} keeps a world of its own (world_scope = {scope!r}): its {what} "
                  "differs from {other}'s")
# The parts of a scope key's signature, as OWN_WORLD_NOTE names them.
_SIGNATURE_PARTS = ("settings", "_init_pg", "opts()", "process-group timeout")


@contextlib.contextmanager
def one_test_worlds(cls: type) -> Iterator[None]:
    """While the body runs, every world of ``cls`` runs one test and is stopped after it (the caller stops it)."""
    _ONE_TEST.add(cls)
    try:
        yield
    finally:
        _ONE_TEST.discard(cls)


def start_seconds(cls: type) -> float:
    """Seconds this process spent starting worlds of ``cls`` so far."""
    return _START_SECONDS.get(cls, 0.0)


def _function(cls: type, name: str) -> Any:
    value = getattr(cls, name, None)
    return getattr(value, "__func__", value)


def _signature(cls: type, settings: config.ClassSettings) -> tuple:
    """What classes sharing a world must have in common: settings, ``_init_pg``, ``opts``, the group's timeout."""
    return (dataclasses.replace(settings, qualname=""), _function(cls, "_init_pg"), _function(cls, "opts"),
            getattr(cls, "timeout", None))


def scope_key(cls: type, settings: config.ClassSettings) -> Any:
    """The key of the world ``cls`` runs in: ``cls`` itself, or what the classes sharing its scope's world have
    in common (ConfigError names a bad ``world_scope``)."""
    scope = config.world_scope(cls)
    if scope == "class" or cls in _ONE_TEST:
        return cls
    return ("scope", scope, cls.__module__ if scope == "module" else None, _signature(cls, settings))


def _say_why_own(cls: type, key: tuple, size: Optional[int]) -> None:
    """In verbose mode: why ``cls`` does not share the world of a class of its scope seen before it."""
    seen = _SEEN.setdefault((key[:3], size), {})
    for other_key, other in list(seen.items()):
        if getattr(sys.modules.get(other.__module__), other.__qualname__, None) is not other:
            del seen[other_key]  # a class of an earlier run of its module (a run in this process before)
    if key in seen:
        return
    for other_key, other in seen.items():
        mine, theirs = key[3], other_key[3]
        what = next(name for name, a, b in zip(_SIGNATURE_PARTS, mine, theirs) if a != b)
        if what == "settings":
            what = ", ".join(f.name for f in dataclasses.fields(mine)
                             if getattr(mine, f.name) != getattr(theirs, f.name)) + " setting"
        progress.say_verbose(OWN_WORLD_NOTE.format(cls=world_name(cls), scope=key[1], what=what,
                                                   other=world_name(other)))
        break
    seen[key] = cls


def world_for(cls: type, settings: config.ClassSettings, size: Optional[int] = None) -> World:
    """The world of ``cls`` (at ``size``), created on first use; one with other settings is stopped and replaced.

    A class whose ``world_scope`` is ``module`` or ``session`` joins the world of
    the classes of its scope whose settings, ``_init_pg``, ``opts`` and group
    timeout are its own, if one runs.
    """
    key = scope_key(cls, settings)
    _KEYS[(cls, size)] = key
    world = _WORLDS.get((key, size))
    if key is not cls:
        if world is None:
            _say_why_own(cls, key, size)
            world = _WORLDS[(key, size)] = World(cls, settings)
        elif cls not in world.members:
            world.members.append(cls)
        return world
    if world is None or world.settings != settings:
        if world is not None:
            world.stop()
        world = _WORLDS[(key, size)] = World(cls, settings)
    return world


def park_idle_worlds(waiting: Optional[World]) -> None:
    """Stop this process's idle worlds that hold devices, for ``waiting``, which lacks some.

    A process runs one test at a time: a world of it that holds devices while
    another of its worlds waits for them would wait for itself.
    """
    for world in list(_WORLDS.values()):
        if world is not waiting and world.lease is not None and world.state is WorldState.READY:
            world.park()


def start_world_for(cls: type, size: Optional[int] = None) -> World:
    """Return the started world of ``cls`` (of a sized test's ``size``); unless it is READY, its configuration
    is checked first.

    A world that failed to start is not retried for the rest of the class: every
    later test reports the same error (or skip) at once.  That holds for what the start
    itself found (a rank that failed or died, a bad setting, a skip, devices waited for
    too long); an exception raised into the controller while it waited (a runner's
    timeout, by a signal handler) is the running test's, and the next test starts the
    world again.
    """
    key = _KEYS.get((cls, size))
    world = _WORLDS.get((key, size)) if key is not None else None
    if world is not None and world.state is WorldState.READY:
        return world  # checked when it started
    world = world_for(cls, config.resolve(cls, size), size)
    if world.start_error is not None:
        raise _again(world.start_error, cls)
    try:
        world.ensure_started()
    except Exception as exc:
        import unittest

        if isinstance(exc, (WorldStartError, ConfigError, unittest.SkipTest)):
            world.start_error = exc
        raise
    return world


NOT_RETRIED = "(the world of {cls} failed to start for an earlier test and is not retried)"


def _again(error: BaseException, cls: type) -> BaseException:
    import unittest

    if isinstance(error, unittest.SkipTest):
        return type(error)(*error.args)  # config.DeviceSkip stays one: the run's tally counts it
    copy = type(error)(f"{error}\n{NOT_RETRIED.format(cls=world_name(cls))}")
    copy.__cause__ = error.__cause__
    return copy


def stop_world(cls: type) -> None:
    """Stop the worlds of ``cls`` (one per size), if it has any; raises RankDiedError if a rank died outside a test.

    A world ``cls`` shares with other classes (``world_scope``) is left running
    while a test the runner has still to run (:func:`continuous_test.controller.ahead.remaining_classes`)
    is of a class that would run in it; it stops after the last of them.
    """
    deaths: List[str] = []
    for key in [key for key in _WORLDS if key[0] is cls]:
        deaths += [d.describe(cls) for d in _WORLDS.pop(key).stop()]
    for (member, size), key in list(_KEYS.items()):
        if member is not cls or key is cls:
            continue
        world = _WORLDS.get((key, size))
        if world is None or _used_later(cls, key, size):
            continue
        del _WORLDS[(key, size)]
        for ended in world.members:
            _KEYS.pop((ended, size), None)
        deaths += [d.describe(world.cls) for d in world.stop()]
    if deaths:
        raise RankDiedError("\n".join(deaths))


def _used_later(cls: type, key: Any, size: Optional[int]) -> bool:
    """Whether a test the runner has still to run is of a class, other than ``cls``, that runs in world ``key``."""
    from continuous_test.controller import ahead

    later = ahead.remaining_classes(cls)
    if later is None:  # the runner does not say: the world stops with the class, as a class's own does
        return False
    for other in later:
        if other is cls or not isinstance(other, type):
            continue
        known = _KEYS.get((other, size))
        if known is None:
            try:
                known = scope_key(other, config.resolve(other, size, check_importable=False))
            except Exception:  # noqa: BLE001 - a class that cannot start shares no world; its tests say why
                continue
        if known == key:
            return True
    return False


@atexit.register
def stop_all() -> None:
    """Stop every world; runs at interpreter exit so no rank outlives the controller."""
    for key in list(_WORLDS):
        world = _WORLDS.pop(key, None)
        if world is None:
            continue
        deaths = world.stop()
        if deaths:
            text = "\n".join(d.describe(world.cls) for d in deaths)
            sys.stderr.write(f"continuous_test: {text}\n")
    _KEYS.clear()
