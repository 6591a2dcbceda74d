"""README.rst and docs/ stay true: every Python example runs, the failure report shown is
what a run prints, quoted benchmark rows equal the generated ones, every module is listed,
and test/README.rst maps every CONTINUOUS_TEST_* variable to tests that name it and names every
test file and scenario."""
from __future__ import annotations

import ast
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


@pytest.mark.e2e
@pytest.mark.parametrize("index", range(len(EXAMPLES)), ids=[f"{e[0]}-{i}" for i, e in enumerate(EXAMPLES)])
def test_example_runs(index, tmp_path):
    _, code, shown = EXAMPLES[index]
    path = tmp_path / f"test_readme_example_{index}.py"
    path.write_text(code)
    if "run_tests()" in code:
        proc = helpers.run([sys.executable, str(path)], cwd=tmp_path, env=helpers.DEFAULTS)
    else:
        proc = helpers.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(path)], cwd=tmp_path,
                           env=helpers.DEFAULTS)
    if not code.startswith(EXPECTED_FAILURE):
        assert proc.returncode == 0, describe(proc)
        # Exit code 0 holds as well when every test was skipped: something must have passed.
        if "run_tests()" in code:
            counts = helpers.unittest_counts(proc.stderr)
            assert counts.get("ran", 0) > 0 and set(counts) == {"ran"}, describe(proc)
        else:
            counts = helpers.pytest_counts(proc.stdout)
            assert counts.get("passed", 0) > 0 and set(counts) == {"passed"}, describe(proc)
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


def test_the_suite_figures_are_the_kept_runs():
    # README's wall times of the suite and of the quick tier are the summary lines of the runs kept in
    # benchmarks/results (each file starts with the command and the commit it ran at).
    readme = (ROOT / "README.rst").read_text()
    results = ROOT / "benchmarks" / "results"
    suite = re.search(r"The suite ran (\d+) tests in (\d+) s", readme)
    quick = re.search(r"the unit and world tiers in (\d+) s", readme)
    assert suite and quick, "README.rst no longer quotes the suite's figures"
    for (passed, seconds), name in (((suite[1], suite[2]), "suite_run_merged.txt"),
                                    ((None, quick[1]), "quick_run_merged.txt")):
        kept = re.search(r"^(\d+) passed.* in ([\d.]+)s", (results / name).read_text(), re.M)
        assert kept, name
        assert passed in (None, kept[1]) and round(float(kept[2])) == int(seconds), (name, kept[0], passed, seconds)


def test_design_lists_every_module():
    text = (ROOT / "docs" / "design.rst").read_text()
    listed = set(re.findall(r"^``([\w/]+\.py)``  ", text, re.M))
    package = ROOT / "continuous_test"
    modules = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    assert modules - listed == set(), "add these modules to the layout tables in docs/design.rst"
    assert listed - modules == set(), "these modules in docs/design.rst no longer exist"


# -- test/README.rst: every CONTINUOUS_TEST_* variable to the tests that exercise it --------

TEST_README = ROOT / "test" / "README.rst"
ENV_FILE = ROOT / "continuous_test" / "wire" / "env.py"
HARNESS_COMMENT = "# Set by the harness"  # in wire/env.py: the variables after it are not a user's settings
HARNESS_HEADER = "set by the harness"  # the first cell of the second table's header
SETTING_ROW = re.compile(r"^``(CONTINUOUS_TEST_\w+)``\s+``(test_\w+\.py)``\s+(.+)$", re.M)


def _env_variables() -> tuple:
    """({variable: constant} a user sets, {variable: constant} the harness sets), from wire/env.py's source."""
    source = ENV_FILE.read_text()
    harness_from = source.index(HARNESS_COMMENT)
    user: dict = {}
    harness: dict = {}
    for constant, value in re.findall(r'^(ENV_\w+) = "(CONTINUOUS_TEST_\w+)"$', source, re.M):
        at = source.index(f"\n{constant} = ")
        (user if at < harness_from else harness)[value] = constant
    return user, harness


def _settings_rows() -> tuple:
    """Rows (variable, test file, [tests]) of test/README.rst's settings table and harness table."""
    text = TEST_README.read_text()
    split = re.search(rf"^{HARNESS_HEADER}\s", text, re.M)
    assert split, f"no table headed {HARNESS_HEADER!r} in test/README.rst"

    def rows(part: str) -> list:
        return [(var, file, re.findall(r"``(test_\w+)``", tests)) for var, file, tests in SETTING_ROW.findall(part)]
    return rows(text[:split.start()]), rows(text[split.start():])


def _functions(path) -> dict:
    """Module-level functions of a test file: name -> source, decorators included."""
    source = path.read_text()
    lines = source.splitlines()
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            found[node.name] = "\n".join(lines[start - 1:node.end_lineno])
    return found


def _names(source: str, variable: str, constant: str) -> bool:
    return variable in source or re.search(rf"\b{constant}\b", source) is not None


def test_env_variables_are_found_and_split():
    user, harness = _env_variables()
    assert {"CONTINUOUS_TEST_TIMEOUT", "CONTINUOUS_TEST_AHEAD"} <= set(user), user
    assert {"CONTINUOUS_TEST_COVERAGE", "CONTINUOUS_TEST_TEMPLATE_PID"} <= set(harness), harness
    from continuous_test.wire import env

    declared = {getattr(env, name) for name in env.__all__ if name.startswith("ENV_")}
    assert set(user) | set(harness) == declared


def test_test_readme_maps_every_variable_to_tests_that_name_it():
    user, harness = _env_variables()
    settings, harness_rows = _settings_rows()
    assert {row[0] for row in settings} == set(user), "the settings table of test/README.rst is not wire/env.py's"
    assert {row[0] for row in harness_rows} == set(harness), "the harness table of test/README.rst is not wire/env.py's"
    constants = {**user, **harness}
    for variable, file, tests in settings + harness_rows:
        path = ROOT / "test" / file
        assert path.is_file(), f"{variable}: {file} does not exist"
        assert tests, f"{variable}: no test named for {file}"
        functions = _functions(path)
        # A helper of the same file that names the variable counts for the tests that call it.
        helpers_naming = [name for name, source in functions.items()
                          if not name.startswith("test_") and _names(source, variable, constants[variable])]
        for test in tests:
            assert test in functions, f"{variable}: {file} has no {test}"
            source = functions[test]
            assert _names(source, variable, constants[variable]) or any(
                re.search(rf"\b{helper}\(", source) for helper in helpers_naming), \
                f"{variable}: {file}::{test} does not name it (nor ENV constant {constants[variable]})"


def _literal_block_after(text: str, heading: str) -> str:
    """The first ``::`` literal block of README section ``heading``, unindented."""
    section = text[text.index(f"\n{heading}\n"):]
    found = re.search(r"::\n\n((?:(?:    .*)?\n)+)", section)
    assert found, f"no literal block under {heading!r}"
    return _unindent(found.group(1)).strip() + "\n"


def test_test_readme_names_every_test_file_and_scenario():
    # The map says which test covers which module: a test file or scenario it leaves
    # out covers something nobody can find from there (issue 26 found several).
    text = (ROOT / "test" / "README.rst").read_text()
    names = [p.name for p in sorted((ROOT / "test").glob("test_*.py"))]
    names += [p.stem for p in sorted((ROOT / "test" / "scenarios").glob("*.py"))]
    missing = [name for name in names if name not in text]
    assert missing == [], f"name these in test/README.rst, with the modules they cover: {missing}"


@pytest.mark.e2e
def test_the_install_steps_work_literally_in_a_fresh_venv(tmp_path):
    # The README's Install block, then its Quick start's example command, run as one
    # bash script in an empty directory, exactly as written, but for the clone URL
    # (this checkout's committed tree) and one pip setting: this machine reaches no
    # index but PyPI, so the unreachable one is not retried (PIP_RETRIES=0), and pip
    # takes torch's CPU wheel from its configured local sources instead; and pip does not
    # byte-compile what it installs (PIP_NO_COMPILE=0: pip reads the variable of a --no-*
    # switch inverted), 13 s of CPU for torch's 5,000 files that change no step's outcome.
    import os
    import subprocess

    readme = (ROOT / "README.rst").read_text()
    install = _literal_block_after(readme, "Install")
    example = _literal_block_after(readme, "Quick start").splitlines()[0]
    assert example.startswith("python examples/"), example
    assert "<this repository's URL>" in install and "pip install -e" in install
    script = "set -eu\n" + install.replace("<this repository's URL>", str(ROOT)) + example + "\n"
    env = {key: value for key, value in os.environ.items()
           if key not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME") and not key.startswith("CONTINUOUS_TEST_")}
    # Without this checkout's virtual environment on PATH: the steps make their own.
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep)
                                  if not p.startswith(str(ROOT)) and not p.startswith(sys.prefix))
    env["PIP_RETRIES"] = "0"
    env["PIP_NO_COMPILE"] = "0"
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, describe(proc)
    assert re.search(r"^OK\b", proc.stderr, re.M), describe(proc)
    venv_python = tmp_path / "continuous_test" / ".venv" / "bin" / "python"
    check = subprocess.run([str(venv_python), "-c", "import continuous_test, torch; print(continuous_test.__file__)"],
                           capture_output=True, text=True, env=env, cwd="/", timeout=120)
    assert str(tmp_path) in check.stdout, describe(check)  # the clone's package, not this checkout's


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
