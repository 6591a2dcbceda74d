"""The TestCase classes users subclass.

* :class:`TestCase`: torch's own ``TestCase`` (``torch.testing._internal.common_utils``,
  itself an ``expecttest.TestCase``) whose ``assertEqual`` keeps torch's semantics and
  names where nested values differ; usable on its own, in one process.  Being torch's
  class is what lets torch's ``run_tests()`` and its helpers accept these classes.
* :class:`MultiProcContinuousTest`: every test runs on every rank of one shared
  world per class, which lives as long as the class.  Its ``run(result)`` picks the
  role of this process (:func:`continuous_test._role.current_role`) and hands off:

  - in a rank of a shared world: run the test for real (``unittest``'s own run);
  - launched (torchrun, srun): run in place and exchange outcomes through the store
    (:mod:`continuous_test.launched.run`);
  - otherwise this process is the controller: :mod:`continuous_test.controller.dispatch`
    runs the test in the class's shared world (:mod:`continuous_test.controller.world`)
    and replays the merged verdict into ``result``.

The rank side imports this module, so the controller's dispatch and worlds are only
imported lazily, on the controller path; at import, only the light
:mod:`continuous_test.session.shuffle` is loaded (for ``python -m unittest``).
"""
from __future__ import annotations

import os
import sys
import unittest
from datetime import timedelta
from typing import Any, Callable, Optional

import expecttest
import torch

from continuous_test import _role, config, sizes
from continuous_test.errors import ConfigError
from continuous_test._role import ProcessRole
from continuous_test.config import BAD_WORLD_SIZE, NOT_IMPORTABLE, UNKNOWN_BACKEND
from continuous_test.session import unittest_program
from continuous_test._launch import detect
from continuous_test.rank import result as rank_result
from continuous_test import _assert_equal
from continuous_test.wire.env import ENV_TORCH_TESTCASE

__all__ = ["TestCase", "MultiProcContinuousTest", "BAD_WORLD_SIZE", "NOT_IMPORTABLE", "UNKNOWN_BACKEND"]

# Hide this module's frames (assertEqual and friends) from unittest tracebacks.
__unittest = True

def _torch_test_case() -> type:
    """The base of :class:`TestCase`: torch's own TestCase for files that use torch's testing internals.

    torch's ``run_tests()`` accepts only subclasses of its ``common_utils.TestCase``,
    so a file migrated from ``torch.testing._internal`` (which imported torch's
    ``common_utils`` before this module) gets that base.  Other users do not pay for
    importing torch's internals, or for their side effects (``common_utils``
    disables ``torch.backends`` global flags).  The choice is made once and exported
    in the environment (``CONTINUOUS_TEST_TORCH_TESTCASE=1`` or ``0``, which a user
    may also set), so the template and the ranks, which import this module before
    the test file, choose the same base as the controller.
    """
    wanted = config.torch_testcase_wanted()
    if wanted is None:
        wanted = "torch.testing._internal.common_utils" in sys.modules
        os.environ[ENV_TORCH_TESTCASE] = "1" if wanted else "0"
    if wanted:
        try:
            from torch.testing._internal.common_utils import TestCase as TorchTestCase
        except Exception:  # a torch build without torch.testing._internal
            return expecttest.TestCase
        return TorchTestCase
    return expecttest.TestCase


class TestCase(_torch_test_case()):  # type: ignore[misc]
    """A TestCase whose ``assertEqual`` follows torch's and names where nested values differ.

    Its base is expecttest's TestCase, or torch's own for files that use torch's
    testing internals (see ``_torch_test_case``).  The lifecycle is unittest's.  torch's ``run``,
    ``setUp`` and ``tearDown`` never run around a test body in the ranks of torch's own
    distributed classes either, which call the test function directly: its ``run``
    prepares dynamo test modes, and its ``setUp`` reads torch CI's lists of disabled
    tests, which imports ``torch._dynamo`` (seconds, in every rank) and creates a cache
    directory in ``TMPDIR``.  Its ``__init__`` rewrites the test method on the
    instance.  Ranks are seeded as torch seeds them.
    """

    # True on a class torch runs entirely in this process (a LocalTensor variant made
    # by torch's create_local_tensor_test_class from a class derived from this
    # package's bases): it then runs exactly as on torch's bases, in the process that
    # runs the test, and this package's classes step aside (_role.runs_in_one_process).
    _ct_in_process = False  # _role.IN_PROCESS_ATTR

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if _role.runs_in_one_process(cls):
            setattr(cls, _role.IN_PROCESS_ATTR, True)
            setattr(cls, _role.RANK_CLASS_ATTR, False)
        elif getattr(cls, _role.RANK_CLASS_ATTR, False):
            try:
                several = sizes.sizes_of(cls)  # world_size = [1, 2, 4]: each test once per size
            except ConfigError:  # a bad list: each test fails with the error (config._world_size)
                several = None
            if several is not None:
                sizes.expand(cls, several)
            else:  # one size: a subclass of a sized class runs its tests at its own size, under their own names
                sizes.unexpand(cls)

    def __init__(self, methodName: str = "runTest") -> None:  # noqa: N803 - unittest's name
        if self._ct_in_process:
            super().__init__(methodName)
            return
        size = sizes.parse(methodName)
        if size is not None:  # test_x[ws2]
            sizes.sized_method(type(self), methodName)
        unittest.TestCase.__init__(self, methodName)
        if size is not None:
            sizes.set_size(self, size[1])

    def run(self, result: Optional[unittest.TestResult] = None) -> Optional[unittest.TestResult]:
        """unittest's run (see the class docstring)."""
        if self._ct_in_process:
            return super().run(result)
        return unittest.TestCase.run(self, result)

    def setUp(self) -> None:
        """unittest's setUp (see the class docstring)."""
        if self._ct_in_process:
            super().setUp()
            return
        unittest.TestCase.setUp(self)

    # Set (by replay.run_with) while a verdict is replayed under unittest's own run
    # (in the controller, or in a launched rank): setUp and tearDown ran where the
    # test ran, and the test's body is the verdict.
    _ct_verdict_source: Optional[Callable[[], Any]] = None

    def _callSetUp(self) -> None:  # noqa: N802 - unittest's seam
        if self._ct_verdict_source is None:
            super()._callSetUp()

    def _callTestMethod(self, method: Callable) -> None:  # noqa: N802 - unittest's seam
        source = self._ct_verdict_source
        if source is None:
            super()._callTestMethod(method)
            return
        __tracebackhide__ = True  # noqa: F841 - pytest starts the report at the ranks' tracebacks
        from continuous_test.verdict import replay  # a verdict is replayed where no rank runs

        replay.raise_verdict(self, replay.verdict_of(self, source))

    def _callTearDown(self) -> None:  # noqa: N802 - unittest's seam
        if self._ct_verdict_source is None:
            super()._callTearDown()

    def tearDown(self) -> None:
        """unittest's tearDown (see the class docstring)."""
        if self._ct_in_process:
            super().tearDown()
            return
        unittest.TestCase.tearDown(self)

    def assertEqual(self, first: Any, second: Any, msg: Any = None, *, atol: Optional[float] = None,  # noqa: N802
                    rtol: Optional[float] = None, equal_nan: bool = True, exact_dtype: bool = True,
                    exact_device: bool = False, exact_layout: bool = False, exact_stride: bool = False,
                    exact_is_coalesced: bool = False) -> None:
        """Compare tensors, arrays, numbers and nested containers as torch's assertEqual does."""
        try:
            _assert_equal.assert_equal(first, second, rtol=rtol, atol=atol, equal_nan=equal_nan,
                                      exact_dtype=exact_dtype, exact_device=exact_device, exact_layout=exact_layout,
                                      exact_stride=exact_stride, exact_is_coalesced=exact_is_coalesced,
                                      rtol_floor=getattr(self, "rel_tol", 0.0),
                                      atol_floor=getattr(self, "precision", 0.0), fallback=self._plain_assert_equal)
        except _assert_equal.Mismatch as exc:
            text = msg(str(exc)) if callable(msg) else self._formatMessage(msg, str(exc))
            raise self.failureException(text) from None

    def _plain_assert_equal(self, first: Any, second: Any) -> None:
        unittest.TestCase.assertEqual(self, first, second)

    def assertNotEqual(self, first: Any, second: Any, msg: Any = None, **kwargs: Any) -> None:  # noqa: N802
        """Fail if the two values are equal in the sense of :meth:`assertEqual`."""
        try:
            self.assertEqual(first, second, **kwargs)
        except AssertionError:
            return
        raise self.failureException(self._formatMessage(msg, f"{first!r} == {second!r}"))

    def assertRaisesRegex(self, expected_exception: Any, expected_regex: Any,  # noqa: N802 - unittest's name
                          *args: Any, **kwargs: Any) -> Any:
        """Check the exception's type and message.

        torch's version ignores the regex on a non-native ``device_type``; it takes a
        ``device_type`` method (``MultiProcContinuousTest``'s) for one, so it would never
        check the message.  Only a ``device_type`` string is given to torch's rule.
        """
        if isinstance(getattr(self, "device_type", None), str):
            return super().assertRaisesRegex(expected_exception, expected_regex, *args, **kwargs)
        return unittest.TestCase.assertRaisesRegex(self, expected_exception, expected_regex, *args, **kwargs)

    def assertExpectedInline(self, actual: str, expect: str, skip: int = 0, **kwargs: Any) -> None:  # noqa: N802
        """expecttest's check; when accepting in a world, only rank 0 rewrites the file.

        Every rank records the value it accepts, so a value that differs between
        ranks fails the test (:mod:`continuous_test.verdict.merge`) instead of passing on
        the strength of rank 0 alone.
        """
        rank = _role.rank() if os.environ.get("EXPECTTEST_ACCEPT") else None
        if rank is not None:
            caller = sys._getframe(1 + skip)
            rank_result.record_expect_value(f"{caller.f_code.co_filename}:{caller.f_lineno}", actual)
            if rank != 0:
                return
        super().assertExpectedInline(actual, expect, skip=skip + 1, **kwargs)


NO_SHARED_TEMP_DIR = ("{cls}.shared_temp_dir exists in the ranks of a world the controller started, while a test "
                      "runs; under a launcher (torchrun, srun) the ranks may not share a file system: use a "
                      "directory of your own there")


class MultiProcContinuousTest(TestCase):
    """Run every test on every rank of one world that lives as long as the class."""

    MAIN_PROCESS_RANK = -1
    rank: int = MAIN_PROCESS_RANK
    _ct_runs_in_ranks = True  # _role.RANK_CLASS_ATTR: asked without importing this module
    # An int, or a property returning one; None means "the device count for
    # accelerator backends, else 2".
    world_size: Optional[int] = None
    # Process-group timeout, as in torch's class.
    timeout: timedelta = timedelta(seconds=120)
    # Set in each rank by _init_pg, as in torch's class: the default group and its rendezvous.
    pg: Any = None
    rdvz_file: Optional[str] = None
    # Per-test time limit in seconds (None: CONTINUOUS_TEST_TIMEOUT or the default).
    test_timeout: Optional[float] = None
    # Seconds to wait for the other ranks after one rank fails.
    grace_period: Optional[float] = None
    # Seconds to wait for a world to start, and for it to shut down before its
    # ranks are killed.
    start_timeout: Optional[float] = None
    shutdown_timeout: Optional[float] = None
    # What to do when a test leaves process-global state changed: "restore"
    # (None: CONTINUOUS_TEST_LEAKS or the default), "fail" or "off".
    leak_policy: Optional[str] = None
    # How widely the world is shared: "class" (None: CONTINUOUS_TEST_WORLD_SCOPE or "class"),
    # "module" or "session": classes of that scope with the same settings, _init_pg and
    # opts share one world (docs/fresh-worlds.rst).
    world_scope: Optional[str] = None

    # -- torch-compatible configuration hooks --------------------------------------

    @classmethod
    def backend_str(cls) -> Optional[str]:
        """Process-group backend; None lets torch pick per device."""
        return None

    @classmethod
    def device_type(cls) -> str:
        """The device each rank uses: the accelerator this host has at run time (``config.accelerator()``), else ``cpu``."""
        return config.accelerator() or "cpu"

    @classmethod
    def opts(cls, high_priority_stream: bool = False) -> Any:
        """Process-group options passed to ``init_process_group``; None by default."""
        return None

    # Set by a launched rank while it calls _init_pg: the launcher's store to make the group on.
    _ct_store: Any = None

    @classmethod
    def _init_pg(cls, rank: int, world_size: int, rdvz_file: str) -> None:
        """Create the default process group (``cls.pg``) on a FileStore at ``rdvz_file``, in a rank before its tests.

        Under a launcher the group is made on the launcher's store instead, so that a
        class's override (which calls this, then makes its subgroups) runs there too.
        """
        import torch.distributed as dist

        cls.rdvz_file = rdvz_file
        store = cls._ct_store if cls._ct_store is not None else dist.FileStore(rdvz_file, world_size)
        backend = cls.backend_str()
        dist.init_process_group(backend=config.default_backend() if backend is None else backend,
                                world_size=world_size, rank=rank, store=store,
                                pg_options=cls.opts(), timeout=cls.timeout)
        cls.pg = dist.distributed_c10d._get_default_group()

    _init_pg.__func__._ct_base = True  # type: ignore[attr-defined]  # launched.join: "not overridden"

    # -- per-instance view -----------------------------------------------------------

    @property
    def device(self) -> torch.device:
        """This rank's device: ``cuda:LOCAL_RANK`` for accelerators, else cpu."""
        ctx = _role.current()
        device = ctx.spec.settings.device_type if ctx is not None and ctx.spec.settings else config.resolve_device_type(type(self))
        if device == "cpu":
            return torch.device("cpu")
        return torch.device(device, int(os.environ.get("LOCAL_RANK", "0")))

    # Set in a rank for each test (rank.run.run_one): the path of its shared_temp_dir.
    _ct_shared_temp_dir: Optional[str] = None

    @property
    def shared_temp_dir(self) -> str:
        """A directory of this test's own, the same path on every rank of its world, made on first use (0700).

        It is empty when the test starts, and removed once every rank reported the
        test, before any rank starts the next, so no test sees another's files: a suite's file barrier or a file each
        rank writes for the others (``TEMP_DIR`` in torch's ``distributed_test.py``)
        goes there.  In a rank of a controller's world only; under a launcher the
        ranks may not share a file system, and this raises ``RuntimeError``.
        """
        path = self._ct_shared_temp_dir
        if path is None:
            raise RuntimeError(NO_SHARED_TEMP_DIR.format(cls=type(self).__qualname__))
        os.makedirs(path, mode=0o700, exist_ok=True)
        return path

    # -- running ---------------------------------------------------------------------

    def run(self, result: Optional[unittest.TestResult] = None) -> Optional[unittest.TestResult]:
        """unittest's seam: run for real in a rank, in place under a launcher, else in the class's shared world."""
        if self._ct_in_process:
            return TestCase.run(self, result)
        role = _role.current_role()
        if role is ProcessRole.RANK:
            self.rank = _role.rank()  # type: ignore[assignment]  # a rank always has one
            return super().run(result)
        if role is ProcessRole.LAUNCHED:
            from continuous_test.launched import run as launched

            return launched.run_in_place(self, result, detect())
        from continuous_test.controller import dispatch

        return dispatch.run(self, result)

    @classmethod
    def tearDownClass(cls) -> None:
        """Stop this class's shared world (controller only); fails if a rank died outside a test."""
        try:
            if _role.current_role() is ProcessRole.CONTROLLER and not cls._ct_in_process:
                from continuous_test.controller import dispatch

                dispatch.stop_class(cls)
        finally:
            super().tearDownClass()


def _shares_a_world(cls: type) -> bool:
    """Whether ``cls``'s tests run in one shared world (what shards keep together)."""
    return issubclass(cls, MultiProcContinuousTest)


# The runner's session under ``python -m unittest`` and ``unittest.main`` (torch's
# ``run_tests()`` too): the order shuffled, the template made before tests run,
# shards and repeats.  Only the hooks load here; the session's code loads when
# unittest's program calls them, which a rank never does.
unittest_program.install(_shares_a_world)
