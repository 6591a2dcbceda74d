"""Settings, resolved once with a documented precedence.

Per-test time limit, highest precedence first:

1. the command line (``--ct-timeout`` of the pytest plugin, via :func:`set_cli_timeout`);
2. the ``CONTINUOUS_TEST_TIMEOUT`` environment variable;
3. a ``ct_timeout(seconds)`` pytest marker, then the ``@continuous_test.timeout(seconds)``
   decorator on the test;
4. the ``test_timeout`` class attribute;
5. :data:`DEFAULT_TEST_TIMEOUT`.

The result is then multiplied by ``CONTINUOUS_TEST_TIMEOUT_SCALE`` (default 1),
for slow machines.  The grace period after a first failure comes from
``CONTINUOUS_TEST_GRACE``, else the ``grace_period`` class attribute, else
:data:`DEFAULT_GRACE`.  Every bad value raises :class:`ConfigError` naming where
it came from.
"""
from __future__ import annotations

import math
import os
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, TypeVar

__all__ = [
    "ConfigError",
    "DEFAULT_TEST_TIMEOUT",
    "DEFAULT_GRACE",
    "DEFAULT_START_TIMEOUT",
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "ENV_SHUTDOWN_TIMEOUT",
    "ENV_TIMEOUT",
    "ENV_TIMEOUT_SCALE",
    "ENV_GRACE",
    "ENV_START_TIMEOUT",
    "ENV_START_METHOD",
    "INVALID_VALUE",
    "parse_seconds",
    "timeout",
    "test_time_limit",
    "grace_period",
    "start_timeout",
    "shutdown_timeout",
    "set_cli_timeout",
    "set_cli_world_size",
    "mark_world_size",
    "mark_timeout",
    "world_size_override",
]

DEFAULT_TEST_TIMEOUT = 300.0
DEFAULT_GRACE = 3.0
DEFAULT_START_TIMEOUT = 120.0
DEFAULT_SHUTDOWN_TIMEOUT = 10.0

ENV_TIMEOUT = "CONTINUOUS_TEST_TIMEOUT"
ENV_TIMEOUT_SCALE = "CONTINUOUS_TEST_TIMEOUT_SCALE"
ENV_GRACE = "CONTINUOUS_TEST_GRACE"
ENV_START_TIMEOUT = "CONTINUOUS_TEST_START_TIMEOUT"
ENV_START_METHOD = "CONTINUOUS_TEST_START_METHOD"
ENV_SHUTDOWN_TIMEOUT = "CONTINUOUS_TEST_SHUTDOWN_TIMEOUT"

INVALID_VALUE = "Invalid {what} {value!r} from {source}: expected a positive number of seconds"
TIMEOUT_ATTR = "__continuous_test_timeout__"

F = TypeVar("F", bound=Callable[..., Any])
_cli_timeout: Optional[float] = None
_cli_world_size: Optional[int] = None
# Set from pytest markers: per class world sizes and per test time limits.
_marked_world_sizes: Dict[type, int] = {}
_marked_timeouts: Dict[Tuple[type, str], float] = {}


class ConfigError(ValueError):
    """A setting has a value that cannot be used; the message says where it came from."""


def parse_seconds(value: Any, what: str, source: str) -> float:
    """Validate a positive, finite number of seconds; every setting goes through here."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not (math.isfinite(seconds) and seconds > 0):
        raise ConfigError(INVALID_VALUE.format(what=what, value=value, source=source))
    return seconds


def timeout(seconds: float) -> Callable[[F], F]:
    """Decorator: give one test its own time limit in seconds."""
    limit = parse_seconds(seconds, "timeout", "@continuous_test.timeout(...)")

    def decorate(fn: F) -> F:
        setattr(fn, TIMEOUT_ATTR, limit)
        return fn

    return decorate


def set_cli_timeout(seconds: Optional[float]) -> None:
    """Install the command-line time limit; the pytest plugin calls this at configure time."""
    global _cli_timeout
    _cli_timeout = None if seconds is None else parse_seconds(seconds, "timeout", "the --ct-timeout option")


def set_cli_world_size(world_size: Optional[int]) -> None:
    """Install the command-line world size; the pytest plugin calls this at configure time."""
    global _cli_world_size
    if world_size is not None and (isinstance(world_size, bool) or not isinstance(world_size, int) or world_size <= 0):
        raise ConfigError(f"Invalid world size {world_size!r} from the --ct-world-size option: expected a positive int")
    _cli_world_size = world_size


def mark_world_size(cls: type, world_size: int, source: str) -> None:
    """Record a ``world_size`` marker for ``cls``; the pytest plugin calls this at collection."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size <= 0:
        raise ConfigError(f"Invalid world size {world_size!r} from {source}: expected a positive int")
    _marked_world_sizes[cls] = world_size


def mark_timeout(cls: type, name: str, seconds: Any, source: str) -> None:
    """Record a per-test time limit marker; the pytest plugin calls this at collection."""
    _marked_timeouts[(cls, name)] = parse_seconds(seconds, "timeout", source)


def world_size_override(cls: type) -> Optional[int]:
    """The world size the command line or a marker imposes on ``cls``, if any."""
    if _cli_world_size is not None:
        return _cli_world_size
    for klass in getattr(cls, "__mro__", (cls,)):
        if klass in _marked_world_sizes:
            return _marked_world_sizes[klass]
    return None


def _env_seconds(name: str, env: Mapping[str, str], what: str) -> Optional[float]:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    return parse_seconds(raw, what, f"{name} environment variable")


def test_time_limit(cls: type, method: Optional[Callable], env: Mapping[str, str] = os.environ) -> float:
    """Resolve the time limit of one test; the controller calls this before dispatching it."""
    limit = _cli_timeout
    if limit is None:
        limit = _env_seconds(ENV_TIMEOUT, env, "timeout")
    if limit is None and method is not None:
        limit = _marked_timeouts.get((cls, getattr(method, "__name__", "")))
    if limit is None and method is not None:
        limit = getattr(method, TIMEOUT_ATTR, None)
    if limit is None and getattr(cls, "test_timeout", None) is not None:
        limit = parse_seconds(cls.test_timeout, "timeout", f"{cls.__qualname__}.test_timeout")
    if limit is None:
        limit = DEFAULT_TEST_TIMEOUT
    scale = _env_seconds(ENV_TIMEOUT_SCALE, env, "timeout scale")
    return limit * (scale if scale is not None else 1.0)


test_time_limit.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def _class_seconds(cls: type, attr: str, what: str, env_name: str, default: float,
                   env: Mapping[str, str]) -> float:
    value = _env_seconds(env_name, env, what)
    if value is None and getattr(cls, attr, None) is not None:
        value = parse_seconds(getattr(cls, attr), what, f"{cls.__qualname__}.{attr}")
    return default if value is None else value


def grace_period(cls: type, env: Mapping[str, str] = os.environ) -> float:
    """Seconds to wait for peers after a first rank failure; resolved once per world."""
    return _class_seconds(cls, "grace_period", "grace period", ENV_GRACE, DEFAULT_GRACE, env)


def start_timeout(cls: type, env: Mapping[str, str] = os.environ) -> float:
    """Bound on starting a world and joining its process group."""
    return _class_seconds(cls, "start_timeout", "start timeout", ENV_START_TIMEOUT, DEFAULT_START_TIMEOUT, env)


def shutdown_timeout(cls: type, env: Mapping[str, str] = os.environ) -> float:
    """Bound on a graceful world shutdown; ranks still alive after it are killed."""
    return _class_seconds(cls, "shutdown_timeout", "shutdown timeout", ENV_SHUTDOWN_TIMEOUT,
                          DEFAULT_SHUTDOWN_TIMEOUT, env)
