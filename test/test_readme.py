"""README.rst stays true: every Python example in it runs and passes."""
from __future__ import annotations

import re
import sys

import pytest

import helpers
from helpers import ROOT, describe

BLOCK = re.compile(r"^\.\. code-block:: python\n\n((?:(?:    .*)?\n)+)", re.M)


def examples():
    text = (ROOT / "README.rst").read_text()
    return ["\n".join(line[4:] for line in block.splitlines()) for block in BLOCK.findall(text)]


def test_readme_has_examples():
    assert len(examples()) >= 3


@pytest.mark.parametrize("index", range(len(examples())))
def test_example_runs(index, tmp_path):
    code = examples()[index]
    path = tmp_path / f"test_readme_example_{index}.py"
    path.write_text(code)
    if "run_tests()" in code:
        proc = helpers.run([sys.executable, str(path)], cwd=tmp_path)
    else:
        proc = helpers.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(path)], cwd=tmp_path)
    assert proc.returncode == 0, describe(proc)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
