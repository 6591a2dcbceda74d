"""Every ``CONTINUOUS_TEST_*`` environment variable, and the one parser of on/off switches.

The environment crosses every process boundary of a run (the controller exports it
to the template and the ranks, a launcher to each rank, pytest to its xdist
workers), so the names live here, beside the messages.  What a value means, and
its precedence against options, markers and class attributes, is
:mod:`continuous_test.config`'s business.

On/off switches (:func:`parse_switch`) take ``1``/``on``/``true``/``yes`` or
``0``/``off``/``false``/``no``, in any case and with surrounding blanks; unset or
empty means the switch's default.  Any other value is a
:class:`~continuous_test.errors.ConfigError` that names the variable and the
words it takes: a switch never guesses what a typo meant.

Stdlib only.
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

from continuous_test.errors import ConfigError

__all__ = [
    "ENV_TIMEOUT",
    "ENV_TIMEOUT_SCALE",
    "ENV_GRACE",
    "ENV_START_TIMEOUT",
    "ENV_START_METHOD",
    "ENV_SHUTDOWN_TIMEOUT",
    "ENV_TORCH_TESTCASE",
    "ENV_LEAKS",
    "ENV_SHUFFLE",
    "ENV_BISECT",
    "ENV_AHEAD",
    "ENV_HEARTBEAT",
    "ENV_REPORT",
    "ENV_REPORT_HTML",
    "ENV_SIMULATE_DEVICES",
    "ENV_DEVICE_WAIT",
    "ENV_DEVICE_DIR",
    "ENV_SHARD",
    "ENV_DURATIONS",
    "ENV_REPEAT",
    "ENV_WORLD_SCOPE",
    "ENV_REPEAT_FRESH",
    "ENV_LIVE_OUTPUT",
    "ENV_RECORD",
    "ENV_KEEP_OUTPUT",
    "ENV_COVERAGE",
    "COVERAGE_SUFFIX",
    "ENV_RANK_MARKER",
    "ENV_PRIVATE_DIR",
    "ENV_TEMPLATE_PID",
    "ENV_PRELOAD_MAIN",
    "ENV_TB_LOCALS",
    "SWITCHES",
    "ON_WORDS",
    "OFF_WORDS",
    "BAD_SWITCH",
    "parse_switch",
    "switch_if_set",
]

# Settings a user sets (README "Settings", docs/isolation.rst, docs/reports.rst).
ENV_TIMEOUT = "CONTINUOUS_TEST_TIMEOUT"
ENV_TIMEOUT_SCALE = "CONTINUOUS_TEST_TIMEOUT_SCALE"
ENV_GRACE = "CONTINUOUS_TEST_GRACE"
ENV_START_TIMEOUT = "CONTINUOUS_TEST_START_TIMEOUT"
ENV_START_METHOD = "CONTINUOUS_TEST_START_METHOD"
ENV_SHUTDOWN_TIMEOUT = "CONTINUOUS_TEST_SHUTDOWN_TIMEOUT"
ENV_LEAKS = "CONTINUOUS_TEST_LEAKS"
ENV_SHUFFLE = "CONTINUOUS_TEST_SHUFFLE"
ENV_BISECT = "CONTINUOUS_TEST_BISECT"
ENV_HEARTBEAT = "CONTINUOUS_TEST_HEARTBEAT"
# Files run_tests() writes at the end: the run's JSON report and its picture (docs/run-report.rst).
ENV_REPORT = "CONTINUOUS_TEST_REPORT"
ENV_REPORT_HTML = "CONTINUOUS_TEST_REPORT_HTML"
# Device leases (docs/devices.rst): a simulated device count, the bound on waiting for
# devices, and the directory of the per-host pool's lock files.
ENV_SIMULATE_DEVICES = "CONTINUOUS_TEST_SIMULATE_DEVICES"
ENV_DEVICE_WAIT = "CONTINUOUS_TEST_DEVICE_WAIT"
ENV_DEVICE_DIR = "CONTINUOUS_TEST_DEVICE_DIR"
# Sharding and flake hunting (docs/sharding.rst): I/N, the durations file, repeats per test.
ENV_SHARD = "CONTINUOUS_TEST_SHARD"
ENV_DURATIONS = "CONTINUOUS_TEST_DURATIONS"
ENV_REPEAT = "CONTINUOUS_TEST_REPEAT"
# World scopes (docs/fresh-worlds.rst): class, module or session, for classes that do not set world_scope.
ENV_WORLD_SCOPE = "CONTINUOUS_TEST_WORLD_SCOPE"
# On/off switches, all read by parse_switch.
ENV_AHEAD = "CONTINUOUS_TEST_AHEAD"
ENV_LIVE_OUTPUT = "CONTINUOUS_TEST_LIVE_OUTPUT"
ENV_RECORD = "CONTINUOUS_TEST_RECORD"
ENV_TORCH_TESTCASE = "CONTINUOUS_TEST_TORCH_TESTCASE"
ENV_KEEP_OUTPUT = "CONTINUOUS_TEST_KEEP_OUTPUT"
ENV_REPEAT_FRESH = "CONTINUOUS_TEST_REPEAT_FRESH"
# name -> what unset means (None: the harness decides, see continuous_test.case).
SWITCHES = {ENV_AHEAD: True, ENV_LIVE_OUTPUT: False, ENV_RECORD: True, ENV_TORCH_TESTCASE: None,
            ENV_KEEP_OUTPUT: False, ENV_REPEAT_FRESH: False}

# Set by the harness for its own processes; never by a user.
# The controller's measurement, handed to its ranks (continuous_test.rank.coverage), and the
# first part of each rank's data file suffix, <data_file>.continuous_test.<host>.<controller pid>...,
# by which the controller finds them again (continuous_test.controller.coverage).
ENV_COVERAGE = "CONTINUOUS_TEST_COVERAGE"
COVERAGE_SUFFIX = "continuous_test"
# Set in every rank a controller started, so that nothing there takes the RANK and
# WORLD_SIZE variables it also sets for a launcher's (continuous_test._launch).
ENV_RANK_MARKER = "CONTINUOUS_TEST_CONTROLLED_RANK"
# The controller's private directory, which the template removes if the controller dies.
ENV_PRIVATE_DIR = "CONTINUOUS_TEST_PRIVATE_DIR"
# The pid of the template process, set in the template itself: only there does a fork
# freeze the objects that exist (continuous_test.rank.run).
ENV_TEMPLATE_PID = "CONTINUOUS_TEST_TEMPLATE_PID"
# The test file a fresh-interpreter template imports (a file run as a script).
ENV_PRELOAD_MAIN = "CONTINUOUS_TEST_PRELOAD_MAIN"
# Set by a controller whose runner shows local variables in tracebacks (unittest's
# --locals, pytest's -l): ranks format their tracebacks with them too.
ENV_TB_LOCALS = "CONTINUOUS_TEST_TB_LOCALS"

ON_WORDS = ("1", "on", "true", "yes")
OFF_WORDS = ("0", "off", "false", "no")
BAD_SWITCH = "Invalid value {value!r} from {name} environment variable: expected one of {words}"


def parse_switch(name: str, env: Mapping[str, str] = os.environ) -> bool:
    """The on/off switch ``name`` (one of :data:`SWITCHES`), its default when unset; ConfigError for an unknown word."""
    value = switch_if_set(name, env)
    default = SWITCHES[name]
    assert default is not None, f"{name} has no default: read it with switch_if_set()"
    return default if value is None else value


def switch_if_set(name: str, env: Mapping[str, str] = os.environ) -> Optional[bool]:
    """The on/off switch ``name``, or None when it is unset or empty; ConfigError for an unknown word."""
    raw = env.get(name, "").strip().lower()
    if not raw:
        return None
    if raw in ON_WORDS:
        return True
    if raw in OFF_WORDS:
        return False
    raise ConfigError(BAD_SWITCH.format(value=env.get(name), name=name, words=", ".join(ON_WORDS + OFF_WORDS)))
