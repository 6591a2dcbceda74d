"""From per-rank outcomes to one verdict, and the report a person reads.

:mod:`~continuous_test.verdict.merge` turns every rank's outcome (and the faults
the controller saw) into one :class:`~continuous_test.verdict.merge.Verdict`;
:mod:`~continuous_test.verdict.report` builds the exception that carries the
report; :mod:`~continuous_test.verdict.replay` raises a verdict inside the running
test, so the runner records it as any test's result.  Used by the controller and
by launched ranks; never by a controller's ranks.  No torch.
"""
