"""The runner's session: what a run does to its tests as a whole, touching no rank.

Above the controller (which drives ranks), below the runners that use it
(``run_tests()``, ``python -m unittest`` through :mod:`~.unittest_program`, the
pytest plugin): :mod:`~.shuffle` (the order, from a seed), :mod:`~.shard` (this
job's share of the worlds, balanced on recorded durations), :mod:`~.repeat` (each
test run again, tallied and diagnosed), :mod:`~.suite` (unittest's side of shards
and repeats), :mod:`~.unittest_program` (the hooks in unittest's own program).
"""
from __future__ import annotations

__all__ = ["tests_loaded"]


def tests_loaded(need_ranks: bool = True) -> None:
    """The tests are loaded and none has run: in a controller whose tests ``need_ranks``, start the template.

    The one trigger every runner pulls (``run_tests()``, unittest's program, the
    pytest plugin after collection): the template is made while the controller
    is clean, and the controller's code is loaded before the first test, not in it.
    """
    from continuous_test._role import ProcessRole, current_role

    if not need_ranks or current_role() is not ProcessRole.CONTROLLER:
        return
    from continuous_test.controller import dispatch  # noqa: F401 - loaded before the first test, not in it
    from continuous_test.template import server

    server.prepare()
