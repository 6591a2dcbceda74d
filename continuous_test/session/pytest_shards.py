"""pytest's side of shards, repeats and durations: two plugin objects the pytest plugin registers at configure.

::

    pytest_configure ─► Sharding (--ct-shard, --ct-durations, --ct-store-durations, --ct-repeat[-fresh])
      ├─ Shards, in every process that runs tests (xdist workers too):
      │    collection (trylast, after -k/-m) ─► this shard's worlds ─► each test as its runs
      │    a [fresh-KofN] run ─► a world of its own;  each report ─► its run, its world's start
      └─ Recorder, in the process that sees every report (xdist's main process):
           reports ─► test and world-start seconds, the repeat tally ─► summary, durations file

Planning is :func:`continuous_test.session.shard.keep` (unittest's suite calls it too).
What pytest knows about an item (its world, whether it has one, the stash key of
its settings) comes from the plugin, which collected it.

Touches: the item list, and the shared world of a test run fresh (stopped before and after it).
"""
from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any, Callable, List, Optional

import _pytest.python as _pytest_python  # pytest's own: the parametrization a repeated run extends
import pytest
from _pytest.unittest import TestCaseFunction as _TestCaseFunction

from continuous_test._role import rank_class_of

__all__ = ["Sharding", "Shards", "Recorder", "resolve", "REPEAT", "SHARDING", "not_written"]

SHARDS_NAME = "continuous_test.shards"
RECORDER_NAME = "continuous_test.recorder"


class Sharding:
    """This session's shard, durations files and repeats, read once at configure."""

    def __init__(self, shard: Any, durations: str, store: Optional[str], repeat: int, fresh: bool) -> None:
        self.shard, self.durations, self.store = shard, durations, store
        self.repeat, self.fresh = repeat, fresh
        # Set when this process kept none of a non-empty selection: more shards than groups of tests.
        self.empty_shard = False
        # Filled by the controller as reports come (xdist workers' too): node id -> seconds,
        # world id -> seconds of its starts, and the repeated runs' outcomes.
        self.test_seconds: dict = {}
        self.world_seconds: dict = {}
        from continuous_test.session.repeat import RepeatTally

        self.tally = RepeatTally()
        # node id of each repeated run -> the test it repeats (the run report's repeat counts).
        self.repeated: dict = {}

    def repeat_counts(self) -> dict:
        """node id of each repeated run -> its test's ``runs``, ``passed`` and ``diagnosis``, all its runs together."""
        found = {}
        for node, test in self.repeated.items():
            counts = self.tally.tests.get(test)
            if counts is not None:
                found[node] = counts.as_report()
        return found


SHARDING = pytest.StashKey[Sharding]()
REPEAT = pytest.StashKey[Any]()  # on a repeated run's item: its RepeatRun
_WORLD_STARTS = pytest.StashKey[float]()


def resolve(config: pytest.Config) -> Sharding:
    """Resolve --ct-shard (else CONTINUOUS_TEST_SHARD; ``slurm``: the job array's task), the durations files and
    the repeats (ConfigError, a ValueError, naming the bad one)."""
    from continuous_test import config as ct_config
    from continuous_test.session import shard

    value = config.getoption("ct_shard")
    chosen = shard.parse_shard(value, "the --ct-shard option") if value is not None else shard.shard_from_env()
    root = str(config.rootpath)
    durations = shard.durations_path(config.getoption("ct_durations"), root)
    store = config.getoption("ct_store_durations")
    stored = None if store is None else (shard.durations_path(store, root) if store else durations)
    if stored is not None and not hasattr(config, "workerinput"):  # the main process writes it, at the end
        from continuous_test.wire import files

        stored = files.check(stored, "the --ct-store-durations option")
    count = config.getoption("ct_repeat")
    repeat = (ct_config.parse_positive_int(count, "repeat count", "the --ct-repeat option") if count is not None
              else ct_config.repeat_count())
    fresh = bool(config.getoption("ct_repeat_fresh")) or ct_config.repeat_fresh()
    return Sharding(chosen, durations, stored, repeat, fresh)


def not_written(message: str) -> None:
    """A report or durations file that cannot be written at the end: a warning, the session's verdicts stand."""
    warnings.warn(pytest.PytestWarning(message), stacklevel=2)


def _test_class(item: pytest.Item) -> Optional[type]:
    return rank_class_of(getattr(item, "cls", None)) or rank_class_of(getattr(item, "function", None))


class Shards:
    """Registered in every process that collects and runs tests: keeps this shard, makes and runs the repeats."""

    def __init__(self, sharding: Sharding, world: Callable[[pytest.Item], str],
                 has_world: Callable[[pytest.Item], bool], marked: Any) -> None:
        self.sharding = sharding
        self.world = world  # the plugin's item_world: shards never split one
        self.has_world = has_world  # whether an item runs in a shared world
        self.marked = marked  # the plugin's stash key of a distributed test's settings

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: List[pytest.Item]) -> None:
        """After the selection (-k, -m, which run before): keep this shard's worlds, then make the repeats."""
        sharding = self.sharding
        if sharding.shard is not None:
            self._keep_shard(config, items)
        if sharding.repeat > 1 or sharding.fresh:
            items[:] = self._repeated(items, sharding.repeat, sharding.fresh)

    def _keep_shard(self, config: pytest.Config, items: List[pytest.Item]) -> None:
        from continuous_test.session import shard

        try:
            durations = shard.Durations.load(self.sharding.durations)
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        kept = shard.keep(items, self.world, lambda item: item.nodeid, self.has_world, self.sharding.shard, durations)
        kept_ids = {id(item) for item in kept.tests}
        dropped = [item for item in items if id(item) not in kept_ids]
        self.sharding.empty_shard = bool(items) and not kept.tests
        items[:] = kept.tests
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and not hasattr(config, "workerinput"):
            reporter.write_line(kept.line)

    def _repeated(self, items: List[pytest.Item], count: int, fresh: bool) -> List[pytest.Item]:
        """Each item as ``count`` runs in a row; with ``fresh``, ``count`` more of each test of a shared world,
        after that world's shared runs (so that the shared world is started once)."""
        from continuous_test.session.repeat import FRESH, SHARED

        out: List[pytest.Item] = []
        pending: List[pytest.Item] = []
        for index, item in enumerate(items):
            out.extend(self._run_of(item, SHARED, k, count) for k in range(1, count + 1))
            if fresh and self.has_world(item):
                pending.extend(self._run_of(item, FRESH, k, count) for k in range(1, count + 1))
            following = items[index + 1] if index + 1 < len(items) else None
            if pending and (following is None or self.world(following) != self.world(item)):
                out.extend(pending)
                pending = []
        return out

    def _run_of(self, item: pytest.Item, mode: str, number: int, count: int) -> pytest.Item:
        """A new item for run ``number`` of ``count`` of ``item``, with the item's markers, fixtures and settings."""
        from continuous_test.session.repeat import RepeatRun, run_name, run_tag

        name = run_name(item.name, mode, number, count)
        original = getattr(item, "originalname", None) or item.name
        kind = _RepeatedTestCaseFunction if isinstance(item, _TestCaseFunction) else pytest.Function
        new = kind.from_parent(item.parent, name=name, originalname=original,
                               fixtureinfo=getattr(item, "_fixtureinfo", None),
                               **_callspec(item, run_tag(mode, number, count)))
        new.own_markers[:] = item.own_markers
        new.keywords.update(item.keywords)
        new.extra_keyword_matches.update(item.extra_keyword_matches)
        if self.marked in item.stash:
            new.stash[self.marked] = item.stash[self.marked]
        new.stash[REPEAT] = RepeatRun(item.nodeid, mode, number, count)
        return new

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Optional[pytest.Item]):
        """Run a ``[fresh-KofN]`` item in a world started for it alone."""
        run = item.stash.get(REPEAT, None)
        cls = _test_class(item) if run is not None and run.mode == "fresh" else None
        if cls is None:
            yield
            return
        from continuous_test.session.repeat import fresh_world

        with fresh_world(cls):
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        """Put on the report (which crosses from xdist workers) the repeat run and the world start this test
        paid for."""
        outcome = yield
        report = outcome.get_result()
        run = item.stash.get(REPEAT, None)
        if run is not None:
            report.ct_repeat = run.as_list()
            if call.when == "teardown":  # whether its world starts again after this run (a failure restarts it)
                from continuous_test.controller import run_log

                record = run_log.log().tests.get(item.nodeid)
                report.ct_restarts_world = bool(record is not None and record.restarts_world)
        if self.marked not in item.stash or not self.has_world(item):
            return
        from continuous_test.controller.world import start_seconds

        cls = _test_class(item)
        assert cls is not None  # has_world
        if call.when == "setup":
            item.stash[_WORLD_STARTS] = start_seconds(cls)
        elif call.when == "call":
            spent = start_seconds(cls) - item.stash.get(_WORLD_STARTS, start_seconds(cls))
            if spent > 0:
                report.ct_world_start = [self.world(item), spent]


def _callspec(item: pytest.Item, tag: str) -> dict:
    """The ``callspec`` argument of a run of ``item``: its own, whose ids also name the run where pytest
    builds node ids from them (pytest 9.2+), so that ``test_x[repeat-2of3]`` is the run's node id."""
    callspec = getattr(item, "callspec", None)
    kind = getattr(_pytest_python, "CallSpec", None) or getattr(_pytest_python, "CallSpec2")
    if not any(f.name == "_idlist" for f in dataclasses.fields(kind)):
        return {} if callspec is None else {"callspec": callspec}
    base = callspec if callspec is not None else kind()
    return {"callspec": dataclasses.replace(base, _idlist=(*base._idlist, tag))}


class _RepeatedTestCaseFunction(_TestCaseFunction):
    """One run of a unittest test under ``--ct-repeat``: named ``test_x[repeat-2of3]``, it runs ``test_x``."""

    def _getinstance(self):  # pytest's seam: the TestCase instance for this item
        return self.parent.obj(self.originalname)  # type: ignore[union-attr]


class Recorder:
    """Registered in the controller (not in xdist workers): adds up reports, writes durations, prints the repeats."""

    def __init__(self, sharding: Sharding) -> None:
        self.sharding = sharding

    @pytest.hookimpl(tryfirst=True)  # before junitxml, which writes the teardown report's properties
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Add up each test's time and its world's starts, and tally repeated runs."""
        sharding = self.sharding
        run = getattr(report, "ct_repeat", None)
        if run is not None:
            from continuous_test.session.repeat import RepeatRun

            passed = None if report.skipped else (False if report.failed else (True if report.when == "call" else None))
            repeat_run = RepeatRun(*run)
            sharding.tally.record(repeat_run, passed)
            if getattr(report, "ct_restarts_world", False):
                sharding.tally.restarted(repeat_run)
            sharding.repeated[report.nodeid] = run[0]
            if report.when == "teardown" and repeat_run.number == repeat_run.count and \
                    repeat_run.mode == ("fresh" if sharding.fresh else "repeat"):
                # The test's last run: its diagnosis is complete, for JUnit XML.
                report.user_properties.append(("repeat_diagnosis", sharding.tally.tests[repeat_run.test].diagnosis()))
            return
        started = getattr(report, "ct_world_start", None)
        seconds = report.duration
        if started is not None:
            world, spent = started
            sharding.world_seconds[world] = spent
            seconds = max(0.0, seconds - spent)
        sharding.test_seconds[report.nodeid] = sharding.test_seconds.get(report.nodeid, 0.0) + seconds

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """The repeats' summary: per test, passed runs and what its failures follow."""
        lines = self.sharding.tally.summary()
        if lines:
            terminalreporter.section("continuous_test repeats")
            for line in lines[1:]:
                terminalreporter.write_line(line)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """An empty shard of a non-empty selection passes; with --ct-store-durations, update the durations
        file with this run's (other tests' records are kept)."""
        sharding = self.sharding
        if sharding.empty_shard and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            session.exitstatus = pytest.ExitCode.OK  # the other shards run the selection
        # A shard stores even when it ran nothing: its run's records are committed once every shard stored.
        if sharding.store is None or not (sharding.test_seconds or sharding.shard is not None):
            return
        from continuous_test.session.shard import Durations

        stored = Durations()
        if os.path.isfile(sharding.store):  # not a FIFO's or a device's: reading one would wait or read nothing
            try:
                stored = Durations.load(sharding.store)
            except ValueError:  # unreadable: written again from this run alone
                pass
        run = Durations({k: round(v, 4) for k, v in sharding.test_seconds.items()},
                        {k: round(v, 4) for k, v in sharding.world_seconds.items()})
        # Into the file the shards read, a shard's records wait for the run's other shards (the split
        # reads only committed records); into a file of its own they are this job's records.
        same_file = os.path.realpath(sharding.store) == os.path.realpath(sharding.durations)
        stored.record(run, sharding.shard if same_file else None)
        try:
            stored.save(sharding.store)
        except OSError as exc:  # the session's verdicts and its summary stand
            not_written(f"continuous_test: the durations for the --ct-store-durations option were not written "
                        f"to {sharding.store!r}: {exc.strerror or exc}")
