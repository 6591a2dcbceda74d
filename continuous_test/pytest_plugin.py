"""pytest plugin, registered through the ``pytest11`` entry point.

* **Rank-aware reports.**  A failing distributed test gets one report section per
  rank that did not pass (its traceback or stacks, and its captured output), plus one
  section with the state of the other ranks.  The failing ranks are recorded as the
  ``failing_ranks`` property, which ``--junitxml`` writes to the XML.
* **Options and markers.**  ``--ct-timeout SECONDS`` (ini ``ct_timeout``) sets every
  per-test time limit, ``--ct-world-size N`` (ini ``ct_world_size``) every world size.
  ``@pytest.mark.world_size(n)`` on a test class or ``@distributed`` function and
  ``@pytest.mark.ct_timeout(seconds)`` on a test override them one at a time.
* **Module worlds.**  The shared world of a module's ``@distributed`` functions is
  stopped when the last test of that module is done.
"""
from __future__ import annotations

from typing import Any, List, Optional

import pytest

__all__ = [
    "pytest_addoption",
    "pytest_configure",
    "pytest_collection_modifyitems",
    "pytest_collection_finish",
    "pytest_runtest_makereport",
    "pytest_runtest_teardown",
]

TIMEOUT_HELP = "per-test time limit in seconds for distributed tests (overrides CONTINUOUS_TEST_TIMEOUT)"
WORLD_SIZE_HELP = "world size for every distributed test class and @distributed function"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the plugin's command-line options and ini keys."""
    group = parser.getgroup("continuous_test", "distributed tests (continuous_test)")
    group.addoption("--ct-timeout", dest="ct_timeout", default=None, metavar="SECONDS", help=TIMEOUT_HELP)
    group.addoption("--ct-world-size", dest="ct_world_size", default=None, metavar="N", help=WORLD_SIZE_HELP)
    parser.addini("ct_timeout", TIMEOUT_HELP, default=None)
    parser.addini("ct_world_size", WORLD_SIZE_HELP, default=None)


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers and install the command-line settings (command line beats ini)."""
    from continuous_test import config as ct_config

    config.addinivalue_line("markers", "world_size(n): run this distributed test class or function with n ranks")
    config.addinivalue_line("markers", "ct_timeout(seconds): per-test time limit of a distributed test")
    try:
        timeout, source = _setting(config, "ct_timeout")
        if timeout is not None:
            ct_config.set_cli_timeout(ct_config.parse_seconds(timeout, "timeout", source))
        world_size, source = _setting(config, "ct_world_size")
        if world_size is not None:
            ct_config.set_cli_world_size(_int(world_size, source))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _setting(config: pytest.Config, name: str) -> tuple:
    value = config.getoption(name)
    if value is not None:
        return value, f"the --{name.replace('_', '-')} option"
    value = config.getini(name)
    return (value or None), f"the {name} ini setting"


def _int(value: Any, source: str) -> int:
    try:
        return int(str(value))
    except ValueError:
        raise ValueError(f"Invalid world size {value!r} from {source}: expected a positive int") from None


def _test_class(item: pytest.Item) -> Optional[type]:
    import sys

    if "continuous_test.case" not in sys.modules:
        return None  # no test uses the library: do not import torch for nothing
    from continuous_test.case import MultiProcContinuousTest
    from continuous_test.functions import CLASS_ATTR
    from continuous_test.multiprocess import MultiProcessTestCase

    cls = getattr(item, "cls", None)
    if cls is not None and issubclass(cls, (MultiProcContinuousTest, MultiProcessTestCase)):
        return cls
    return getattr(getattr(item, "function", None), CLASS_ATTR, None)


def pytest_collection_modifyitems(items: List[pytest.Item]) -> None:
    """Turn ``world_size`` and ``ct_timeout`` markers into settings of the tests' classes."""
    from continuous_test import config as ct_config

    for item in items:
        cls = _test_class(item)
        if cls is None:
            continue
        name = getattr(item, "originalname", None) or item.name
        try:
            marker = item.get_closest_marker("world_size")
            if marker is not None:
                ct_config.mark_world_size(cls, _marker_arg(marker), f"the world_size marker of {item.nodeid}")
            marker = item.get_closest_marker("ct_timeout")
            if marker is not None:
                ct_config.mark_timeout(cls, name, _marker_arg(marker), f"the ct_timeout marker of {item.nodeid}")
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None


def _marker_arg(marker: Any) -> Any:
    if marker.args:
        return marker.args[0]
    return next(iter(marker.kwargs.values()), None)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the rank template once the tests are imported and before any runs, if a test needs ranks."""
    if session.config.option.collectonly:
        return
    if any(_test_class(item) is not None for item in session.items):
        from continuous_test import launch, template

        if not launch.detect().is_launcher:
            template.prepare()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Add one section per rank that did not pass, and the failing ranks as a property."""
    outcome = yield
    if call.when != "call" or call.excinfo is None:
        return
    ranks = getattr(call.excinfo.value, "ct_ranks", None)
    if not ranks:
        return
    report = outcome.get_result()
    others = []
    for rank, info in sorted(ranks.items()):
        if info.status in ("passed", "skipped", "ended as expected"):
            others.append(f"rank {rank}: {info.status}")
            continue
        body = info.detail.rstrip()
        if info.output.strip():
            body += f"\n--- output of rank {rank} ---\n{info.output.rstrip()}"
        report.sections.append((f"rank {rank}: {info.status.replace('_', ' ')}", body + "\n"))
    if others:
        report.sections.append(("other ranks", "\n".join(others) + "\n"))
    failing = ",".join(str(r) for r, info in sorted(ranks.items()) if info.status not in ("passed", "skipped", "ended as expected"))
    item.user_properties.append(("failing_ranks", failing))


def pytest_runtest_teardown(item: pytest.Item, nextitem: Optional[pytest.Item]) -> None:
    """Stop a module's @distributed world after its last test."""
    module = getattr(item, "module", None)
    if module is None or (nextitem is not None and getattr(nextitem, "module", None) is module):
        return
    from continuous_test.functions import function_classes

    classes = function_classes(module)
    if classes:
        from continuous_test.world import stop_world

        for cls in classes:
            stop_world(cls)
