"""Running one test for real in a rank, and what a rank does around every test.

Every test starts from the same RNG seed on every rank; process groups the test
created are destroyed after it; process-global state is compared with a
snapshot and put back, under the leak policy the test's controller resolved.
Shared by every kind of rank: a shared world's, a fresh one
(:mod:`continuous_test.rank.fresh`), and a launched one.
"""
from __future__ import annotations

import atexit
import ctypes
import gc
import importlib
import inspect
import os
import random
import socket
import sys
import threading
import traceback
import unittest
import weakref
from typing import AbstractSet, Any, FrozenSet, List, Optional

import torch

import continuous_test
from continuous_test import config
from continuous_test.rank import coverage as rank_coverage, leaks, recorder
from continuous_test.rank.result import RankResult, take_expect_values
from continuous_test.wire.env import ENV_TEMPLATE_PID
from continuous_test.wire.messages import RankSpec, RunTest, shared_temp_dir
from continuous_test.wire.outcome import EventKind, RankOutcome


SEED = 1234


try:
    LIBC: Optional[ctypes.CDLL] = ctypes.CDLL(None)
except OSError:  # no C library to flush (unusual platforms)
    LIBC = None


def _cuda_initialized() -> bool:
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


_template_cuda_initialized = False


def _before_fork() -> None:
    # Registered in every process that imports this module, it acts only in the
    # template, just before it forks a rank: remember whether CUDA was initialized
    # there, since a forked rank cannot use it then, and freeze the objects that
    # exist now, which keeps the rank's garbage collector from touching (and so
    # copying) the template's pages.  Anywhere else (the controller, a rank whose
    # test forks) freezing would keep garbage cycles from ever being collected.
    global _template_cuda_initialized
    if os.environ.get(ENV_TEMPLATE_PID) != str(os.getpid()):
        return
    _template_cuda_initialized = _cuda_initialized()
    gc.freeze()


os.register_at_fork(before=_before_fork)


def template_cuda_initialized() -> bool:
    """Whether CUDA was initialized in the process this rank was forked from."""
    bad_fork = getattr(torch.cuda, "_is_in_bad_fork", lambda: False)
    return _template_cuda_initialized or bool(bad_fork())


def forget_inherited_cleanup() -> None:
    """Drop the ``atexit`` handlers and finalizers inherited from the process this rank was forked from.

    They are the controller's (or the template's): its temporary directories, its
    worlds.  Run in a rank they would remove what the controller still uses.  What
    the rank's tests register from now on is theirs (:func:`run_cleanup`).
    """
    atexit._clear()
    registry = getattr(weakref.finalize, "_registry", {})
    for info in list(registry.values()):
        info.atexit = False  # inherited objects' finalizers: not this process's to run at its end
    weakref.finalize._registered_with_atexit = False  # type: ignore[attr-defined]  # a new one registers again


def run_cleanup() -> None:
    """Run what this rank's tests registered for the end of their process: atexit handlers, finalizers.

    A rank ends with ``os._exit``, which skips them; so at its normal end (its
    world stopped, or its one fresh test done) it runs them here, as a process of
    its own would at exit.  A rank that is killed (a fault, a time limit) runs none.
    Then it ends its children that left its process group (``start_new_session``),
    which the end of the group would not reach: they would outlive the run.
    """
    atexit._run_exitfuncs()
    leaks.end_children_outside_group()


def before_exit() -> None:
    """A rank's normal end, before it reports it: :func:`run_cleanup`, its output flushed, its coverage saved.

    The controller may kill the rank as soon as it has reported its end.
    """
    run_cleanup()
    flush_output()
    rank_coverage.save_in_rank()


def import_test_class(module: str, qualname: str, module_file: Optional[str], method: Optional[str] = None) -> type:
    """The class ``qualname`` of ``module``, imported (or loaded from ``module_file``), with test ``method``.

    A module's ``load_tests`` may make tests (methods, classes) when unittest
    loads it, as the controller's runner did; a rank only imported the module.
    So when the class or the method is missing, the module is loaded as unittest
    loads it, once, and the name looked up again.
    """
    mod = sys.modules.get(module)
    if mod is None:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            if not module_file:
                raise
            mod = _load_from_file(module, module_file)
    if module_file and not _same_file(getattr(mod, "__file__", None), module_file):
        # The name is another file's here: a template whose ``__main__`` is another
        # program's, or a module of that name earlier on this rank's sys.path.  The
        # controller took the class from ``module_file``.
        mod = _load_from_file(module, module_file)
    try:
        cls = _resolve(mod, qualname)
        if method is None or hasattr(cls, method):
            return cls
    except AttributeError:
        if not _load_tests(mod):
            raise
        return _resolve(mod, qualname)
    _load_tests(mod)
    return _resolve(mod, qualname)


def _same_file(a: Optional[str], b: str) -> bool:
    return a is not None and os.path.realpath(a) == os.path.realpath(b)


def _resolve(mod: Any, qualname: str) -> Any:
    obj: Any = mod
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


# Modules whose load_tests this rank ran.
_loaded_tests: set = set()


def _load_tests(mod: Any) -> bool:
    """Run ``mod``'s ``load_tests`` as unittest's loader would, once; False when it has none."""
    if not callable(getattr(mod, "load_tests", None)) or mod.__name__ in _loaded_tests:
        return False
    _loaded_tests.add(mod.__name__)
    unittest.defaultTestLoader.loadTestsFromModule(mod)
    return True


def _load_from_file(module: str, path: str):
    spec = importlib.util.spec_from_file_location(module, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load module {module!r} from {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod
    spec.loader.exec_module(mod)
    return mod


def set_world_size(cls: Any, world_size: int) -> None:
    """Make ``cls.world_size`` the size its world was started with, in this rank, even where it was a property.

    The size a world was started with may come from an override (command line,
    marker) that the class itself does not know about; the rank process is
    dedicated to this class, so replacing the attribute here is safe.
    """
    cls.world_size = world_size


# The default group this rank joined; a test that destroys or replaces it is
# noticed (default_group_changed) and every rank joins a new one before the next test.
_expected_group: Any = None
_NO_GROUP = object()  # joined a world without a default group


def remember_default_group() -> None:
    """Record the current default group as the one joined: :func:`default_group_changed` compares with it."""
    from torch.distributed import distributed_c10d as c10d

    global _expected_group
    # A class whose _init_pg makes no default group (torch_compat.rpc.RpcWorld): none is expected.
    _expected_group = c10d._get_default_group() if c10d.is_initialized() else _NO_GROUP


def forget_default_group() -> None:
    """Drop the reference to the group joined (it was destroyed; a new one is remembered next)."""
    global _expected_group
    _expected_group = None


def default_group_changed() -> bool:
    """True if the default group was destroyed, or replaced by another one, since it was joined."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    if _expected_group is _NO_GROUP:  # a test that made one leaves it for the next: a new world
        return dist.is_initialized()
    if not dist.is_initialized():
        return True
    return _expected_group is not None and c10d._get_default_group() is not _expected_group


def run_one(cls: type, message: RunTest, spec: RankSpec) -> RankOutcome:
    """Run the test ``message`` names, of a shared world, on this rank."""
    if not hasattr(cls, message.method):  # a test its module's load_tests makes
        cls = import_test_class(cls.__module__, cls.__qualname__, None, message.method)
    case = cls(message.method)
    case.rank = spec.rank
    case._ct_shared_temp_dir = shared_temp_dir(spec.world_dir, message.seq)
    if message.kwargs is not None:
        case.call_kwargs = message.kwargs
    return run_case(case, spec.rank, message.leak_policy)


# The process groups the last test made: released when the next test starts.
_release_before_next: List[Any] = []


def run_case(case: unittest.TestCase, rank: int, policy: str) -> RankOutcome:
    """Run ``case`` for real on this rank and record what unittest saw.

    Every test starts from the same RNG seed on every rank, and process groups the
    test created (other than the default one) are destroyed before the next test,
    once every rank has ended this one: a rank that ends first must not close its
    connections while a peer still uses them (a peer's barrier on the group would
    fail at once with "Connection closed" instead of timing out, as in torch's
    ``test_barrier_timeout_full_group``).  Unless the
    leak ``policy`` (resolved by whoever controls the test) is ``off``,
    process-global state is compared with a snapshot taken before it
    (:mod:`continuous_test.rank.leaks`), and put back.
    """
    global _release_before_next
    if _release_before_next:  # every rank ended the test that made them
        _release_subgroups(_release_before_next)
        _release_before_next = []
    before = leaks.take() if policy != "off" else None
    groups = before.groups if before is not None else _group_names()
    recorder.begin_test(case)
    seed_everything(SEED)
    result = RankResult()
    run_real(case, result)
    report = leaks.check(before, policy, lambda: own_files(case)) if before is not None else None
    _release_before_next = _made_since(groups)
    flush_output()
    return RankOutcome(rank, result.events, group_changed=default_group_changed(),
                       call_failed=recorder.a_call_failed(), leaks=report,
                       expect_values=take_expect_values())


def own_files(case: unittest.TestCase) -> FrozenSet[str]:
    """The test's own code files (absolute): the test method's and the test class's module's."""
    files = set()
    method = getattr(type(case), getattr(case, "_testMethodName", ""), None)
    code = getattr(inspect.unwrap(method), "__code__", None) if callable(method) else None
    if code is not None:
        files.add(os.path.abspath(code.co_filename))
    module_file = getattr(sys.modules.get(type(case).__module__), "__file__", None)
    if module_file:
        files.add(os.path.abspath(module_file))
    return frozenset(files)


FORKED_CHILD_RETURNED = (
    "continuous_test: a process that {test} forked returned from the test instead of exiting; "
    "it exits here, so that only the rank reports the test"
)


def run_real(case: unittest.TestCase, result: unittest.TestResult) -> None:
    """unittest's own run of ``case`` (not the override that picks a role), in this process only.

    A child the test forks that returns from the test, instead of exiting, would
    go on as a second copy of this rank and report the test again: it ends here.
    """
    pid = os.getpid()
    unittest.TestCase.run(case, result)
    if os.getpid() != pid:
        print(FORKED_CHILD_RETURNED.format(test=case.id()), file=sys.stderr)
        flush_output()
        failed = any(event.kind in (EventKind.FAILURE, EventKind.ERROR) for event in getattr(result, "events", ()))
        os._exit(1 if failed else 0)


def _group_names() -> set:
    from torch.distributed import distributed_c10d as c10d

    return set(c10d._world.pg_names.keys())


def _made_since(before: AbstractSet[Any]) -> List[Any]:
    """The process groups made since ``before`` (the default one aside): those a test made."""
    from torch.distributed import distributed_c10d as c10d

    names = c10d._world.pg_names
    if len(names) == len(before) and names.keys() <= before:
        return []  # the groups of before the test, and no other
    default = c10d._world.default_pg
    return [pg for pg in list(names) if pg not in before and pg is not default]


def _release_subgroups(made: List[Any]) -> None:
    """Destroy the groups a test made that still exist (not those a world made again since: its own)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    if not dist.is_initialized():
        return
    for pg in made:
        if pg in c10d._world.pg_names:
            try:
                dist.destroy_process_group(pg)
            except Exception:  # a group the test already broke; nothing more to release
                pass


def seed_everything(seed: int) -> None:
    """Seed ``random``, torch and numpy (if imported) with ``seed``: the same streams on every rank."""
    random.seed(seed)
    if _has_accelerator():
        torch.manual_seed(seed)  # also seeds every accelerator's generators
    else:
        # torch.manual_seed() also queues a seed for each accelerator module it
        # knows, recording a formatted stack each time: a quarter of a
        # millisecond per test, for devices this process does not have.
        torch.default_generator.manual_seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed)


_accelerator: Optional[bool] = None


def _has_accelerator() -> bool:
    global _accelerator
    if _accelerator is None:
        _accelerator = config.accelerator() is not None
    return _accelerator


def format_stacks() -> str:
    """Python stacks of every thread but the listener, with file, line and function.

    Leading frames of the harness (multiprocessing, unittest, this package) are
    dropped, so a stack starts where the test's own code does.
    """
    names = {t.ident: t.name for t in threading.enumerate()}
    me = threading.get_ident()
    parts = []
    for ident, frame in sys._current_frames().items():
        if ident == me:
            continue
        summary = _trim_harness(traceback.extract_stack(frame))
        stack = "".join(_format_folded(summary))
        parts.append(f"Thread {names.get(ident, ident)} (most recent call last):\n{stack}")
    return "\n".join(parts)


FOLDED = "  ({n} frame(s) of continuous_test and torch's logging wrappers)\n"
_C10D_LOGGER = os.sep + os.path.join("torch", "distributed", "c10d_logger.py")


def _format_folded(frames: list) -> List[str]:
    """The frames as traceback prints them, each run of wrapper frames folded into one line.

    Wrapper frames: this package's (the recorder's ``_call`` and the frame of
    torch's function whose code it swapped, just before it) and torch's logging
    decorator (``c10d_logger.py``).  They sit between the test's call and
    torch's real body of every collective.
    """
    wrapper = [f.filename.startswith(_OWN_DIR) or f.filename.endswith(_C10D_LOGGER) for f in frames]
    for i in range(len(frames) - 1):
        if frames[i + 1].filename.startswith(_OWN_DIR) and frames[i + 1].name == "_call":
            wrapper[i] = True  # torch's function, at its def line: the body the recorder swapped in
    lines: List[str] = []
    run = 0
    for frame, folded in zip(frames, wrapper):
        if folded:
            run += 1
            continue
        if run:
            lines.append(FOLDED.format(n=run))
            run = 0
        lines.extend(traceback.format_list([frame]))
    if run:
        lines.append(FOLDED.format(n=run))
    return lines


_HARNESS_DIRS = tuple(
    os.path.dirname(m.__file__) + os.sep for m in (unittest, __import__("multiprocessing")) if m.__file__
) + (os.path.dirname(os.path.abspath(continuous_test.__file__)) + os.sep,)
_UNITTEST_DIR = os.path.dirname(unittest.__file__) + os.sep
_OWN_DIR = os.path.dirname(os.path.abspath(continuous_test.__file__)) + os.sep


def _trim_harness(frames: traceback.StackSummary) -> list:
    """The frames from the test's own code on: after unittest's last frame (the call of the test
    method) and the harness frames right after it, else after the leading harness frames.

    A rank forked from a template that is a fork of the controller, or a rank under a
    launcher, also has the runner's frames (``run_tests()``, pytest) above the test.
    """
    calls = [i for i, frame in enumerate(frames) if frame.filename.startswith(_UNITTEST_DIR)]
    start = calls[-1] + 1 if calls else 0
    while start < len(frames) and (frames[start].filename.startswith(_HARNESS_DIRS)
                                   or frames[start].filename.startswith("<")):
        start += 1
    return list(frames[start:]) if start < len(frames) else list(frames[-3:])


def flush_output() -> None:
    """Flush Python's and C's buffered output to the rank's log."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    if LIBC is not None:
        LIBC.fflush(None)


def loopback_interface() -> Optional[str]:
    """Name of the loopback interface (``lo`` on Linux, ``lo0`` on macOS), if any."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    for name in names:
        if name == "lo" or name.startswith("lo0"):
            return name
    return None
