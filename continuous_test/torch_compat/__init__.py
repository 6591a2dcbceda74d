"""torch's distributed test bases and helpers, on this project's engine.

For files migrated from ``torch.testing._internal``: the bases here subclass the
public ones (:class:`~continuous_test.MultiProcContinuousTest`,
:class:`~continuous_test.MultiProcessTestCase`) and keep torch's names, methods
and skip codes.  torch's ``assertEqual`` semantics live beneath them, in the leaf
:mod:`~continuous_test._assert_equal` that ``TestCase`` uses.
"""
