"""Make the test helpers importable, keep scenario files out of collection, and keep the tiers true.

Every test has a tier (test/README.rst, "Tiers"): ``unit`` (the default: no process
beyond forked stand-ins), ``world`` (ranks forked from this process's template:
scenario runs in process, worlds started here) or ``e2e`` (real python, pytest,
torchrun, mpiexec or srun processes).  A test that does more than its mark says
fails, naming the mark it needs (``CT_TIER_ENFORCE=0`` turns that off); ``tox -e
quick`` runs ``-m "not e2e"``.
"""
import ast
import functools
import gc
import json
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import tiers  # noqa: E402 - needs the path above

# The suite's processes keep their bytecode (in the gitignored __pycache__ folders) whatever
# PYTHONDONTWRITEBYTECODE says, as container images often set it: otherwise every xdist worker and
# every pytest the tests start rewrites every test module's asserts again (about 2 s of CPU a
# worker), and every interpreter compiles the package again.  Set here, before xdist starts its
# workers, so that they and every process the tests start inherit it.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# Scenario files are run by the tests (as subprocesses or in process), never collected
# directly; gpu/ is run by gpu/check.py on machines with GPUs.
collect_ignore_glob = ["scenarios/*", "gpu/*"]
# Each test's recorded wall time (benchmarks/suite_profile.py --durations), by which --dist loadgroup hands out
# the longest work first; a test not in it counts UNRECORDED_S.
DURATIONS = HERE / "durations.json"
UNRECORDED_S = 1.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--scenarios", choices=("inprocess", "subprocess"), default=None,
                     help="run scenario files in the test process where they can (the default), or every one as "
                          "a real process (CT_SCENARIOS=subprocess)")


def pytest_configure(config: pytest.Config) -> None:
    for tier, text in tiers.TIERS.items():
        config.addinivalue_line("markers", f"{tier}: {text}")
    mode = config.getoption("scenarios")
    if mode:
        os.environ["CT_SCENARIOS"] = mode


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    """The running test's tier, for the guards in test/tiers.py; not in a session that a test of this suite
    started (a scenario run, in process or real: helpers.scenario_env marks its environment).  A hook, not
    an autouse fixture: a function-scoped fixture would change what the plugin sends ahead there."""
    if os.environ.get(tiers.ENV_SCENARIO_RUN):
        yield
        return
    with tiers.running(item.nodeid, tiers.declared(item)):
        yield


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (torch, the package, every test module) lives to the session's end: frozen,
    the collector never walks it again.  Each scenario run in this process ends with pytest's own
    ``gc.collect()``, which otherwise walks all of it (about 0.17 s a run)."""
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Under ``--dist loadgroup``, the longest work first (see the scheduler below).  xdist's workers, whose
    collection the scheduler hands out, see ``dist`` as "no" and ``loadgroup`` set."""
    if config.getvalue("dist") == "loadgroup" or getattr(config.option, "loadgroup", False):
        items[:] = longest_first(items, _recorded(DURATIONS))


def longest_first(items: List[pytest.Item], seconds: Dict[str, float]) -> List[pytest.Item]:
    """``items`` by their scheduling unit's recorded time (a shared group's sum), longest first; a unit's tests
    stay together in their order, and units of equal time keep theirs."""
    units: Dict[str, List[pytest.Item]] = {}
    for item in items:
        units.setdefault(_shared_group(item.nodeid) or item.nodeid, []).append(item)

    def total(unit: List[pytest.Item]) -> float:
        return sum(seconds.get(item.nodeid, UNRECORDED_S) for item in unit)

    return [item for unit in sorted(units.values(), key=total, reverse=True) for item in unit]


def _recorded(path: Path) -> Dict[str, float]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}


@pytest.hookimpl(optionalhook=True)  # xdist's hook: a session without xdist has none
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """The suite's distribution, ``-n 4 --dist loadgroup``: the tests of a file that share one of its module-scoped
    fixtures (a scenario run made once and read by each) go to one worker together; every other test goes to
    whichever worker is free, so that no file is pinned to one worker for its whole time.  Work goes out longest
    first, by ``test/durations.json`` (:func:`longest_first`), so that no long test starts last and bounds the run.

    The groups come from the test files' source (:func:`_shared_group`), not from ``xdist_group`` marks:
    xdist 3.8 renames a marked test's node id to group it, which pytest 9.2's node ids no longer take."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # xdist's own order (most tests first) would undo longest_first

    class SharedRunScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _shared_group(nodeid) or nodeid

    return SharedRunScheduling(config, log)


def _shared_group(nodeid: str) -> Optional[str]:
    """The file of a test that takes one of its file's module-scoped fixtures (or a fixture that does), else None."""
    path, _, rest = nodeid.partition("::")
    name = rest.split("::")[-1].split("[")[0]
    return path if name in _sharing_tests(path) else None


@functools.lru_cache(maxsize=None)
def _sharing_tests(path: str) -> frozenset:
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError):
        return frozenset()
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]

    def module_scoped(node: ast.FunctionDef) -> bool:
        return any(isinstance(d, ast.Call) and any(k.arg == "scope" and isinstance(k.value, ast.Constant) and
                                                   k.value.value in ("module", "package") for k in d.keywords)
                   for d in node.decorator_list)

    shared = {node.name for node in functions if module_scoped(node)}
    fixtures = {node.name: node for node in functions if any("fixture" in ast.unparse(d) for d in node.decorator_list)}
    grew = True
    while grew:  # fixtures that take a shared one share it too
        grew = False
        for fname, node in fixtures.items():
            if fname not in shared and shared & {a.arg for a in node.args.args}:
                shared.add(fname)
                grew = True
    return frozenset(node.name for node in functions if node.name.startswith("test")
                     and shared & {a.arg for a in node.args.args})
