"""``MultiProcessTestCase``: fresh rank processes for every test, for negative tests.

Use it for tests that cannot share a world: destroying or aborting a process
group, watchdog timeouts, expected non-zero exits and crashes.  Ranks are forked
from the same template as :class:`~continuous_test.MultiProcContinuousTest` uses,
so a fresh world costs a fork, not an interpreter start and a torch import; and
not even the fork, after the first test of a class: while a test runs, the next
test's ranks are forked (:class:`continuous_test.controller.processes.Spares`).  A rank reports
its exit code with its outcome and is reaped later, off the test's path; in
``tearDown``, ``self.processes[i].exitcode`` is already that code.

The surface is torch's: ``setUp`` runs in the controller and may call
``self._spawn_processes()`` (if it does not, the ranks start just before the
test); the test method alone runs in each rank, with ``self.rank``,
``self.world_size`` and ``self.file_name`` (a private rendezvous file unique to
this test) set.  ``self.init_pg()`` creates the default process group on that
rendezvous in one call.  The test passes only when every rank ended as declared
with :func:`expect_exit` (or torch's ``special_return_code_checks``) and every
other rank ended normally after passing; a rank that failed on the way to its
declared exit (an assertion, a subtest) fails the test, whatever its exit code.

torch's idiom ``self.skip_return_code_checks = [self.test_x.__wrapped__]`` needs a
``__wrapped__`` on every test method: torch's class gets one by replacing the
method on each instance.  Here each ``test*`` function of a subclass (or of its
mixins) that has none is wrapped once, when the class is defined
(:func:`_unwrappable`).
"""
from __future__ import annotations

import functools
import inspect
import os
import shutil
import signal as signal_module
import time
import unittest
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, TypeVar, Union

from continuous_test import _role, config
from continuous_test._role import ProcessRole
from continuous_test.case import TestCase
from continuous_test._launch import detect
from continuous_test.rank.fresh import ENV_TORCH_INIT_BARRIER
from continuous_test.wire.outcome import TEST_ERROR_EXIT_CODE, ExpectedExit

if TYPE_CHECKING:
    from continuous_test.controller.fresh import FreshRanks
    from continuous_test.verdict.merge import Verdict

__all__ = ["MultiProcessTestCase", "expect_exit", "BAD_EXPECT_EXIT"]

# Hide this module's frames from unittest tracebacks: reports start at the ranks'.
__unittest = True

EXPECT_EXIT_ATTR = "__continuous_test_expect_exit__"
BAD_EXPECT_EXIT = "expect_exit() needs exactly one of code= or signal=, got code={code!r}, signal={signal!r}"
BAD_SIGNAL = "expect_exit(signal={signal!r}): not a signal; use a number or a name such as 'SIGABRT'"
BAD_RANKS = "expect_exit(ranks={ranks!r}): ranks must be non-negative ints"
F = TypeVar("F", bound=Callable[..., Any])


def _default_world_size() -> int:
    # torch's DEFAULT_WORLD_SIZE, so existing files keep their world size; the accelerator as config's rule sees it.
    kind = config.accelerator()
    if kind is not None:
        return min(4, max(2, config.device_count(kind)))
    return 4


def expect_exit(code: Optional[int] = None, *, signal: Union[int, str, None] = None,
                ranks: Union[int, Iterable[int], None] = None) -> Callable[[F], F]:
    """Decorator: the named ranks (all if None) must end with this exit code or signal.

    A named rank the test's world does not have (``ranks=[1]`` at world size 1) fails the
    test with a ConfigError naming it: the declaration would check nothing.
    """
    if (code is None) == (signal is None) or (code is not None and (isinstance(code, bool) or not isinstance(code, int))):
        raise ValueError(BAD_EXPECT_EXIT.format(code=code, signal=signal))
    expected = ExpectedExit(code=code, signal=_signal_number(signal), ranks=_rank_tuple(ranks))

    def decorate(fn: F) -> F:
        setattr(fn, EXPECT_EXIT_ATTR, expected)
        return fn

    return decorate


def _signal_number(signal: Union[int, str, None]) -> Optional[int]:
    if signal is None:
        return None
    if isinstance(signal, str):
        name = signal.upper() if signal.upper().startswith("SIG") else "SIG" + signal.upper()
        number = getattr(signal_module.Signals, name, None)
        if number is None:
            raise ValueError(BAD_SIGNAL.format(signal=signal))
        return int(number)
    if isinstance(signal, bool) or not isinstance(signal, int) or signal <= 0:
        raise ValueError(BAD_SIGNAL.format(signal=signal))
    return signal


def _rank_tuple(ranks: Union[int, Iterable[int], None]) -> Optional[tuple]:
    if ranks is None:
        return None
    values = (ranks,) if isinstance(ranks, int) else tuple(ranks)
    if not values or any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in values):
        raise ValueError(BAD_RANKS.format(ranks=ranks))
    return values


def _unwrappable(fn: F) -> F:
    """A pass-through wrapper of test method ``fn`` whose ``__wrapped__`` is ``fn``.

    ``functools.wraps`` copies the name, the signature (through ``__wrapped__``) and
    the attributes set by decorators (``expect_exit``, ``timeout``, ``unittest.skip``,
    torch's ``parametrize``), so everything that inspects the method still sees ``fn``.
    """

    @functools.wraps(fn)
    def test_method(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # noqa: F841 - pytest starts the report at the test's frame
        return fn(self, *args, **kwargs)

    return test_method  # type: ignore[return-value]


class MultiProcessTestCase(TestCase):
    """Each test gets fresh ``world_size`` rank processes; see the module docstring."""

    MAIN_PROCESS_RANK = -1
    _ct_runs_in_ranks = True  # _role.RANK_CLASS_ATTR: asked without importing this module
    TEST_ERROR_EXIT_CODE = TEST_ERROR_EXIT_CODE
    test_timeout: Optional[float] = None
    grace_period: Optional[float] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Give each ``test*`` function of ``cls`` (its own or a mixin's) a ``__wrapped__``, for torch's idiom."""
        super().__init_subclass__(**kwargs)
        for name in dir(cls):
            value = inspect.getattr_static(cls, name, None) if name.startswith("test") else None
            if inspect.isfunction(value) and not hasattr(value, "__wrapped__"):
                setattr(cls, name, _unwrappable(value))

    @property
    def world_size(self) -> int:
        """Ranks per test; override as a property or class attribute."""
        return _default_world_size()

    @property
    def destroy_pg_upon_exit(self) -> bool:
        """Whether a rank destroys a default group the test left behind."""
        return True

    @property
    def shared_temp_dir(self) -> str:
        """This test's own directory, the same on every rank and in the controller; removed after the test.

        The rendezvous file (``self.file_name``) lies in it; a suite's file barrier
        or the files its ranks write for each other may go there too.
        """
        if self._test_dir is not None:
            return self._test_dir
        if self.file_name is None:
            raise RuntimeError(f"{type(self).__qualname__}.shared_temp_dir: the test's ranks were not started")
        return os.path.dirname(self.file_name)

    @property
    def is_master(self) -> bool:
        """True on rank 0."""
        return self.rank == 0

    def __init__(self, methodName: str = "runTest") -> None:  # noqa: N803 - unittest's name
        super().__init__(methodName)
        self.rank = self.MAIN_PROCESS_RANK
        self.file_name: Optional[str] = None
        self._fresh: Optional[FreshRanks] = None
        self._test_dir: Optional[str] = None

    # -- controller side -------------------------------------------------------------

    def run(self, result: Optional[unittest.TestResult] = None) -> Optional[unittest.TestResult]:
        """unittest's run: under a launcher, once per launch (launcher rank 0 runs it); in the
        controller it first notes how verbose ``result`` is (heartbeats)."""
        if self._ct_in_process:
            return super().run(result)
        role = _role.current_role()
        if role is ProcessRole.LAUNCHED:
            from continuous_test.launched import run as launched

            return launched.run_fresh_once(self, result, detect(), super().run)
        if role is ProcessRole.CONTROLLER:
            from continuous_test.controller import progress

            progress.observe(result)
        return super().run(result)

    def setUp(self) -> None:
        """Controller-side per-test state, as in torch's class."""
        super().setUp()
        if self._ct_in_process:
            return
        self.special_return_code_checks: dict = {}
        self.skip_return_code_checks: list = []
        self.processes: list = []
        self.pid_to_pipe: dict = {}
        self.rank = self.MAIN_PROCESS_RANK
        self._make_test_dir()

    def _make_test_dir(self) -> None:
        if self._test_dir is None:
            from continuous_test.controller import fresh

            self._test_dir = fresh.test_dir(type(self))
            self.file_name = os.path.join(self._test_dir, "rendezvous")
            self.addCleanup(shutil.rmtree, self._test_dir, True)

    def _spawn_processes(self) -> None:
        """Start this test's ranks (torch's name); a second call does nothing."""
        from continuous_test.controller import fresh

        if self._fresh is not None:
            return
        self._check_settings()
        self._make_test_dir()
        assert self._test_dir is not None and self.file_name is not None
        ranks = self._fresh = fresh.start(type(self), self._testMethodName, self.world_size, self._test_dir,
                                          self.file_name)
        self.addCleanup(ranks.stop)
        self.processes = ranks.processes()

    def _check_settings(self) -> None:
        """Check every setting this test's verdict reads, before its ranks start (raises ConfigError naming it)."""
        from continuous_test.controller import dispatch

        dispatch.run_settings()
        cls = type(self)
        config.test_time_limit(cls, getattr(cls, self._testMethodName))
        config.grace_period(cls)

    @classmethod
    def tearDownClass(cls) -> None:
        """Kill the ranks forked ahead for a next test of this class that did not come; reap the ended ones."""
        from continuous_test.controller import fresh

        if not cls._ct_in_process:
            fresh.end_class(cls)
        super().tearDownClass()

    def _start_processes(self, proc: Any = None) -> None:
        """torch's name for starting the ranks; the process class argument is ignored."""
        self._spawn_processes()

    def _callSetUp(self) -> None:  # noqa: N802 - unittest's seam
        if _role.current_role() is not ProcessRole.RANK:
            super()._callSetUp()

    def _callTearDown(self) -> None:  # noqa: N802 - unittest's seam
        if _role.current_role() is not ProcessRole.RANK:
            super()._callTearDown()

    def _callTestMethod(self, method: Callable) -> None:  # noqa: N802 - unittest's seam
        # In a rank: the test itself.  Replaying a verdict made elsewhere (launcher
        # rank 0 ran the test once for the launch): TestCase raises it.
        if (_role.current_role() is ProcessRole.RANK or self._ct_verdict_source is not None
                or self._ct_in_process):
            super()._callTestMethod(method)
            return
        __tracebackhide__ = True  # noqa: F841
        from continuous_test.verdict import replay  # judged where no rank runs

        self._spawn_processes()
        replay.raise_verdict(self, self._judge())

    def _judge(self) -> Verdict:
        from continuous_test.controller import fresh
        from continuous_test.verdict import replay

        cls = type(self)
        fn = getattr(cls, self._testMethodName)
        expected = getattr(fn, EXPECT_EXIT_ATTR, None)
        special = _lookup(getattr(self, "special_return_code_checks", {}), fn)
        if expected is None and special is not None:
            expected = ExpectedExit(code=special[1])
        check_codes = _lookup(getattr(self, "skip_return_code_checks", []), fn) is None
        assert self._fresh is not None, "_judge() after _spawn_processes()"
        return fresh.judge(self._fresh, replay.short_id(self), expected, check_codes,
                           config.test_time_limit(cls, fn), config.grace_period(cls))

    # -- rank side ---------------------------------------------------------------------

    @classmethod
    def _run(cls, rank: int, test_name: str, file_name: str, parent_pipe: Any = None, **kwargs: Any) -> None:
        """A fresh rank's entry, as in torch's class: make the test case and run ``test_name`` on ``rank``.

        A suite may override it, as torch's ``TestDistBackend`` does (create its
        process group, wait at its file barrier, ``self.run_test(test_name, pipe)``,
        barrier again, destroy the group, ``sys.exit(0)``): the rank then runs the
        override, and the test's outcome is what ``run_test`` recorded.
        ``parent_pipe`` is None here (outcomes travel another way).
        """
        case = cls(test_name)
        case.rank = rank
        case.file_name = file_name
        case.run_test(test_name, parent_pipe)

    def run_test(self, test_name: str, parent_pipe: Any = None) -> None:
        """Run this rank's test (torch's name): its outcome becomes the rank's report.

        As torch's ``run_test`` ends the rank when the test failed or skipped, this
        raises ``SystemExit`` then, so a suite's ``_run`` does not go on to its
        after-test barrier, where the ranks whose test passed would wait.
        """
        from continuous_test.rank import fresh as fresh_rank

        assert test_name == self._testMethodName, f"run_test({test_name!r}) on the case of {self._testMethodName!r}"
        fresh_rank.run_case(self)

    def init_pg(self, backend: Optional[str] = None, **kwargs: Any):
        """Create the default process group on this test's own rendezvous, and wait for every rank's (in a rank)."""
        import torch.distributed as dist

        assert self.file_name is not None, "init_pg() runs in a rank, after the ranks were started"
        store = dist.FileStore(self.file_name, self.world_size)
        # torch's own barrier after init (on in fresh ranks) polls every 10 ms: this one is faster.
        previous = os.environ.get(ENV_TORCH_INIT_BARRIER)
        os.environ[ENV_TORCH_INIT_BARRIER] = "0"
        try:
            dist.init_process_group(backend=config.default_backend() if backend is None else backend, rank=self.rank,
                                    world_size=self.world_size, store=store, **kwargs)
        finally:
            if previous is None:
                del os.environ[ENV_TORCH_INIT_BARRIER]
            else:
                os.environ[ENV_TORCH_INIT_BARRIER] = previous
        init_barrier(store, self.rank, self.world_size)
        return dist.distributed_c10d._get_default_group()


INIT_BARRIER_TIMEOUT = 120.0
INIT_BARRIER_EXPIRED = ("init_pg(): after {seconds:g} s, rank(s) {ranks} had not finished init_process_group; "
                        "each rank of the test must call init_pg()")


def init_barrier(store: Any, rank: int, world_size: int) -> None:
    """Return once all ``world_size`` ranks reached this call on ``store``; TimeoutError after INIT_BARRIER_TIMEOUT s.

    Right after ``init_process_group`` (as in ``init_pg``), it returns once every
    rank's ``init_process_group`` returned.  Without it, a rank that destroys its
    group and exits at once can close its end while a peer is still connecting
    (gloo: "connectFullMesh failed ... Connection closed by peer").  The store, not
    the group, carries it: the test may break the group.
    """
    store.set(f"continuous_test/init/{rank}", "1")
    keys = [f"continuous_test/init/{r}" for r in range(world_size)]
    # Polled: a FileStore's own wait() sleeps 10 ms between looks, which would be
    # most of what a fresh world costs beyond its init.
    deadline = time.monotonic() + INIT_BARRIER_TIMEOUT
    pause = 0.0001
    while not store.check(keys):
        if time.monotonic() > deadline:
            missing = [r for r, key in enumerate(keys) if not store.check([key])]
            raise TimeoutError(INIT_BARRIER_EXPIRED.format(seconds=INIT_BARRIER_TIMEOUT, ranks=missing))
        time.sleep(pause)
        pause = min(2 * pause, 0.002)


def _lookup(container, fn: Callable) -> Optional[tuple]:
    """Find ``fn`` among keys given as functions, bound methods, ``__wrapped__`` or names."""
    items = container.items() if isinstance(container, dict) else ((k, None) for k in container)
    for key, value in items:
        target = getattr(key, "__func__", key)
        if target is fn or getattr(fn, "__wrapped__", None) is target or key == fn.__name__:
            return (key, value)
    return None
