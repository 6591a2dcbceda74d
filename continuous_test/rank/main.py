"""The loop inside a rank process.

A rank is started by the controller with a :class:`~continuous_test.wire.messages.RankSpec`
and one end of two pipes.  It

1. sends its stdout/stderr (file descriptors 1 and 2) to a private log file that the
   controller reads per test, so C++ and subprocess output is captured too;
2. starts a listener thread that answers ``DumpStacks`` at once (even while the main
   thread is blocked in a collective) and exits the process as soon as the
   controller's end of the pipe closes, so a dead controller leaves no orphans;
3. imports the test class by module and qualified name, joins the default process
   group (``MultiProcContinuousTest``) and answers ``Ready``;
4. runs every ``RunTest`` (:mod:`continuous_test.rank.run`) and answers ``TestDone``.

A fresh rank runs its one test instead (:mod:`continuous_test.rank.fresh`), and a
spare first waits for the spec it is to run.
"""
from __future__ import annotations

import faulthandler
import os
import shutil
import signal
import sys
import threading
import time
import unittest
from typing import Any, Dict, Iterable, List, NoReturn, Tuple

import torch

from continuous_test import _role, errors
from continuous_test._procfs import running
from continuous_test._role import RankContext
from continuous_test.rank import coverage as rank_coverage, recorder
from continuous_test.rank.run import (
    LIBC,
    before_exit,
    flush_output,
    forget_default_group,
    forget_inherited_cleanup,
    format_stacks,
    import_test_class,
    loopback_interface,
    remember_default_group,
    run_one,
    set_world_size,
    template_cuda_initialized,
)
from continuous_test.wire import kept, messages
from continuous_test.wire.env import ENV_RANK_MARKER, ENV_TEMPLATE_PID
from continuous_test.wire.messages import (
    Assign,
    DumpStacks,
    InitFailed,
    RankKind,
    RankSpec,
    Ready,
    RunTest,
    Shutdown,
    Stacks,
    Stopped,
    TestDone,
)
from continuous_test.wire.outcome import ErrorRecord, torch_skip_reason
from continuous_test.wire.records import records_path

__all__ = [
    "rank_main",
    "EXIT_CONTROLLER_GONE",
]

EXIT_CONTROLLER_GONE = 70
CUDA_IN_TEMPLATE = (
    "CUDA was initialized in the template process before this rank was forked, so it "
    "cannot use CUDA. Something imported at module level initialized it (for example a "
    "tensor created on 'cuda' at import time); move that into a test or setUp, or set "
    "CONTINUOUS_TEST_START_METHOD=spawn."
)


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
            messages.send(self.conn, message)

    def receive(self, spec: RankSpec) -> Any:
        """The next command, for the main thread; exits the process if the controller died."""
        try:
            return messages.recv(self.conn)
        except (EOFError, OSError):
            _controller_gone(spec)

    def watch(self, spec: RankSpec) -> None:
        """Listener thread body: answer stack requests, die with the controller."""
        while True:
            try:
                message = messages.recv(self.control)
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
    if spec.private_dir and not running(spec.controller_pid):
        shutil.rmtree(spec.private_dir, ignore_errors=True)
    flush_output()
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)  # this rank and its tests' processes
    os._exit(EXIT_CONTROLLER_GONE)


_PR_SET_PDEATHSIG = 1


def _release_runner_capture() -> None:
    """Let warnings and log records reach this rank's output, as in a process of its own.

    A rank forked from a controller under pytest inherits what pytest set up
    around its collection: ``catch_warnings(record=True)``, which sends every
    warning to a list, and its log-capturing handlers on the root logger.  In a
    rank nobody reads either, so warnings and log records vanished; they go to
    the rank's stderr again (the warnings filters are left as the runner set them).
    """
    import logging
    import warnings

    impl = getattr(warnings, "_showwarnmsg_impl", None)
    if impl is not None and getattr(impl, "__module__", None) != "warnings":
        setattr(warnings, "_showwarnmsg_impl", _show_warning)
        warnings.showwarning = getattr(warnings, "_showwarning_orig", warnings.showwarning)
    root = logging.getLogger()
    for handler in list(root.handlers):
        if type(handler).__module__.startswith("_pytest."):
            root.removeHandler(handler)


def _show_warning(message: Any) -> None:
    """What the standard library does with a warning that is shown: write it to stderr."""
    import warnings

    stream = message.file if message.file is not None else sys.stderr
    try:
        stream.write(getattr(warnings, "_formatwarnmsg")(message))
    except OSError:
        pass


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
    if spec.parent_pid and spec.parent_pid != spec.controller_pid and LIBC is not None and sys.platform == "linux":
        LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != _template_pid(spec):  # the template died before the call above
            os._exit(EXIT_CONTROLLER_GONE)
    from multiprocessing import forkserver

    alive_fd = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)
    if alive_fd is not None and spec.parent_pid != spec.controller_pid:
        try:
            os.close(alive_fd)
        except OSError:
            pass
        setattr(forkserver._forkserver, "_forkserver_alive_fd", None)


def _template_pid(spec: RankSpec) -> int:
    """The pid of the template that forked this rank, as the template itself knows it.

    The controller knows the pid that starting the template returned, which is a
    wrapper's where ``sys.executable`` is a wrapper that runs the interpreter as its
    child instead of exec'ing it; the template sets its own pid in the environment
    that its ranks inherit (:mod:`continuous_test.template.at_exit`).
    """
    own = os.environ.get(ENV_TEMPLATE_PID, "")
    return int(own) if own.isdigit() else spec.parent_pid


def rank_main(spec: RankSpec, conn, control) -> None:
    """Entry point of every rank process (``conn``, ``control``: its ends of two pipes); the process ends in it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the controller's to handle
    forget_inherited_cleanup()
    _adopt(spec)
    if not os.path.isdir(os.path.dirname(spec.log_file)):
        # The controller gave up on this world (a runner's timeout while it started) before the
        # template forked this rank, and removed its directory: nothing to run, nothing to say.
        os._exit(0)
    _redirect_output(spec.log_file)
    _release_runner_capture()
    if faulthandler.is_enabled():
        # Enabled in the controller this rank may be forked from (pytest does), it
        # would write to the controller's terminal: it writes to this rank's log.
        faulthandler.enable(file=sys.stderr, all_threads=True)
    _apply_env(spec)
    rank_coverage.start_in_rank()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    forked_ahead = spec.kind is RankKind.SPARE
    if forked_ahead:
        spec = _assigned(spec, conn)
    recorder.open_ring(records_path(spec.world_dir, spec.rank), spec.rank)
    kept.use(spec.output_dir)
    _role.enter(RankContext(spec.rank, spec.world_size, spec, forked_ahead))
    channel = _Channel(conn, control)
    threading.Thread(target=channel.watch, args=(spec,), name="continuous_test-listener", daemon=True).start()
    if spec.kind is RankKind.FRESH:
        from continuous_test.rank.fresh import run_single

        code = run_single(spec, channel.send)  # it ran the test's cleanup before it reported
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
        message = messages.recv(conn)
    except (EOFError, OSError):
        _controller_gone(spare)
    if isinstance(message, Shutdown):  # not needed after all
        flush_output()
        os._exit(0)
    if not isinstance(message, Assign):
        raise errors.ProtocolError(f"spare rank {spare.rank} got an unexpected {message!r}")
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
    classes: Dict[Tuple[str, str], Any] = {}  # the other classes sharing this world (world_scope), by (module, qualname)
    while True:
        message = channel.receive(spec)
        if isinstance(message, Shutdown):
            break
        if not isinstance(message, RunTest):
            raise errors.ProtocolError(f"rank {spec.rank} got an unexpected {message!r}")
        if message.reinit is not None:
            _reinit_world(cls, spec, message.reinit, classes.values())
        owner: Any = cls
        if message.owner is not None:
            owner = classes.get(message.owner[:2])
            if owner is None:
                owner = classes[message.owner[:2]] = import_test_class(*message.owner)
            _share_world(cls, owner, spec)
        outcome = run_one(owner, message, spec)
        channel.send(TestDone.of(spec.rank, message.seq, outcome))
    _leave_world(channel, spec)


def _wait_for_shutdown(channel: _Channel, spec: RankSpec) -> None:
    while not isinstance(channel.receive(spec), Shutdown):
        pass
    _exit_stopped(channel, spec)


def _leave_world(channel: _Channel, spec: RankSpec) -> None:
    import torch.distributed as dist

    _join_releases()
    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    finally:
        _exit_stopped(channel, spec)


def _exit_stopped(channel: _Channel, spec: RankSpec) -> NoReturn:
    """End the rank after ``Shutdown``: its cleanups, output and coverage, then ``Stopped``, then ``os._exit(0)``.

    Nothing but the exit follows ``Stopped``, so the controller need not wait for the
    kernel to tear this process down (:meth:`continuous_test.controller.world.World.stop`).
    """
    try:
        before_exit()
        channel.send(Stopped(spec.rank, 0))
    except OSError:  # the controller is gone: nobody to tell
        pass
    finally:
        os._exit(0)


def _redirect_output(log_file: str) -> None:
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    _streams_on_descriptors()


def _streams_on_descriptors() -> None:
    """``sys.stdout`` and ``sys.stderr`` write to descriptors 1 and 2, as in a process of its own.

    A rank forked from a process whose runner had replaced them (pytest's capture
    writes to a file on a descriptor of its own) would otherwise print where that
    runner reads, not into the rank's log.
    """
    import io

    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        try:
            if stream.fileno() == fd:
                continue
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
            pass
        setattr(sys, name, io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), line_buffering=True,
                                            write_through=fd == 2))


def _apply_env(spec: RankSpec) -> None:
    os.environ.clear()
    os.environ.update(spec.env)
    os.environ.update(
        RANK=str(spec.rank),
        WORLD_SIZE=str(spec.world_size),
        LOCAL_RANK=str(spec.rank),
        LOCAL_WORLD_SIZE=str(spec.world_size),
        **{ENV_RANK_MARKER: "1"},
    )
    lo = loopback_interface()
    if lo and not os.environ.get("GLOO_SOCKET_IFNAME") and not os.environ.get("GLOO_DEVICE_TRANSPORT"):
        os.environ["GLOO_SOCKET_IFNAME"] = lo
    if lo and not os.environ.get("TP_SOCKET_IFNAME"):  # TensorPipe's (RPC's) listeners, read once per process
        os.environ["TP_SOCKET_IFNAME"] = lo
    _apply_torch_settings(spec.torch_settings)


def _apply_torch_settings(settings: dict) -> None:
    """torch's process-wide settings as the controller had them before any test (whatever the template)."""
    import torch

    if not settings:
        return
    dtype = getattr(torch, settings["default_dtype"], None)
    if isinstance(dtype, torch.dtype) and dtype != torch.get_default_dtype():
        torch.set_default_dtype(dtype)
    if settings["default_device"] is not None:
        torch.set_default_device(settings["default_device"])
    torch.set_grad_enabled(settings["grad_enabled"])
    enabled, warn_only = settings["deterministic"]
    if (enabled, warn_only) != (torch.are_deterministic_algorithms_enabled(),
                                torch.is_deterministic_algorithms_warn_only_enabled()):
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
    if settings["float32_matmul_precision"] != torch.get_float32_matmul_precision():
        torch.set_float32_matmul_precision(settings["float32_matmul_precision"])


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


def _share_world(first: Any, cls: Any, spec: RankSpec) -> None:
    """Give ``cls``, a class sharing the world ``first`` joined (world_scope), what its ``_init_pg`` would have set."""
    cls.rank = spec.rank
    set_world_size(cls, spec.world_size)
    cls.pg = first.pg
    cls.rdvz_file = first.rdvz_file


def _reinit_world(cls: Any, spec: RankSpec, generation: int, sharing: Iterable[Any] = ()) -> None:
    """Destroy every group and make the default group again on rendezvous file ``<rendezvous>.<generation>``.

    The destroyed groups' objects end on a thread of their own (:func:`_release`):
    torch has forgotten them, and ending one (its backend's threads and
    connections) took 20 ms for a gloo group here, which the test need not wait for.
    """
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    destroyed = list(c10d._world.pg_names)
    if dist.is_initialized():
        dist.destroy_process_group()
    for holder in (cls, *sharing):  # the harness's own references to the old group: the thread drops the last
        if getattr(holder, "pg", None) in destroyed:
            holder.pg = None
    forget_default_group()
    _release(destroyed)
    path = f"{spec.rendezvous_file}.{generation}"
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    cls._init_pg(spec.rank, spec.world_size, path)
    remember_default_group()


# Threads ending destroyed groups' objects (_reinit_world); joined before the rank leaves.
_RELEASING: List[threading.Thread] = []
RELEASE_JOIN_SECONDS = 10.0


def _release(groups: List[Any]) -> None:
    """Drop the last references to ``groups`` on a daemon thread (their destructors release the GIL)."""
    _RELEASING[:] = [t for t in _RELEASING if t.is_alive()]
    thread = threading.Thread(target=groups.clear, name="continuous_test-release-groups", daemon=True)
    thread.start()
    _RELEASING.append(thread)


def _join_releases() -> None:
    deadline = time.monotonic() + RELEASE_JOIN_SECONDS
    for thread in _RELEASING:
        thread.join(max(0.0, deadline - time.monotonic()))
