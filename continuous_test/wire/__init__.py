"""What crosses a process boundary: the messages, the per-rank outcomes, the records layout, the environment.

Every process of a run imports this subpackage, so it imports nothing but the
standard library and :mod:`continuous_test.errors`: no torch, no other part of
the package.  Whatever two sides must agree on (a message, a field, a file
layout, a variable name) is defined here once.
"""
