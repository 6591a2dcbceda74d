"""Make the test helpers importable, keep scenario files out of collection, and keep the tiers true.

Every test has a tier (test/README.rst, "Tiers"): ``unit`` (the default: no process
beyond forked stand-ins), ``world`` (ranks forked from this process's template:
scenario runs in process, worlds started here) or ``e2e`` (real python, pytest,
torchrun, mpiexec or srun processes).  A test that does more than its mark says
fails, naming the mark it needs (``CT_TIER_ENFORCE=0`` turns that off); ``tox -e
quick`` runs ``-m "not e2e"``.
"""
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import tiers  # noqa: E402 - needs the path above

# Scenario files are run by the tests (as subprocesses or in process), never collected
# directly; gpu/ is run by gpu/check.py on machines with GPUs.
collect_ignore_glob = ["scenarios/*", "gpu/*"]


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


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the marks under --dist loadgroup
def pytest_collection_modifyitems(items: list) -> None:
    """The suite's distribution (``-n 2 --dist loadgroup``): the tests of a file that share one of its module-scoped
    fixtures (a scenario run made once and read by each) go to one worker together; every other test goes to
    whichever worker is free, so that no file is pinned to one worker for its whole time."""
    if os.environ.get(tiers.ENV_SCENARIO_RUN):
        return
    for item in items:
        path = item.nodeid.split("::")[0]
        info = getattr(item, "_fixtureinfo", None)
        defs = [d for ds in (info.name2fixturedefs.values() if info else ()) for d in ds]
        if any(d.scope in ("module", "package") and d.baseid == path for d in defs):
            item.add_marker(pytest.mark.xdist_group(path))

