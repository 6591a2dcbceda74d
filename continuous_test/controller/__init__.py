"""The controller: the process that runs the test runner, starts the ranks and judges their outcomes.

How one test flows (the controller's modules on the left)::

    runner (unittest, pytest)
      │ MultiProcContinuousTest.run(result), or a @distributed function's call
      ▼
    dispatch ── plan: settings checked, leak policy and time limit resolved, once
      │
      ▼
    world.World.run_test(plan) ──RunTest──────────────►  rank 0 … rank N-1   (continuous_test.rank.main,
      │ watch.Watch.wait: every pipe and sentinel         forked from the template by processes.start_ranks)
      │ ◄────────────────────TestDone / Stacks──────────────────┘
      ▼
    verdict.merge ─► bisect.after_test (rerun, bisect) ─► verdict.replay raises it inside the test ─► result

Lifecycles: three ways to start ranks, one wait loop (:meth:`watch.Watch.wait`) for all::

    shared world (MultiProcContinuousTest: world.World, one per class)

        NEW ─start()─► wait(Ready) ─► READY ─run_test()─► wait(TestDone) ─► READY ─ … ─stop()─► Shutdown ─► wait(Stopped or exit) ─► STOPPED
                           │                                 │                                         │
                           │            fault or failed test ─► BROKEN (ranks killed): next run_test() starts again
                           │            a rank died between tests: reported, started again             └─ deaths after the
                           └─ InitFailed / death / start timeout ─► WorldStartError (or SkipTest)            last test reported;
                                                                                                            kill groups, reap later
    a test of a shared class in a world of its own (fresh_worlds): a World started for it and
    stopped after it; the runner's next test, if it wants one of the same size too, gets spares

    fresh ranks (MultiProcessTestCase: fresh.FreshRanks, one set per test)

        start (each rank runs the one test at once) ─► wait(TestDone with its exit code, or exit) ─► judge endings
            │                                                                                          │
            └─ processes.Spares.refill: the next test's ranks forked meanwhile    kill groups, reap later ◄┘

    spares (processes.Spares): forked while a fresh test (or a test in a world of its own)
    runs, they wait for Assign; start_ranks hands them their specs instead of forking.

Under a launcher (torchrun, srun) there is no controller: each launched process is a
rank and its own controller (:mod:`continuous_test.launched`).

Modules: :mod:`~.dispatch` (a test to its verdict), :mod:`~.world` (the shared
world and its registry), :mod:`~.processes` (starting, spares, killing, reaping),
:mod:`~.watch` (the wait loop, stacks), :mod:`~.fresh` (fresh ranks),
:mod:`~.ahead` (which test comes next), :mod:`~.bisect` (rerun and bisect),
:mod:`~.progress` (heartbeats, live output), :mod:`~.devices` (device leases),
:mod:`~.output` (a rank's output in a report), :mod:`~.run_log` (the run's
record), :mod:`~.coverage` (the ranks' coverage data).  The controller drives
ranks only: what a run does to its tests as a whole (order, shards, repeats) is
the session's (:mod:`continuous_test.session`), above it.  The controller imports
the wire format, the verdict and the template, never the rank's code, but for
the rank process's entry point.
"""
