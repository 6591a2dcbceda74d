"""assertExpectedInline works inside ranks; when accepting, only rank 0 rewrites the file."""
from __future__ import annotations

import re
import shutil

import helpers
import pytest
from helpers import describe, unittest_counts


@pytest.mark.world
def test_expected_inline_passes_on_every_rank():
    proc = helpers.python("test_expect.py")
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 1}, describe(proc)


@pytest.mark.e2e
def test_wrong_expectation_fails(tmp_path):
    copy = tmp_path / "test_expect_wrong.py"
    copy.write_text((helpers.SCENARIOS / "test_expect.py").read_text().replace('"""world of 2"""', '"""old"""'))
    proc = helpers.run([helpers.sys.executable, str(copy)], cwd=tmp_path)
    assert proc.returncode == 1, describe(proc)
    assert "failed on ranks 0, 1 of 2" in proc.stderr, describe(proc)


@pytest.mark.e2e
def test_accept_rewrites_the_file_once(tmp_path):
    copy = tmp_path / "test_expect_accept.py"
    shutil.copy(helpers.SCENARIOS / "test_expect.py", copy)
    copy.write_text(copy.read_text().replace('"""world of 2"""', '"""old"""'))
    proc = helpers.run([helpers.sys.executable, str(copy)], cwd=tmp_path, env={"EXPECTTEST_ACCEPT": "1"})
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 1}, describe(proc)
    text = copy.read_text()
    assert text.count('"""world of 2"""') == 1 and '"""old"""' not in text, text
    # The rewritten file is valid and now passes without accepting.
    again = helpers.run([helpers.sys.executable, str(copy)], cwd=tmp_path)
    assert again.returncode == 0, describe(again)
    assert unittest_counts(again.stderr) == {"ran": 1}, describe(again)


@pytest.mark.e2e
def test_accept_fails_when_ranks_disagree(tmp_path):
    copy = tmp_path / "test_expect_differing.py"
    shutil.copy(helpers.SCENARIOS / "test_expect.py", copy)
    before = copy.read_text()
    proc = helpers.run([helpers.sys.executable, str(copy), "DifferingExpectTest"], cwd=tmp_path,
                       env={"EXPECTTEST_ACCEPT": "1", "EXPECT_DIFFERING": "1"})
    assert proc.returncode == 1, describe(proc)
    assert "DifferingExpectTest.test_differs_on_rank_2 failed on rank 2 of 3 (ranks 0, 1 passed)" in proc.stderr
    assert re.search(r"^rank 2: continuous_test.errors.ExpectMismatchError: under EXPECTTEST_ACCEPT=1 the value "
                     r"checked at .*test_expect_differing.py:\d+ differs between ranks", proc.stderr, re.M), describe(proc)
    assert "  rank 0: 'a'\n  rank 1: 'a'\n  rank 2: 'b'" in proc.stderr, describe(proc)
    assert copy.read_text() == before  # rank 0's value matched: nothing rewritten, by rank 2 least of all


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
