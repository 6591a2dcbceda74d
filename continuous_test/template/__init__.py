"""The template process ranks are forked from, and what it imports before forking.

:mod:`~continuous_test.template.server` is the controller's management of it
(forked from the controller, or a fresh interpreter); the ``preload_*`` modules and
:mod:`~continuous_test.template.at_exit` are imported only inside the template.
"""
