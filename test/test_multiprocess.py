"""MultiProcessTestCase and the rank template, end to end."""
from __future__ import annotations

import os
import re

import helpers
import pytest
from helpers import describe, pytest_counts, unittest_counts, verbose_name
from test_faults import section

from continuous_test import expect_exit
from continuous_test.multiprocess import BAD_EXPECT_EXIT


@pytest.fixture(scope="module")
def negative(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tmp")
    return helpers.python("test_negative.py", "-v", env={"TMPDIR": str(tmp)}), tmp


@pytest.mark.world
def test_counts(negative):
    proc, _ = negative
    assert unittest_counts(proc.stderr) == {"ran": 15, "failures": 3, "errors": 1, "skipped": 2}, describe(proc)


@pytest.mark.world
@pytest.mark.parametrize("test", [
    "test_init_all_reduce_destroy", "test_destroy_and_recreate", "test_expected_exit_code",
    "test_expected_signal_on_all", "test_expected_segfault_on_rank_0", "test_rank_attributes",
    "test_per_test_init", "test_special_return_code", "test_skipped_return_code",
])
def test_passing_endings(negative, test):
    assert re.search(rf"^{test} .* \.\.\. ok$", negative[0].stderr, re.M), describe(negative[0])


@pytest.mark.world
def test_wrong_ending_reports_every_rank_and_output(negative):
    report = section(negative[0].stderr, "test_wrong_ending")
    assert "NegativeTest.test_wrong_ending: rank 1 did not end as expected" in report
    assert "rank 0: ended with exit code 0, as expected" in report
    assert "rank 1: ended with exit code 4; expected exit code 3" in report
    assert "[rank0] rank 0 about to end" in report and "[rank1] rank 1 about to end" in report


@pytest.mark.world
def test_unexpected_crash(negative):
    report = section(negative[0].stderr, "test_unexpected_crash")
    assert "rank 0: ended with exit code 7; expected a normal exit" in report


@pytest.mark.world
def test_failure_and_skips(negative):
    from continuous_test.torch_compat.dtensor import too_few_devices  # torch's testing code: not at collection

    err = negative[0].stderr
    assert "NegativeTest.test_failure_on_one_rank failed on rank 1 of 2 (rank 0 passed)" in err
    assert f"{verbose_name('test_skip_on_every_rank', 'NegativeTest')} ... skipped 'not today'" in err
    assert f"skipped '{too_few_devices(4).message}'" in err  # 'CUDA devices' before torch 2.15, 'accelerator devices' on


@pytest.mark.world
def test_time_limit_kills_and_reports_stacks(negative):
    report = section(negative[0].stderr, "test_hang")
    assert "SlowNegativeTest.test_hang exceeded its time limit of 3 s on rank 1" in report
    assert re.search(r'line \d+, in test_hang\n\s+time.sleep\(600\)', report)


@pytest.mark.world
def test_nothing_left_behind(negative):
    # torch itself may create a torchinductor_<user> cache directory; that is not ours.
    assert [p for p in os.listdir(negative[1]) if not p.startswith("torchinductor_")] == []


@pytest.mark.world
def test_negative_tests_under_pytest():
    proc = helpers.pytest("test_negative.py", "-k", "test_expected or init or TorchStyle")
    assert proc.returncode == 0, describe(proc)
    assert pytest_counts(proc.stdout) == {"passed": 7, "deselected": 8}, describe(proc)


@pytest.mark.parametrize("kwargs", [{}, {"code": 1, "signal": 6}, {"code": True}])
def test_expect_exit_needs_one_ending(kwargs):
    with pytest.raises(ValueError) as info:
        expect_exit(**kwargs)
    assert str(info.value) == BAD_EXPECT_EXIT.format(code=kwargs.get("code"), signal=kwargs.get("signal"))


def test_expect_exit_rejects_bad_signal_and_ranks():
    with pytest.raises(ValueError, match="not a signal"):
        expect_exit(signal="SIGNOPE")
    with pytest.raises(ValueError, match="ranks must be non-negative ints"):
        expect_exit(1, ranks=[-1])


@pytest.mark.e2e
def test_template_has_no_cuda_initialized():
    proc = helpers.python("test_template.py", "-v")
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 3}, describe(proc)


@pytest.mark.e2e
def test_template_cuda_flag_is_read_from_the_template():
    # The scenario fakes CUDA initialization at import time, which happens in the
    # template: the ranks must see the flag set.
    proc = helpers.python("test_template.py", "-v", env={"FAKE_CUDA_INIT_IN_TEMPLATE": "1"})
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 3}, describe(proc)


@pytest.mark.e2e
def test_spawn_fallback():
    proc = helpers.python("test_template.py", env={"CONTINUOUS_TEST_START_METHOD": "spawn"})
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 3}, describe(proc)


@pytest.mark.e2e
def test_bad_start_method_is_named():
    proc = helpers.python("test_template.py", env={"CONTINUOUS_TEST_START_METHOD": "thread"})
    assert proc.returncode == 1, describe(proc)
    assert "Invalid start method 'thread' from CONTINUOUS_TEST_START_METHOD environment variable" in proc.stderr


@pytest.mark.e2e
def test_a_fresh_test_is_judged_when_its_ranks_declare_their_exit_not_when_they_are_reaped(tmp_path):
    # Rank 0 stops the template as the test ends; the scenario resumes it after the
    # verdict, or 12 s later.  A rank that reports without declaring its exit code
    # leaves the controller waiting for the template to report the rank's end: 12 s.
    # real: the template stopped must be the scenario's own, not this process's.
    proc = helpers.python("test_declared_exit.py", env={"STAMP_DIR": str(tmp_path)}, real=True)
    assert unittest_counts(proc.stderr) == {"ran": 1}, describe(proc)
    took = float(re.search(r"Ran 1 test in ([\d.]+)s", proc.stderr).group(1))
    assert took < 6.0, f"judged after {took} s: the controller waited for the template\n{describe(proc)}"


@pytest.mark.world
def test_expect_exit_never_hides_a_failure_on_the_way_to_the_exit():
    proc = helpers.python("test_expect_exit.py", "-v")
    assert unittest_counts(proc.stderr) == {"ran": 6, "failures": 4, "errors": 1}, describe(proc)
    assert f"{verbose_name('test_d_passes', 'ExpectExitTest')} ... ok" in proc.stderr, describe(proc)
    # A declared rank the world does not have: a clear error naming the test, not a pass that checked nothing.
    assert "ConfigError: NoSuchRankTest.test_rank_one_exits: @expect_exit(ranks=[1]) names rank 1, which does " \
        "not exist: the test ran at world size 1 (rank 0)" in proc.stderr, describe(proc)
    for test in ("test_a_subtest_failed_before_the_exit", "test_b_assertion_on_a_rank_declared_to_exit_10",
                 "test_c_own_failure_beside_a_wrong_ending", "test_e_rank_0_exits_without_reporting"):
        assert f"FAIL: {test}" in proc.stderr or f"{verbose_name(test, 'ExpectExitTest')} ... FAIL" in proc.stderr, \
            describe(proc)
    # Rank 1's own assertion is in the report, even where rank 0's ending is what was wrong.
    assert "AssertionError: \"rank 1's own\" != 'failure'" in proc.stderr, describe(proc)
    assert "AssertionError: 'declared' != 'failed'" in proc.stderr, describe(proc)
    # Rank 0 left without a report; rank 1's failure (its exit code 10) is still its failure.
    assert "rank 1: failed: AssertionError: \"rank 1's assertion\" != 'still reported' (then ended with exit code 10)" \
        in proc.stderr, describe(proc)
    assert "exit code 10, as expected" not in proc.stderr, describe(proc)


@pytest.mark.world
@pytest.mark.parametrize("setting", [None, "0"])
def test_fresh_ranks_init_their_own_group_behind_torchs_barrier(setting):
    env = {} if setting is None else {"TORCH_DIST_INIT_BARRIER": setting, "EXPECTED_BARRIER": setting}
    # Under the default the harness's barrier makes the race of an at-once destroy safe, ten times over; with
    # the caller's 0, the setting is kept and nothing that races is asserted.
    proc = helpers.python("test_init_barrier.py", env=env)
    assert proc.returncode == 0 and unittest_counts(proc.stderr) == {"ran": 2}, describe(proc)


@pytest.mark.world
def test_a_suite_that_overrides_run_enters_each_rank_through_it(tmp_path):
    from continuous_test.torch_compat.dtensor import too_few_devices  # torch's testing code: not at collection

    # torch's TestDistBackend (distributed_test.py) overrides _run: its ranks make
    # their own group and barrier around self.run_test, which reports the test.
    proc = helpers.python("test_suite_entry.py", "-v", env={"ENTRY_DIR": str(tmp_path)})
    assert unittest_counts(proc.stderr) == {"ran": 4, "failures": 1, "skipped": 2}, describe(proc)
    tests = ("test_a_passes", "test_b_fails_on_one_rank", "test_c_skips_in_its_ranks", "test_d_skipped_by_the_entry")
    assert sorted(os.listdir(tmp_path)) == [f"{test}.{rank}" for test in tests for rank in range(3)], describe(proc)
    assert f"{verbose_name('test_a_passes', 'SuiteEntryTest')} ... ok" in proc.stderr, describe(proc)
    assert "failed on rank 1 of 3" in proc.stderr, describe(proc)
    assert f"skipped '{too_few_devices(8).message}'" in proc.stderr, describe(proc)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
