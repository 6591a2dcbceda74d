"""pytest plugin, registered through the ``pytest11`` entry point.

* **Rank-aware reports.**  A failing distributed test gets one report section per
  rank that did not pass (its traceback or stacks, and its captured output), plus one
  section with the state of the other ranks.  The failing ranks are recorded as the
  ``failing_ranks`` property (every rank that did not pass), and those whose own
  code raised as ``raising_ranks``, which ``--junitxml`` writes to the XML.
* **Options and markers.**  ``--ct-timeout SECONDS`` (ini ``ct_timeout``) sets every
  per-test time limit, ``--ct-world-size N`` (ini ``ct_world_size``) every world size.
  ``@pytest.mark.world_size(n)`` on a test class or module (or on one
  ``MultiProcessTestCase`` test: its ranks are its own) and
  ``@pytest.mark.ct_timeout(seconds)`` on a test override them one at a time.  A
  ``world_size(n)`` marker on one test of a shared world runs it in that size's
  world (:func:`continuous_test.sizes.size_tests`).  The ``class_tmpdir`` fixture is
  one private directory per test class, for its ranks (docs/pytest-classes.rst).
* **Isolation.**  ``--ct-leaks restore|fail|off`` (and the ``ct_leaks(policy)`` marker)
  sets the leak policy, ``--ct-shuffle[=SEED]`` shuffles the order of tests within
  each class and of classes within each module (the seed is in the header and in
  every failure report), ``--ct-bisect SECONDS|off`` bounds rerunning and bisecting
  failed tests.  See :mod:`continuous_test.rank.leaks`, :mod:`continuous_test.session.shuffle` and
  :mod:`continuous_test.controller.bisect`.
* **Verdicts for machines.**  Every diagnosis made about a test (failing ranks,
  the rerun-and-bisect verdict and its polluters, leaks, the shuffle seed, the world
  and its restarts) is a property of the test, which ``--junitxml`` writes.
  ``--ct-report=FILE.json`` writes the whole run (every world's starts, every
  test's times), ``--ct-report-html=FILE`` its picture
  (:mod:`continuous_test.controller.run_log`, :mod:`continuous_test.report_html`);
  under xdist each worker sends its part to the main process, which writes them.
* **Devices.**  Every distributed test is marked at collection with the devices it
  needs, ``ct_devices(n=N)`` (:func:`continuous_test.controller.device_needs.devices_needed`;
  0 for a CPU world), and with the keyword ``ct_devices_N``; ``--ct-max-devices N`` and
  ``--ct-min-devices N`` deselect the tests that need more or fewer (a test that is
  not distributed needs 0).  ``--collect-only`` says how many tests need how many.
  See ``docs/devices.rst``.
* **Shards and repeats.**  ``--ct-shard=I/N`` keeps one shard of the selected tests,
  whole worlds only, balanced on the durations ``--ct-store-durations[=FILE]`` wrote
  (``--ct-durations=FILE`` reads them; see :mod:`continuous_test.session.shard`).
  ``--ct-repeat=N`` runs each test N times in its shared world, ``--ct-repeat-fresh``
  N more times in fresh worlds, and the summary says what the failures follow
  (:mod:`continuous_test.session.repeat`; the tally: :func:`repeat_tally`).
* **Module worlds.**  The shared world of a module's ``@distributed`` functions is
  stopped when the last test of that module is done.

This module keeps the options, collection, the run protocol and teardown.  The rest
is plugin objects of the session room, registered by :func:`pytest_configure` (as
pytest-xdist registers its ``DSession``): the report shaping
(:class:`~continuous_test.session.pytest_report.RankReports`), shards and repeats
(:class:`~continuous_test.session.pytest_shards.Shards`) and, in the process that
sees every report, durations and the repeat tally
(:class:`~continuous_test.session.pytest_shards.Recorder`).
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Dict, List, Optional

import pytest
from _pytest.unittest import TestCaseFunction as _TestCaseFunction

from continuous_test.config import Overrides  # light: no torch
from continuous_test.session import pytest_report, pytest_shards
from continuous_test.session.pytest_report import OUTCOME as _OUTCOME
from continuous_test.session.pytest_shards import SHARDING, not_written as _not_written
# The plugin objects under the names tests reach them by (test_shard.py).
from continuous_test.session.pytest_shards import Recorder as _Recorder, Sharding as _Sharding

__all__ = [
    "pytest_addoption",
    "pytest_configure",
    "pytest_unconfigure",
    "pytest_collection_modifyitems",
    "pytest_runtest_protocol",
    "pytest_collection_finish",
    "pytest_report_collectionfinish",
    "pytest_runtest_teardown",
    "pytest_report_header",
    "pytest_sessionstart",
    "pytest_load_initial_conftests",
    "pytest_unconfigure",
    "pytest_sessionfinish",
    "pytest_testnodedown",
    "pytest_pycollect_makeitem",
    "pytest_generate_tests",
    "repeat_tally",
    "item_world",
]

TIMEOUT_HELP = "per-test time limit in seconds for distributed tests (overrides CONTINUOUS_TEST_TIMEOUT)"
LIVE_OUTPUT_HELP = "print every rank's output while a distributed test runs, prefixed [rankN] (CONTINUOUS_TEST_LIVE_OUTPUT=1)"
WORLD_SIZE_HELP = "world size for every distributed test class and @distributed function"
LEAKS_HELP = "what a test that leaves process-global state changed gets: restore (default: warn), fail, off"
SHUFFLE_HELP = "shuffle tests within each class and classes within each module; a seed replays an order"
SHUFFLE_RANDOM = "random"
REPORT_HELP = "write the run's JSON report (worlds, tests, times, diagnoses) to FILE (CONTINUOUS_TEST_REPORT)"
REPORT_HTML_HELP = "draw the run as one self-contained HTML page in FILE (CONTINUOUS_TEST_REPORT_HTML)"
SIZES_ON_A_FUNCTION = (
    "{test}: a world_size marker with several sizes ({sizes}) applies to test classes; give the @distributed "
    "function world_size={sizes} instead"
)
MAX_DEVICES_HELP = "deselect the distributed tests that need more than N devices (a CPU-only gloo test needs 0)"
MIN_DEVICES_HELP = "deselect the tests that need fewer than N devices"
DEVICES_MARKER = "ct_devices"
DEVICES_LINE = "continuous_test: devices needed: {counts} (marker ct_devices(n=N); select with -m \"ct_devices(n=N)\")"
BISECT_HELP = "seconds per run for rerunning and bisecting failed distributed tests, or off (default 120)"
SHARD_HELP = ("run shard I of N (I from 1) of the selected tests, whole worlds only; slurm: the shard of this Slurm "
              "job array task (CONTINUOUS_TEST_SHARD)")
DURATIONS_HELP = "durations file the shards are balanced on (default .ct_durations.json in the rootdir)"
STORE_DURATIONS_HELP = "write this run's test and world-start durations to FILE (default: the durations file)"
REPEAT_HELP = "run each selected test N times in its shared world (CONTINUOUS_TEST_REPEAT)"
WORLD_SCOPE_HELP = ("share worlds across classes of a module or the session: class, module or session, for classes "
                    "that set no world_scope (CONTINUOUS_TEST_WORLD_SCOPE)")
REPEAT_FRESH_HELP = "with --ct-repeat, also run each test N times in fresh worlds (CONTINUOUS_TEST_REPEAT_FRESH=1)"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the plugin's command-line options and ini keys."""
    group = parser.getgroup("continuous_test", "distributed tests (continuous_test)")
    group.addoption("--ct-timeout", dest="ct_timeout", default=None, metavar="SECONDS", help=TIMEOUT_HELP)
    group.addoption("--ct-world-size", dest="ct_world_size", default=None, metavar="N", help=WORLD_SIZE_HELP)
    group.addoption("--ct-leaks", dest="ct_leaks", default=None, metavar="POLICY", help=LEAKS_HELP)
    group.addoption("--ct-shuffle", dest="ct_shuffle", default=None, nargs="?", const=SHUFFLE_RANDOM, metavar="SEED",
                    help=SHUFFLE_HELP)
    group.addoption("--ct-bisect", dest="ct_bisect", default=None, metavar="SECONDS", help=BISECT_HELP)
    group.addoption("--ct-report", dest="ct_report", default=None, metavar="FILE", help=REPORT_HELP)
    group.addoption("--ct-report-html", dest="ct_report_html", default=None, metavar="FILE", help=REPORT_HTML_HELP)
    group.addoption("--ct-max-devices", dest="ct_max_devices", default=None, metavar="N", help=MAX_DEVICES_HELP)
    group.addoption("--ct-min-devices", dest="ct_min_devices", default=None, metavar="N", help=MIN_DEVICES_HELP)
    group.addoption("--ct-live-output", dest="ct_live_output", action="store_true", default=None,
                    help=LIVE_OUTPUT_HELP)
    group.addoption("--ct-shard", dest="ct_shard", default=None, metavar="I/N|slurm", help=SHARD_HELP)
    group.addoption("--ct-durations", dest="ct_durations", default=None, metavar="FILE", help=DURATIONS_HELP)
    group.addoption("--ct-store-durations", dest="ct_store_durations", default=None, nargs="?", const="",
                    metavar="FILE", help=STORE_DURATIONS_HELP)
    group.addoption("--ct-repeat", dest="ct_repeat", default=None, metavar="N", help=REPEAT_HELP)
    group.addoption("--ct-repeat-fresh", dest="ct_repeat_fresh", action="store_true", default=None,
                    help=REPEAT_FRESH_HELP)
    parser.addini("ct_timeout", TIMEOUT_HELP, default=None)
    parser.addini("ct_world_size", WORLD_SIZE_HELP, default=None)
    group.addoption("--ct-world-scope", dest="ct_world_scope", default=None, metavar="SCOPE", help=WORLD_SCOPE_HELP)
    parser.addini("ct_world_scope", WORLD_SCOPE_HELP, default=None)


_OVERRIDES = pytest.StashKey[Overrides]()
_MARKED = pytest.StashKey[Overrides]()
_SAVED_ENV = pytest.StashKey[dict]()
_PARTS = pytest.StashKey[list]()  # the run reports xdist's workers sent
WORKER_OUTPUT_KEY = "continuous_test_run_report"
_TALLIES = pytest.StashKey[list]()  # xdist's workers' counts of distributed tests and device skips
WORKER_TALLY_KEY = "continuous_test_device_tally"


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: List[str]) -> None:
    """Read a bare ``--ct-shuffle`` as "pick a seed" (and a bare ``--ct-store-durations`` as "the default
    file"), so that neither swallows the next argument (a path)."""
    bare = {"--ct-shuffle": f"--ct-shuffle={SHUFFLE_RANDOM}", "--ct-store-durations": "--ct-store-durations="}
    args[:] = [bare.get(arg, arg) for arg in args]


XDIST_UNDER_A_LAUNCHER = (
    "pytest-xdist ({option}) cannot run under {launcher}: the launcher started one process per rank, and each "
    "must run every test itself; xdist would split the tests of that one launched world among its workers, "
    "so each rank would wait for peers that never come. Drop {option} from the pytest command under "
    "{launcher} (or pass -p no:xdist), or run pytest {option} without {launcher}: each xdist worker then "
    "starts the ranks of its worlds itself"
)
_LAUNCHER_NAMES = {"torchrun": "torchrun", "slurm": "srun", "mpi": "mpiexec"}


def _export_launch(config: pytest.Config) -> None:
    """Under srun or mpiexec, export torchrun's variables (``RANK``, ...) before the test files are imported.

    A bad or missing launcher setting (mpiexec across hosts without ``MASTER_ADDR``)
    is a ConfigError, which stops the session with its message; so is xdist under
    any launcher (:data:`XDIST_UNDER_A_LAUNCHER`).
    """
    from continuous_test.errors import ConfigError
    from continuous_test._launch import detect, export_env

    launch = detect()
    option = _xdist_option(config)
    if launch.is_launcher and option is not None:
        raise ConfigError(XDIST_UNDER_A_LAUNCHER.format(option=option, launcher=_LAUNCHER_NAMES[launch.mode.value]))
    export_env(launch)


def _xdist_option(config: pytest.Config) -> Optional[str]:
    """How this session asked xdist for workers (``-n 2``, ``--tx ...``), or None; an xdist worker says ``-n``."""
    if hasattr(config, "workerinput"):
        return "-n"
    workers = getattr(config.option, "numprocesses", None)
    if workers not in (None, 0, "0"):
        return f"-n {workers}"
    if getattr(config.option, "tx", None):
        return "--tx"
    return None


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers and read the command-line settings (command line beats ini)."""
    from continuous_test import config as ct_config

    config.addinivalue_line("markers", "world_size(n): run this distributed test class or function with n ranks")
    config.addinivalue_line("markers", "ct_timeout(seconds): per-test time limit of a distributed test")
    config.addinivalue_line("markers", "ct_leaks(policy): leak policy (restore, fail, off) of a distributed test")
    config.addinivalue_line("markers", "ct_record(on): record collective calls for the timeline (False: off)")
    config.addinivalue_line("markers", "ct_devices(n): set by continuous_test at collection: the devices a "
                                       "distributed test needs (0 for a CPU world); see docs/devices.rst")
    if getattr(config.option, "showlocals", False):  # -l: the ranks' tracebacks show local variables too
        from continuous_test.wire.env import ENV_TB_LOCALS

        os.environ[ENV_TB_LOCALS] = "1"
    try:
        timeout, source = _setting(config, "ct_timeout")
        limit = None if timeout is None else ct_config.parse_seconds(timeout, "timeout", source)
        world_size, source = _setting(config, "ct_world_size")
        size = None if world_size is None else ct_config.parse_positive_int(world_size, "world size", source)
        _configure_isolation(config)
        _export_launch(config)
        _device_limits(config)
        config.stash[SHARDING] = sharding = pytest_shards.resolve(config)
        config.stash[_REPORTS] = _checked_report_paths(config)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    _register(config, sharding)
    # Kept on this session's config, never in module globals: a later session in
    # the same process starts clean.
    config.stash[_OVERRIDES] = ct_config.Overrides(time_limit=limit, world_size=size)
    config.stash[_PARTS] = []
    from continuous_test.controller import run_log

    run_log.reset()  # a later session in the same process starts a new record
    _progress_through_terminal(config)


# The plugin objects of the session room, by the name each is registered under.
_PLUGIN_OBJECTS = (pytest_report.NAME, pytest_shards.SHARDS_NAME, pytest_shards.RECORDER_NAME)


def _register(config: pytest.Config, sharding: _Sharding) -> None:
    """Register the report shaping, then the shards and repeats (whose report wrapper is then the outer one),
    and, in the process that sees every report (xdist workers' too), the recorder of durations and repeats."""
    config.pluginmanager.register(pytest_report.RankReports(), pytest_report.NAME)
    config.pluginmanager.register(pytest_shards.Shards(sharding, item_world, _has_world, _MARKED),
                                  pytest_shards.SHARDS_NAME)
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Recorder(sharding), pytest_shards.RECORDER_NAME)


_DEVICE_LIMITS = pytest.StashKey[tuple]()
_NEEDS = pytest.StashKey[int]()


def _device_limits(config: pytest.Config) -> None:
    """Check --ct-max-devices and --ct-min-devices (ConfigError naming the bad one) and keep them."""
    from continuous_test import config as ct_config

    limits = []
    for name in ("ct_max_devices", "ct_min_devices"):
        value = config.getoption(name)
        option = f"the --{name.replace('_', '-')} option"
        limits.append(None if value is None else ct_config.parse_non_negative_int(value, "device count", option))
    config.stash[_DEVICE_LIMITS] = tuple(limits)


def _progress_through_terminal(config: pytest.Config) -> None:
    """Heartbeats (with -v) and live rank output go to pytest's terminal, past its capture."""
    from continuous_test.controller import progress

    def emit(line: str, first: bool) -> None:
        reporter = config.pluginmanager.getplugin("terminalreporter")
        if reporter is None:  # an xdist worker: nobody sees its terminal
            return
        capman = config.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman is not None else _nothing():
            reporter.write_line(line)

    progress.use_pytest(config.option.verbose > 0, emit, config.getoption("ct_live_output"))


@contextlib.contextmanager
def _nothing():
    yield


def _configure_isolation(config: pytest.Config) -> None:
    """Export --ct-leaks, --ct-bisect and --ct-shuffle to the environment, which ranks and xdist workers inherit.

    The environment is put back at ``pytest_unconfigure``, so that a later session
    in the same process does not inherit this one's options.
    """
    import os

    from continuous_test import config as ct_config
    from continuous_test.wire.env import ENV_BISECT, ENV_LEAKS, ENV_SHUFFLE, ENV_WORLD_SCOPE

    names = (ENV_LEAKS, ENV_BISECT, ENV_SHUFFLE, ENV_WORLD_SCOPE)
    config.stash[_SAVED_ENV] = {name: os.environ.get(name) for name in names}
    scope = config.getoption("ct_world_scope")
    source = "the --ct-world-scope option"
    if scope is None and config.getini("ct_world_scope"):
        scope, source = config.getini("ct_world_scope"), "the ct_world_scope ini key"
    if scope is not None:
        os.environ[ENV_WORLD_SCOPE] = ct_config.parse_world_scope(scope, source)

    ct_config.set_cli_leaks(config.getoption("ct_leaks"))
    budget = config.getoption("ct_bisect")
    if budget is not None:
        ct_config.parse_budget(budget, "the --ct-bisect option")
        os.environ[ENV_BISECT] = str(budget)
    seed = config.getoption("ct_shuffle")
    if seed == SHUFFLE_RANDOM:
        from continuous_test.session.shuffle import random_seed

        # Chosen once, by the controller; xdist workers inherit its environment
        # and must collect the same order.
        worker = hasattr(config, "workerinput") and os.environ.get(ENV_SHUFFLE)
        seed = config.option.ct_shuffle = worker or str(random_seed())
    if seed is not None:
        os.environ[ENV_SHUFFLE] = str(ct_config.parse_seed(seed, "the --ct-shuffle option"))
    else:
        ct_config.shuffle_seed()  # a bad CONTINUOUS_TEST_SHUFFLE is a usage error


def pytest_unconfigure(config: pytest.Config) -> None:
    """Put back what this session changed: progress goes back to unittest runners, and the
    environment ``_configure_isolation`` changed is restored."""
    import os

    from continuous_test.controller import progress

    progress.use_unittest()
    for name in _PLUGIN_OBJECTS:
        plugin = config.pluginmanager.get_plugin(name)
        if plugin is not None:
            config.pluginmanager.unregister(plugin)
    for name, value in config.stash.get(_SAVED_ENV, {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_report_header(config: pytest.Config) -> List[str]:
    """Say the shuffle seed and the shard at the start of the run (xdist's controller collects nothing)."""
    sharding = config.stash.get(SHARDING, None)
    chosen = sharding.shard if sharding is not None else None
    shard_line = None if chosen is None else f"continuous_test: shard {chosen.index}/{chosen.count} ({chosen.source})"
    return [line for line in (_seed_line(), shard_line) if line]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Say the shuffle seed even under ``-q``, which hides the header."""
    line = _seed_line()
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if line and reporter is not None and session.config.get_verbosity() < 0:
        reporter.write_line(line)


def _seed_line() -> Optional[str]:
    from continuous_test import config as ct_config
    from continuous_test.session.shuffle import SEED_LINE

    seed = ct_config.shuffle_seed()
    return None if seed is None else SEED_LINE.format(seed=seed)


def _setting(config: pytest.Config, name: str) -> tuple:
    value = config.getoption(name)
    if value is not None:
        return value, f"the --{name.replace('_', '-')} option"
    value = config.getini(name)
    return (value or None), f"the {name} ini setting"


def _test_class(item: pytest.Item) -> Optional[type]:
    """The class whose tests run in ranks for ``item`` (a test class's or a ``@distributed`` function's), else None."""
    from continuous_test._role import rank_class_of

    return rank_class_of(getattr(item, "cls", None)) or rank_class_of(getattr(item, "function", None))


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: Any, name: str, obj: Any) -> None:
    """Give a distributed test class marked ``world_size([1, 2])`` (on it, or on its module) one test per size,
    and a shared-world test marked ``world_size(n)`` its own size."""
    import inspect

    if not inspect.isclass(obj) or not getattr(obj, "_ct_runs_in_ranks", False):
        return None
    from continuous_test import sizes

    own = [m for m in getattr(obj, "pytestmark", []) if getattr(m, "name", None) == "world_size"]
    marker = own[0] if own else collector.get_closest_marker("world_size")
    value = None if marker is None else _marker_arg(marker)
    if sizes.is_list(value):
        try:
            sizes.expand(obj, sizes.check(value, f"the world_size marker of {obj.__qualname__}"))
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
    if _shared_world(obj):
        sizes.size_tests(obj, _sized_by_their_markers(obj))
    return None


def _sized_by_their_markers(cls: type) -> dict:
    """Tests of ``cls`` with their own valid ``world_size(n)`` marker -> n (a bad one is reported per test)."""
    found = {}
    for attr, raw in vars(cls).items():
        marks = [m for m in getattr(raw, "pytestmark", []) if getattr(m, "name", None) == "world_size"]
        value = _marker_arg(marks[0]) if marks and callable(raw) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            found[attr] = value
    return found


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A ``@distributed`` function of several world sizes runs once per size: ids ``test_x[ws2]``."""
    from continuous_test.functions import SIZE_ARG, function_sizes

    several = function_sizes(metafunc.function)
    if several is not None and SIZE_ARG in metafunc.fixturenames:
        metafunc.parametrize(SIZE_ARG, several, ids=[f"ws{size}" for size in several])


@pytest.hookimpl(tryfirst=True)  # before -m and -k deselect: they may select by the ct_devices marker
def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Shuffle the order if asked; check the markers of distributed tests, and keep them per test."""
    from continuous_test import config as ct_config, sizes

    seed = ct_config.shuffle_seed()
    if seed is not None:
        from continuous_test.session.shuffle import shuffle_items

        shuffle_items(items, seed)
    base = config.stash.get(_OVERRIDES, ct_config.Overrides())
    for item in items:
        cls = _test_class(item)
        if cls is None:
            continue
        _parsed_id(item)
        size = limit = None
        try:
            marker = item.get_closest_marker("world_size")
            if marker is not None and sizes.is_list(_marker_arg(marker)):
                if getattr(item, "cls", None) is None:
                    raise pytest.UsageError(SIZES_ON_A_FUNCTION.format(test=item.nodeid, sizes=_marker_arg(marker)))
                sizes.check(_marker_arg(marker), f"the world_size marker of {item.nodeid}")
                size = sizes.size_of(item.name)  # the test's own size (test_x[ws2])
            elif marker is not None:
                size = ct_config.parse_positive_int(_marker_arg(marker), "world size",
                                                    f"the world_size marker of {item.nodeid}")
            marker = item.get_closest_marker("ct_timeout")
            if marker is not None:
                limit = ct_config.parse_seconds(_marker_arg(marker), "timeout", f"the ct_timeout marker of {item.nodeid}")
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        item.stash[_MARKED] = ct_config.Overrides(time_limit=base.time_limit, world_size=base.world_size,
                                                  marked_time_limit=limit, marked_world_size=size)
        _mark_devices(item, cls, item.stash[_MARKED])
    _deselect_by_devices(config, items)


def _parsed_id(item: pytest.Item) -> None:
    """Give a test method named with brackets (``test_x[ws3]``) the structured id pytest parses from its node id.

    pytest 9 keys its cache (``--lf``, ``--sw``) by structured ids, parsed from the node id strings it
    stored: ``test_x`` with the parameters ``ws3``.  A unittest method's id is made from its name, brackets
    and all, and never equals that, so ``--lf`` would find no failure and rerun every size.  Older pytest
    compares the strings, which are the same either way.
    """
    structured: Any = getattr(item, "_id", None)
    if getattr(structured, "params", "") is None and "[" in item.name:
        item._id = type(structured).parse(item.nodeid)  # pytest's own class, parsing as its cache does


def _mark_devices(item: pytest.Item, cls: type, overrides: Overrides) -> None:
    """Mark ``item`` with the devices it needs: ``ct_devices(n=N)`` and the keyword ``ct_devices_N``."""
    from continuous_test import config as ct_config
    from continuous_test.controller import device_needs

    try:
        with ct_config.overridden(overrides):
            need = device_needs.test_need(cls, getattr(item, "function", None), _method_name(item, cls), _size(item))
    except Exception:  # noqa: BLE001 - a class's device_type() that fails here fails its tests when they run
        need = 0
    item.stash[_NEEDS] = need
    item.add_marker(pytest.mark.ct_devices(n=need))
    item.extra_keyword_matches.add(f"{DEVICES_MARKER}_{need}")


def _size(item: pytest.Item) -> Optional[int]:
    """A sized test's own world size: ``test_x[ws2]`` of a class, or a ``@distributed`` function's size argument."""
    from continuous_test import sizes
    from continuous_test.functions import SIZE_ARG

    callspec = getattr(item, "callspec", None)
    if callspec is not None and SIZE_ARG in callspec.params:
        return int(callspec.params[SIZE_ARG])
    return sizes.size_of(item.name)


def _method_name(item: pytest.Item, cls: type) -> Optional[str]:
    name = getattr(item, "originalname", None) or item.name.split("[", 1)[0]
    return name if callable(getattr(cls, name, None)) else None


def _deselect_by_devices(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Deselect (pytest's way, so that they count as deselected) what --ct-max/min-devices leave out."""
    most, least = config.stash.get(_DEVICE_LIMITS, (None, None))
    if most is None and least is None:
        return
    kept: List[pytest.Item] = []
    dropped: List[pytest.Item] = []
    for item in items:
        need = item.stash.get(_NEEDS, 0)
        fits = (most is None or need <= most) and (least is None or need >= least)
        (kept if fits else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_report_collectionfinish(config: pytest.Config, start_path: Any, items: List[pytest.Item]) -> Any:
    """Under --collect-only, say how many distributed tests need how many devices."""
    if not config.option.collectonly:
        return None
    counts: dict = {}
    for item in items:
        if _NEEDS in item.stash:
            counts[item.stash[_NEEDS]] = counts.get(item.stash[_NEEDS], 0) + 1
    if not counts:
        return None
    text = ", ".join(f"{need} by {n} test{'s' if n != 1 else ''}" for need, n in sorted(counts.items()))
    return DEVICES_LINE.format(counts=text)


def _marker_arg(marker: Any) -> Any:
    if marker.args:
        return marker.args[0]
    return next(iter(marker.kwargs.values()), None)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the rank template once the tests are imported and before any runs, if a test needs ranks."""
    if session.config.option.collectonly:
        return
    from continuous_test import session as ct_session

    ct_session.tests_loaded(any(_test_class(item) is not None for item in session.items))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Optional[pytest.Item]):
    """Run each distributed test with this session's options and its own markers in force."""
    from continuous_test.controller import ahead

    from continuous_test.controller import run_log

    overrides = item.stash.get(_MARKED, None)
    ahead.set_pytest_next(_next_in_world(item, nextitem))
    ahead.set_pytest_remaining((_test_class(item), lambda: _classes_after(item, nextitem)))
    run_log.log().begin(item.nodeid)
    try:
        if overrides is None:
            yield
            return
        from continuous_test import config as ct_config
        from continuous_test import functions

        # A @distributed function's reports name pytest's own id of the call (test_lr[0.1]).
        is_function = _test_class(item) is not None and not isinstance(item, _TestCaseFunction)  # or a plain class's
        plain_class = getattr(item, "cls", None) is not None  # a plain class's test: TestX::test_y
        functions.use_pytest_id((item.nodeid.split("::", 1)[-1] if plain_class else item.name) if is_function else None)
        with ct_config.overridden(overrides):
            yield
    finally:
        if overrides is not None:
            from continuous_test import functions

            functions.use_pytest_id(None)
        ahead.set_pytest_next(None)
        ahead.set_pytest_remaining(None)
        run_log.log().end(item.nodeid, item.stash.get(_OUTCOME, run_log.UNKNOWN))
        _stop_if_interrupted(item.session)


_ITEM_INDEX = pytest.StashKey[Dict[str, int]]()


def _classes_after(item: pytest.Item, nextitem: Optional[pytest.Item]) -> list:
    """The distributed classes of the items this session runs after ``item`` (a shared world's users to come).

    An xdist worker runs the items the controller hands it, not its whole list: only
    the next one is known there.
    """
    if hasattr(item.config, "workerinput"):
        following = _test_class(nextitem) if nextitem is not None else None
        return [following] if following is not None else []
    items = item.session.items
    index = item.session.stash.get(_ITEM_INDEX, None)
    if index is None or len(index) != len(items):
        index = item.session.stash[_ITEM_INDEX] = {it.nodeid: i for i, it in enumerate(items)}
    at = index.get(item.nodeid)
    if at is None:
        return []
    return list(dict.fromkeys(c for c in map(_test_class, items[at + 1:]) if c is not None))


def _stop_if_interrupted(session: pytest.Session) -> None:
    """Stop the session after a test whose rerun or bisect a Ctrl-C ended (its failure is reported)."""
    from continuous_test.controller import progress

    why = progress.take_stop()
    if why:
        session.shouldstop = why


# Markers under which pytest itself may skip an item, or not run it as collected.
_RUNNER_MARKERS = frozenset({"skip", "skipif", "xfail", "usefixtures"})


def _next_in_world(item: pytest.Item, nextitem: Optional[pytest.Item]) -> Optional[tuple]:
    """(class, method, next method) when ``nextitem`` is the next test of ``item``'s shared world
    and nothing of pytest's runs between the two tests; else None (nothing is sent ahead)."""
    cls = getattr(item, "cls", None)
    marked = item.stash.get(_MARKED, None)  # set on distributed tests only: nothing imported for others
    if nextitem is None or cls is None or marked is None or getattr(nextitem, "cls", None) is not cls:
        return None
    from continuous_test._role import skipped_by_unittest
    from continuous_test.case import MultiProcContinuousTest

    if not (isinstance(cls, type) and issubclass(cls, MultiProcContinuousTest)) or type(item).__name__ != "TestCaseFunction":
        return None
    if type(nextitem) is not type(item) or nextitem.stash.get(_MARKED, None) != marked:
        return None  # the next test's settings are read under this one's: they must be the same
    if any(mark.name in _RUNNER_MARKERS for it in (item, nextitem) for mark in it.iter_markers()):
        return None  # a strict xfail that passes fails, and -x would stop
    if skipped_by_unittest(cls, nextitem.name):
        return None
    if _function_fixtures(item) or _function_fixtures(nextitem) or _foreign_runtest_hooks(nextitem):
        # This test's fixtures end, and the next one's start, after the next test was sent;
        # a conftest or plugin hook may skip the next test at its setup.
        return None
    return cls, item.name, nextitem.name


# Where runtest hooks may come from without skipping or changing a test: pytest itself,
# xdist, pytest-cov, pytest-timeout (it arms a timer around the call; when it fires in
# this process, the world is discarded: controller/world.py) and this plugin.
_KNOWN_HOOK_MODULES = ("_pytest.", "pytest_cov.", "xdist.", "pytest_timeout", "continuous_test.")


def _foreign_runtest_hooks(item: pytest.Item) -> bool:
    """Whether a conftest or another plugin implements a runtest hook that applies to ``item``."""
    for name in ("pytest_runtest_setup", "pytest_runtest_call", "pytest_runtest_teardown"):
        for impl in getattr(item.ihook, name).get_hookimpls():
            plugin = impl.plugin
            module = getattr(plugin, "__name__", None) or type(plugin).__module__
            if not str(module).startswith(_KNOWN_HOOK_MODULES):
                return True
    return False


def _function_fixtures(item: pytest.Item) -> bool:
    """Whether ``item`` uses a fixture of function scope (True when that cannot be told)."""
    try:
        defs = item._fixtureinfo.name2fixturedefs  # type: ignore[attr-defined]
        return any(getattr(d, "scope", "function") == "function" for seq in defs.values() for d in seq)
    except AttributeError:
        return True


_REPORTS = pytest.StashKey[tuple]()


def _checked_report_paths(config: pytest.Config) -> tuple:
    """(path, where it came from) of the JSON report and of the page: --ct-report and --ct-report-html,
    else CONTINUOUS_TEST_REPORT and CONTINUOUS_TEST_REPORT_HTML.  In the process that writes them,
    a path that cannot be written is a ConfigError now, and each is made absolute (a test's chdir
    does not move it)."""
    from continuous_test.wire import files
    from continuous_test.wire.env import ENV_REPORT, ENV_REPORT_HTML

    found = []
    for name, variable in (("ct_report", ENV_REPORT), ("ct_report_html", ENV_REPORT_HTML)):
        value = config.getoption(name)
        source = f"the --{name.replace('_', '-')} option" if value else f"the {variable} environment variable"
        value = value or os.environ.get(variable)
        if value and not hasattr(config, "workerinput"):  # an xdist worker hands its part to the main process
            value = files.check(value, source)
        found.append((value or None, source))
    return tuple(found)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the run report: an xdist worker hands its part to the main process, which writes them all."""
    config = session.config
    (json_path, json_source), (html_path, html_source) = config.stash.get(_REPORTS, ((None, ""), (None, "")))
    from continuous_test import _role

    if not json_path and not html_path or _role.rank():  # under a launcher, rank 0 writes it
        return
    from continuous_test.controller import run_log

    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[WORKER_OUTPUT_KEY] = run_log.log().as_dict(worker=getattr(config, "workerinput", {}).get("workerid"))
        return
    from continuous_test.runner import write_reports

    parts: list = config.stash.get(_PARTS, [])
    sharding = config.stash.get(SHARDING, None)
    # A file that cannot be written now is a warning: the session's verdicts and its summary stand.
    write_reports(json_path, html_path, parts, sharding.repeat_counts() if sharding is not None else {},
                  sources=(json_source, html_source), on_error=_not_written)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist, in the main process: keep the run report and the device tally a worker sent as it finished."""
    output = getattr(node, "workeroutput", {})
    part = output.get(WORKER_OUTPUT_KEY)
    if part is not None:
        node.config.stash.setdefault(_PARTS, []).append(part)
    tally = output.get(WORKER_TALLY_KEY)
    if tally is not None:
        node.config.stash.setdefault(_TALLIES, []).append(tally)


@pytest.hookimpl(specname="pytest_sessionfinish")
def pytest_sessionfinish_tally(session: pytest.Session) -> None:
    """An xdist worker sends the main process its count of distributed tests and of device skips."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        from continuous_test.controller import run_log

        workeroutput[WORKER_TALLY_KEY] = run_log.log().device_tally()


@pytest.hookimpl(hookwrapper=True, tryfirst=True, specname="pytest_terminal_summary")
def pytest_terminal_summary_all_skipped(terminalreporter: Any) -> Any:
    """After pytest's own summary (its short test summary included), when every distributed test skipped
    for want of devices or a backend: one line that says so and why, just above pytest's counts."""
    yield
    from continuous_test.controller import run_log

    line = run_log.all_skipped_line([run_log.log().device_tally(), *terminalreporter.config.stash.get(_TALLIES, [])])
    if line is not None:
        terminalreporter.write_line(line)


@pytest.hookimpl(tryfirst=True, specname="pytest_runtest_teardown")
def pytest_runtest_teardown_in_ranks(item: pytest.Item) -> None:
    """Under ``--pdb``, keep pytest from calling a shared-world test's ``tearDown`` in the controller.

    pytest postpones ``tearDown`` to its teardown phase under ``--pdb`` (so that the
    debugger sees the test's state), by keeping the bound method on the item
    (``_explicit_tearDown``); a shared-world test's ``tearDown`` already ran in the ranks.
    """
    if getattr(item, "_explicit_tearDown", None) is None:
        return
    from continuous_test._role import ProcessRole, current_role, rank_class_of

    cls = rank_class_of(getattr(item, "cls", None))
    if cls is not None and _shared_world(cls) and current_role() is ProcessRole.CONTROLLER:
        item._explicit_tearDown = None  # type: ignore[attr-defined]


@pytest.fixture(scope="class")
def class_tmpdir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One private (0700) directory per test class, the same path on each of its ranks; removed at its end."""
    import shutil

    path = tmp_path_factory.mktemp(f"{getattr(request.cls, '__name__', 'module')[:30]}-", numbered=True)
    path.chmod(0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _shared_world(cls: type) -> bool:
    from continuous_test.case import MultiProcContinuousTest

    return issubclass(cls, MultiProcContinuousTest)


def pytest_runtest_teardown(item: pytest.Item, nextitem: Optional[pytest.Item]) -> None:
    """Stop a module's @distributed world after its last test."""
    module = getattr(item, "module", None)
    if module is None or (nextitem is not None and getattr(nextitem, "module", None) is module):
        return
    from continuous_test.functions import function_classes

    classes = function_classes(module)
    if classes:
        from continuous_test.controller.world import stop_world

        for cls in classes:
            stop_world(cls)


# -- what shards and repeats ask of an item (session/pytest_shards.py does the rest) ---------------

def repeat_tally(config: pytest.Config) -> Any:
    """The :class:`~continuous_test.session.repeat.RepeatTally` of this session (in the controller: all workers')."""
    return config.stash[SHARDING].tally


def item_world(item: pytest.Item) -> str:
    """The world ``item`` runs in (:func:`continuous_test.session.shard.world_of`): shards never split one."""
    from continuous_test.session.shard import world_of

    from continuous_test import sizes
    from continuous_test.functions import SIZE_ARG

    path = item.nodeid.split("::", 1)[0]
    name = getattr(item, "originalname", None) or item.name
    cls = getattr(item, "cls", None)
    if cls is not None:  # a test class's: test_x[ws2] is in the world of size 2
        return world_of(path, cls, name, sizes.size_of(name) if _has_world(item) else None)
    cls = _test_class(item)
    size = getattr(item, "callspec", None) and item.callspec.params.get(SIZE_ARG)  # type: ignore[attr-defined]
    if cls is not None and size:  # a @distributed function of several sizes: the module's world of this size
        cls = _function_class_of_size(cls, size)
    return world_of(path, cls, name)


def _function_class_of_size(cls: type, size: int) -> type:
    """The hidden class of ``cls``'s module for ``size`` (and the same backend), which that size's functions share."""
    import re
    import sys

    name = re.sub(r"^_DistributedFunctions_\d+", f"_DistributedFunctions_{size}", cls.__qualname__)
    return getattr(sys.modules.get(cls.__module__), name, cls)


def _has_world(item: pytest.Item) -> bool:
    cls = _test_class(item)
    return cls is not None and _shared_world(cls)
