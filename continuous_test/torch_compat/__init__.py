"""torch's distributed test bases and helpers, on this project's engine.

For files migrated from ``torch.testing._internal``: the bases here subclass the
public ones (:class:`~continuous_test.MultiProcContinuousTest`,
:class:`~continuous_test.MultiProcessTestCase`) and keep torch's names, methods
and skip codes; :mod:`~continuous_test.torch_compat.assert_equal` is torch's
``assertEqual`` semantics.
"""
