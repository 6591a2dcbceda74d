"""The runner's session: what a run does to its tests as a whole, touching no rank.

Above the controller (which drives ranks), below the runners that use it
(``run_tests()``, ``python -m unittest`` through :mod:`~.unittest_program`, the
pytest plugin): :mod:`~.shuffle` (the order, from a seed), :mod:`~.shard` (this
job's share of the worlds, balanced on recorded durations), :mod:`~.repeat` (each
test run again, tallied and diagnosed), :mod:`~.suite` (unittest's side of shards
and repeats), :mod:`~.unittest_program` (the hooks in unittest's own program).
"""
