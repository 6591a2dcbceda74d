"""The compat files are run as subprocesses by test/test_compat.py, never collected directly.

Each one runs against torch's classes or continuous_test's, chosen by the
``CT_COMPAT_BASE`` environment variable; a path given explicitly on the command
line is still collected, so ``pytest test/compat/test_x.py`` works.
"""
collect_ignore_glob = ["test_*.py", "migrated/test_*.py"]
