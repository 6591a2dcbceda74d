"""The suite's three tiers, and the guards that keep each test's mark true.

A test's tier is its mark (``pytest.mark.world``, ``pytest.mark.e2e``), else
``unit``.  Three places notice what a test really does and call :func:`uses`:
``helpers.run`` (a real process: e2e), ``inprocess`` (a scenario run in this
process: world) and the controller's ``_fork_ranks`` (ranks forked here: world).
A test whose mark is lower fails there, saying which mark it needs.  With
``CT_TIER_RECORD=FILE`` the guards write ``nodeid tier`` lines to FILE instead.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Optional

TIERS = {
    "unit": "no process beyond forked stand-ins (the default)",
    "world": "ranks forked from this process's template: scenario runs in process, worlds started here",
    "e2e": "real python, pytest, xdist, torchrun, mpiexec or srun processes; the real process is the point",
}
_ORDER = list(TIERS)
ENV_RECORD = "CT_TIER_RECORD"
ENV_SCENARIO_RUN = "CT_SCENARIO_RUN"  # set in every scenario run's environment: its tests have no tier
ENV_ENFORCE = "CT_TIER_ENFORCE"  # "0": the guards only record (with CT_TIER_RECORD) or do nothing

_current: Optional[tuple] = None  # (nodeid, declared tier) of the running test


def declared(node: Any) -> str:
    """The tier ``node``'s marks declare (the highest of them), else ``unit``."""
    marks = {m.name for m in node.iter_markers()}
    return max((t for t in _ORDER if t in marks), key=_ORDER.index, default="unit")


@contextlib.contextmanager
def running(nodeid: str, tier: str) -> Iterator[None]:
    """Mark ``nodeid`` (of ``tier``) as the running test for the guards."""
    global _current
    _install_fork_guard()
    _current = (nodeid, tier)
    try:
        yield
    finally:
        _current = None


def uses(tier: str, what: str) -> None:
    """The running test does something of ``tier`` (``what``): fail unless its mark allows it."""
    if _current is None:
        return
    nodeid, have = _current
    record = os.environ.get(ENV_RECORD)
    if record:
        with open(record, "a") as f:
            f.write(f"{nodeid} {tier}\n")
        return
    if os.environ.get(ENV_ENFORCE, "1") != "0" and _ORDER.index(tier) > _ORDER.index(have):
        raise AssertionError(f"{nodeid} {what}: mark it @pytest.mark.{tier} (its tier is {have}; test/README.rst, "
                             f"'Tiers')")


_guarded = False


def _install_fork_guard() -> None:
    """Wrap the controller's one place that forks ranks, once (its module may not be imported yet)."""
    global _guarded
    if _guarded:
        return
    from continuous_test.controller import processes

    fork = processes._fork_ranks

    def guarded(*args: Any, **kwargs: Any) -> Any:
        uses("world", "forks ranks from the template in the test process")
        return fork(*args, **kwargs)

    processes._fork_ranks = guarded  # type: ignore[assignment]
    _guarded = True
