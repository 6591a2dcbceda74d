"""Code that runs inside a rank process a controller started.

:mod:`~continuous_test.rank.main` is the process's entry point (a shared world's
loop, a fresh rank's one test, a spare's wait); :mod:`~continuous_test.rank.run`
runs one test for real; the others are what a rank does around a test (leak
snapshots, the collective recorder, coverage, its unittest result).  Launched
ranks (torchrun, srun) run tests through :mod:`~continuous_test.rank.run` too.

Never imports the controller, the verdict, the template or a launcher's code
(``test/test_layout.py`` checks it): a rank reports what happened, it does not judge.
"""
