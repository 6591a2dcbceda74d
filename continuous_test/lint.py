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
                         check_file ──> ast.parse ──> _main_blocks ──> _block_runs_tests
                               │
                               ▼
                         [Problem, ...] ──> report: stdout + summary on stderr ──> ExitCode

Rules, each reported as ``path:line: message``:

- The file has no top-level ``if __name__ == "__main__":`` block (either operand order, any
  quotes). Reported on line 1: editors and CI annotations jump there reliably, and an empty
  file has no last line.
- No main block calls ``run_tests`` (``run_tests(...)``, ``x.run_tests(...)``,
  ``a.b.run_tests(...)``) or raises. Reported on the line of each main block's ``if``. Any
  call or ``raise`` anywhere in the block's body counts, also inside one branch of an inner
  ``if`` or inside a nested ``def``; the ``else`` of the main ``if`` itself does not. A file
  with several main blocks passes when any one of them passes.

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
    "MAIN_BLOCK_WITHOUT_RUN_TESTS",
    "NO_MAIN_BLOCK",
    "PATH_NOT_FOUND",
    "PROG",
    "SUMMARY",
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

NO_MAIN_BLOCK = (
    "no 'if __name__ == \"__main__\":' block; add one that calls run_tests() "
    "so the file runs its tests when executed as a script"
)
MAIN_BLOCK_WITHOUT_RUN_TESTS = (
    "the '__main__' block neither calls run_tests() nor raises; "
    "call run_tests() (or raise to mark the file as not runnable)"
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
        """Called by report to render the problem as one output line."""
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
    """Called by check_file (and tests) to check the contents of one file named path."""
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        return [_error(path, exc.lineno or 1, CANNOT_PARSE.format(error=exc.msg))]
    except (ValueError, RecursionError) as exc:
        return [_error(path, 1, CANNOT_PARSE.format(error=str(exc) or type(exc).__name__))]
    blocks = _main_blocks(tree)
    if not blocks:
        return [Problem(path, 1, NO_MAIN_BLOCK)]
    if any(_block_runs_tests(block) for block in blocks):
        return []
    return [Problem(path, block.lineno, MAIN_BLOCK_WITHOUT_RUN_TESTS) for block in blocks]


def check_file(path: str) -> list[Problem]:
    """Called by check_files, in this process or a pool worker, for each file to check."""
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        return [_error(path, 1, CANNOT_READ.format(error=exc.strerror or exc))]
    return check_source(source, path)


def check_files(files: Sequence[str], jobs: int = 1) -> list[Problem]:
    """Called by main to check every discovered file, in a process pool when jobs > 1."""
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


def _block_runs_tests(block: ast.If) -> bool:
    for statement in block.body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Raise) or _is_run_tests_call(node):
                return True
    return False


def _is_run_tests_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id == _RUN_TESTS
    return isinstance(func, ast.Attribute) and func.attr == _RUN_TESTS


# --------------------------------------------------------------------------- discovery


def discover_files(
    paths: Iterable[str],
    globs: Sequence[str] = DEFAULT_GLOBS,
    excludes: Sequence[str] = (),
) -> Discovery:
    """Called by main to turn existing command-line paths into the sorted files to check.

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
    """Called by main to print problems to stdout and, unless quiet, a summary to stderr."""
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
    """Called by main to map the problems found to the process exit status."""
    kinds = {problem.kind for problem in problems}
    if Kind.ERROR in kinds:
        return ExitCode.ERROR
    return ExitCode.PROBLEMS if kinds else ExitCode.OK


def main(argv: list[str] | None = None) -> int:
    """Called by the console script and ``python -m continuous_test.lint``; returns exit code."""
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
        description="Check that each test file's '__main__' block calls run_tests() or raises.",
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
