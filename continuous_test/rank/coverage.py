"""Coverage of the code that runs inside ranks, the rank's half.

A rank is forked from the template (not from the controller) and always ends with
``os._exit``, which skips the ``atexit`` hook where coverage.py saves its data.  So
a measurement in the controller (``coverage run``, pytest-cov's ``--cov``, or
``COVERAGE_PROCESS_START``) would see none of the lines that only ranks execute.
How the controller's measurement reaches the ranks and comes back::

    controller                                       rank (forked from the template)
    ──────────                                       ───────────────────────────────
    coverage.Coverage.current() is measuring
      │ rank_environment(): its config, serialized
      ▼ in CONTINUOUS_TEST_COVERAGE
    start_ranks ── RankSpec.env ──────────────────▶  start_in_rank(): drop any measurement
                                                       inherited from the template, start one
                                                       with the controller's config, writing
                                                       <data_file>.continuous_test.<host>.
                                                       <controller pid>.<pid>.<random>
                                                       │ os._exit (wrapped): stop, save
    merge_rank_data() ◀── data files ──────────────────┘
      when the ranks of a world have ended, their files are folded into the
      controller's running measurement, which coverage.py (``coverage run``) or
      pytest-cov then saves and reports as usual

The controller's half (``rank_environment()``, ``merge_rank_data()``) is
:mod:`continuous_test.controller.coverage`; ``start_ranks`` is in
:mod:`continuous_test.controller.processes`.  The rank side never imports the
controller; nothing here imports coverage.py unless the controller already did.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
from typing import Any

from continuous_test.wire.env import COVERAGE_SUFFIX, ENV_COVERAGE

__all__ = [
    "ENV_COVERAGE",
    "start_in_rank",
    "save_in_rank",
]

_CONFIG_DATA_PREFIX = ":data:"  # coverage.control.CONFIG_DATA_PREFIX, coverage >= 7.10


def _current() -> Any:
    coverage = sys.modules.get("coverage")  # not measuring if coverage.py was never imported
    current = getattr(getattr(coverage, "Coverage", None), "current", None)
    return current() if current is not None else None


# ---------------------------------------------------------------------------- rank side


def start_in_rank() -> None:
    """Measure this rank as the controller measures itself, not as the template did; nothing before it is measured."""
    raw = os.environ.get(ENV_COVERAGE)
    inherited = _current()
    if inherited is not None:
        # Started in the template (COVERAGE_PROCESS_START, [run] patch = fork): its
        # data and file name belong to the template, so this rank must not save it.
        inherited._auto_save = False
        with contextlib.suppress(Exception):
            inherited.stop()
    if not raw:
        return
    import coverage

    settings = json.loads(raw)
    suffix = f"{COVERAGE_SUFFIX}.{settings['host']}.{settings['controller']}.{os.getpid()}.{secrets.token_hex(3)}"
    cov = coverage.Coverage(config_file=_CONFIG_DATA_PREFIX + settings["config"], data_suffix=suffix)
    # As coverage.py's own start in a subprocess: the controller warns once, not every rank.
    cov._warn_no_data = cov._warn_unimported_source = cov._warn_preimported_source = False
    cov.start()
    if "_exit" not in (getattr(cov.config, "patch", None) or ()):
        _save_before_exit(cov)


# The rank's own measurement, until it is saved.
_rank_cov: Any = None


def _save_before_exit(cov: Any) -> None:
    # A rank always ends with os._exit (continuous_test.rank.main), also when a test calls it,
    # and os._exit skips atexit; coverage's own "[run] patch = _exit" does the same.
    global _rank_cov
    _rank_cov = cov
    real_exit = os._exit

    def exit_saving_coverage(status: int) -> None:
        save_in_rank()
        real_exit(status)

    os._exit = exit_saving_coverage  # type: ignore[assignment]


def save_in_rank() -> None:
    """Stop and save this rank's measurement now, once: a rank may be killed as soon as it reported its exit."""
    global _rank_cov
    cov, _rank_cov = _rank_cov, None
    if cov is not None:
        with contextlib.suppress(Exception):
            cov.stop()
            cov.save()
