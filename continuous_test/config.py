"""Settings, resolved once per test class into a frozen :class:`ClassSettings`.

Every setting goes through this module, with one precedence, highest first:

1. the runner: the pytest plugin's options (``--ct-timeout``, ``--ct-world-size``),
   then its markers on one class or test (``world_size``, ``ct_timeout``);
2. the environment (``CONTINUOUS_TEST_*``);
3. the test class (``world_size``, ``test_timeout``, ``grace_period``, ...) or the
   ``@continuous_test.time_limit(seconds)`` decorator on one test;
4. the defaults below.

(For the per-test time limit the environment beats the markers, so that one
variable can raise every limit on a slow machine; ``CONTINUOUS_TEST_TIMEOUT_SCALE``
then multiplies it.)  The runner's settings are not module globals: the pytest
plugin passes them for each test through :func:`overridden`, so nothing leaks from
one pytest session to the next in the same process.

:func:`resolve` reads a class once, through torch's documented override points
(``world_size``, ``device_type()``, ``backend_str()``) and plain attributes, checks
the result, and returns a :class:`ClassSettings` that the controller keeps and the
ranks receive inside their :class:`~continuous_test.wire.messages.RankSpec`.  Every bad
value raises :class:`ConfigError` naming where it came from; a backend or device this
machine lacks raises :class:`unittest.SkipTest`.

Leak policy of a test (:mod:`continuous_test.rank.leaks`), highest precedence first: the
``--ct-leaks`` option (exported to the ranks as ``CONTINUOUS_TEST_LEAKS``), the
``CONTINUOUS_TEST_LEAKS`` environment variable, a ``ct_leaks(policy)`` pytest marker
on the test, then on its class, the ``leak_policy`` class attribute, ``restore``.

Order shuffling: ``--ct-shuffle[=SEED]``, else ``CONTINUOUS_TEST_SHUFFLE=SEED``.
Repeats (:mod:`continuous_test.session.repeat`): ``--ct-repeat=N``, else
``CONTINUOUS_TEST_REPEAT=N`` (default 1); ``--ct-repeat-fresh``, else
``CONTINUOUS_TEST_REPEAT_FRESH``.  Shards: :mod:`continuous_test.session.shard`.
Rerun and bisect of a failed test (:mod:`continuous_test.controller.bisect`): at most
``CONTINUOUS_TEST_BISECT`` seconds per run in all (``--ct-bisect``; ``off`` or 0
turns it off; default :data:`DEFAULT_BISECT_BUDGET`).
"""
from __future__ import annotations

import contextlib
import contextvars
import inspect
import math
import multiprocessing
import os
import sys
import unittest
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Iterator, Mapping, NoReturn, Optional, TypeVar

from continuous_test import sizes
from continuous_test.errors import ConfigError
from continuous_test.wire import env as _env  # the variables' names: imported from there, not from here
from continuous_test.wire.env import SWITCHES, switch_if_set
from continuous_test.wire.messages import ClassSettings

__all__ = [
    "Overrides",
    "resolve",
    "overridden",
    "current_overrides",
    "parse_positive_int",
    "parse_non_negative_int",
    "class_world_size",
    "parse_choice",
    "start_method",
    "START_METHODS",
    "torch_testcase_wanted",
    "check_switches",
    "resolve_device_type",
    "device_count",
    "accelerator",
    "default_backend",
    "DeviceSkip",
    "ACCELERATOR_BACKENDS",
    "resolve_fresh",
    "with_world_size",
    "backend_names",
    "time_limit",
    "DEFAULT_TEST_TIMEOUT",
    "DEFAULT_GRACE",
    "DEFAULT_START_TIMEOUT",
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "INVALID_VALUE",
    "parse_seconds",
    "timeout",
    "test_time_limit",
    "grace_period",
    "start_timeout",
    "shutdown_timeout",
    "BAD_WORLD_SIZE",
    "NOT_IMPORTABLE",
    "UNKNOWN_BACKEND",
    "NO_DEVICES",
    "BACKEND_UNAVAILABLE",
    "BAD_START_METHOD",
    "world_scope",
    "WORLD_SCOPES",
    "DEFAULT_LEAK_POLICY",
    "DEFAULT_BISECT_BUDGET",
    "INVALID_POLICY",
    "leak_policy",
    "parse_leak_policy",
    "set_cli_leaks",
    "parse_seed",
    "shuffle_seed",
    "shuffle_failure_line",
    "SHUFFLE_FAILURE_LINE",
    "bisect_budget",
    "parse_budget",
    "repeat_count",
    "repeat_fresh",
]

DEFAULT_TEST_TIMEOUT = 300.0
DEFAULT_GRACE = 3.0
DEFAULT_START_TIMEOUT = 120.0
DEFAULT_SHUTDOWN_TIMEOUT = 10.0
DEFAULT_LEAK_POLICY = "restore"
DEFAULT_BISECT_BUDGET = 120.0
LEAK_POLICIES = ("restore", "fail", "off")
LEAK_MARKER = "ct_leaks"
INVALID_POLICY = "Invalid leak policy {value!r} from {source}: expected one of restore, fail, off"
INVALID_SEED = "Invalid shuffle seed {value!r} from {source}: expected a non-negative integer"
# The line every failure report gets when the order was shuffled (added once per report).
SHUFFLE_FAILURE_LINE = "test order shuffled with seed {seed}: CONTINUOUS_TEST_SHUFFLE={seed} replays it"
INVALID_BUDGET = "Invalid bisect budget {value!r} from {source}: expected seconds (0 or 'off' turns it off)"

DEFAULT_CPU_WORLD_SIZE = 2
INVALID_VALUE = "Invalid {what} {value!r} from {source}: expected a positive number of seconds"
INVALID_INT = "Invalid {what} {value!r} from {source}: expected a positive int"
TOO_LARGE = "Invalid {what} {value!r} from {source}: expected a positive int of at most {most}"
# The longest run of digits read as a number: anything longer is no count a setting means.
MAX_DIGITS = 18
INVALID_COUNT = "Invalid {what} {value!r} from {source}: expected an int >= 0"
INVALID_CHOICE = "Invalid {what} {value!r} from {source}: expected one of {choices}"
SEVERAL_SIZES = (
    "{cls} has several world sizes ({value}): each of its tests runs once per size, under the name "
    "test_x[wsN]; run the tests by those names"
)
BAD_WORLD_SIZE = (
    "{cls}.world_size must be a positive int, got {value!r}; set it as a class "
    "attribute (world_size = 2, or world_size = [1, 2] for each test at each size) or a property that returns one"
)
NOT_IMPORTABLE = (
    "{cls} cannot be imported by its rank processes ({why}); define the test class at "
    "the top level of a module"
)
UNKNOWN_BACKEND = "{cls}.backend_str() returned unknown backend {name!r}; known backends: {known}"
NO_DEVICES = "{cls} needs {needed} {device} device(s), found {found}"
BACKEND_NEEDS_DEVICES = "{cls} needs {needed} {device} device(s) for backend {name!r}, found {found}"
BACKEND_UNAVAILABLE = (
    "{cls}: backend {name!r} is not available on this machine (this build of torch, or no device for it); "
    "the class is skipped"
)
BAD_START_METHOD = (
    "Invalid start method {value!r} from " + _env.ENV_START_METHOD + " environment variable: "
    "expected one of {choices}"
)
TIMEOUT_ATTR = "__continuous_test_timeout__"

F = TypeVar("F", bound=Callable[..., Any])


def digits(text: str) -> Optional[int]:
    """The one reading of an integer setting's text: ASCII digits only (no sign, ``_``, ``²`` or other
    Unicode digits), at most :data:`MAX_DIGITS` of them, around optional whitespace; None for anything else."""
    text = text.strip()
    if not text or len(text) > MAX_DIGITS or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def parse_positive_int(value: Any, what: str, source: str, most: Optional[int] = None) -> int:
    """Validate a positive int (not a bool), at most ``most`` if given; strings (:func:`digits`) are
    accepted only from text sources."""
    number: Any = digits(value) if isinstance(value, str) else value
    if isinstance(number, bool) or not isinstance(number, int) or number <= 0:
        raise ConfigError(INVALID_INT.format(what=what, value=value, source=source))
    if most is not None and number > most:
        raise ConfigError(TOO_LARGE.format(what=what, value=value, source=source, most=most))
    return number


def parse_non_negative_int(value: Any, what: str, source: str) -> int:
    """Validate an int >= 0 (a device count); strings are accepted only from text sources."""
    if isinstance(value, str) and digits(value) == 0 or value == 0 and not isinstance(value, bool):
        return 0
    try:
        return parse_positive_int(value, what, source)
    except ConfigError:
        raise ConfigError(INVALID_COUNT.format(what=what, value=value, source=source)) from None


def parse_choice(value: str, what: str, source: str, choices: tuple) -> str:
    """Validate one of a fixed set of words."""
    if value not in choices:
        raise ConfigError(INVALID_CHOICE.format(what=what, value=value, source=source, choices=", ".join(choices)))
    return value


def parse_seconds(value: Any, what: str, source: str) -> float:
    """Validate a positive, finite number of seconds; every setting goes through here."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not (math.isfinite(seconds) and seconds > 0):
        raise ConfigError(INVALID_VALUE.format(what=what, value=value, source=source))
    return seconds


def time_limit(seconds: float) -> Callable[[F], F]:
    """Decorator: give one test its own time limit in seconds."""
    limit = parse_seconds(seconds, "time limit", "@continuous_test.time_limit(...)")

    def decorate(fn: F) -> F:
        setattr(fn, TIMEOUT_ATTR, limit)
        return fn

    return decorate


def timeout(seconds: float) -> Callable[[F], F]:
    """The former name of :func:`time_limit` (not the class's process-group ``timeout``)."""
    limit = parse_seconds(seconds, "timeout", "@continuous_test.timeout(...)")
    return time_limit(limit)


@dataclass(frozen=True)
class Overrides:
    """What the runner imposes on the tests it runs now: the pytest plugin's options and markers."""

    # --ct-timeout / --ct-world-size (or their ini keys).
    time_limit: Optional[float] = None
    world_size: Optional[int] = None
    # The current test's ct_timeout and world_size markers.
    marked_time_limit: Optional[float] = None
    marked_world_size: Optional[int] = None


_OVERRIDES: contextvars.ContextVar[Overrides] = contextvars.ContextVar("continuous_test_overrides",
                                                                        default=Overrides())  # noqa: B039 - frozen


@contextlib.contextmanager
def overridden(overrides: Overrides) -> Iterator[None]:
    """Make ``overrides`` the runner's settings within the block (one test's run); the previous ones after it."""
    token = _OVERRIDES.set(overrides)
    try:
        yield
    finally:
        _OVERRIDES.reset(token)


def current_overrides() -> Overrides:
    """The runner's settings for the test running now (none outside pytest)."""
    return _OVERRIDES.get()


def _env_seconds(name: str, env: Mapping[str, str], what: str) -> Optional[float]:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    return parse_seconds(raw, what, f"{name} environment variable")


def test_time_limit(cls: type, method: Optional[Callable], env: Mapping[str, str] = os.environ) -> float:
    """The time limit of one test in seconds, by the precedence above, times ``CONTINUOUS_TEST_TIMEOUT_SCALE``."""
    overrides = current_overrides()
    limit = overrides.time_limit
    if limit is None:
        limit = _env_seconds(_env.ENV_TIMEOUT, env, "timeout")
    if limit is None:
        limit = overrides.marked_time_limit
    if limit is None and method is not None:
        limit = getattr(method, TIMEOUT_ATTR, None)
    class_limit = getattr(cls, "test_timeout", None)
    if limit is None and class_limit is not None:
        limit = parse_seconds(class_limit, "timeout", f"{cls.__qualname__}.test_timeout")
    if limit is None:
        limit = DEFAULT_TEST_TIMEOUT
    scale = _env_seconds(_env.ENV_TIMEOUT_SCALE, env, "timeout scale")
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
    return _class_seconds(cls, "grace_period", "grace period", _env.ENV_GRACE, DEFAULT_GRACE, env)


def start_timeout(cls: type, env: Mapping[str, str] = os.environ) -> float:
    """Bound on starting a world and joining its process group."""
    return _class_seconds(cls, "start_timeout", "start timeout", _env.ENV_START_TIMEOUT, DEFAULT_START_TIMEOUT, env)


def shutdown_timeout(cls: type, env: Mapping[str, str] = os.environ) -> float:
    """Bound on a graceful world shutdown; ranks still alive after it are killed."""
    return _class_seconds(cls, "shutdown_timeout", "shutdown timeout", _env.ENV_SHUTDOWN_TIMEOUT,
                          DEFAULT_SHUTDOWN_TIMEOUT, env)


START_METHODS = ("fork", "forkserver", "spawn")


def start_method(env: Mapping[str, str] = os.environ) -> str:
    """How ranks start: the environment's choice, else fork (Linux), else forkserver, else spawn.

    ``fork`` forks the template from the controller itself and serves
    multiprocessing's forkserver protocol from it, so it needs forkserver too
    (see :mod:`continuous_test.template.server`).
    """
    available = multiprocessing.get_all_start_methods()
    choices = [m for m in START_METHODS if m in available and (m != "fork" or "forkserver" in available)]
    wanted = env.get(_env.ENV_START_METHOD, "").strip()
    if wanted:
        if wanted not in choices:
            raise ConfigError(BAD_START_METHOD.format(value=wanted, choices=", ".join(choices)))
        return wanted
    if "fork" in choices and sys.platform.startswith("linux"):
        return "fork"
    return "forkserver" if "forkserver" in choices else "spawn"


def torch_testcase_wanted(env: Mapping[str, str] = os.environ) -> Optional[bool]:
    """``CONTINUOUS_TEST_TORCH_TESTCASE``: True, False, or None when unset (then the import order decides)."""
    return switch_if_set(_env.ENV_TORCH_TESTCASE, env)


def check_switches(env: Mapping[str, str] = os.environ) -> Dict[str, Optional[bool]]:
    """Every on/off switch of the run (:data:`~continuous_test.wire.env.SWITCHES`), defaults filled in.

    Raises ConfigError naming a bad one.  Checked before anything is sent to a
    rank, so that a rank, which reads some of them too, never meets a value it
    cannot use.
    """
    values = {name: switch_if_set(name, env) for name in SWITCHES}
    return {name: SWITCHES[name] if value is None else value for name, value in values.items()}


# -- one class's settings ---------------------------------------------------------


def resolve(cls: type, world_size: Optional[int] = None, check_importable: bool = True,
            env: Mapping[str, str] = os.environ) -> ClassSettings:
    """Read and check ``cls``'s settings: ConfigError for a bad value, SkipTest for a backend or device missing here.

    ``world_size`` is the size a launcher already started (torchrun, srun), which the
    class is then checked against by the caller, or a sized test's own size
    (``test_x[ws2]``, :mod:`continuous_test.sizes`), which no other setting overrides.
    """
    if check_importable:
        _check_importable(cls)
    device = resolve_device_type(cls)
    size = _world_size(cls, device) if world_size is None else world_size
    backend = _backend(cls, device, size)
    return ClassSettings(
        qualname=cls.__qualname__, world_size=size, device_type=device, backend=backend,
        grace=grace_period(cls, env), start_timeout=start_timeout(cls, env),
        shutdown_timeout=shutdown_timeout(cls, env),
    )


def resolve_fresh(cls: type, world_size: Any, env: Mapping[str, str] = os.environ, sized: bool = False) -> ClassSettings:
    """Settings of one MultiProcessTestCase test, whose world size the instance gives (``sized``: its own, from
    a list of sizes, which no other setting overrides)."""
    overrides = current_overrides()
    value = overrides.world_size if overrides.world_size is not None else overrides.marked_world_size
    value = world_size if value is None or sized else value
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)  # torch's TestDistBackend returns os.environ["WORLD_SIZE"]; torch's class takes int() of it
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(BAD_WORLD_SIZE.format(cls=cls.__qualname__, value=value))
    return ClassSettings(
        qualname=cls.__qualname__, world_size=value, device_type=resolve_device_type(cls), backend=None,
        grace=grace_period(cls, env), start_timeout=start_timeout(cls, env),
        shutdown_timeout=shutdown_timeout(cls, env),
    )


def with_world_size(settings: ClassSettings, world_size: int) -> ClassSettings:
    """The same settings for another world size (a launcher's)."""
    return replace(settings, world_size=world_size)


def _check_importable(cls: type) -> None:
    if "<locals>" in cls.__qualname__:
        why = f"it is defined inside a function: {cls.__qualname__}"
        raise ConfigError(NOT_IMPORTABLE.format(cls=cls.__qualname__, why=why))
    module = sys.modules.get(cls.__module__)
    if cls.__module__ == "__main__" and not getattr(module, "__file__", None):
        raise ConfigError(NOT_IMPORTABLE.format(cls=cls.__qualname__, why="its module __main__ has no file"))


def resolve_device_type(cls: type) -> str:
    """``device_type`` as torch's classes spell it: a classmethod, a property, or a string."""
    attr = inspect.getattr_static(cls, "device_type", "cpu")
    if isinstance(attr, (classmethod, staticmethod)):
        return str(getattr(cls, "device_type")())
    if isinstance(attr, property):
        return str(attr.fget(cls))  # type: ignore[misc]
    return str(attr() if callable(attr) else attr)


def class_world_size(cls: type, device: str) -> int:
    """The world size of ``cls`` under the runner's overrides (the pytest plugin asks at collection);
    SkipTest when it defaults to a device count of 0."""
    return _world_size(cls, device)


def _world_size(cls: type, device: str) -> int:
    overrides = current_overrides()
    value = overrides.world_size if overrides.world_size is not None else overrides.marked_world_size
    if value is None:
        attr = inspect.getattr_static(cls, "world_size", None)
        # A property is read on a bare instance: torch's classes define world_size
        # as a property whose value does not depend on the test.
        value = attr.fget(object.__new__(cls)) if isinstance(attr, property) and attr.fget else getattr(cls, "world_size", None)
    if sizes.is_list(value):
        sizes.check(value, f"{cls.__qualname__}.world_size")  # a bad list: which, and why
    if isinstance(value, sizes.WorldSizes) or sizes.is_list(value):
        raise ConfigError(SEVERAL_SIZES.format(cls=cls.__qualname__, value=getattr(value, "sizes", value)))
    if value is None or value == -2:  # -2 is torch's "unset"
        return _default_world_size(cls, device)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(BAD_WORLD_SIZE.format(cls=cls.__qualname__, value=value))
    return value


# Backends that only run on accelerator devices, and the device type each runs on: a class
# naming one needs devices whatever its device_type says (controller/devices.py leases them).
BACKEND_DEVICE = {"nccl": "cuda", "xccl": "xpu", "hccl": "hpu", "cncl": "mlu", "ucc": "cuda"}
ACCELERATOR_BACKENDS = frozenset(BACKEND_DEVICE)


def device_count(device: str) -> int:
    """How many devices of type ``device`` torch sees in this process (0 for a type this build lacks).

    For CUDA this is ``torch.cuda.device_count()``, which asks NVML first and so
    creates no CUDA context (it does not poison fork); only where NVML cannot be
    loaded does torch fall back to the CUDA runtime, which without a driver finds 0.
    """
    import torch

    try:
        module = torch.get_device_module(device)
    except (RuntimeError, AttributeError, ValueError):
        return 0
    return int(module.device_count())


def accelerator() -> Optional[str]:
    """The accelerator this process uses, or None for cpu and gloo: the one rule for devices and backends.

    torch's current accelerator (``torch.accelerator.current_accelerator()``) is the
    one the build was compiled for: a CUDA build names ``cuda`` on a host without a
    GPU.  So it counts only when this host has at least one of its devices now
    (:func:`device_count`, which initializes no CUDA in the controller or the
    template).  Every place that picks a device or a backend asks this: the bases'
    ``device_type()``, torch's bases, device leases, the default backend.
    """
    import torch

    if hasattr(torch, "accelerator"):
        current = torch.accelerator.current_accelerator()  # a compile-time answer: no device is touched
        kind = None if current is None else current.type
    else:  # torch before 2.6: CUDA (or ROCm, which torch calls cuda) is the accelerator it knows
        kind = "cuda" if torch.backends.cuda.is_built() else None
    return kind if kind is not None and device_count(kind) > 0 else None


def default_backend() -> Optional[str]:
    """The backend of a class whose ``backend_str()`` is None: torch's pick with an accelerator, else gloo."""
    return None if accelerator() is not None else "gloo"


# Set True on a class that keeps torch's defaults (the torch_compat bases); for other
# classes :func:`keeps_torch_defaults` decides by the file that defines them.
TORCH_DEFAULTS_ATTR = "_ct_torch_defaults"
_TORCH_RUN_TESTS = "torch.testing._internal.common_utils"


def keeps_torch_defaults(cls: type) -> bool:
    """Whether ``cls`` counts and sizes as torch's harness does: a torch_compat base, or a class in a file
    written for torch's harness (one that runs torch's ``run_tests``).

    Such a class with no ``world_size`` runs on the device count of its device type
    (1 on CPU), and a rank's failed assertion is an error
    (:class:`~continuous_test.errors.RankFailedError`), as torch's parent process
    reports every rank failure.  The file decides, not the runner, so ``python
    file.py`` and pytest give the same worlds.
    """
    for klass in cls.__mro__:
        if TORCH_DEFAULTS_ATTR in vars(klass):
            return bool(vars(klass)[TORCH_DEFAULTS_ATTR])
    runner = getattr(sys.modules.get(cls.__module__), "run_tests", None)
    return getattr(runner, "__module__", None) == _TORCH_RUN_TESTS


def _default_world_size(cls: type, device: str) -> int:
    if device == "cpu" and not keeps_torch_defaults(cls):
        return DEFAULT_CPU_WORLD_SIZE
    count = device_count(device)
    if count == 0:
        _skip(NO_DEVICES.format(cls=cls.__qualname__, needed="at least 1", device=device, found=0))
    return count


def _backend(cls: type, device: str, world_size: int) -> Optional[str]:
    import torch.distributed as dist

    if not dist.is_available():
        _skip("torch.distributed is not available in this build of torch")
    backend_str = getattr(cls, "backend_str", None)
    spec = backend_str() if callable(backend_str) else None
    known = [b for b in dist.Backend.backend_list if b != "undefined"]
    for name in backend_names(spec):
        if name not in known:
            raise ConfigError(UNKNOWN_BACKEND.format(cls=cls.__qualname__, name=name, known=", ".join(known)))
        if not dist.is_backend_available(name):
            _skip(BACKEND_UNAVAILABLE.format(cls=cls.__qualname__, name=name))
    if device != "cpu":
        found = device_count(device)
        if found < world_size:
            _skip(NO_DEVICES.format(cls=cls.__qualname__, needed=world_size, device=device, found=found))
    for name in backend_names(spec):
        needs = BACKEND_DEVICE.get(name)
        found = device_count(needs) if needs is not None and needs != device else world_size
        if needs is not None and found < world_size:
            _skip(BACKEND_NEEDS_DEVICES.format(cls=cls.__qualname__, needed=world_size, device=needs, name=name,
                                               found=found))
    return spec


class DeviceSkip(unittest.SkipTest):
    """The skip of a class this host lacks the devices or the backend for (a plain ``SkipTest`` to the runner).

    The controller counts them (``controller/run_log.py``): a run whose every
    distributed test skipped so ends with a line that says why.
    """


def _skip(reason: str) -> NoReturn:
    raise DeviceSkip(reason)


def backend_names(spec: Optional[str]) -> list:
    """``gloo`` -> [gloo]; ``cpu:gloo,cuda:nccl`` -> [gloo, nccl]."""
    if not spec:
        return []
    names = [part.split(":")[-1].strip() for part in str(spec).lower().split(",")]
    return [n for n in names if n]


# -- leaks, shuffling, bisect ---------------------------------------------------------


def parse_leak_policy(value: Any, source: str) -> str:
    """Validate a leak policy (restore, fail, off); raises ConfigError naming ``source``."""
    policy = str(value).strip().lower() if isinstance(value, str) else None
    if policy not in LEAK_POLICIES:
        raise ConfigError(INVALID_POLICY.format(value=value, source=source))
    return policy


def set_cli_leaks(value: Optional[str], env: Any = os.environ) -> None:
    """Export ``--ct-leaks`` (if given; ConfigError if bad) as CONTINUOUS_TEST_LEAKS in ``env``, which ranks inherit."""
    if value is not None:
        env[_env.ENV_LEAKS] = parse_leak_policy(value, "the --ct-leaks option")


def _marked_policy(obj: Any, where: str) -> Optional[str]:
    # pytest stores markers on the function or class itself (``pytestmark``), so
    # ranks, which never run pytest, read them from there.
    marks: Any = getattr(obj, "pytestmark", [])
    for mark in marks if isinstance(marks, list) else [marks]:
        if getattr(mark, "name", None) == LEAK_MARKER:
            value = mark.args[0] if mark.args else next(iter(mark.kwargs.values()), None)
            return parse_leak_policy(value, f"the {LEAK_MARKER} marker of {where}")
    return None


def leak_policy(cls: type, method: Optional[Callable], env: Mapping[str, str] = os.environ) -> str:
    """The leak policy of one test, by the precedence above; ConfigError naming a bad value."""
    raw = env.get(_env.ENV_LEAKS)
    if raw is not None and raw.strip():
        return parse_leak_policy(raw, f"{_env.ENV_LEAKS} environment variable")
    name = getattr(method, "__name__", "?")
    policy = _marked_policy(method, f"{cls.__qualname__}.{name}") if method is not None else None
    if policy is None:
        policy = _marked_policy(cls, cls.__qualname__)
    class_policy = getattr(cls, "leak_policy", None)
    if policy is None and class_policy is not None:
        policy = parse_leak_policy(class_policy, f"{cls.__qualname__}.leak_policy")
    return policy or DEFAULT_LEAK_POLICY


WORLD_SCOPES = ("class", "module", "session")
BAD_WORLD_SCOPE = "{where} is {value!r}: expected one of class, module, session"


def parse_world_scope(value: Any, where: str) -> str:
    """Validate a world scope; raises ConfigError naming ``where`` (the class and attribute, or the variable)."""
    scope = value.strip().lower() if isinstance(value, str) else None
    if scope not in WORLD_SCOPES:
        raise ConfigError(BAD_WORLD_SCOPE.format(where=where, value=value))
    return scope


def world_scope(cls: type, env: Mapping[str, str] = os.environ) -> str:
    """How widely ``cls``'s world is shared: its ``world_scope``, else CONTINUOUS_TEST_WORLD_SCOPE, else "class"."""
    value = getattr(cls, "world_scope", None)
    if value is not None:
        return parse_world_scope(value, f"{cls.__qualname__}.world_scope")
    raw = env.get(_env.ENV_WORLD_SCOPE)
    if raw is not None and raw.strip():
        return parse_world_scope(raw, f"the {_env.ENV_WORLD_SCOPE} environment variable")
    return "class"


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
    raw = env.get(_env.ENV_SHUFFLE)
    if raw is None or not raw.strip():
        return None
    return parse_seed(raw, f"{_env.ENV_SHUFFLE} environment variable")


def shuffle_failure_line(seed: Optional[int] = None) -> Optional[str]:
    """The line a failure report gets when the order was shuffled (by ``seed``, else this run's), else None."""
    if seed is None:
        seed = shuffle_seed()
    return None if seed is None else SHUFFLE_FAILURE_LINE.format(seed=seed)


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
    raw = env.get(_env.ENV_BISECT)
    if raw is None or not raw.strip():
        return DEFAULT_BISECT_BUDGET
    return parse_budget(raw, f"{_env.ENV_BISECT} environment variable")


def repeat_count(env: Mapping[str, str] = os.environ) -> int:
    """How many times each selected test runs in its shared world, from ``CONTINUOUS_TEST_REPEAT`` (default 1)."""
    raw = env.get(_env.ENV_REPEAT, "").strip()
    return parse_positive_int(raw, "repeat count", f"{_env.ENV_REPEAT} environment variable") if raw else 1


def repeat_fresh(env: Mapping[str, str] = os.environ) -> bool:
    """Whether each selected test also runs that many times in fresh worlds (``CONTINUOUS_TEST_REPEAT_FRESH``)."""
    return bool(switch_if_set(_env.ENV_REPEAT_FRESH, env))
