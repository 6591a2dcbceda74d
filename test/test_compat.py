"""Migrating a torch distributed test file by changing one import.

Each file in ``test/compat`` is written as PyTorch writes its distributed tests and
picks its base classes with ``CT_COMPAT_BASE=torch|ours``.  Run both ways with
``python file.py`` as real subprocesses (and one of them also with pytest, under
ours), it must pass with the same counts.  The unit tests below cover what the files
cannot show under torch's classes, which are slow (each of their
``MultiProcessTestCase`` tests starts interpreters) or differ: torch's ``__wrapped__``
idiom on undecorated test methods, ``assertRaisesRegex`` (which torch's
``MultiProcContinuousTest`` never checks), and torch's own lint of test classes.
"""
from __future__ import annotations

import inspect
import re
import sys
import types
import unittest
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from unittest import mock

import helpers
import pytest
from helpers import describe, pytest_counts, unittest_counts

COMPAT = Path(__file__).resolve().parent / "compat"

def _nccl_in_build() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_nccl_available()


# What each file reports under either base, so that a file that silently ran
# nothing cannot pass by matching itself.  test_collectives.py's @requires_nccl() test
# runs wherever the build has NCCL (a CUDA build, GPU or not), and skips elsewhere.
EXPECTED = {
    "test_replicate_state_dict.py": {"ran": 4},
    "test_collectives.py": {"ran": 15, "skipped": 2 if _nccl_in_build() else 3},
    "test_dtensor.py": {"ran": 5},
    "test_device_type.py": {"ran": 8},
    "test_dtensor_bases.py": {"ran": 15, "skipped": 2},
    "test_fsdp_bases.py": {"ran": 7, "skipped": 4},
    "test_local_tensor_variants.py": {"ran": 14, "skipped": 1},
    "test_derived_bases.py": {"ran": 8, "skipped": 5},
}


# A guard against hangs, never a performance assertion: under torch's classes,
# test_dtensor_bases.py starts 4 interpreters for each of its 6 fresh-world tests
# (160 s on an idle 2-core machine, 13 minutes on a loaded one).
COMPAT_TIMEOUT = 1800

# How a crash of torch's own harness (not a verdict) shows in its output.
TORCH_CRASH = "terminate called without an active exception"

# Files also run through pytest, under continuous_test's classes.
UNDER_PYTEST = {"test_collectives.py", "test_derived_bases.py", "test_dtensor_bases.py", "test_fsdp_bases.py", "test_local_tensor_variants.py"}


def compat_env(base: str) -> dict:
    return {"CT_COMPAT_BASE": base}


def run_all(runs: dict) -> dict:
    """Run every named zero-argument callable at the same time; returns their results by name."""
    with ThreadPoolExecutor(len(runs)) as pool:
        futures = {key: pool.submit(fn) for key, fn in runs.items()}
        return {key: future.result() for key, future in futures.items()}


# EXPECTED is what torch's classes reported for each file under this torch release
# (torch's side is run live whenever the installed torch differs, or with
# CT_COMPAT_LIVE=1): its fresh interpreters per test made torch's side most of this
# file's time, and twice a crash of its own harness, not a verdict, failed CI.
RECORDED_WITH_TORCH = "2.13.0"


def torch_runs_live() -> bool:
    import os

    import torch

    return torch.__version__.split("+")[0] != RECORDED_WITH_TORCH or os.environ.get("CT_COMPAT_LIVE") == "1"


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_same_counts_as_torch(name):
    bases = ("torch", "ours") if torch_runs_live() else ("ours",)
    runs = {base: (lambda base=base: helpers.python(name, cwd=COMPAT, env=compat_env(base), timeout=COMPAT_TIMEOUT))
            for base in bases}
    if name in UNDER_PYTEST:
        runs["ours, pytest"] = lambda: helpers.pytest(name, cwd=COMPAT, env=compat_env("ours"), timeout=COMPAT_TIMEOUT)
    procs = run_all(runs)
    if "torch" in procs and procs["torch"].returncode != 0 and TORCH_CRASH in procs["torch"].stderr:
        # torch's own harness, the reference, crashed (seen once: a rank aborted in C++
        # on a loaded machine); one more run of it, never of ours.
        procs["torch"] = runs["torch"]()
    for how, proc in procs.items():
        assert proc.returncode == 0, f"{name} under {how}:\n{describe(proc)}"
    torch_counts = EXPECTED[name]
    if "torch" in procs:
        assert unittest_counts(procs["torch"].stderr) == torch_counts, describe(procs["torch"])
    assert unittest_counts(procs["ours"].stderr) == torch_counts, describe(procs["ours"])
    if "ours, pytest" in procs:
        skipped = torch_counts.get("skipped", 0)
        expected = {"passed": torch_counts["ran"] - skipped, **({"skipped": skipped} if skipped else {})}
        counts = pytest_counts(procs["ours, pytest"].stdout)
        counts.pop("subtests", None)  # run_subtests' blocks, which unittest's summary does not count
        assert counts == expected, describe(procs["ours, pytest"])


# test_torch_counts.py under torch 2.13.0's own classes on CPU (CT_COMPAT_BASE=torch):
# 1 rank for each class with no world_size, and rank 1's failed assertion an error.
TORCH_COUNTS = {"ran": 3, "errors": 1}


def _sizes(output: str) -> dict:
    return dict(re.findall(r"(\w+Test) world size (\d+)", output))


@pytest.mark.e2e
def test_a_file_for_torchs_harness_keeps_torchs_default_world_size_and_errors():
    # A file that runs torch's run_tests keeps torch's counts (config.keeps_torch_defaults);
    # the same classes under continuous_test's run_tests take this library's defaults.
    import torch

    no_accelerator = torch.accelerator.current_accelerator() is None  # torch's classes skip on a CUDA build without GPUs
    bases = ("torch", "ours") if torch_runs_live() and no_accelerator else ("ours",)
    runs = {base: (lambda base=base: helpers.python("test_torch_counts.py", cwd=COMPAT, env=compat_env(base),
                                                      timeout=COMPAT_TIMEOUT)) for base in bases}
    runs["our runner"] = lambda: helpers.python("test_torch_counts.py", cwd=COMPAT, env={"CT_RUNNER": "ours"},
                                                timeout=COMPAT_TIMEOUT)
    procs = run_all(runs)
    for base in bases:
        assert unittest_counts(procs[base].stderr) == TORCH_COUNTS, describe(procs[base])
        assert "ERROR: test_rank_1_fails" in procs[base].stderr, describe(procs[base])
        assert _sizes(procs[base].stdout + procs[base].stderr) == {"UnsizedTest": "1", "UnsizedDTensorTest": "1"}, describe(procs[base])
    ours = procs["our runner"]
    assert unittest_counts(ours.stderr) == {"ran": 3, "failures": 1}, describe(ours)
    assert _sizes(ours.stdout + ours.stderr) == {"UnsizedTest": "2", "UnsizedDTensorTest": "1"}, describe(ours)  # a torch base: torch's


def test_local_tensor_variants_of_our_bases_run_in_this_process():
    # torch's create_local_tensor_test_class puts a copy of the class on a base that
    # runs every rank here, on the fake backend: no ranks, no world, torch's verdicts.
    import os

    import torch.distributed as dist
    from torch.testing._internal.distributed._tensor.common_dtensor import (
        LocalDTensorContinuousTestBase,
        create_local_tensor_test_class,
    )

    from continuous_test import DTensorContinuousTestBase, DTensorTestBase, _role, with_comms

    here = os.getpid()

    class Fresh(DTensorTestBase):
        @property
        def world_size(self):
            return 2

        @with_comms
        def test_in_this_process(self):
            assert (dist.get_backend(), os.getpid(), self.world_size) == ("fake", here, 2)

    class Shared(DTensorContinuousTestBase):
        world_size = 2

        def test_in_this_process(self):
            assert (dist.get_backend(), os.getpid()) == ("fake", here)

    variants = [create_local_tensor_test_class(Fresh),
                create_local_tensor_test_class(Shared, base_class=LocalDTensorContinuousTestBase)]
    assert [_role.rank_class_of(cls) for cls in variants] == [None, None]
    assert _role.rank_class_of(Fresh) is Fresh and _role.rank_class_of(Shared) is Shared
    suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(cls) for cls in variants)
    result = unittest.TestResult()
    suite.run(result)
    assert (result.testsRun, result.failures, result.errors) == (2, [], []), result.failures + result.errors
    assert not dist.is_initialized()


@pytest.mark.e2e
def test_under_torchrun_torchs_run_tests_prints_one_report():
    # A migrated file keeps torch's run_tests(): under a launcher only rank 0 prints
    # the unittest report, as with continuous_test's run_tests().
    proc = helpers.torchrun("test_collectives.py", 2, cwd=COMPAT)
    output = proc.stdout + proc.stderr
    assert output.count("\nRan 15 tests in ") == 1, describe(proc)
    skipped = EXPECTED["test_collectives.py"]["skipped"]  # 2 where the build has NCCL
    assert proc.returncode == 0 and f"OK (skipped={skipped})" in output, describe(proc)


# -- a directory migrated by its conftest.py ----------------------------------------------


@pytest.mark.e2e
def test_conftest_line_migrates_a_directory():
    # test_migrated.py imports only torch's bases; the conftest.py of its directory makes
    # them ours, in the controller and in the ranks (the file checks which one a rank
    # sees); --noconftest keeps torch's.
    engines = (("ours", ()), ("torch", ("--noconftest",))) if torch_runs_live() else (("ours", ()),)
    runs = {engine: (lambda engine=engine, flags=flags: helpers.pytest(
                "migrated/test_migrated.py", *flags, cwd=COMPAT, env={"CT_EXPECT_ENGINE": engine},
                timeout=COMPAT_TIMEOUT))
            for engine, flags in engines}
    procs = run_all(runs)
    for engine, proc in procs.items():
        assert proc.returncode == 0, f"under {engine}:\n{describe(proc)}"
        assert pytest_counts(proc.stdout) == {"passed": 6, "skipped": 1}, describe(proc)


# Each directory's module checks which engine the bases it imports from torch's helper
# modules are on; only the directory whose conftest.py asks may get continuous_test's.
ORDER_PROBE = """
from torch.testing._internal.common_distributed import (
    C10dTorchCommsTestBase, DynamoDistributedMultiProcTestCase, MultiProcessTestCase)
from torch.testing._internal.distributed._shard.sharded_tensor import ShardedTensorTestBase
from torch.testing._internal.distributed._tensor.common_dtensor import DTensorTestBase

EXPECTED = {expected!r}


class Sharded(ShardedTensorTestBase):
    pass


def engine(cls):
    return "ours" if any(c.__module__.startswith("continuous_test.") for c in cls.__mro__) else "torch"


def test_bases():
    classes = (Sharded, ShardedTensorTestBase, DynamoDistributedMultiProcTestCase, C10dTorchCommsTestBase,
               DTensorTestBase, MultiProcessTestCase)
    assert {{cls.__name__: engine(cls) for cls in classes}} == {{cls.__name__: EXPECTED for cls in classes}}
"""


@pytest.mark.e2e
def test_conftest_route_migrates_exactly_the_directories_that_ask_in_any_order(tmp_path):
    # "asks" has the conftest line, "plain" not; the first one pytest collects imports
    # torch's helper modules (sharded_tensor's, common_dtensor) first in the process.
    (tmp_path / "asks").mkdir()
    (tmp_path / "plain").mkdir()
    (tmp_path / "asks" / "conftest.py").write_text(
        "from continuous_test.migrate import pytest_pycollect_makemodule  # noqa: F401\n")
    (tmp_path / "asks" / "test_asks.py").write_text(ORDER_PROBE.format(expected="ours"))
    (tmp_path / "plain" / "test_plain.py").write_text(ORDER_PROBE.format(expected="torch"))
    procs = run_all({order: (lambda order=order: helpers.pytest(*order, real=True, cwd=tmp_path))
                     for order in (("asks", "plain"), ("plain", "asks"))})
    for order, proc in procs.items():
        assert pytest_counts(proc.stdout) == {"passed": 2}, f"collected in the order {order}:\n{describe(proc)}"


def test_derived_bases_are_rebuilt_on_ours_and_exported():
    from torch.testing._internal import common_distributed
    from torch.testing._internal.distributed._shard import sharded_tensor

    import continuous_test
    from continuous_test import C10dTorchCommsTestBase, DistributedTestBase, DynamoDistributedMultiProcTestCase
    from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, ShardedTensorTestBase

    for cls, torch_cls, base in (
            (DynamoDistributedMultiProcTestCase, common_distributed.DynamoDistributedMultiProcTestCase,
             DistributedTestBase),
            (C10dTorchCommsTestBase, common_distributed.C10dTorchCommsTestBase, MultiProcContinuousTest),
            (ShardedTensorTestBase, sharded_tensor.ShardedTensorTestBase, MultiProcessTestCase)):
        assert cls.__name__ in continuous_test.__all__
        assert cls is not torch_cls and cls.__bases__ == (base,) and cls.__name__ == torch_cls.__name__
        assert base not in torch_cls.__mro__  # torch's own class is left as it was
        # torch's own function objects, where they do not call super()
        for name, value in vars(torch_cls).items():
            if name.startswith("__") or not isinstance(value, (types.FunctionType, classmethod, staticmethod,
                                                                  property)):
                continue  # unittest gives each class its own _class_cleanups
            func = getattr(value, "__func__", getattr(value, "fget", value))
            if "__class__" not in getattr(getattr(func, "__code__", None), "co_freevars", ()):
                assert vars(cls)[name] is value, f"{cls.__name__}.{name}"
    # The methods that call super() continue along the new class's MRO.
    assert DynamoDistributedMultiProcTestCase._run.__func__ is \
        common_distributed.DynamoDistributedMultiProcTestCase._run.__func__
    assert vars(C10dTorchCommsTestBase)["setUp"].__closure__[0].cell_contents is C10dTorchCommsTestBase
    assert vars(ShardedTensorTestBase)["setUp"].__closure__[0].cell_contents is ShardedTensorTestBase


def test_rebase_rebinds_zero_argument_super():
    import functools

    from continuous_test.torch_compat.derived import rebase

    calls = []

    class TorchBase:
        def setUp(self):
            calls.append("torch base")

        @classmethod
        def init(cls):
            calls.append(f"torch base init of {cls.__name__}")

    class OurBase(TorchBase):
        def setUp(self):
            calls.append("our base")

        @classmethod
        def init(cls):
            calls.append(f"our base init of {cls.__name__}")

    def logged(fn):
        @functools.wraps(fn)
        def wrapper(self):
            calls.append("wrapper")
            return fn(self)
        return wrapper

    class Derived(TorchBase):
        """torch's docstring."""
        value = 3

        @logged
        def setUp(self):
            super().setUp()
            calls.append("derived")

        @classmethod
        def init(cls):
            super().init()

        @property
        def me(self):
            return __class__  # noqa: F821 - the cell super() uses

        def plain(self):
            return self.value

    New = rebase(Derived, {TorchBase: OurBase}, __name__)
    assert (New.__name__, New.__qualname__, New.__module__, New.__doc__) == (
        "Derived", "Derived", __name__, "torch's docstring.")
    assert New.__mro__ == (New, OurBase, TorchBase, object)
    New().setUp()
    New.init()
    assert calls == ["wrapper", "our base", "derived", "our base init of Derived"]
    assert New().me is New and Derived().me is Derived
    assert vars(New)["plain"] is vars(Derived)["plain"] and New().plain() == 3
    calls.clear()
    Derived().setUp()  # torch's class is unchanged
    assert calls == ["wrapper", "torch base", "derived"]
    with pytest.raises(TypeError, match=r"rebase\(.*Derived\): none of its bases \(.*TorchBase\) is a key"):
        rebase(Derived, {OurBase: TorchBase}, __name__)


def test_dynamo_base_without_accelerators_skips_with_a_reason():
    # torch's world_size is the accelerator count: 0 here; torch reports such a test passed unrun.
    from continuous_test import DynamoDistributedMultiProcTestCase

    class NoWorldSize(DynamoDistributedMultiProcTestCase):
        def test_x(self):
            pass

    result = unittest.TestResult()
    with mock.patch("torch.accelerator.device_count", return_value=0):
        NoWorldSize("test_x").run(result)
    assert (result.testsRun, result.errors, result.failures) == (1, [], [])
    assert "NoWorldSize.world_size is 0" in result.skipped[0][1]
    assert "NoWorldSize a world_size" in result.skipped[0][1]


def test_migrate_replaces_torch_names_only_while_importing(monkeypatch):
    from torch.testing._internal.distributed._tensor import common_dtensor

    from continuous_test import DTensorTestBase, migrate

    monkeypatch.setattr(migrate, "_used", False)  # this process's own templates stay unmigrated
    assert not migrate.in_use()

    torch_base = common_dtensor.DTensorTestBase
    assert torch_base is not DTensorTestBase
    with migrate.replaced():
        assert common_dtensor.DTensorTestBase is DTensorTestBase
    assert common_dtensor.DTensorTestBase is torch_base
    assert migrate.in_use()


def test_migrate_replaces_torchs_derived_bases_only_while_importing(monkeypatch):
    from torch.testing._internal import common_distributed
    from torch.testing._internal.distributed._shard import sharded_tensor

    import continuous_test
    from continuous_test import migrate

    monkeypatch.setattr(migrate, "_used", False)
    names = ((common_distributed, "DynamoDistributedMultiProcTestCase"),
             (common_distributed, "C10dTorchCommsTestBase"), (sharded_tensor, "ShardedTensorTestBase"))
    torchs = [getattr(module, name) for module, name in names]
    with migrate.replaced():
        assert [getattr(module, name) for module, name in names] == [getattr(continuous_test, n) for _, n in names]
    assert [getattr(module, name) for module, name in names] == torchs


def test_template_preloads_torch_testing_helpers_and_the_migration(monkeypatch):
    import torch.testing._internal.common_distributed  # noqa: F401 - a migrated file imported it

    from continuous_test import migrate
    from continuous_test.template import server as template

    monkeypatch.setattr(migrate, "_used", False)
    assert "continuous_test.template.preload_migration" not in template.preload_modules()
    with migrate.replaced():
        modules = template.preload_modules()
    assert "torch.testing._internal.common_distributed" in modules
    assert "continuous_test.template.preload_migration" in modules


# -- continuous bases run setUp and tearDown on every rank --------------------------------


@pytest.mark.e2e
def test_continuous_setup_runs_on_every_rank_unlike_torch():
    bases = ("torch", "ours") if torch_runs_live() else ("ours",)
    procs = run_all({base: (lambda base=base: helpers.python("test_continuous_setup.py", cwd=COMPAT,
                                                              env=compat_env(base), timeout=COMPAT_TIMEOUT))
                     for base in bases})
    assert procs["ours"].returncode == 0, describe(procs["ours"])
    assert unittest_counts(procs["ours"].stderr) == {"ran": 2}, describe(procs["ours"])
    if "torch" in procs:
        # torch's FSDPTestContinuous never runs setUp in a rank: its dynamo reset is missing there.
        assert procs["torch"].returncode != 0, describe(procs["torch"])
        assert "AssertionError: 0 not found in []" in procs["torch"].stderr, describe(procs["torch"])


# -- torch's ``self.test_x.__wrapped__`` idiom ------------------------------------------


def _negative_case_class():
    from continuous_test import MultiProcessTestCase, expect_exit, timeout
    from torch.testing._internal.common_distributed import skip_if_lt_x_gpu

    class Mixin:
        def test_from_mixin(self):
            pass

    class Negative(Mixin, MultiProcessTestCase):
        world_size = 2

        def setUp(self):
            super().setUp()
            self.special_return_code_checks = {self.test_abort.__wrapped__: -6}
            self.skip_return_code_checks = [self.test_any_code.__wrapped__]

        def test_abort(self):
            pass

        def test_any_code(self, extra=1):
            return extra

        @expect_exit(3)
        @timeout(7)
        def test_decorated(self):
            pass

        @skip_if_lt_x_gpu(2, allow_cpu=True)
        def test_already_wrapped(self):
            pass

        @unittest.skip("not today")
        def test_skipped(self):
            pass

        def helper(self):
            return "not a test"

    return Negative


def test_every_test_method_has_wrapped():
    cls = _negative_case_class()
    for name in ("test_abort", "test_any_code", "test_decorated", "test_skipped", "test_from_mixin"):
        fn = vars(cls)[name]
        original = fn.__wrapped__
        assert original is not fn and not hasattr(original, "__wrapped__")  # no wrapper loop
        assert inspect.unwrap(fn) is original and fn.__name__ == name
    assert "__wrapped__" not in vars(vars(cls)["helper"])


def test_wrapping_keeps_signature_and_decorators():
    from continuous_test import config
    from continuous_test.multiprocess import EXPECT_EXIT_ATTR

    cls = _negative_case_class()
    assert list(inspect.signature(cls.test_any_code).parameters) == ["self", "extra"]
    assert cls("test_any_code").test_any_code(5) == 5
    assert getattr(cls.test_decorated, EXPECT_EXIT_ATTR).code == 3
    assert config.test_time_limit(cls, cls.test_decorated, env={}) == 7
    assert cls.test_skipped.__unittest_skip_why__ == "not today"
    # A method that already had a __wrapped__ (torch's decorators) is left alone.
    assert cls.test_already_wrapped.__wrapped__.__name__ == "test_already_wrapped"
    assert not hasattr(cls.test_already_wrapped.__wrapped__, "__wrapped__")


def test_wrapped_keys_find_the_running_test():
    from continuous_test.multiprocess import _lookup

    cls = _negative_case_class()
    case = cls("test_abort")
    case.setUp()
    try:
        assert _lookup(case.special_return_code_checks, cls.test_abort) == (cls.test_abort.__wrapped__, -6)
        assert _lookup(case.skip_return_code_checks, cls.test_any_code) is not None
        assert _lookup(case.skip_return_code_checks, cls.test_abort) is None
    finally:
        case.doCleanups()


def test_parametrized_tests_keep_working():
    from continuous_test import MultiProcessTestCase
    from torch.testing._internal.common_utils import instantiate_parametrized_tests, parametrize

    @instantiate_parametrized_tests
    class Params(MultiProcessTestCase):
        world_size = 2

        @parametrize("x", [1, 2])
        def test_x(self, x):
            return x

    assert sorted(n for n in vars(Params) if n.startswith("test")) == ["test_x_x_1", "test_x_x_2"]
    assert Params("test_x_x_2").test_x_x_2() is None  # torch's wrapper returns nothing
    assert hasattr(Params.test_x_x_1, "__wrapped__")


# -- torch's TestCase surface ------------------------------------------------------------


def test_assert_raises_regex_checks_the_message():
    # torch's own MultiProcContinuousTest never checks it: device_type is a method there,
    # which torch's assertRaisesRegex takes for a non-native device.
    from continuous_test import MultiProcContinuousTest

    class Continuous(MultiProcContinuousTest):
        def test_a(self):
            pass

    case = Continuous("test_a")
    with case.assertRaisesRegex(ValueError, "bad"):
        raise ValueError("a bad value")
    with pytest.raises(AssertionError, match="does not match"):
        with case.assertRaisesRegex(ValueError, "bad"):
            raise ValueError("something else")


# -- torch's run_tests accepts the classes ----------------------------------------------


BASE_PROBE = """
import sys, unittest
{first}
from continuous_test import DistributedTestBase, MultiProcContinuousTest, MultiProcessTestCase, TestCase
uses_torch = "torch.testing._internal.common_utils" in sys.modules
if uses_torch:
    from torch.testing._internal.common_utils import TestCase as TorchTestCase, lint_test_case_extension
    assert all(issubclass(b, TorchTestCase) for b in (TestCase, MultiProcContinuousTest, MultiProcessTestCase,
                                                       DistributedTestBase))

    class Continuous(MultiProcContinuousTest):
        def test_a(self):
            pass

    assert lint_test_case_extension(unittest.TestSuite([unittest.defaultTestLoader.loadTestsFromTestCase(Continuous)]))
print("torch base" if uses_torch else "expecttest base")
"""


def _probe(first: str) -> str:
    proc = helpers.run([sys.executable, "-c", BASE_PROBE.format(first=first)], cwd=helpers.ROOT)
    assert proc.returncode == 0, describe(proc)
    return proc.stdout.strip()


@pytest.mark.e2e
def test_torch_run_tests_accepts_our_classes_in_migrated_files():
    # A migrated file imports torch's testing internals first: our classes then
    # extend torch's TestCase, which torch's run_tests() requires.
    assert _probe("import torch.testing._internal.common_distributed") == "torch base"


@pytest.mark.e2e
def test_other_files_do_not_import_torch_internals():
    assert _probe("") == "expecttest base"


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
