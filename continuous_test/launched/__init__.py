"""Tests under a launcher (torchrun, srun, mpiexec): each launched process is a rank and its own controller.

:mod:`~continuous_test._launch` (a leaf: anyone may ask) tells how this process was
launched; :mod:`~continuous_test.launched.join` reaches the launcher's
store and keeps the default group; :mod:`~continuous_test.launched.run` runs each
test in place and exchanges outcomes; :mod:`~continuous_test.launched.time_limit`
ends a rank whose test outlives its limit.
"""
