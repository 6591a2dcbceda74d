"""Every torch-style file in this directory runs on continuous_test by this one line."""
from continuous_test.migrate import pytest_pycollect_makemodule  # noqa: F401 - the migration
