"""Scenario runs inside the test process, on pytest's ``pytester`` model.

``python scenarios/FILE args`` and ``pytest scenarios/FILE args`` cost an interpreter,
``import torch`` and a template each as real processes (about 3 s of CPU).  Here the
scenario file runs in the process of the test that asked for it, with this
library's own runner (``run_tests()``) or ``pytest.main``, under the environment,
working directory and ``sys.argv`` the real process would have had, its output
captured at the file descriptors.  Its worlds fork from this process's one template,
started once per worker.  What it returns is the ``subprocess.CompletedProcess`` the
real run would have returned, so a test reads either the same way.

What is scoped to one run and put back after it: ``os.environ``, the working
directory, ``sys.argv``, ``sys.path``, the scenario's modules in ``sys.modules`` (and
a test module of this suite whose name a scenario shares, set aside while it runs),
signal handlers, warnings filters, the controller's run log, bisect budget and the
runner in use; every world the run left is stopped, and so is a template it forked.

Not everything can run here.  :func:`reason_for_real` names what needs the real
process: a main block other than ``run_tests()``, xdist (``-n``), a working
directory of its own, a launcher's variables.  A ``PYTHONPATH`` of its own goes on
``sys.path`` as the interpreter would put it there, and the run forks a template of
its own, whose ranks have it too.  ``CT_SCENARIOS=subprocess``
(the suite's ``--scenarios=subprocess``) makes every scenario run a real process, as
pytest's ``--runpytest=subprocess`` does.
"""
from __future__ import annotations

import contextlib
import faulthandler
import io
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
import types
import warnings
from multiprocessing import process as mp_process, spawn as mp_spawn, util as mp_util
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import tiers
import zygote

_LAUNCHER_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "TORCHELASTIC_", "MPI_LOCAL")
_LAUNCHER_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
ENV_MODE = "CT_SCENARIOS"  # "subprocess": every scenario run is a real process
TEST_DIR = Path(__file__).resolve().parent
SCENARIOS = TEST_DIR / "scenarios"
_MAIN_BLOCK = re.compile(r'^if __name__ == "__main__":\n    run_tests\(\)\n\Z', re.M)
_SIGNALS = [s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGUSR1, signal.SIGUSR2,
                        signal.SIGALRM, signal.SIGHUP) if s is not None]


def enabled() -> bool:
    """Whether scenario runs may run in this process (the default); ``CT_SCENARIOS=subprocess``, or the suite's
    ``--scenarios=subprocess``, makes every one a real process."""
    return os.environ.get(ENV_MODE, "inprocess") != "subprocess"


def reason_for_real(runner: str, scenario: str, args: Sequence[str], env: Optional[Dict[str, str]],
                    cwd: Optional[Path]) -> Optional[str]:
    """Why this run needs a real process (None: it can run here)."""
    path = SCENARIOS / (f"{scenario.split('.')[0]}.py" if runner == "unittest" else scenario.split("::")[0])
    if cwd is not None and Path(cwd) != SCENARIOS:
        return "a working directory of its own"
    if not path.is_file():
        return "not a scenario file"
    if env and any(k.startswith(_LAUNCHER_PREFIXES) or k in _LAUNCHER_NAMES for k in env):
        return "a launcher's variables: the process would be a launched rank"
    if runner == "unittest":
        return None if all((SCENARIOS / f"{a.split('.')[0]}.py").is_file() for a in args if not a.startswith("-")) \
            else "not scenario modules"
    if runner == "python" and not _MAIN_BLOCK.search(path.read_text()):
        return "its main block is not run_tests()"
    if runner == "pytest" and any(a == "-n" or a.startswith(("-n", "--numprocesses", "--pdb")) for a in args):
        return "xdist or --pdb"
    return None


def python(scenario: str, args: Sequence[str], env: Dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``python scenarios/<scenario> args...`` in this process: the file, as ``__main__``, through ``run_tests()``."""
    path = SCENARIOS / scenario
    argv = [scenario, *args]

    def body() -> int:
        from continuous_test.runner import run_tests

        # As the interpreter runs a script: a module named __main__ with no spec.  Ranks
        # forked from this process's template find another __main__ there and load the
        # class's file (continuous_test/rank/run.py, import_test_class).
        module = types.ModuleType("__main__")
        module.__file__ = str(path)
        module.__spec__ = None
        # multiprocessing's alias, as its import made it in the real process.
        sys.modules["__main__"] = sys.modules["__mp_main__"] = module
        exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
        run_tests(argv=argv, module="__main__")
        return 0

    return _run([sys.executable, scenario, *args], argv, env, timeout, body, own=["__main__", "__mp_main__"])


def unittest(args: Sequence[str], env: Dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``python -m unittest args...`` in this process: ``unittest.main`` with the same arguments."""
    import unittest as unittest_module

    def body() -> int:
        unittest_module.main(module=None, argv=["python -m unittest", *args])
        return 0

    return _run([sys.executable, "-m", "unittest", *args], ["python -m unittest", *args], env, timeout, body, own=[])


def pytest(args: Sequence[str], env: Dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``python -m pytest args...`` in this process: ``pytest.main`` with the same arguments."""
    import pytest as pytest_module

    def body() -> int:
        return int(pytest_module.main(list(args)))

    return _run([sys.executable, "-m", "pytest", *args], ["pytest", *args], env, timeout, body, own=[])


def _run(args: List[str], argv: List[str], env: Dict[str, str], timeout: float, body,
         own: List[str]) -> subprocess.CompletedProcess:
    tiers.uses("world", "runs a scenario in process")
    from continuous_test.template import server

    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    if paths:
        server.stop()  # the template's sys.path is the one it was forked with: this run forks its own
    template_before = server.template_pid()
    with _scoped(env, argv, own, paths), _captured() as output:
        # A hang is a bug of the run: end this process with every thread's stack, as the
        # subprocess's timeout would have ended the run.
        faulthandler.dump_traceback_later(timeout, exit=True)
        try:
            code = body()
        except SystemExit as exc:
            code = zygote.exit_status(exc.code)
        except Exception:  # as the interpreter ends on an uncaught exception: its traceback, exit code 1
            traceback.print_exc(file=sys.stderr)
            code = 1
        finally:
            faulthandler.cancel_dump_traceback_later()
            _stop_worlds(template_before)
    stdout, stderr = output
    return subprocess.CompletedProcess(args, code, stdout, stderr)


def _stop_worlds(template_before: Optional[int]) -> None:
    """Stop every world the run left, and a template it started (forked, or the fresh interpreter that
    replaced a forked one whose probe failed): a later run's ranks must not fork from a process that holds
    this run's modules and ``__main__`` (a real run's template ends with it)."""
    from continuous_test.controller import world
    from continuous_test.template import server

    world.stop_all()
    if server.template_pid() not in (None, template_before):
        server.stop()


@contextlib.contextmanager
def _scoped(env: Dict[str, str], argv: List[str], own: List[str], paths: List[str]) -> Iterator[None]:
    """The process state of a fresh run for the block, put back after it."""
    from continuous_test.controller import bisect, progress, run_log

    saved_env, saved_cwd, saved_argv, saved_path = dict(os.environ), os.getcwd(), sys.argv[:], sys.path[:]
    saved_modules = dict(sys.modules)
    saved_handlers = {s: signal.getsignal(s) for s in _SIGNALS}
    saved_where, saved_log, saved_tempdir = progress._where, run_log.log(), tempfile.tempdir
    import torch

    saved_dtype = torch.get_default_dtype()  # a scenario's conftest may set it (conftest_thread/)
    # multiprocessing's temp dir (the template's and the worlds' private directory): the run makes its own
    # under its TMPDIR, removed after it, as a real process's is at its exit.
    mp_config = getattr(mp_process.current_process(), "_config")
    saved_mp_tempdir = mp_config.pop("tempdir", None)
    # A module of this suite that a scenario shares a name with (test_leaks.py in both):
    # set aside, so that the scenario's import finds its own file.
    for name in _shadowed():
        del sys.modules[name]
    os.environ.clear()
    os.environ.update(env)
    saved_executable = _fork_fresh_templates()
    os.chdir(SCENARIOS)
    sys.argv[:] = argv
    sys.path[:0] = [str(SCENARIOS), *paths]  # the script's directory, then PYTHONPATH's entries
    progress.use_unittest()
    run_log.reset()
    tempfile.tempdir = None  # read from TMPDIR again
    bisect.reset_budget()
    try:
        with warnings.catch_warnings():
            _fresh_warnings()
            yield
    finally:
        for name in [n for n in sys.modules if n not in saved_modules or sys.modules[n] is not saved_modules[n]]:
            if name in own or _from_scenarios(sys.modules[name]):
                del sys.modules[name]
        sys.modules.update({n: m for n, m in saved_modules.items() if n not in sys.modules})
        for s, handler in saved_handlers.items():
            if handler is not None:
                signal.signal(s, handler)
        _remove_mp_tempdir(mp_config.pop("tempdir", None))
        if saved_mp_tempdir is not None:
            mp_config["tempdir"] = saved_mp_tempdir
        progress._where = saved_where
        torch.set_default_dtype(saved_dtype)
        tempfile.tempdir = saved_tempdir
        run_log._log = saved_log  # type: ignore[attr-defined]
        sys.path[:] = saved_path
        sys.argv[:] = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        multiprocessing.set_executable(saved_executable)


def _fork_fresh_templates() -> str:
    """Where this worker's zygote runs already, a fresh-interpreter template the run starts (multiprocessing's
    forkserver, chosen when the process runs other threads) is forked from it too, as it is in a real run
    (test/zygote.py); returns multiprocessing's executable before."""
    before = os.fsdecode(mp_spawn.get_executable())  # bytes on POSIX: set_executable() encodes what it is given
    running = zygote.running()
    if running is not None:
        os.environ[zygote.ENV_SOCKET], shim = running
        multiprocessing.set_executable(shim)
    return before


def _remove_mp_tempdir(path: Optional[str]) -> None:
    """Remove the run's multiprocessing temp dir, through multiprocessing's own finalizer where it made one."""
    if path is None:
        return
    for finalizer in list(getattr(mp_util, "_finalizer_registry").values()):
        if path in (getattr(finalizer, "_args", None) or ()):
            try:
                finalizer()
            except FileNotFoundError:  # a killed template's own cleanup got there first
                pass
    shutil.rmtree(path, ignore_errors=True)  # made by the template's short-path fallback instead


def _fresh_warnings() -> None:
    """A fresh interpreter's warnings filters, and warnings printed to ``sys.stderr`` (not
    recorded by the pytest that runs this test)."""
    warnings.resetwarnings()
    for category, module in ((DeprecationWarning, "__main__"), (DeprecationWarning, ""),
                             (PendingDeprecationWarning, ""), (ImportWarning, ""), (ResourceWarning, "")):
        warnings.filterwarnings("default" if module else "ignore", category=category, module=module, append=True)
    warnings._showwarnmsg_impl = _print_warning  # type: ignore[attr-defined]


def _print_warning(msg: warnings.WarningMessage) -> None:
    (msg.file or sys.stderr).write(warnings._formatwarnmsg(msg))  # type: ignore[attr-defined]


def _shadowed() -> List[str]:
    names = {p.stem for p in SCENARIOS.glob("*.py")}
    return [n for n in names if n in sys.modules and not _from_scenarios(sys.modules[n])]


def _from_scenarios(module: object) -> bool:
    file = getattr(module, "__file__", None)
    return bool(file) and Path(str(file)).resolve().is_relative_to(SCENARIOS)


@contextlib.contextmanager
def _captured() -> Iterator[Tuple[str, str]]:
    """Capture file descriptors 1 and 2 (and ``sys.stdout``/``sys.stderr`` on them); yields (stdout, stderr) after."""
    result: List[str] = []
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        saved_fds = os.dup(1), os.dup(2)
        saved_streams = sys.stdout, sys.stderr
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        # On the descriptors themselves, as a real process's: a rank forked meanwhile
        # redirects 1 and 2 to its log, and its sys.stdout must follow.
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
        holder = _Output()
        try:
            yield holder  # type: ignore[misc]
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
                stream.close()
            sys.stdout, sys.stderr = saved_streams
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            for fd in saved_fds:
                os.close(fd)
            for f in (out, err):
                f.seek(0)
                result.append(f.read().decode("utf-8", "replace"))
            holder[:] = result


class _Output(list):
    """(stdout, stderr), filled when the capture ends."""
