"""The loop inside a rank process.

A rank is started by the controller with a :class:`~continuous_test.protocol.RankSpec`
and one end of a pipe.  It

1. sends its stdout/stderr (file descriptors 1 and 2) to a private log file that the
   controller reads per test, so C++ and subprocess output is captured too;
2. starts a listener thread that answers ``DumpStacks`` at once (even while the main
   thread is blocked in a collective) and exits the process as soon as the
   controller's end of the pipe closes, so a dead controller leaves no orphans;
3. imports the test class by module and qualified name, joins the default process
   group (``MultiProcContinuousTest``) and answers ``Ready``;
4. runs every ``RunTest`` under :class:`~continuous_test.outcome.RankResult` and
   answers ``TestDone``.

This module never imports the controller (:mod:`continuous_test.world`).
"""
from __future__ import annotations

import ctypes
import faulthandler
import gc
import importlib
import importlib.util
import os
import random
import shutil
import signal
import socket
import sys
import threading
import traceback
import unittest
from dataclasses import dataclass
from typing import AbstractSet, Any, Dict, NoReturn, Optional, Tuple

import torch

from continuous_test import coverage_support
from continuous_test.launch import RANK_MARKER_ENV
from continuous_test import config, leaks, protocol, recorder
from continuous_test.timeline import records_path
from continuous_test.outcome import ErrorRecord, RankOutcome, RankResult, take_expect_values
from continuous_test.outcome import _torch_skip_reason as torch_skip_reason
from continuous_test.protocol import (
    SPARE_ROLE,
    Assign,
    DumpStacks,
    InitFailed,
    Ready,
    RankSpec,
    RunTest,
    Shutdown,
    Stacks,
    TestDone,
)

__all__ = [
    "RankContext",
    "current",
    "rank_main",
    "run_case",
    "set_world_size",
    "import_test_class",
    "format_stacks",
    "seed_everything",
    "loopback_interface",
    "template_cuda_initialized",
    "SEED",
    "flush_output",
    "EXIT_CONTROLLER_GONE",
]

SEED = 1234
EXIT_CONTROLLER_GONE = 70
CUDA_IN_TEMPLATE = (
    "CUDA was initialized in the template process before this rank was forked, so it "
    "cannot use CUDA. Something imported at module level initialized it (for example a "
    "tensor created on 'cuda' at import time); move that into a test or setUp, or set "
    "CONTINUOUS_TEST_START_METHOD=spawn."
)


def _cuda_initialized() -> bool:
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


_template_cuda_initialized = False


def _before_fork() -> None:
    # Runs in the template just before it forks a rank: remember whether CUDA was
    # initialized there, since a forked rank cannot use it then.  Freezing the
    # objects that exist now keeps the rank's garbage collector from touching
    # (and so copying) the template's pages.
    global _template_cuda_initialized
    _template_cuda_initialized = _cuda_initialized()
    gc.freeze()


os.register_at_fork(before=_before_fork)


def template_cuda_initialized() -> bool:
    """Whether CUDA was initialized in the process this rank was forked from."""
    bad_fork = getattr(torch.cuda, "_is_in_bad_fork", lambda: False)
    return _template_cuda_initialized or bool(bad_fork())


@dataclass(frozen=True)
class RankContext:
    """Where this process sits in a dispatcher world; None outside ranks."""

    rank: int
    world_size: int
    spec: RankSpec
    # Forked ahead of need (a spare) and assigned this spec later.
    forked_ahead: bool = False


_CURRENT: Optional[RankContext] = None
try:
    _LIBC: Optional[ctypes.CDLL] = ctypes.CDLL(None)
except OSError:  # no C library to flush (unusual platforms)
    _LIBC = None


def current() -> Optional[RankContext]:
    """The rank context of this process; test cases call this to pick their role."""
    return _CURRENT


class _Channel:
    """The rank's ends of its two pipes.

    The main thread reads commands from ``conn`` itself (no hand-off between
    threads on the per-test path).  A listener thread reads ``control``, on which
    the controller asks for stacks; it answers at once even while the main thread
    is blocked in a collective, and when that pipe closes the controller is gone.
    Sends are locked because both threads send on ``conn``.
    """

    def __init__(self, conn, control) -> None:
        self.conn = conn
        self.control = control
        self.lock = threading.Lock()

    def send(self, message: Any) -> None:
        with self.lock:
            protocol.send(self.conn, message)

    def receive(self, spec: RankSpec) -> Any:
        """The next command, for the main thread; exits the process if the controller died."""
        try:
            return protocol.recv(self.conn)
        except (EOFError, OSError):
            _controller_gone(spec)

    def watch(self, spec: RankSpec) -> None:
        """Listener thread body: answer stack requests, die with the controller."""
        while True:
            try:
                message = protocol.recv(self.control)
            except (EOFError, OSError):
                _controller_gone(spec)
                return
            if isinstance(message, DumpStacks):
                self.send(Stacks(spec.rank, format_stacks()))
            else:
                print(f"continuous_test: rank {spec.rank} got an unexpected {message!r} on its control pipe",
                      file=sys.stderr, flush=True)


def _controller_gone(spec: RankSpec) -> NoReturn:
    """Leave now, with what this rank's tests started: the controller closed the pipe or died."""
    # The controller closes the pipe itself when it stops a world, and removes its
    # files; if it died (even SIGKILL closes its pipe end), nobody else may.
    if spec.private_dir and not _running(spec.controller_pid):
        shutil.rmtree(spec.private_dir, ignore_errors=True)
    flush_output()
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)  # this rank and its tests' processes
    os._exit(EXIT_CONTROLLER_GONE)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


_PR_SET_PDEATHSIG = 1


def _adopt(spec: RankSpec) -> None:
    """Tie this rank's life to the template's, and give it its own process group.

    * Its own process group: the controller (and the template at exit) kill the
      group, which takes along whatever the tests started (Popen, fork).
    * Forked by the template: the kernel kills this rank when the template dies
      (it dies with the controller), even while the rank holds the GIL in C code,
      when no Python thread of the rank could act.
    * The forkserver hands each child the write end of the pipe whose closing
      tells the template that its controller is gone; a rank, or a process its
      test forks, holding it would keep the template alive.
    """
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    if spec.parent_pid and spec.parent_pid != spec.controller_pid and _LIBC is not None and sys.platform == "linux":
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != spec.parent_pid:  # the template died before the call above
            os._exit(EXIT_CONTROLLER_GONE)
    from multiprocessing import forkserver

    alive_fd = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)
    if alive_fd is not None and spec.parent_pid != spec.controller_pid:
        try:
            os.close(alive_fd)
        except OSError:
            pass
        setattr(forkserver._forkserver, "_forkserver_alive_fd", None)


def rank_main(spec: RankSpec, conn, control) -> None:
    """Entry point of every rank process; started by the controller with its two pipes."""
    global _CURRENT
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the controller's to handle
    _adopt(spec)
    _redirect_output(spec.log_file)
    if faulthandler.is_enabled():
        # Enabled in the controller this rank may be forked from (pytest does), it
        # would write to the controller's terminal: it writes to this rank's log.
        faulthandler.enable(file=sys.stderr, all_threads=True)
    _apply_env(spec)
    coverage_support.start_in_rank()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    forked_ahead = spec.role == SPARE_ROLE
    if forked_ahead:
        spec = _assigned(spec, conn)
    recorder.open_ring(records_path(spec.world_dir, spec.rank), spec.rank)
    _CURRENT = RankContext(spec.rank, spec.world_size, spec, forked_ahead)
    channel = _Channel(conn, control)
    threading.Thread(target=channel.watch, args=(spec,), name="continuous_test-listener", daemon=True).start()
    if spec.role == "single":
        from continuous_test.single import run_single

        code = run_single(spec, channel.send)
        flush_output()
        os._exit(code)
    _continuous_loop(spec, channel)


def _assigned(spare: RankSpec, conn) -> RankSpec:
    """A spare's wait for the spec it is to run; everything before it was done ahead of need.

    What the spare did already is what does not depend on the test: its process
    group, its tie to the template, the environment (applied again only if the
    controller's changed since, e.g. in a ``setUp``, or the rank differs).
    """
    try:
        message = protocol.recv(conn)
    except (EOFError, OSError):
        _controller_gone(spare)
    if isinstance(message, Shutdown):  # not needed after all
        flush_output()
        os._exit(0)
    if not isinstance(message, Assign):
        raise protocol.ProtocolError(f"spare rank {spare.rank} got an unexpected {message!r}")
    spec = message.spec
    _redirect_output(spec.log_file)
    if (spec.env, spec.rank, spec.world_size) != (spare.env, spare.rank, spare.world_size):
        _apply_env(spec)
    return spec


def _continuous_loop(spec: RankSpec, channel: _Channel) -> None:
    try:
        cls = import_test_class(spec.module, spec.qualname, spec.module_file)
        _join_world(cls, spec, spec.rendezvous_file)
    except unittest.SkipTest as skip:
        channel.send(InitFailed(spec.rank, ErrorRecord.from_exception(skip), skip_reason=str(skip)))
        _wait_for_shutdown(channel, spec)
        return
    except BaseException as exc:  # noqa: B902 - any init error is reported, not raised
        # torch's _init_pg overrides skip a whole class by sys.exit(TEST_SKIPS[...].exit_code).
        channel.send(InitFailed(spec.rank, ErrorRecord.from_exception(exc), skip_reason=torch_skip_reason(exc)))
        _wait_for_shutdown(channel, spec)
        return
    channel.send(Ready(spec.rank))
    while True:
        message = channel.receive(spec)
        if isinstance(message, Shutdown):
            break
        if not isinstance(message, RunTest):
            raise protocol.ProtocolError(f"rank {spec.rank} got an unexpected {message!r}")
        if message.reinit is not None:
            _reinit_world(cls, spec, message.reinit)
        outcome = run_one(cls, message, spec)
        channel.send(TestDone.of(spec.rank, message.seq, outcome))
    _leave_world()


def _wait_for_shutdown(channel: _Channel, spec: RankSpec) -> None:
    while not isinstance(channel.receive(spec), Shutdown):
        pass
    flush_output()
    os._exit(0)


def _leave_world() -> None:
    import torch.distributed as dist

    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    finally:
        flush_output()
        os._exit(0)


def _redirect_output(log_file: str) -> None:
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _apply_env(spec: RankSpec) -> None:
    os.environ.clear()
    os.environ.update(spec.env)
    os.environ.update(
        RANK=str(spec.rank),
        WORLD_SIZE=str(spec.world_size),
        LOCAL_RANK=str(spec.rank),
        LOCAL_WORLD_SIZE=str(spec.world_size),
        **{RANK_MARKER_ENV: "1"},
    )
    if not os.environ.get("GLOO_SOCKET_IFNAME") and not os.environ.get("GLOO_DEVICE_TRANSPORT"):
        lo = loopback_interface()
        if lo:
            os.environ["GLOO_SOCKET_IFNAME"] = lo


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


def import_test_class(module: str, qualname: str, module_file: Optional[str]) -> type:
    """Find a test class by module and qualified name; ranks call this once at start."""
    mod = sys.modules.get(module)
    if mod is None:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            if not module_file:
                raise
            mod = _load_from_file(module, module_file)
    recorder.rebind(mod)  # names it imported from torch.distributed record too
    obj: Any = mod
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _load_from_file(module: str, path: str):
    spec = importlib.util.spec_from_file_location(module, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load module {module!r} from {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod
    spec.loader.exec_module(mod)
    return mod


def _join_world(cls: Any, spec: RankSpec, rendezvous_file: str) -> None:
    cls.rank = spec.rank
    set_world_size(cls, spec.world_size)
    device = spec.settings.device_type if spec.settings is not None else "cpu"
    if device != "cpu":
        if device == "cuda" and template_cuda_initialized():
            raise RuntimeError(CUDA_IN_TEMPLATE)
        torch.accelerator.set_device_index(spec.rank)
    cls._init_pg(spec.rank, spec.world_size, rendezvous_file)
    remember_default_group()


# The default group this rank joined; a test that destroys or replaces it is
# noticed (default_group_changed) and every rank joins a new one before the next test.
_expected_group: Any = None


def remember_default_group() -> None:
    """Record the default group just created; called after every join of a world."""
    from torch.distributed import distributed_c10d as c10d

    global _expected_group
    _expected_group = c10d._get_default_group()


def default_group_changed() -> bool:
    """True if the default group was destroyed, or replaced by another one, since it was joined."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    if not dist.is_initialized():
        return True
    return _expected_group is not None and c10d._get_default_group() is not _expected_group


def set_world_size(cls: Any, world_size: int) -> None:
    """Make ``cls.world_size`` the launched size in this rank, even where it was a property.

    The size a world was started with may come from an override (command line,
    marker) that the class itself does not know about; the rank process is
    dedicated to this class, so replacing the attribute here is safe.
    """
    cls.world_size = world_size


def _reinit_world(cls: Any, spec: RankSpec, generation: int) -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    path = f"{spec.rendezvous_file}.{generation}"
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    cls._init_pg(spec.rank, spec.world_size, path)
    remember_default_group()


def run_one(cls: type, message: RunTest, spec: RankSpec) -> RankOutcome:
    """Run one test method of a dispatcher world on this rank."""
    case = cls(message.method)
    case.rank = spec.rank
    if message.kwargs is not None:
        case.call_kwargs = message.kwargs
    return run_case(case, spec.rank)


def run_case(case: unittest.TestCase, rank: int) -> RankOutcome:
    """Run ``case`` for real on this rank and record what unittest saw.

    Every test starts from the same RNG seed on every rank, and process groups the
    test created (other than the default one) are destroyed after it.  Unless the
    test's leak policy is ``off``, process-global state is compared with a snapshot
    taken before it (:mod:`continuous_test.leaks`), and put back.
    """
    policy = _leak_policy(case)
    before = leaks.take() if policy != "off" else None
    groups = before.groups if before is not None else _group_names()
    recorder.begin_test(case)
    seed_everything(SEED)
    result = RankResult()
    unittest.TestCase.run(case, result)  # the real run, not the dispatching override
    report = leaks.check(before, policy) if before is not None else None
    _release_subgroups(groups)
    flush_output()
    return RankOutcome(rank, result.events, group_changed=default_group_changed(), leaks=report,
                       expect_values=take_expect_values())


def _leak_policy(case: unittest.TestCase) -> str:
    """The test's leak policy, resolved once per test method and value of ``CONTINUOUS_TEST_LEAKS``."""
    cls, name = type(case), case._testMethodName
    key = (cls, name, os.environ.get(config.ENV_LEAKS))
    policy = _policies.get(key)
    if policy is None:
        try:
            policy = config.leak_policy(cls, getattr(case, name, None))
        except config.ConfigError:  # the controller reports it; the rank keeps the default
            policy = config.DEFAULT_LEAK_POLICY
        _policies[key] = policy
    return policy


_policies: Dict[Tuple[type, str, Optional[str]], str] = {}


def _group_names() -> set:
    from torch.distributed import distributed_c10d as c10d

    return set(c10d._world.pg_names.keys())


def _release_subgroups(before: AbstractSet[Any]) -> None:
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    names = c10d._world.pg_names
    if len(names) == len(before) and names.keys() <= before:
        return  # the groups of before the test, and no other
    if not dist.is_initialized():
        return
    default = c10d._get_default_group()
    for pg in list(c10d._world.pg_names.keys()):
        if pg not in before and pg is not default:
            try:
                dist.destroy_process_group(pg)
            except Exception:  # a group the test already broke; nothing more to release
                pass


def seed_everything(seed: int) -> None:
    """Seed torch, numpy and random identically; called before every test on every rank."""
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
        accel = getattr(torch, "accelerator", None)
        _accelerator = bool(accel.is_available()) if accel is not None else torch.cuda.is_available()
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
        stack = "".join(traceback.format_list(summary))
        parts.append(f"Thread {names.get(ident, ident)} (most recent call last):\n{stack}")
    return "\n".join(parts)


_HARNESS_DIRS = tuple(
    os.path.dirname(m.__file__) + os.sep for m in (unittest, __import__("multiprocessing")) if m.__file__
) + (os.path.dirname(os.path.abspath(__file__)) + os.sep,)


_UNITTEST_DIR = os.path.dirname(unittest.__file__) + os.sep


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
    if _LIBC is not None:
        _LIBC.fflush(None)
