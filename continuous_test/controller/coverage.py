"""Coverage across ranks, the controller's half: hand the measurement's settings on, fold the data back.

:mod:`continuous_test.rank.coverage` draws the whole flow; the ranks' data files
carry :data:`~continuous_test.wire.env.COVERAGE_SUFFIX`, this controller's host and
pid, by which they are found.  Nothing here imports coverage.py unless the
controller already did.
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
import socket
import sys
from typing import Any

from continuous_test.wire.env import COVERAGE_SUFFIX, ENV_COVERAGE


def _current() -> Any:
    coverage = sys.modules.get("coverage")  # not measuring if coverage.py was never imported
    current = getattr(getattr(coverage, "Coverage", None), "current", None)
    return current() if current is not None else None


# The controller's settings for its ranks, serialized once per measurement: (id, text).
_settings_cache: tuple | None = None


def rank_environment() -> dict[str, str]:
    """The environment of ranks started now: the controller's, plus its coverage settings when it is measuring."""
    global _settings_cache
    env = dict(os.environ)
    env.pop(ENV_COVERAGE, None)
    cov = _current()
    if cov is None:
        return env
    if _settings_cache is None or _settings_cache[0] != id(cov):
        _settings_cache = (id(cov), _settings(cov))
    if _settings_cache[1] is not None:
        env[ENV_COVERAGE] = _settings_cache[1]
    return env


def _settings(cov: Any) -> str | None:
    serialize = getattr(cov.config, "serialize", None)
    if serialize is None:
        return None  # coverage.py before 7.10 cannot hand its settings on; ranks go unmeasured
    # Every setting, with paths made absolute, as coverage.py passes them to subprocesses.
    settings = {"controller": os.getpid(), "host": socket.gethostname(), "config": serialize()}
    return json.dumps(settings)


def _rank_files(cov: Any) -> list:
    data_file = os.path.abspath(cov.config.data_file)
    pattern = f"{glob.escape(data_file)}.{COVERAGE_SUFFIX}.{glob.escape(socket.gethostname())}.{os.getpid()}.*"
    return sorted(glob.glob(pattern))


def merge_rank_data() -> None:
    """Fold the data of this controller's ended ranks into its measurement.

    Due as ranks end, while the measurement still runs: ``coverage run`` stops
    and saves it before ``atexit`` hooks run.
    """
    cov = _current()
    if cov is None:
        return
    files = _rank_files(cov)
    if files:
        with contextlib.suppress(Exception):  # a broken data file must not fail the test
            cov.combine(data_paths=files, keep=False)
