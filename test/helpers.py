"""Run scenario files as real subprocesses and read what they report."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import unittest as _unittest  # the module; unittest() below runs one
from pathlib import Path
from typing import Dict, Optional, Sequence

import inprocess
import tiers
import zygote

from continuous_test import config

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = Path(__file__).resolve().parent / "scenarios"
RUN_TIMEOUT = 300  # a guard against hangs, never a performance assertion
# Quiet defaults of every scenario run: a failed shared-world test is not rerun and
# bisected, and ranks that have not reported after a failure elsewhere are waited for
# one second, not three.  A test about either sets its own value (BISECT_ON, a GRACE).
QUIET = {"CONTINUOUS_TEST_BISECT": "off", "CONTINUOUS_TEST_GRACE": "1"}
BISECT_ON = {"CONTINUOUS_TEST_BISECT": str(config.DEFAULT_BISECT_BUDGET)}  # the default budget
DEFAULTS = {**BISECT_ON, "CONTINUOUS_TEST_GRACE": str(config.DEFAULT_GRACE)}  # the library's own, as a user's run has them


def scenario_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment scenario subprocesses run in: the checkout first on the path, and the zygote's socket
    (test/zygote.py), so that what they start with ``sys.executable`` is forked too."""
    env = _scenario_env(extra)
    sock = zygote.socket_path()
    if sock:
        env.setdefault(zygote.ENV_SOCKET, sock)
    return env


def _scenario_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """:func:`scenario_env` without the zygote: a run in this process starts no process that could use it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("PYTEST_ADDOPTS", None)
    # Under CI=true, torch's run_tests() (used by the torch-style scenario files) writes
    # XML reports and needs unittest-xml-reporting; these runs are not torch's CI.
    env.pop("CI", None)
    for key in list(env):
        if key.startswith(("CONTINUOUS_TEST_", "TORCHELASTIC_", "SLURM_", "OMPI_COMM_WORLD_", "PMI_", "PMIX_")) or key in (
                "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"):
            env.pop(key)
    env.update(QUIET)
    env[tiers.ENV_SCENARIO_RUN] = "1"  # the run's own tests are not this suite's (test/conftest.py)
    env.update(extra or {})
    return env


def interpreter(fresh: bool = False) -> str:
    """The ``python`` of a real process: forked from this test process's zygote (test/zygote.py: a real
    process without ``import torch`` to pay), or with ``fresh`` (or ``CT_ZYGOTE=0``) a new interpreter."""
    return sys.executable if fresh else zygote.python()


def with_ctrl_c() -> None:
    """``preexec_fn`` for a process a test sends Ctrl-C (SIGINT): as a terminal's foreground job has it.

    A suite started with SIGINT ignored (a shell's background job, ``nohup``) passes that on to every process
    it starts, and a Python started so ignores Ctrl-C for good."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run(args: Sequence[str], env: Optional[Dict[str, str]] = None, timeout: float = RUN_TIMEOUT,
        cwd: Optional[Path] = None, fresh: bool = False) -> subprocess.CompletedProcess:
    """Run a command to completion and return it with text output (a real process: the e2e tier).  A
    ``sys.executable`` command runs forked from the zygote unless ``fresh`` (:func:`interpreter`)."""
    tiers.uses("e2e", f"runs a real process ({Path(str(args[0])).name} ...)")
    args = list(args)
    if args[0] == sys.executable:
        args[0] = interpreter(fresh)
    return subprocess.run(args, cwd=str(cwd or SCENARIOS), env=scenario_env(env), timeout=timeout,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def python(scenario: str, *args: str, real: bool = False, env: Optional[Dict[str, str]] = None,
           timeout: float = RUN_TIMEOUT, cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    """``python scenarios/<scenario> args...``: in this process (test/inprocess.py) unless ``real``
    or the run needs the real process."""
    if not real and inprocess.enabled() and inprocess.reason_for_real("python", scenario, args, env, cwd) is None:
        return inprocess.python(scenario, args, _scenario_env(env), timeout)
    return run([sys.executable, scenario, *args], env=env, timeout=timeout, cwd=cwd)


def unittest(*args: str, real: bool = False, env: Optional[Dict[str, str]] = None,
             timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess:
    """``python -m unittest args...`` in the scenarios directory: in this process (test/inprocess.py)
    unless ``real`` or the run needs the real process."""
    if not real and inprocess.enabled() and inprocess.reason_for_real("unittest", args[0], args, env, None) is None:
        return inprocess.unittest(args, _scenario_env(env), timeout)
    return run([sys.executable, "-m", "unittest", *args], env=env, timeout=timeout)


def pytest(scenario: str, *args: str, real: bool = False, env: Optional[Dict[str, str]] = None,
           timeout: float = RUN_TIMEOUT, cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    """``python -m pytest scenarios/<scenario> args...`` with no cache and plain output: in this
    process (test/inprocess.py) unless ``real`` or the run needs the real process."""
    argv = ["-p", "no:cacheprovider", "-q", scenario, *args]
    if not real and inprocess.enabled() and inprocess.reason_for_real("pytest", scenario, args, env, cwd) is None:
        return inprocess.pytest(argv, _scenario_env(env), timeout)
    return run([sys.executable, "-m", "pytest", *argv], env=env, timeout=timeout, cwd=cwd)


def torchrun(scenario: str, nproc: int, *args: str, **kwargs) -> subprocess.CompletedProcess:
    """``torchrun --nproc-per-node N scenarios/<scenario> args...`` on loopback."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                "--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    return run([*launcher, scenario, *args], **kwargs)


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def verbose_name(test: str, cls: str, module: str = "__main__") -> str:
    """How unittest's verbose output names ``module.cls.test`` on this Python: ``test_x (__main__.C.test_x)``
    from 3.11 on, ``test_x (__main__.C)`` on 3.10 (``TestCase.__str__``)."""
    if sys.version_info >= (3, 11):
        return f"{test} ({module}.{cls}.{test})"
    return f"{test} ({module}.{cls})"


def decorator_skips_counted() -> bool:
    """Whether this Python's unittest counts a test that ``@unittest.skip`` skips (on the method or its class)
    in ``Ran N tests``.  3.12.1 did not: its ``TestCase.run`` called ``startTest`` only for tests that
    were not skipped that way (CPython gh-106584, undone by gh-113267 in 3.12.2 and 3.13)."""
    class Probe(_unittest.TestCase):
        @_unittest.skip("probe")
        def test_skipped(self) -> None:
            pass

    result = _unittest.TestResult()
    Probe("test_skipped").run(result)
    return result.testsRun == 1


def notes(error: BaseException) -> list:
    """The notes added to ``error``: its ``__notes__``, or on Python 3.10, which has none, those that
    ``continuous_test.verdict.report.join_note`` joined to its message."""
    from continuous_test.verdict.report import JOINED_NOTES

    return list(getattr(error, "__notes__", None) or getattr(error, JOINED_NOTES, []))


def unittest_counts(output: str) -> Dict[str, int]:
    """Parse unittest's summary (``Ran N tests`` and ``FAILED (failures=1, skipped=2)``)."""
    counts: Dict[str, int] = {}
    ran = re.search(r"^Ran (\d+) tests? in", output, re.M)
    if ran:
        counts["ran"] = int(ran.group(1))
    summary = re.search(r"^(OK|FAILED)(?: \((.*)\))?$", output, re.M)
    if summary and summary.group(2):
        for part in summary.group(2).split(","):
            key, value = part.strip().split("=")
            counts[key] = int(value)
    return counts


def pytest_counts(output: str) -> Dict[str, int]:
    """Parse pytest's final line (``1 failed, 2 passed, 1 skipped in 3.2s``)."""
    line = [text for text in output.strip().splitlines()
            if " in " in text and re.search(r"\d+ (passed|failed|skipped|error)", text)]
    counts: Dict[str, int] = {}
    if line:
        for number, word in re.findall(r"(\d+) (\w+)", line[-1]):
            if not word.startswith("warning"):
                counts[word] = int(number)
    return counts


def describe(proc: subprocess.CompletedProcess) -> str:
    """Everything a failed assertion should show about a subprocess."""
    return f"exit code {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
