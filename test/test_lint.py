"""Tests for continuous_test/lint.py, the test-file '__main__' block checker."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_PATH = ROOT / "continuous_test" / "lint.py"


def _load_lint() -> ModuleType:
    # Loaded from its file so these tests do not depend on continuous_test/__init__.py (torch).
    spec = importlib.util.spec_from_file_location("continuous_test_lint", LINT_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered so dataclasses and process-pool pickling can find the module by name.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


lint = _load_lint()

LINE_RE = re.compile(r"^(?P<path>.+?):(?P<line>\d+): (?P<message>.+)$")

GOOD = """\
from torch.testing._internal.common_utils import run_tests

if __name__ == "__main__":
    run_tests()
"""


# A file that holds a test and no main block: a violation wherever it is checked.
UNRUN = "import unittest\n\n\nclass T(unittest.TestCase):\n    def test_x(self):\n        pass\n"


def write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def check(source: str, path: str = "test_x.py") -> list:
    return lint.check_source(textwrap.dedent(source), path)


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = lint.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------ accepted main blocks


@pytest.mark.parametrize(
    "source",
    [
        'if __name__ == "__main__":\n    run_tests()\n',
        "if __name__ == '__main__':\n    run_tests()\n",
        'if "__main__" == __name__:\n    run_tests()\n',
        "if '__main__' == __name__:\n    run_tests()\n",
        'if __name__ == """__main__""":\n    run_tests()\n',
        'if (__name__ == "__main__"):\n    run_tests(argv=None)\n',
        'if __name__ == "__main__":\n    common_utils.run_tests()\n',
        'if __name__ == "__main__":\n    a.b.run_tests()\n',
        'if __name__ == "__main__":\n    raise RuntimeError("run with torchrun")\n',
        'if __name__ == "__main__":\n    raise unittest.SkipTest("not runnable")\n',
        'if __name__ == "__main__":\n    sys.exit(run_tests())\n',
        'if __name__ == "__main__":\n    x = 1\n    if x:\n        run_tests()\n',
        'if __name__ == "__main__":\n    if cuda:\n        pass\n    else:\n        run_tests()\n',
        'if __name__ == "__main__":\n    try:\n        setup()\n    finally:\n        run_tests()\n',
        'if __name__ == "__main__":\n    for _ in range(2):\n        raise SystemExit(1)\n',
        'import x\nif __name__ == "__main__":\n    pass\nif __name__ == "__main__":\n    run_tests()\n',
    ],
    ids=[
        "double-quotes", "single-quotes", "reversed-double", "reversed-single",
        "triple-quotes", "parenthesised", "attribute", "dotted-attribute", "raise",
        "raise-skip", "nested-in-call", "nested-in-if", "else-branch-of-inner-if",
        "nested-in-try", "raise-nested-in-loop", "second-block-passes",
    ],
)
def test_accepted_main_blocks(source: str) -> None:
    assert lint.check_source(source, "test_x.py") == []


# ------------------------------------------------------------------ rejected main blocks


def test_missing_main_block_is_reported_on_line_1() -> None:
    problems = check("import unittest\n\nclass T(unittest.TestCase):\n    pass\n")
    assert [p.format() for p in problems] == [f"test_x.py:1: {lint.NO_MAIN_BLOCK}"]
    assert problems[0].kind is lint.Kind.VIOLATION


def test_a_file_that_holds_no_test_needs_no_main_block() -> None:
    # An empty file, or a helper module named test_*.py: nothing for any runner to run.
    assert check("") == []
    helper = "import torch\n\nclass Buffer:\n    pass\n\nclass Failed(Exception):\n    pass\n\ndef make_input():\n    return 1\n"
    assert check(helper, "test_utils.py") == []
    # A class derived from a test case may inherit its tests: it still needs one.
    assert [p.message for p in check("import unittest\nclass T(unittest.TestCase):\n    pass\n")] == [lint.NO_MAIN_BLOCK]
    assert [p.message for p in check("from base import SharedTests\nclass T(SharedTests):\n    pass\n")] == \
        [lint.NO_MAIN_BLOCK]


def test_block_without_run_tests_is_reported_on_the_if_line() -> None:
    source = """\
        import unittest


        class T(unittest.TestCase):
            pass


        if __name__ == "__main__":
            print("nothing runs")
        """
    problems = check(source)
    assert [p.format() for p in problems] == [f"test_x.py:8: {lint.MAIN_BLOCK_WITHOUT_RUN_TESTS}"]


# ------------------------------------------------------------------ every runner

PYTEST_FILE = textwrap.dedent("""\
    import pytest
    import continuous_test


    @continuous_test.distributed(world_size=2)
    @pytest.mark.parametrize("n", [1, 4])
    def test_all_reduce(n):
        assert n


    def test_plain():
        pass
    """)

UNITTEST_FILE = textwrap.dedent("""\
    import unittest


    class AllReduceTest(unittest.TestCase):
        def test_sum(self):
            pass
    """)


@pytest.mark.parametrize(
    "source",
    [
        PYTEST_FILE,
        "def test_plain():\n    pass\n",
        "async def test_async():\n    pass\n",
        "class TestPlain:\n    def test_x(self):\n        pass\n",
        "class TestPlain(object):\n    def test_x(self):\n        pass\n",
        PYTEST_FILE + 'if __name__ == "__main__":\n    raise SystemExit(pytest.main([__file__]))\n',
        PYTEST_FILE + 'if __name__ == "__main__":\n    import sys\n    sys.exit(pytest.main([__file__]))\n',
        PYTEST_FILE + 'if __name__ == "__main__":\n    print("a script too")\n',
        "from pytest import main as pm\ndef test_x():\n    pass\nif __name__ == '__main__':\n    pm()\n",
    ],
    ids=["distributed-functions", "function", "async-function", "pytest-class", "object-base",
         "pytest-main", "sys-exit-pytest-main", "block-does-something-else", "from-import-alias"],
)
def test_pytest_style_files_are_accepted(source: str) -> None:
    assert check(source) == []


@pytest.mark.parametrize(
    "block",
    [
        "unittest.main()",
        "unittest.main(verbosity=2)",
        "run_tests()",
        "common_utils.run_tests()",
        "raise SystemExit(pytest.main([__file__]))",
    ],
)
def test_unittest_files_accept_every_runner(block: str) -> None:
    source = UNITTEST_FILE + f'\n\nif __name__ == "__main__":\n    {block}\n'
    assert check(source) == []


def test_unittest_main_imported_under_other_names() -> None:
    source = (
        "import unittest as ut\nfrom unittest import main as m\nclass XTest(ut.TestCase):\n"
        "    def test_x(self):\n        pass\nif __name__ == '__main__':\n    ut.main()\n"
        "if __name__ == '__main__':\n    m()\n"
    )
    assert check(source) == []


def test_main_of_another_module_is_not_a_runner() -> None:
    source = UNITTEST_FILE + '\nif __name__ == "__main__":\n    app.main()\n'
    assert [p.message for p in check(source)] == [lint.MAIN_BLOCK_WITHOUT_RUN_TESTS]


@pytest.mark.parametrize(
    "block", ["run_tests()", "import unittest; unittest.main()", "raise SystemExit(run_tests())"]
)
def test_unittest_runner_in_a_file_of_functions_is_reported(block: str) -> None:
    source = PYTEST_FILE + f'\nif __name__ == "__main__":\n    {block}\n'
    problems = check(source)
    expected = lint.UNITTEST_RUNNER_WITH_FUNCTIONS.format(name="test_all_reduce", line=7)
    assert [(p.line, p.message) for p in problems] == [(14, expected)]
    assert lint.PYTEST_MAIN in expected


def test_mixed_file_needs_pytest() -> None:
    mixed = UNITTEST_FILE + "\n\ndef test_function():\n    pass\n"
    assert [p.message for p in check(mixed)] == [lint.NO_MAIN_BLOCK_MIXED]
    without = mixed + '\nif __name__ == "__main__":\n    print("no runner")\n'
    assert [p.message for p in check(without)] == [lint.MAIN_BLOCK_WITHOUT_PYTEST]
    with_unittest = mixed + '\nif __name__ == "__main__":\n    unittest.main()\n'
    assert [p.line for p in check(with_unittest)] == [12]
    with_pytest = mixed + f'\nimport pytest\nif __name__ == "__main__":\n    {lint.PYTEST_MAIN}\n'
    assert check(with_pytest) == []


def test_base_class_with_tests_counts_as_unittest_even_without_test_name() -> None:
    source = "class Checks(Base):\n    def test_x(self):\n        pass\n"
    assert [p.message for p in check(source)] == [lint.NO_MAIN_BLOCK]
    named = "class GlooTest(Base):\n    backend = 'gloo'\n"
    assert [p.message for p in check(named)] == [lint.NO_MAIN_BLOCK]


@pytest.mark.e2e
def test_following_the_advice_keeps_a_pytest_file_runnable(tmp_path: Path) -> None:
    # The README's @distributed example with the main block the lint advises, run as a script:
    # unittest's runner would fail it with "missing 1 required positional argument: 'n'".
    source = textwrap.dedent("""\
        import pytest, torch, torch.distributed as dist
        import continuous_test

        @continuous_test.distributed(world_size=2)
        @pytest.mark.parametrize("n", [1, 4])
        def test_all_reduce(n):
            t = torch.ones(n)
            dist.all_reduce(t)
            assert t.tolist() == [2.0] * n

        if __name__ == "__main__":
            run_tests = continuous_test.run_tests
            run_tests()
        """)
    broken = write(tmp_path / "test_broken.py", source)
    [problem] = lint.check_file(str(broken))
    assert lint.PYTEST_MAIN in problem.message
    fixed = write(tmp_path / "test_fixed.py", source.replace(
        "    run_tests = continuous_test.run_tests\n    run_tests()\n", f"    {lint.PYTEST_MAIN}\n"))
    assert lint.check_file(str(fixed)) == []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("CI", None)
    proc = subprocess.run([sys.executable, str(fixed), "-p", "no:cacheprovider"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout


@pytest.mark.parametrize(
    "source, message",
    [
        ('if __name__ == "__main__":\n    fn = run_tests\n', "block"),
        ('if __name__ == "__main__":\n    pass\nelse:\n    run_tests()\n', "block"),
        ('if __name__ == "__main__":\n    print("run_tests()")\n', "block"),
        ('if __name__ == "__main__":\n    run_test()\n', "block"),
        ('if __name__ != "__main__":\n    run_tests()\n', "none"),
        ('if __name__ == "__main__" and x:\n    run_tests()\n', "none"),
        ('if __name__ == "main":\n    run_tests()\n', "none"),
        ('if name == "__main__":\n    run_tests()\n', "none"),
        ('def f():\n    if __name__ == "__main__":\n        run_tests()\n', "none"),
        ('run_tests()\n# if __name__ == "__main__":\n', "none"),
    ],
    ids=[
        "reference-not-call", "call-in-else", "call-in-string", "wrong-name",
        "not-equal", "extra-condition", "wrong-constant", "wrong-variable",
        "not-top-level", "comment-only",
    ],
)
def test_rejected_sources(source: str, message: str) -> None:
    expected = lint.NO_MAIN_BLOCK if message == "none" else lint.MAIN_BLOCK_WITHOUT_RUN_TESTS
    source += "\n\nclass T(unittest.TestCase):\n    def test_x(self):\n        pass\n"  # a file that holds a test
    problems = lint.check_source(source, "test_x.py")
    assert [(p.line, p.message) for p in problems] == [(1, expected)]


def test_every_failing_block_is_reported_when_none_passes() -> None:
    source = 'if __name__ == "__main__":\n    pass\nx = 1\nif "__main__" == __name__:\n    pass\n' + UNRUN
    problems = lint.check_source(source, "test_x.py")
    assert [p.line for p in problems] == [1, 4]


# ------------------------------------------------------------------ parse and read errors


def test_syntax_error_names_file_line_and_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write(tmp_path / "test_bad.py", "x = 1\ndef f(:\n    pass\n")
    code, out, _ = run_main([str(bad)], capsys)
    assert code == lint.ExitCode.ERROR == 2
    assert out == f"{bad}:2: {lint.CANNOT_PARSE.format(error='invalid syntax')}\n"


def test_syntax_error_does_not_stop_other_files_and_wins_over_violations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "test_a_bad.py", "def f(:\n")
    write(tmp_path / "test_b_missing.py", UNRUN)
    write(tmp_path / "test_c_good.py", GOOD)
    code, out, err = run_main([str(tmp_path)], capsys)
    assert code == 2
    lines = out.splitlines()
    assert lines[0].startswith(f"{tmp_path / 'test_a_bad.py'}:1: cannot parse: ")
    assert lines[1] == f"{tmp_path / 'test_b_missing.py'}:1: {lint.NO_MAIN_BLOCK}"
    assert len(lines) == 2
    assert "checked 3 files, 2 problems" in err


def test_undecodable_file_is_a_parse_error(tmp_path: Path) -> None:
    bad = tmp_path / "test_bytes.py"
    bad.write_bytes(b'x = "\xff"\n' + GOOD.encode())
    problems = lint.check_file(str(bad))
    assert len(problems) == 1 and problems[0].kind is lint.Kind.ERROR
    assert problems[0].message.startswith("cannot parse: ")


def test_encoding_cookie_is_honoured(tmp_path: Path) -> None:
    path = tmp_path / "test_latin1.py"
    path.write_bytes(b"# -*- coding: latin-1 -*-\nx = '\xe9'\n" + GOOD.encode())
    assert lint.check_file(str(path)) == []


def test_unreadable_file_found_in_walk_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "test_dangling.py").symlink_to(tmp_path / "missing_target.py")
    write(tmp_path / "test_good.py", GOOD)
    code, out, _ = run_main([str(tmp_path)], capsys)
    assert code == 2
    assert out.startswith(f"{tmp_path / 'test_dangling.py'}:1: cannot read: ")


def test_nonexistent_path_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "test_missing.py", UNRUN)
    missing = tmp_path / "nope"
    code, out, err = run_main([str(tmp_path), str(missing)], capsys)
    assert code == 2
    assert out == ""
    assert lint.PATH_NOT_FOUND.format(path=missing) in err


@pytest.mark.parametrize(
    "argv", [["--bogus"], ["--jobs", "-1"], ["--jobs", "many"], ["--glob", ","]]
)
def test_bad_arguments_are_usage_errors(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_main([*argv, str(tmp_path)], capsys)
    assert code == 2
    assert out == ""
    assert "error:" in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["--help"], capsys)
    assert code == 0
    assert "--exclude" in out


# ------------------------------------------------------------------ output and exit codes


def test_clean_run_exits_0_with_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "test_good.py", GOOD)
    code, out, err = run_main([str(tmp_path)], capsys)
    assert (code, out) == (0, "")
    assert err == lint.SUMMARY.format(files=1, files_s="", problems=0, problems_s="s") + "\n"
    assert err == "checked 1 file, 0 problems\n"


def test_violations_exit_1_and_use_path_line_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = write(tmp_path / "test_missing.py", UNRUN)
    no_call = write(tmp_path / "test_no_call.py", 'x = 1\nif __name__ == "__main__":\n    main()\n' + UNRUN)
    code, out, err = run_main([str(tmp_path)], capsys)
    assert code == lint.ExitCode.PROBLEMS == 1
    assert out.splitlines() == [
        f"{missing}:1: {lint.NO_MAIN_BLOCK}",
        f"{no_call}:2: {lint.MAIN_BLOCK_WITHOUT_RUN_TESTS}",
    ]
    assert err == "checked 2 files, 2 problems\n"


def test_quiet_prints_nothing_on_success(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "test_good.py", GOOD)
    assert run_main(["-q", str(tmp_path)], capsys) == (0, "", "")


def test_quiet_still_prints_problems_but_no_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write(tmp_path / "test_bad.py", UNRUN)
    code, out, err = run_main(["--quiet", str(tmp_path)], capsys)
    assert (code, out, err) == (1, f"{bad}:1: {lint.NO_MAIN_BLOCK}\n", "")


def test_output_is_sorted_by_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    names = ["z/test_c.py", "a/b/test_b.py", "test_z.py", "a/test_a.py", "m/test_m.py"]
    for name in names:
        write(tmp_path / name, UNRUN)
    _, out, _ = run_main([str(tmp_path)], capsys)
    paths = [LINE_RE.match(line).group("path") for line in out.splitlines()]
    assert paths == sorted(str(tmp_path / name) for name in names)


# ------------------------------------------------------------------ discovery


def test_directory_walk_finds_nested_test_files_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "test_top.py", UNRUN)
    write(tmp_path / "pkg" / "sub" / "test_deep.py", UNRUN)
    write(tmp_path / "pkg" / "helper.py", UNRUN)
    write(tmp_path / "pkg" / "conftest.py", UNRUN)
    write(tmp_path / "pkg" / "mytest_x.py", UNRUN)
    write(tmp_path / "pkg" / "test_notes.txt", UNRUN)
    files = lint.discover_files([str(tmp_path)]).files
    assert files == [str(tmp_path / "pkg/sub/test_deep.py"), str(tmp_path / "test_top.py")]
    code, out, err = run_main([str(tmp_path)], capsys)
    assert code == 1 and len(out.splitlines()) == 2
    assert "checked 2 files" in err


def test_default_path_is_current_directory_with_relative_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "sub" / "test_bad.py", UNRUN)
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_main([], capsys)
    assert code == 1
    assert out == f"{os.path.join('sub', 'test_bad.py')}:1: {lint.NO_MAIN_BLOCK}\n"


def test_explicit_file_is_checked_whatever_its_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    helper = write(tmp_path / "helper.py", UNRUN)
    assert lint.discover_files([str(tmp_path)]).files == []
    code, out, _ = run_main([str(helper)], capsys)
    assert code == 1
    assert out == f"{helper}:1: {lint.NO_MAIN_BLOCK}\n"


def test_file_reached_twice_is_checked_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write(tmp_path / "test_bad.py", UNRUN)
    code, out, err = run_main([str(tmp_path), str(bad), f"{tmp_path}/./test_bad.py"], capsys)
    assert code == 1
    assert out.splitlines() == [f"{bad}:1: {lint.NO_MAIN_BLOCK}"]
    assert "checked 1 file," in err


@pytest.mark.parametrize(
    "skipped_dir", [".hidden", ".git", "__pycache__", ".tox", ".venv", "build", "pkg.egg-info"]
)
def test_default_skipped_directories(skipped_dir: str, tmp_path: Path) -> None:
    write(tmp_path / skipped_dir / "test_bad.py", UNRUN)
    write(tmp_path / "ok" / skipped_dir / "nested" / "test_bad.py", UNRUN)
    write(tmp_path / "ok" / "test_kept.py", UNRUN)
    assert lint.discover_files([str(tmp_path)]).files == [str(tmp_path / "ok" / "test_kept.py")]


def test_skipped_directory_given_explicitly_is_still_walked(tmp_path: Path) -> None:
    write(tmp_path / "build" / "test_bad.py", UNRUN)
    assert lint.discover_files([str(tmp_path / "build")]).files == [
        str(tmp_path / "build" / "test_bad.py")
    ]


@pytest.mark.parametrize(
    "globs, expected",
    [
        ([], ["test_a.py"]),
        (["--glob", "*_test.py"], ["b_test.py"]),
        (["--glob", "test_*.py,*_test.py"], ["b_test.py", "test_a.py"]),
        (["--glob", "test_*.py", "--glob", "*_test.py"], ["b_test.py", "test_a.py"]),
        (["--glob", "*.py"], ["b_test.py", "helper.py", "sub/c.py", "test_a.py"]),
        (["--glob", "sub/*.py"], ["sub/c.py"]),
    ],
    ids=["default", "other", "comma", "repeated", "all", "with-directory"],
)
def test_glob_option(
    globs: list[str], expected: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in ["test_a.py", "b_test.py", "helper.py", "sub/c.py", "notes.txt"]:
        write(tmp_path / name, UNRUN)
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_main([*globs, "."], capsys)
    assert code == 1
    found = [LINE_RE.match(line).group("path") for line in out.splitlines()]
    assert found == [os.path.normpath(name) for name in expected]


@pytest.mark.parametrize(
    "excludes",
    [
        ["--exclude", "scenarios/*"],
        ["--exclude", "test/scenarios/*"],
        ["--exclude", "test/scenarios"],
        ["--exclude", "scenarios"],
        ["--exclude", "test_scenario_*.py"],
        ["--exclude", "*/test_scenario_*"],
        ["--exclude", "nothing,test/scenarios/*"],
        ["--exclude", "nothing", "--exclude", "test/scenarios/*"],
    ],
    ids=[
        "relative-to-root", "relative-to-cwd", "directory-path", "directory-name",
        "basename", "path-glob", "comma", "repeated",
    ],
)
def test_exclude_option(
    excludes: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    write(tmp_path / "test" / "scenarios" / "test_scenario_one.py", UNRUN)
    write(tmp_path / "test" / "test_unit.py", GOOD)
    monkeypatch.chdir(tmp_path)
    assert run_main(["test"], capsys)[0] == 1
    code, out, err = run_main([*excludes, "test"], capsys)
    assert (code, out) == (0, "")
    assert "checked 1 file," in err


def test_exclude_applies_to_explicit_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "test" / "scenarios" / "test_s.py", UNRUN)
    monkeypatch.chdir(tmp_path)
    path = os.path.join("test", "scenarios", "test_s.py")
    assert run_main([path], capsys)[0] == 1
    assert run_main(["--exclude", "test/scenarios/*", path], capsys)[:2] == (0, "")


# ------------------------------------------------------------------ parallel and speed


def _make_many(root: Path, count: int) -> list[str]:
    bad = []
    for i in range(count):
        path = root / f"d{i % 20:02d}" / f"test_{i:05d}.py"
        if i % 3 == 0:
            write(path, f"{UNRUN}x = {i}\n")
            bad.append(str(path))
        else:
            write(path, GOOD)
    return sorted(bad)


def test_many_files_are_all_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _make_many(tmp_path, 2000)
    code, out, err = run_main([str(tmp_path)], capsys)
    assert code == 1
    assert [LINE_RE.match(line).group("path") for line in out.splitlines()] == bad
    assert err == f"checked 2000 files, {len(bad)} problems\n"


@pytest.mark.parametrize("jobs", ["0", "2", "4"])
def test_jobs_give_the_same_output_as_serial(
    jobs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _make_many(tmp_path, 600)
    write(tmp_path / "test_broken.py", "def f(:\n")
    serial = run_main([str(tmp_path)], capsys)
    parallel = run_main(["--jobs", jobs, str(tmp_path)], capsys)
    assert serial[0] == 2
    assert parallel == serial


# ------------------------------------------------------------------ as a real process


@pytest.mark.e2e
def test_runs_as_a_script(tmp_path: Path) -> None:
    bad = write(tmp_path / "test_bad.py", 'import x\n\nif "__main__" == __name__:\n    x.main()\n' + UNRUN)
    missing = write(tmp_path / "sub" / "test_missing.py", UNRUN)
    write(tmp_path / "sub" / "test_good.py", GOOD)
    result = subprocess.run(
        [sys.executable, str(LINT_PATH), str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 1, result.stderr
    matches = [LINE_RE.match(line) for line in result.stdout.splitlines()]
    assert all(matches), result.stdout
    assert [(m["path"], m["line"], m["message"]) for m in matches] == [
        (str(missing), "1", lint.NO_MAIN_BLOCK),
        (str(bad), "3", lint.MAIN_BLOCK_WITHOUT_RUN_TESTS),
    ]
    assert result.stderr == "checked 3 files, 2 problems\n"


@pytest.mark.e2e
def test_script_exit_codes(tmp_path: Path) -> None:
    def run(*args: str) -> int:
        cmd = [sys.executable, str(LINT_PATH), "-q", *args]
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=120).returncode

    write(tmp_path / "good" / "test_good.py", GOOD)
    write(tmp_path / "broken" / "test_broken.py", "def f(:\n")
    assert run(str(tmp_path / "good")) == 0
    assert run(str(tmp_path / "broken")) == 2
    assert run(str(tmp_path / "does-not-exist")) == 2


# ------------------------------------------------------------------ pre-commit hook


def test_pre_commit_hook_definition() -> None:
    text = (ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    fields = dict(re.findall(r"^\s*-?\s*(\w+):\s*(.+?)\s*$", text, re.MULTILINE))
    assert fields["id"] == "continuous-test-lint"
    assert fields["entry"] == "continuous-test-lint"
    assert fields["language"] == "python"
    files = re.compile(fields["files"].strip("'\""))
    assert files.search("test/test_c10d.py")
    assert files.search("test_top.py")
    assert not files.search("test/c10d_test.py")
    assert not files.search("test_dir/helper.py")
    assert not files.search("test/test_notes.txt")



@pytest.mark.e2e
def test_project_test_files_and_examples_pass() -> None:
    # The self-check CI also runs: every test file of this project runs its tests as a script.
    proc = subprocess.run([sys.executable, "-m", "continuous_test.lint", "test", "examples"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"checked \d+ files?, 0 problems", proc.stderr), proc.stderr


if __name__ == "__main__":
    # pytest-style tests: run them through pytest and exit with its status.
    raise SystemExit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
