"""Check that each test file runs its tests when it is executed as a script.

A test file whose ``if __name__ == "__main__":`` block never calls ``run_tests()`` runs
nothing when CI executes it as ``python test_x.py``, and still exits 0. This checker finds
those files. It uses only the standard library (no torch, nothing else from continuous_test),
so it also works as ``python continuous_test/lint.py``.

How data flows::

    argv ──> _parse_args ──> Options
                               │ paths, --glob, --exclude
                               ▼
                         discover_files ──> sorted file paths (+ walk errors)
                               │ serial, or a process pool with --jobs
                               ▼
                         check_file ──> ast.parse ──> _find_tests, _main_blocks ──> _block_runs
                               │
                               ▼
                         [Problem, ...] ──> report: stdout + summary on stderr ──> ExitCode

Which runner a file needs depends on what it holds:

- **unittest classes** (a top-level class with a base class, named ``Test*``/``*Test(s)`` or
  defining ``test*`` methods): ``python test_x.py`` runs them only through a main block that
  calls ``run_tests()`` (``x.run_tests()``, ``a.b.run_tests()``, torch's or ours) or
  ``unittest.main()``, or that raises (to mark a file as not runnable as a script).
- **test functions** (top-level ``def test*``, ``@continuous_test.distributed`` functions,
  classes without a base named ``Test*``): pytest runs them, so a file with only these needs no
  main block.  unittest's runner does not run them, and fails on a parametrized
  ``@distributed`` function for lack of its arguments, so a main block of such a file that
  calls ``run_tests()`` or ``unittest.main()`` without calling ``pytest.main`` is reported.
- **both**: only pytest runs everything, so the main block must call ``pytest.main`` or raise.

A file that holds no test (no test function, no test class, no class derived from a base named
like a test case: a helper module named ``test_*.py``) needs no main block and is not reported.

Rules, each reported as ``path:line: message``, with advice that keeps the file runnable:

- A file that needs a main block has none (either operand order, any quotes). Reported on
  line 1: editors and CI annotations jump there reliably, and an empty file has no last line.
- No main block runs the tests as the file needs, nor raises. Reported on the line of each
  main block's ``if``. Any call or ``raise`` anywhere in the block's body counts, also inside
  one branch of an inner ``if`` or inside a nested ``def``; the ``else`` of the main ``if``
  itself does not. A file with several main blocks passes when any one of them passes.

Every file is parsed, even one whose text lacks ``__main__``: a syntax error is then always
reported (``path:LINE: cannot parse: <msg>``), and ``ast.parse`` is fast enough for thousands
of small files per second on one core.

Exit codes (``ExitCode``): 0 clean, 1 violations, 2 usage error or a file that could not be
read or parsed (2 takes precedence over 1; the other files are still checked).
"""
from __future__ import annotations

import argparse
import ast
import enum
import fnmatch
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Iterable, Iterator, NamedTuple, Sequence

__all__ = [
    "CANNOT_PARSE",
    "CANNOT_READ",
    "DEFAULT_GLOBS",
    "DEFAULT_SKIP_DIRS",
    "MAIN_BLOCK_WITHOUT_PYTEST",
    "MAIN_BLOCK_WITHOUT_RUN_TESTS",
    "NO_MAIN_BLOCK",
    "NO_MAIN_BLOCK_MIXED",
    "PATH_NOT_FOUND",
    "PROG",
    "PYTEST_MAIN",
    "SUMMARY",
    "UNITTEST_RUNNER_WITH_FUNCTIONS",
    "Discovery",
    "ExitCode",
    "Kind",
    "Options",
    "Problem",
    "check_file",
    "check_files",
    "check_source",
    "discover_files",
    "exit_code",
    "main",
    "report",
]

PROG = "continuous-test-lint"

# The main block that runs a file of test functions as a script; the advice quotes it.
PYTEST_MAIN = "raise SystemExit(pytest.main([__file__]))"

NO_MAIN_BLOCK = (
    "no 'if __name__ == \"__main__\":' block; add one that calls run_tests() "
    "so the file runs its tests when executed as a script"
)
NO_MAIN_BLOCK_MIXED = (
    "no 'if __name__ == \"__main__\":' block; the file has test classes and test functions, "
    f"which only pytest runs together: add one with 'import pytest' and '{PYTEST_MAIN}'"
)
MAIN_BLOCK_WITHOUT_RUN_TESTS = (
    "the '__main__' block neither calls run_tests() (or unittest.main()) nor raises; "
    "call run_tests() (or raise to mark the file as not runnable)"
)
MAIN_BLOCK_WITHOUT_PYTEST = (
    "the '__main__' block neither calls pytest.main() nor raises, and the file's test "
    f"functions run only under pytest: use 'import pytest' and '{PYTEST_MAIN}'"
)
UNITTEST_RUNNER_WITH_FUNCTIONS = (
    "the '__main__' block runs unittest's runner, which skips test functions such as "
    "'{name}' (line {line}) and fails on parametrized ones; run the file with pytest "
    f"instead: 'import pytest' and '{PYTEST_MAIN}'"
)
CANNOT_PARSE = "cannot parse: {error}"
CANNOT_READ = "cannot read: {error}"
PATH_NOT_FOUND = "path '{path}' does not exist"
SUMMARY = "checked {files} file{files_s}, {problems} problem{problems_s}"

DEFAULT_GLOBS = ("test_*.py",)
# Directory names (fnmatch patterns) never walked into; hidden directories are skipped too.
DEFAULT_SKIP_DIRS = ("__pycache__", ".tox", ".venv", "build", "*.egg-info")

_RUN_TESTS = "run_tests"
_MAIN = "__main__"
# A worker process costs more to start than checking a few dozen files, so only fan out
# when each worker gets at least this many.
_MIN_FILES_PER_JOB = 64


class ExitCode(enum.IntEnum):
    """Process exit status returned by main."""

    OK = 0
    PROBLEMS = 1
    ERROR = 2


class Kind(enum.Enum):
    """Whether a Problem is a rule violation or a file that could not be checked."""

    VIOLATION = "violation"
    ERROR = "error"


@dataclass(frozen=True)
class Problem:
    """One finding about one file, printed as ``path:line: message``."""

    path: str
    line: int
    message: str
    kind: Kind = field(default=Kind.VIOLATION)

    def format(self) -> str:
        """The problem as one output line: ``path:line: message``."""
        return f"{self.path}:{self.line}: {self.message}"


@dataclass(frozen=True)
class Options:
    """Command-line settings, resolved once by _parse_args."""

    paths: tuple[str, ...]
    globs: tuple[str, ...]
    excludes: tuple[str, ...]
    jobs: int
    quiet: bool


class Discovery(NamedTuple):
    """Files found by discover_files, and directories that could not be listed."""

    files: list[str]
    errors: list[Problem]


# ---------------------------------------------------------------------------- checking


def check_source(source: bytes | str, path: str) -> list[Problem]:
    """The problems of ``source``, the contents of the file named ``path``."""
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        return [_error(path, exc.lineno or 1, CANNOT_PARSE.format(error=exc.msg))]
    except (ValueError, RecursionError) as exc:
        return [_error(path, 1, CANNOT_PARSE.format(error=str(exc) or type(exc).__name__))]
    tests = _find_tests(tree)
    blocks = _main_blocks(tree)
    if tests.function is None and not tests.has_classes and not _may_inherit_tests(tree):
        return []  # a helper module named test_*.py: nothing for any runner to run
    if not blocks:
        if tests.function is not None and not tests.has_classes:
            return []  # pytest-style: pytest runs it, and `python file.py` is not its runner
        message = NO_MAIN_BLOCK_MIXED if tests.function is not None else NO_MAIN_BLOCK
        return [Problem(path, 1, message)]
    runners = _Runners.of(tree)
    found = [_block_runs(block, runners) for block in blocks]
    if tests.function is None:
        if any(f.unittest or f.pytest or f.raises for f in found):
            return []
        return [Problem(path, block.lineno, MAIN_BLOCK_WITHOUT_RUN_TESTS) for block in blocks]
    if any(f.pytest or (f.raises and not f.unittest) for f in found):
        return []
    if any(f.unittest for f in found):
        name, line = tests.function
        message = UNITTEST_RUNNER_WITH_FUNCTIONS.format(name=name, line=line)
        return [Problem(path, block.lineno, message) for block, f in zip(blocks, found) if f.unittest]
    if not tests.has_classes:
        return []  # a pytest-style file's main block may do something else
    return [Problem(path, block.lineno, MAIN_BLOCK_WITHOUT_PYTEST) for block in blocks]


def check_file(path: str) -> list[Problem]:
    """Read and check the file ``path``; a file that cannot be read is one problem."""
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        return [_error(path, 1, CANNOT_READ.format(error=exc.strerror or exc))]
    return check_source(source, path)


def check_files(files: Sequence[str], jobs: int = 1) -> list[Problem]:
    """Check ``files``: in this process, or in a pool of up to ``jobs`` processes once each gets enough files."""
    workers = min(jobs, len(files) // _MIN_FILES_PER_JOB)
    if workers <= 1:
        results: Iterable[list[Problem]] = map(check_file, files)
        return [problem for found in results for problem in found]
    chunksize = max(1, len(files) // (workers * 4))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        results = pool.map(check_file, files, chunksize=chunksize)
        return [problem for found in results for problem in found]


def _error(path: str, line: int, message: str) -> Problem:
    return Problem(path, line, message, Kind.ERROR)


def _main_blocks(tree: ast.Module) -> list[ast.If]:
    return [node for node in tree.body if isinstance(node, ast.If) and _is_main_test(node.test)]


def _is_main_test(test: ast.expr) -> bool:
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return False
    if not isinstance(test.ops[0], ast.Eq):
        return False
    operands = {_operand(test.left), _operand(test.comparators[0])}
    return operands == {"name", "main"}


def _operand(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name) and node.id == "__name__":
        return "name"
    if isinstance(node, ast.Constant) and node.value == _MAIN:
        return "main"
    return None


class _Tests(NamedTuple):
    """What kinds of tests a file defines: its first test function, and any unittest class."""

    function: tuple[str, int] | None
    has_classes: bool


def _find_tests(tree: ast.Module) -> _Tests:
    function = None
    has_classes = False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            function = function or (node.name, node.lineno)
        elif isinstance(node, ast.ClassDef):
            if _is_unittest_class(node):
                has_classes = True
            elif node.name.startswith("Test") and _defines_tests(node):
                function = function or (f"{node.name}.{_defines_tests(node)}", node.lineno)
    return _Tests(function, has_classes)


def _may_inherit_tests(tree: ast.Module) -> bool:
    """Whether a top-level class derives from a base named like a test case (``class T(unittest.TestCase)``):
    its tests may come from the base."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
                if "Test" in name:
                    return True
    return False


def _is_unittest_class(node: ast.ClassDef) -> bool:
    # A pytest class has no base; a unittest class inherits its runner from one.
    bases = [b for b in node.bases if not (isinstance(b, ast.Name) and b.id == "object")]
    if not bases:
        return False
    name = node.name
    named = name.startswith("Test") or name.endswith(("Test", "Tests", "TestCase"))
    return named or bool(_defines_tests(node))


def _defines_tests(node: ast.ClassDef) -> str:
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
            return item.name
    return ""


@dataclass(frozen=True)
class _Runners:
    """The names under which this file can call unittest's and pytest's ``main``."""

    modules: dict  # local module alias -> "unittest" or "pytest"
    functions: dict  # local name of an imported ``main`` -> "unittest" or "pytest"

    @classmethod
    def of(cls, tree: ast.Module) -> _Runners:
        modules: dict = {}
        functions: dict = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in ("unittest", "pytest"):
                        modules[alias.asname or alias.name] = alias.name
            elif isinstance(node, ast.ImportFrom) and node.module in ("unittest", "pytest"):
                for alias in node.names:
                    if alias.name == "main":
                        functions[alias.asname or alias.name] = node.module
        return cls(modules, functions)

    def kind(self, call: ast.Call) -> str | None:
        """'unittest' for run_tests() and unittest.main(), 'pytest' for pytest.main()."""
        func = call.func
        if isinstance(func, ast.Name):
            return "unittest" if func.id == _RUN_TESTS else self.functions.get(func.id)
        if not isinstance(func, ast.Attribute):
            return None
        if func.attr == _RUN_TESTS:
            return "unittest"
        if func.attr == "main" and isinstance(func.value, ast.Name):
            return self.modules.get(func.value.id)
        return None


class _Found(NamedTuple):
    """What one main block does: call unittest's runner, pytest's, or raise."""

    unittest: bool
    pytest: bool
    raises: bool


def _block_runs(block: ast.If, runners: _Runners) -> _Found:
    kinds = set()
    raises = False
    for statement in block.body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Raise):
                raises = True
            elif isinstance(node, ast.Call):
                kinds.add(runners.kind(node))
    return _Found("unittest" in kinds, "pytest" in kinds, raises)


# --------------------------------------------------------------------------- discovery


def discover_files(
    paths: Iterable[str],
    globs: Sequence[str] = DEFAULT_GLOBS,
    excludes: Sequence[str] = (),
) -> Discovery:
    """Turn existing paths into the sorted files to check, and the directories that could not be listed.

    A directory is walked for files matching globs; a file is taken whatever its name. Both
    honour excludes, matched against the path as shown, the path relative to the current
    directory and to the walked directory, and the basename.
    """
    found: set[str] = set()
    errors: list[Problem] = []
    for path in paths:
        path = os.path.normpath(path)
        if os.path.isdir(path):
            found.update(_walk(path, globs, excludes, errors))
        elif not _is_excluded(path, os.path.dirname(path), excludes):
            found.add(path)
    return Discovery(sorted(found), sorted(errors, key=_sort_key))


def _walk(
    root: str, globs: Sequence[str], excludes: Sequence[str], errors: list[Problem]
) -> Iterator[str]:
    def on_error(exc: OSError) -> None:
        where = exc.filename or root
        errors.append(_error(where, 1, CANNOT_READ.format(error=exc.strerror or exc)))

    for dirpath, dirnames, filenames in os.walk(root, onerror=on_error):
        dirnames[:] = sorted(
            name for name in dirnames
            if not _skip_dir(name, os.path.join(dirpath, name), root, excludes)
        )
        for name in filenames:
            path = os.path.normpath(os.path.join(dirpath, name))
            if _matches_glob(name, path, root, globs) and not _is_excluded(path, root, excludes):
                yield path


def _skip_dir(name: str, path: str, root: str, excludes: Sequence[str]) -> bool:
    if name.startswith(".") or _matches_any((name,), DEFAULT_SKIP_DIRS):
        return True
    return _is_excluded(path, root, excludes)


def _matches_glob(name: str, path: str, root: str, globs: Sequence[str]) -> bool:
    if _matches_any((name,), globs):
        return True
    # A glob with a separator (e.g. "unit/test_*.py") is meant for the relative path.
    return any("/" in g for g in globs) and _matches_any(_candidates(path, root), globs)


def _is_excluded(path: str, root: str, excludes: Sequence[str]) -> bool:
    return bool(excludes) and _matches_any(_candidates(path, root), excludes)


def _candidates(path: str, root: str) -> tuple[str, ...]:
    names = [path, os.path.basename(path)]
    for start in (root or os.curdir, os.curdir):
        try:
            names.append(os.path.relpath(path, start))
        except ValueError:  # Windows: path and start on different drives
            pass
    return tuple(name.replace(os.sep, "/") for name in names)


def _matches_any(names: Iterable[str], patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for name in names for pattern in patterns)


# ----------------------------------------------------------------------------- command


def report(problems: Sequence[Problem], n_files: int, quiet: bool = False) -> None:
    """Print ``problems`` to stdout and, unless ``quiet``, a summary to stderr."""
    for problem in problems:
        print(problem.format(), file=sys.stdout)
    if quiet:
        return
    summary = SUMMARY.format(
        files=n_files,
        files_s="" if n_files == 1 else "s",
        problems=len(problems),
        problems_s="" if len(problems) == 1 else "s",
    )
    print(summary, file=sys.stderr)


def exit_code(problems: Iterable[Problem]) -> ExitCode:
    """The process exit status for ``problems``: ERROR if a file could not be checked, else PROBLEMS or OK."""
    kinds = {problem.kind for problem in problems}
    if Kind.ERROR in kinds:
        return ExitCode.ERROR
    return ExitCode.PROBLEMS if kinds else ExitCode.OK


def main(argv: list[str] | None = None) -> int:
    """Run the checker with command line ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    try:
        options = _parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors
        return exc.code if isinstance(exc.code, int) else int(ExitCode.ERROR)
    missing = [path for path in options.paths if not os.path.lexists(path)]
    for path in missing:
        print(f"{PROG}: error: {PATH_NOT_FOUND.format(path=path)}", file=sys.stderr)
    if missing:
        return int(ExitCode.ERROR)
    discovery = discover_files(options.paths, options.globs, options.excludes)
    checked = check_files(discovery.files, options.jobs)
    problems = sorted(discovery.errors + checked, key=_sort_key)
    report(problems, len(discovery.files), options.quiet)
    return int(exit_code(problems))


def _sort_key(problem: Problem) -> tuple[str, int, str]:
    return (problem.path, problem.line, problem.message)


def _parse_args(argv: list[str] | None) -> Options:
    parser = _build_parser()
    args = parser.parse_args(argv)
    globs = _split_patterns(args.glob)
    if args.glob is not None and not globs:
        parser.error("--glob needs at least one non-empty pattern")
    return Options(
        paths=tuple(args.paths or [os.curdir]),
        globs=globs or DEFAULT_GLOBS,
        excludes=_split_patterns(args.exclude),
        jobs=args.jobs or os.cpu_count() or 1,
        quiet=args.quiet,
    )


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Check that each test file runs its tests when executed as a script: "
        "a '__main__' block that calls run_tests(), unittest.main() or, for test functions, "
        "pytest.main(); files of pytest-style test functions alone need none.",
    )
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="files (checked whatever their name) or directories (default: .)")
    parser.add_argument("--glob", action="append", metavar="PATTERN",
                        help="file name pattern for directory walks; repeatable or comma "
                        f"separated (default: {','.join(DEFAULT_GLOBS)})")
    parser.add_argument("--exclude", action="append", metavar="PATTERN",
                        help="fnmatch pattern for a relative path or basename to skip; "
                        "repeatable or comma separated")
    parser.add_argument("-j", "--jobs", type=_jobs, default=1, metavar="N",
                        help="worker processes (0: one per CPU; default: 1)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print nothing on success and no summary")
    return parser


def _split_patterns(values: list[str] | None) -> tuple[str, ...]:
    return tuple(part for value in values or () for part in value.split(",") if part)


def _jobs(value: str) -> int:
    try:
        jobs = int(value)
    except ValueError:
        jobs = -1
    if jobs < 0:
        raise argparse.ArgumentTypeError(f"invalid --jobs value {value!r}; use 0 or more")
    return jobs


if __name__ == "__main__":
    sys.exit(main())
