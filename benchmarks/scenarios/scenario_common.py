"""What every scenario file shares: its settings, the test bodies, and timestamps.

A scenario file is started by ``benchmarks/run.py`` as ``python <file>.py`` with its
settings in ``BENCH_*`` environment variables.  It appends one JSON object per line
to the file named by ``BENCH_STAMPS``: ``{"t": <time.monotonic()>, "pid": ...,
"event": ...}``.  ``time.monotonic()`` is the system-wide ``CLOCK_MONOTONIC`` on
Linux, so stamps of the controller, of its ranks and of the benchmark runner are on
one clock.  Only a few tests are stamped (the first, the last, the ones around a
fault), so stamping adds nothing measurable to the per-test cost.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Dict, List, Optional

__all__ = [
    "SETTINGS",
    "Settings",
    "stamp",
    "mark_controller",
    "is_controller",
    "body",
    "fresh_body",
    "memory_of",
    "process_tree",
    "suite_test_names",
    "add_tests",
    "StampedRun",
    "MEMORY_TEST",
    "FAULT_KINDS",
    "add_fault_tests",
]

MEMORY_TEST = "test_zz_memory"
CONTROLLER_ENV = "BENCH_CONTROLLER_PID"


class Settings:
    """The scenario's parameters, read once from the environment."""

    def __init__(self, env: Dict[str, str] = os.environ) -> None:
        self.stamps: Optional[str] = env.get("BENCH_STAMPS")
        self.kind: str = env.get("BENCH_KIND", "suite")
        self.n: int = int(env.get("BENCH_N", "4"))
        self.world_size: int = int(env.get("BENCH_WORLD_SIZE", "2"))
        self.memory: bool = env.get("BENCH_MEMORY") == "1"
        self.pg_timeout: float = float(env.get("BENCH_PG_TIMEOUT", "120"))
        self.hang_limit: float = float(env.get("BENCH_HANG_LIMIT", "5"))
        self.hang_seconds: float = float(env.get("BENCH_HANG_SECONDS", "600"))


SETTINGS = Settings()


def stamp(event: str, **fields: Any) -> None:
    """Append one timestamped event to the stamps file; scenario files call this."""
    if not SETTINGS.stamps:
        return
    record = {"t": time.monotonic(), "pid": os.getpid(), "event": event, **fields}
    line = (json.dumps(record) + "\n").encode()
    # One O_APPEND write per line: lines from concurrent processes never interleave.
    fd = os.open(SETTINGS.stamps, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def mark_controller() -> None:
    """Remember the controller's pid; the ``__main__`` block calls this before running."""
    os.environ[CONTROLLER_ENV] = str(os.getpid())


def is_controller() -> bool:
    """True in the process that runs the test runner (not in a rank)."""
    return os.environ.get(CONTROLLER_ENV) == str(os.getpid())


def body() -> None:
    """The trivial collective every suite test runs."""
    import torch
    import torch.distributed as dist

    t = torch.ones(8)
    dist.all_reduce(t)


def fresh_body(init: Callable[[], Any]) -> None:
    """A fresh world's body: ``init()`` the default group, one all_reduce, destroy."""
    import torch.distributed as dist

    init()
    body()
    dist.destroy_process_group()


def _status_kb(pid: int, keys: tuple) -> Dict[str, int]:
    found: Dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in keys:
                    found[key] = int(value.split()[0])
    except OSError:
        pass
    return found


def _pss_kb(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def memory_of(pid: int) -> Dict[str, Any]:
    """Peak and current resident memory (kB) of one process, from /proc."""
    mem: Dict[str, Any] = {"pid": pid}
    status = _status_kb(pid, ("VmHWM", "VmRSS"))
    mem["hwm_kb"] = status.get("VmHWM")
    mem["rss_kb"] = status.get("VmRSS")
    mem["pss_kb"] = _pss_kb(pid)
    return mem


def process_tree(root: int) -> List[int]:
    """``root`` and every live descendant of it, found through /proc."""
    children: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def suite_test_names(n: int) -> List[str]:
    """Names of the ``n`` generated suite tests, in the order unittest runs them."""
    return [f"test_{i:04d}" for i in range(n)]


def add_tests(cls: type, n: int, make: Callable[[str], Callable]) -> None:
    """Attach ``n`` generated tests to ``cls`` (and the memory test if asked for)."""
    for name in suite_test_names(n):
        setattr(cls, name, make(name))
    if SETTINGS.memory:
        setattr(cls, MEMORY_TEST, _memory_test)


def _memory_test(self) -> None:
    body()
    stamp("rank_memory", rank=self.rank, **memory_of(os.getpid()))


class StampedRun:
    """Mixin: the controller stamps the start and end of selected tests.

    Stamped: the first and last suite test (and every test of a fault scenario), and
    the class's teardown.  After the memory test, while the ranks still live, the
    controller records the memory of its whole process tree.
    """

    STAMP_ALL = False
    # This run() always runs the test: continuous_test may send the next one ahead.
    send_ahead = True

    def run(self, result=None):
        """unittest's seam: stamp around the test in the controller, run it plainly elsewhere."""
        if not is_controller():
            return super().run(result)
        name = self._testMethodName
        names = _stamped_names()
        stamped = self.STAMP_ALL or name in names
        if stamped:
            stamp("test_start", test=name)
        before = _counts(result)
        outcome = super().run(result)
        if stamped:
            stamp("test_end", test=name, status=_status(before, _counts(result)))
        if name == MEMORY_TEST:
            stamp("tree_memory", procs=[memory_of(pid) for pid in process_tree(os.getpid())])
        return outcome

    @classmethod
    def tearDownClass(cls) -> None:  # noqa: N802 - unittest's name
        """Stamp around the class's teardown, where continuous classes stop their world."""
        if is_controller():
            stamp("class_teardown_start")
        super().tearDownClass()
        if is_controller():
            stamp("class_teardown_end")


_NAMES: Optional[set] = None
_KINDS = ("failures", "errors", "skipped", "expectedFailures", "unexpectedSuccesses")


def _counts(result: Any) -> tuple:
    return tuple(len(getattr(result, kind, ()) or ()) for kind in _KINDS)


def _status(before: tuple, after: tuple) -> str:
    """What unittest recorded for one test: pass, failures, errors, skipped, ..."""
    grown = [kind for kind, b, a in zip(_KINDS, before, after) if a > b]
    return grown[0] if grown else "pass"


def _stamped_names() -> set:
    global _NAMES
    if _NAMES is None:
        names = suite_test_names(SETTINGS.n)
        _NAMES = {names[0], names[-1]} if names else set()
    return _NAMES


# -- fault scenarios -------------------------------------------------------------------

FAULT_KINDS = ("assert", "exit", "hang")


def add_fault_tests(cls: type, kind: str, decorate_hang: Callable[[Callable], Callable]) -> None:
    """Attach healthy, faulty, healthy tests; the controller stamps every one of them.

    ``assert``: rank 0 fails while its peers wait in a collective; ``exit``: rank 1
    calls ``os._exit(3)`` while its peers wait; ``hang``: rank 0 sleeps while its
    peers wait (``decorate_hang`` gives that test its time limit where the class
    supports one).  The faulty rank stamps ``fault`` just before the fault; rank 0
    stamps ``body_start`` when the next test's body starts.
    """
    if kind not in FAULT_KINDS:
        raise ValueError(f"unknown fault kind {kind!r}; expected one of {', '.join(FAULT_KINDS)}")
    cls.STAMP_ALL = True

    def test_a_healthy(self) -> None:
        body()

    def test_b_fault(self) -> None:
        _fault(self.rank, kind, self.fail)
        body()

    def test_c_healthy(self) -> None:
        if self.rank == 0:
            stamp("body_start", test="test_c_healthy")
        body()

    cls.test_a_healthy = test_a_healthy
    cls.test_b_fault = decorate_hang(test_b_fault) if kind == "hang" else test_b_fault
    cls.test_c_healthy = test_c_healthy


def _fault(rank: int, kind: str, fail: Callable[[str], None]) -> None:
    if kind == "assert" and rank == 0:
        stamp("fault", kind=kind, rank=rank)
        fail("rank 0 gave up while its peers wait in all_reduce")
    elif kind == "exit" and rank == 1:
        stamp("fault", kind=kind, rank=rank)
        os._exit(3)
    elif kind == "hang" and rank == 0:
        stamp("fault", kind=kind, rank=rank)
        time.sleep(SETTINGS.hang_seconds)
