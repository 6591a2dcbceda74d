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

Leak policy of a test (:mod:`continuous_test.leaks`), highest precedence first: the
``--ct-leaks`` option (exported to the ranks as ``CONTINUOUS_TEST_LEAKS``), the
``CONTINUOUS_TEST_LEAKS`` environment variable, a ``ct_leaks(policy)`` pytest marker
on the test, then on its class, the ``leak_policy`` class attribute, ``restore``.

Order shuffling: ``--ct-shuffle[=SEED]``, else ``CONTINUOUS_TEST_SHUFFLE=SEED``.
Rerun and bisect of a failed test (:mod:`continuous_test.isolate`): at most
``CONTINUOUS_TEST_BISECT`` seconds per run in all (``--ct-bisect``; ``off`` or 0
turns it off; default :data:`DEFAULT_BISECT_BUDGET`).
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
    "ENV_LEAKS",
    "ENV_SHUFFLE",
    "ENV_BISECT",
    "DEFAULT_LEAK_POLICY",
    "DEFAULT_BISECT_BUDGET",
    "INVALID_POLICY",
    "leak_policy",
    "parse_leak_policy",
    "set_cli_leaks",
    "parse_seed",
    "shuffle_seed",
    "bisect_budget",
    "parse_budget",
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
ENV_LEAKS = "CONTINUOUS_TEST_LEAKS"
ENV_SHUFFLE = "CONTINUOUS_TEST_SHUFFLE"
ENV_BISECT = "CONTINUOUS_TEST_BISECT"

DEFAULT_LEAK_POLICY = "restore"
DEFAULT_BISECT_BUDGET = 120.0
LEAK_POLICIES = ("restore", "fail", "off")
LEAK_MARKER = "ct_leaks"
INVALID_POLICY = "Invalid leak policy {value!r} from {source}: expected one of restore, fail, off"
INVALID_SEED = "Invalid shuffle seed {value!r} from {source}: expected a non-negative integer"
INVALID_BUDGET = "Invalid bisect budget {value!r} from {source}: expected seconds (0 or 'off' turns it off)"

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


# -- leaks, shuffling, bisect ---------------------------------------------------------


def parse_leak_policy(value: Any, source: str) -> str:
    """Validate a leak policy (restore, fail, off); raises ConfigError naming ``source``."""
    policy = str(value).strip().lower() if isinstance(value, str) else None
    if policy not in LEAK_POLICIES:
        raise ConfigError(INVALID_POLICY.format(value=value, source=source))
    return policy


def set_cli_leaks(value: Optional[str], env: Any = os.environ) -> None:
    """Install ``--ct-leaks``: exported in the environment, which ranks inherit; the plugin calls this."""
    if value is not None:
        env[ENV_LEAKS] = parse_leak_policy(value, "the --ct-leaks option")


def _marked_policy(obj: Any, where: str) -> Optional[str]:
    # pytest stores markers on the function or class itself (``pytestmark``), so
    # ranks, which never run pytest, read them from there.
    marks = getattr(obj, "pytestmark", ())
    for mark in marks if isinstance(marks, list) else [marks]:
        if getattr(mark, "name", None) == LEAK_MARKER:
            value = mark.args[0] if mark.args else next(iter(mark.kwargs.values()), None)
            return parse_leak_policy(value, f"the {LEAK_MARKER} marker of {where}")
    return None


def leak_policy(cls: type, method: Optional[Callable], env: Mapping[str, str] = os.environ) -> str:
    """The leak policy of one test; the controller checks it, each rank applies it."""
    raw = env.get(ENV_LEAKS)
    if raw is not None and raw.strip():
        return parse_leak_policy(raw, f"{ENV_LEAKS} environment variable")
    name = getattr(method, "__name__", "?")
    policy = _marked_policy(method, f"{cls.__qualname__}.{name}") if method is not None else None
    if policy is None:
        policy = _marked_policy(cls, cls.__qualname__)
    if policy is None and getattr(cls, "leak_policy", None) is not None:
        policy = parse_leak_policy(cls.leak_policy, f"{cls.__qualname__}.leak_policy")
    return policy or DEFAULT_LEAK_POLICY


def parse_seed(value: Any, source: str) -> int:
    """Validate a shuffle seed (a non-negative int)."""
    try:
        seed = int(str(value).strip())
    except ValueError:
        seed = -1
    if isinstance(value, bool) or seed < 0:
        raise ConfigError(INVALID_SEED.format(value=value, source=source))
    return seed


def shuffle_seed(env: Mapping[str, str] = os.environ) -> Optional[int]:
    """The shuffle seed of this run from ``CONTINUOUS_TEST_SHUFFLE``, or None (no shuffling)."""
    raw = env.get(ENV_SHUFFLE)
    if raw is None or not raw.strip():
        return None
    return parse_seed(raw, f"{ENV_SHUFFLE} environment variable")


def parse_budget(value: Any, source: str) -> float:
    """Validate a rerun/bisect budget in seconds; ``off`` and 0 mean 0."""
    text = str(value).strip().lower()
    if text in ("off", "0", "0.0"):
        return 0.0
    try:
        return parse_seconds(value, "bisect budget", source)
    except ConfigError:
        raise ConfigError(INVALID_BUDGET.format(value=value, source=source)) from None


def bisect_budget(env: Mapping[str, str] = os.environ) -> float:
    """Seconds this run may spend rerunning and bisecting failed tests (0: off)."""
    raw = env.get(ENV_BISECT)
    if raw is None or not raw.strip():
        return DEFAULT_BISECT_BUDGET
    return parse_budget(raw, f"{ENV_BISECT} environment variable")
