"""README.rst and docs/ stay true: every Python example runs, the failure report shown is
what a run prints, quoted benchmark rows equal the generated ones, every module is listed."""
from __future__ import annotations

import re
import sys

import helpers
import pytest
from helpers import ROOT, describe

BLOCK = re.compile(r"^\.\. code-block:: python\n\n((?:(?:    .*)?\n)+)", re.M)
# An example whose first line is this fails on purpose; the text block after it is its output.
EXPECTED_FAILURE = "# expected to fail: its report follows"
OUTPUT_AFTER = re.compile(r"\.\. code-block:: text\n\n((?:(?:    .*)?\n)+)")
DOCS = [ROOT / "README.rst", *sorted((ROOT / "docs").glob("*.rst"))]
README_LIMIT = 16_000  # bytes: the README is the user guide; reference text goes to docs/


def _unindent(block: str) -> str:
    return "\n".join(line[4:] for line in block.splitlines())


def examples():
    found = []
    for path in DOCS:
        text = path.read_text()
        for match in BLOCK.finditer(text):
            output = OUTPUT_AFTER.search(text, match.end())
            found.append((path.relative_to(ROOT).as_posix(), _unindent(match.group(1)),
                          _unindent(output.group(1)) if output else None))
    return found


EXAMPLES = examples()


def test_readme_has_examples():
    assert len([e for e in EXAMPLES if e[0] == "README.rst"]) >= 3


@pytest.mark.parametrize("index", range(len(EXAMPLES)), ids=[f"{e[0]}-{i}" for i, e in enumerate(EXAMPLES)])
def test_example_runs(index, tmp_path):
    _, code, shown = EXAMPLES[index]
    path = tmp_path / f"test_readme_example_{index}.py"
    path.write_text(code)
    if "run_tests()" in code:
        proc = helpers.run([sys.executable, str(path)], cwd=tmp_path)
    else:
        proc = helpers.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(path)], cwd=tmp_path)
    if not code.startswith(EXPECTED_FAILURE):
        assert proc.returncode == 0, describe(proc)
        return
    assert proc.returncode == 1, describe(proc)
    actual = (proc.stdout + proc.stderr).replace(f"{tmp_path}/", "").replace(path.name, "test_sum.py")
    assert _comparable(actual) == _comparable(shown), describe(proc)


def _comparable(report: str) -> list:
    # Only durations may differ: the run's, and the rerun's.
    lines = [re.sub(r"in \d+\.\d+s$", "in Ns", line.rstrip()) for line in report.strip().splitlines()]
    return [re.sub(r"world\(s\), \d+\.\d+ s\)", "world(s), N s)", line) for line in lines]


def test_readme_is_a_guide_with_contents_and_links():
    text = (ROOT / "README.rst").read_text()
    assert len(text.encode()) <= README_LIMIT, "README.rst grew past the limit: move reference text to docs/"
    assert ".. contents::" in text
    for target in re.findall(r"<(docs/[^>]+)>`_", text):
        assert (ROOT / target).is_file(), target


def _table_rows(text: str) -> dict:
    rows = {}
    for line in text.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) >= 4 and not set(line.strip()) <= {"=", " "}:
            rows[cells[0]] = cells
    return rows


def test_quoted_benchmark_rows_equal_the_generated_ones():
    readme = (ROOT / "README.rst").read_text()
    section = readme[readme.index("\nBenchmarks\n"):]
    quoted = {k: v for k, v in _table_rows(section.split("\nMore documentation\n")[0]).items() if k != "measurement"}
    generated = _table_rows((ROOT / "docs" / "benchmarks.rst").read_text())
    assert quoted
    for measurement, cells in quoted.items():
        full = generated[measurement]
        # Generated columns: measurement, ours, torch, floor, ours/torch, ...
        assert cells == [full[0], full[1], full[2], full[4]], measurement


def test_design_lists_every_module():
    text = (ROOT / "docs" / "design.rst").read_text()
    listed = set(re.findall(r"^``([\w/]+\.py)``  ", text, re.M))
    package = ROOT / "continuous_test"
    modules = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    assert modules - listed == set(), "add these modules to the layout tables in docs/design.rst"
    assert listed - modules == set(), "these modules in docs/design.rst no longer exist"


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
