"""Make the test helpers importable, keep scenario files out of collection, and keep the tiers true.

Every test has a tier (test/README.rst, "Tiers"): ``unit`` (the default: no process
beyond forked stand-ins), ``world`` (ranks forked from this process's template:
scenario runs in process, worlds started here) or ``e2e`` (real python, pytest,
torchrun, mpiexec or srun processes).  With ``CT_TIER_ENFORCE=1`` a test that does
more than its mark says fails, naming the mark it needs; ``tox -e quick`` runs
``-m "not e2e"``.
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
                     help="run scenario files in the test process where they can (CT_SCENARIOS=inprocess), or "
                          "every one as a real process (the default)")


def pytest_configure(config: pytest.Config) -> None:
    for tier, text in tiers.TIERS.items():
        config.addinivalue_line("markers", f"{tier}: {text}")
    mode = config.getoption("scenarios")
    if mode:
        os.environ["CT_SCENARIOS"] = mode


if not Path.cwd().resolve().is_relative_to(HERE / "scenarios"):
    # Not in a scenario's own session (run from test/scenarios): a function-scoped
    # autouse fixture there would change what the plugin may send ahead.
    @pytest.fixture(autouse=True)
    def _tier(request: pytest.FixtureRequest):
        """The running test's tier, for the guards in test/tiers.py."""
        with tiers.running(request.node.nodeid, tiers.declared(request.node)):
            yield
