"""The controller's management of the template process that ranks are forked from.

Starting a rank with ``spawn`` costs a new interpreter plus ``import torch``
(about 1.3 s of CPU).  Every rank is instead a ``fork()`` of one template
process per controller, which serves ``multiprocessing``'s forkserver protocol,
so ranks are started, watched and reaped exactly as forkserver children.  The
template is made one of three ways, chosen by :func:`start_method`:

``fork`` (the default on Linux)
    The template is a fork of the controller itself, made at the earliest point
    where the controller has imported the tests and run none of them:
    ``run_tests()`` before unittest runs, the pytest plugin after collection, or
    else the first world start (:func:`prepare`).  It costs no interpreter start
    and no import: torch and the test modules are already in it.  The controller
    is forked only when that is safe (:func:`fork_hazard`): one Python thread (a
    fork copies only the calling thread, and locks that others held would stay
    held), CUDA not initialized (nor its driver loaded), no default process
    group.  Before serving, the template proves that a child of it can run
    intra-op parallel work: GNU OpenMP deadlocks in a forked child once the
    parent ran a parallel region (libgomp has no fork handler), and such a
    region leaves no Python-visible trace.  If any of this fails, the next way
    is used instead.
``forkserver``
    A fresh interpreter whose preloaded modules include torch, the rank loop
    and the test file (when it runs as a script).  It never inherits the
    controller's threads or CUDA state; ``PYTORCH_NVML_BASED_CUDA_CHECK=1``
    keeps module-level ``torch.cuda.is_available()`` calls from initializing
    CUDA in it, and :func:`continuous_test.rank.run.template_cuda_initialized`
    reports whether anything did.
``spawn``
    Where ``forkserver`` is unavailable (Windows, macOS builds without it).
"""
from __future__ import annotations

import inspect
import multiprocessing
import os
import select
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import Any, List, Optional

from continuous_test import migrate
from continuous_test._procfs import running
from continuous_test.config import BAD_START_METHOD, START_METHODS, start_method
from continuous_test.wire.env import ENV_PRELOAD_MAIN, ENV_PRIVATE_DIR

__all__ = [
    "get_context",
    "prepare",
    "preload_modules",
    "start_method",
    "fork_hazard",
    "template_kind",
    "process_settings",
    "private_dir",
    "parent_pid",
    "died",
    "template_pid",
    "stop",
    "BAD_START_METHOD",
    "START_METHODS",
    "PROBE_TIMEOUT",
    "ENV_PRIVATE_DIR",
]

# Seconds the forked template's intra-op probe may take.  A healthy probe takes
# milliseconds; one that takes longer is taken for a deadlock, and the slower
# fresh-interpreter template is used instead.
PROBE_TIMEOUT = 3.0
# Elements of the probe's add_: well above ATen's grain size (32768), so that
# it runs as an OpenMP parallel region whenever torch uses more than one thread.
PROBE_NUMEL = 1 << 20
_READY, _UNSAFE = b"1", b"0"


@dataclass
class _ForkedTemplate:
    """The controller's handle on a template forked from it."""

    pid: int
    status_fd: int  # the template writes _READY or _UNSAFE here once, after its probe
    ok: Optional[bool] = None  # None until the status was read


_context: Optional[BaseContext] = None
_context_method: Optional[str] = None
# The template forked from this process, if any (never more than one).
_forked: Optional[_ForkedTemplate] = None
TORCH_TESTING_MODULES = (
    "torch.testing._internal.common_utils",
    "torch.testing._internal.common_distributed",
    "torch.testing._internal.distributed._tensor.common_dtensor",
    "torch.testing._internal.common_fsdp",
)


# The modules every rank runs: imported before the template forks any rank, so that
# no rank imports them after its fork.  A template forked from the controller gets
# them from the controller (_import_what_ranks_use); a fresh interpreter preloads them.
RANK_MODULES = ("continuous_test.case", "continuous_test.rank.main")


def preload_modules(with_main: bool = True) -> List[str]:
    """Modules a fresh-interpreter template imports before forking any rank."""
    modules = ["torch", "torch.distributed", "numpy", "numpy.random", *RANK_MODULES,
               "continuous_test.template.at_exit", "continuous_test.template.preload_recorder"]
    # torch's testing helpers cost a second per import (they import dynamo); a rank
    # that imports its test module under pytest finds them already loaded.
    modules += [name for name in TORCH_TESTING_MODULES if name in sys.modules]
    if migrate.in_use():
        modules.append("continuous_test.template.preload_migration")
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    # A test file run as a script: the template imports it too, unless importing it
    # started threads (the controller then runs more than one): a thread the
    # import starts (an executor it used, a logging QueueListener) would exist in
    # the template only, and ranks forked from it would have the objects without
    # their threads.  Each rank then imports the file itself, after its fork.
    if with_main and main_file and getattr(main, "__spec__", None) is None and threading.active_count() == 1:
        os.environ[ENV_PRELOAD_MAIN] = os.path.abspath(main_file)
        modules.append("continuous_test.template.preload_main")
    return modules


# The forkserver listens on a Unix socket inside multiprocessing's temp dir, and
# such paths are limited to 107 bytes; leave room for "/pymp-XXXXXXXX/listener-XXXXXXXX".
MAX_TEMP_DIR_LENGTH = 72


def _short_temp_dir() -> None:
    """Give multiprocessing a short private temp dir when TMPDIR is too long for a socket."""
    import atexit
    import shutil
    import tempfile
    from multiprocessing import process

    config = getattr(process.current_process(), "_config")  # multiprocessing's private settings
    if config.get("tempdir") or len(tempfile.gettempdir()) <= MAX_TEMP_DIR_LENGTH:
        return
    short = tempfile.mkdtemp(prefix="pymp-", dir="/tmp" if os.path.isdir("/tmp") else None)  # mode 0700
    config["tempdir"] = short
    atexit.register(shutil.rmtree, short, True)


def prepare() -> None:
    """Start the template now, in the background; due once the tests are imported and before any runs.

    A forked template is made here, while the controller is clean; a
    fresh-interpreter template starts importing torch while the runner goes on.
    """
    try:
        get_context(wait=False)
        if _context_method == "forkserver" or (_context_method == "fork" and _forked is None):
            from multiprocessing import forkserver

            forkserver.ensure_running()
    except Exception:  # noqa: BLE001 - the first world start reports the same error where it belongs
        pass


def process_settings() -> dict:
    """torch's process-wide settings when the template was made (the tests imported, none run), for every rank.

    A template forked from the controller has them already; a fresh-interpreter
    one (chosen when, say, a conftest started a thread) never ran the
    controller's setup, such as a conftest's ``torch.set_default_dtype``.  Each
    rank applies these at start (:func:`continuous_test.rank.main`), so either
    template gives its ranks the same process.  Read once, when the template is made.
    """
    global _settings
    if _settings is None:
        _settings = _read_torch_settings()
    return _settings


_settings: Optional[dict] = None


def _read_torch_settings() -> dict:
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    device_context = getattr(getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None), "device_context", None)
    return {
        "default_dtype": str(torch.get_default_dtype()).replace("torch.", ""),
        "default_device": None if device_context is None else str(device_context.device),
        "grad_enabled": torch.is_grad_enabled(),
        "deterministic": (torch.are_deterministic_algorithms_enabled(),
                          torch.is_deterministic_algorithms_warn_only_enabled()),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def get_context(wait: bool = True) -> BaseContext:
    """The multiprocessing context of ranks; under ``fork`` it forks the template once (``wait``: awaits its probe)."""
    global _context, _context_method
    method = start_method()
    process_settings()  # as the template gets them: now, before any test ran
    if method != "spawn":
        _short_temp_dir()  # while multiprocessing has no temp dir yet (it keeps the first it makes)
    if _context is None or _context_method != method:
        ctx = multiprocessing.get_context("spawn" if method == "spawn" else "forkserver")
        if method != "spawn":
            from multiprocessing import util

            # Before the template exists: it reads this when the controller dies.
            os.environ[ENV_PRIVATE_DIR] = util.get_temp_dir()
            os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
            # Also what a fresh-interpreter template preloads if a forked one cannot be used.
            ctx.set_forkserver_preload(preload_modules())
        _context, _context_method = ctx, method
    if method == "fork":
        if _forked is None:
            _fork_template()
        if wait:
            _confirm_forked()
    return _context


def template_kind() -> Optional[str]:
    """How this controller's ranks are started: "fork", "forkserver", "spawn", or None before the first world."""
    if _context_method is None:
        return None
    if _context_method == "fork":
        return "fork" if _forked is not None and _forked.ok is not False else "forkserver"
    return _context_method


# -- a template forked from the controller --------------------------------------------


def fork_hazard() -> Optional[str]:
    """Why the controller must not be forked now, or None when it may be."""
    if threading.active_count() != 1 or threading.current_thread() is not threading.main_thread():
        return "the controller runs more than one Python thread"
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                return "CUDA is initialized in the controller"
        except Exception:  # noqa: BLE001 - a torch without CUDA support
            pass
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            return "the controller has a default process group"
    if _cuda_driver_loaded():
        return "the CUDA driver is loaded in the controller"
    return None


def _cuda_driver_loaded() -> bool:
    # cuInit (even from torch.cuda.is_available()) loads libcuda; a forked child
    # of a process that initialized the driver cannot use CUDA.
    try:
        with open("/proc/self/maps") as maps:
            return any("libcuda.so" in line for line in maps)
    except OSError:
        return True  # cannot tell: do not fork


def _forkserver_compatible() -> bool:
    """Whether this Python's forkserver has the internals a forked template fills in (3.9 to 3.13)."""
    from multiprocessing import forkserver

    server: Any = getattr(forkserver, "_forkserver", None)
    params = list(inspect.signature(forkserver.main).parameters)
    return (params == ["listener_fd", "alive_r", "preload", "main_path", "sys_path"]
            and all(hasattr(server, a) for a in ("_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid"))
            and server._forkserver_pid is None)


def _fork_template() -> None:
    """Fork the controller as the forkserver, if that is safe; else leave it to the fresh-interpreter one."""
    global _forked
    if fork_hazard() is not None or not _forkserver_compatible():
        return
    from multiprocessing import connection, forkserver, resource_tracker, util

    resource_tracker.ensure_running()  # before the fork: its fd is passed with every rank
    _import_what_ranks_use()
    listener = socket.socket(socket.AF_UNIX)
    address = getattr(connection, "arbitrary_address")("AF_UNIX")  # multiprocessing's own, untyped
    listener.bind(address)
    if not util.is_abstract_socket_namespace(address):
        os.chmod(address, 0o600)
    listener.listen()
    alive_r, alive_w = os.pipe()
    status_r, status_w = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        _flush(stream)  # else the template's ranks would write the controller's buffered output again
    pid = os.fork()
    if pid == 0:
        _serve(listener, alive_r, status_w, closing=(alive_w, status_r))
    listener.close()
    os.close(alive_r)
    os.close(status_w)
    server: Any = forkserver._forkserver  # multiprocessing's private state, filled in as ensure_running() would
    server._forkserver_address, server._forkserver_alive_fd, server._forkserver_pid = address, alive_w, pid
    _forked = _ForkedTemplate(pid, status_r)


def _import_what_ranks_use() -> None:
    """Import (and look up), once and here, what every rank would otherwise redo after its fork."""
    import collections.abc
    import importlib

    for name in RANK_MODULES:  # the ranks' own code: the controller may not have needed it yet
        importlib.import_module(name)

    if "numpy" in sys.modules:
        try:
            import numpy.random  # noqa: F401 - numpy 2 imports it lazily: each rank's seeding would pay
        except ImportError:
            pass
    # Any ABC.register() clears every ABC's isinstance cache; with torch loaded, a
    # cold isinstance(dict, Mapping) walks thousands of subclasses (tens of ms),
    # and each rank's os.environ.update() makes one.
    isinstance({}, collections.abc.Mapping)


def _flush(stream) -> None:
    try:
        stream.flush()
    except Exception:  # noqa: BLE001 - a closed or odd stream: nothing to duplicate
        pass


def _serve(listener: socket.socket, alive_r: int, status_w: int, closing: tuple) -> None:
    """The forked template's whole life: probe, report, serve forkserver requests, exit.  Never returns."""
    code = 0
    try:
        for fd in closing:
            os.close(fd)
        from continuous_test.template import at_exit  # marks this process as the template

        ok = _probe_parallel_work()
        os.write(status_w, _READY if ok else _UNSAFE)
        os.close(status_w)
        if ok:
            from multiprocessing import forkserver

            from continuous_test.template import preload_recorder

            preload_recorder.instrument()  # once here, not in every rank (the status is sent: the controller goes on)
            # Raises SystemExit once the controller and every rank closed the alive pipe.
            forkserver.main(listener.detach(), alive_r, [])
    except SystemExit:
        at_exit.kill_children()  # the controller is gone: so are its ranks and what they started
    except BaseException:  # noqa: BLE001 - nothing of the controller may run here
        code = 1
    finally:
        os._exit(code)


def _probe_parallel_work() -> bool:
    """Whether a child of this process finishes an intra-op parallel region in time."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            torch = sys.modules.get("torch")
            if torch is not None:
                torch.ones(PROBE_NUMEL).add_(1)
            os.write(write_end, _READY)
        finally:
            os._exit(0)
    os.close(write_end)
    ready, _, _ = select.select([read_end], [], [], PROBE_TIMEOUT)
    ok = bool(ready) and os.read(read_end, 1) == _READY
    if not ok:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    os.close(read_end)
    return ok


def _confirm_forked() -> None:
    """Wait (once) for the forked template's probe; if it failed, fall back to a fresh interpreter."""
    if _forked is None or _forked.ok is not None:
        return
    ready, _, _ = select.select([_forked.status_fd], [], [], PROBE_TIMEOUT + 10.0)
    _forked.ok = bool(ready) and os.read(_forked.status_fd, 1) == _READY
    os.close(_forked.status_fd)
    if not _forked.ok:
        _abandon_forked()


def _abandon_forked() -> None:
    """Stop the forked template; the next rank start launches a fresh-interpreter one."""
    assert _forked is not None
    from multiprocessing import forkserver

    server: Any = forkserver._forkserver  # multiprocessing's private state, filled in as ensure_running() would
    try:
        os.kill(_forked.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(_forked.pid, 0)
    os.close(server._forkserver_alive_fd)
    try:
        os.unlink(server._forkserver_address)
    except (OSError, TypeError):
        pass
    server._forkserver_address = server._forkserver_alive_fd = server._forkserver_pid = None
    # What failed the probe is most likely the test file's import-time code, so
    # the fresh template does not import it: each rank does, after the fork.
    server.set_forkserver_preload(preload_modules(with_main=False))


def template_pid() -> Optional[int]:
    """The pid of this process's template (forked from it, or a fresh interpreter), or None."""
    return _forkserver_pid() if _context_method in ("fork", "forkserver") else None


def stop() -> None:
    """Stop this process's template, forked or a fresh interpreter (no world may still use it); the next world
    starts a new one.

    For a process that runs one test session after another (an in-process test
    runner): each session's template then holds that session's modules and
    ``__main__`` only, as a real run's does.
    """
    global _forked
    from multiprocessing import forkserver

    server: Any = forkserver._forkserver
    if _forked is not None:
        _confirm_forked()
        # Unless it died and multiprocessing started a fresh interpreter in its place (then that one is stopped below).
        if _forked.ok and _forked.pid == getattr(server, "_forkserver_pid", None):
            _abandon_forked()
        _forked = None
    if getattr(server, "_forkserver_pid", None) is not None:
        try:
            server._stop()  # the fresh interpreter: closing its alive pipe ends it (multiprocessing's own stop)
        except OSError:  # reaped already, or its socket went with its directory: nothing left to end
            server._forkserver_alive_fd = server._forkserver_pid = server._forkserver_address = None
    if _context is not None:
        _context.set_forkserver_preload(preload_modules())  # _abandon_forked chose the fallback's preload


def private_dir() -> str:
    """The controller's private (0700) directory; every world's files live below it.

    It is multiprocessing's own temp dir, which also holds the forkserver's
    socket and is removed when the controller exits.  If the controller is
    killed, the template (or, failing that, a rank) removes it.
    """
    from multiprocessing import util

    get_context()  # first: it may give multiprocessing a shorter temp dir
    return util.get_temp_dir()


def _forkserver_pid() -> Optional[int]:
    from multiprocessing import forkserver

    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def parent_pid() -> int:
    """The pid ranks are forked by: the template under forkserver, else this controller.

    Starts the template (again, if it died) first, so that the answer holds for
    the ranks about to be started.
    """
    if _context_method in ("fork", "forkserver"):
        from multiprocessing import forkserver

        forkserver.ensure_running()
        pid = _forkserver_pid()
        if pid is not None:
            return pid
    return os.getpid()


def died(wait: float = 0.0) -> bool:
    """True if the template process died (killed by a test, or by the OOM killer).

    Its ranks' sentinels are its pipes, which close while it is still exiting:
    ``wait`` gives it that long to be seen gone.
    """
    import time

    pid = template_pid()
    if pid is None:
        return False
    deadline = time.monotonic() + wait
    while running(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True
