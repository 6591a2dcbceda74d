"""assertExpectedInline works inside ranks; when accepting, only rank 0 rewrites the file."""
from __future__ import annotations

import shutil

import pytest

import helpers
from helpers import describe, unittest_counts


def test_expected_inline_passes_on_every_rank():
    proc = helpers.python("test_expect.py")
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 1}, describe(proc)


def test_wrong_expectation_fails(tmp_path):
    copy = tmp_path / "test_expect_wrong.py"
    copy.write_text((helpers.SCENARIOS / "test_expect.py").read_text().replace('"""world of 2"""', '"""old"""'))
    proc = helpers.run([helpers.sys.executable, str(copy)], cwd=tmp_path)
    assert proc.returncode == 1, describe(proc)
    assert "failed on ranks 0, 1 of 2" in proc.stderr, describe(proc)


def test_accept_rewrites_the_file_once(tmp_path):
    copy = tmp_path / "test_expect_accept.py"
    shutil.copy(helpers.SCENARIOS / "test_expect.py", copy)
    copy.write_text(copy.read_text().replace('"""world of 2"""', '"""old"""'))
    proc = helpers.run([helpers.sys.executable, str(copy)], cwd=tmp_path, env={"EXPECTTEST_ACCEPT": "1"})
    assert proc.returncode == 0, describe(proc)
    text = copy.read_text()
    assert text.count('"""world of 2"""') == 1 and '"""old"""' not in text, text
    # The rewritten file is valid and now passes without accepting.
    again = helpers.run([helpers.sys.executable, str(copy)], cwd=tmp_path)
    assert again.returncode == 0, describe(again)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
