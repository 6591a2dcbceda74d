"""The template process that ranks are forked from.

Starting a rank with ``spawn`` costs a new interpreter plus ``import torch``
(about 1.3 s of CPU).  Instead, the controller starts one ``forkserver`` per
process whose preloaded modules include torch and the rank loop; every rank is
then a ``fork()`` of that template.  The template is a fresh interpreter, not a
fork of the controller, so it never inherits the controller's threads or CUDA
state; ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` keeps module-level
``torch.cuda.is_available()`` calls from initializing CUDA in it, and
:func:`continuous_test.worker.template_cuda_initialized` reports whether
anything did.  Where ``forkserver`` is unavailable (Windows, macOS builds
without it) the plain ``spawn`` context is used.
"""
from __future__ import annotations

import multiprocessing
import os
import sys
from multiprocessing.context import BaseContext
from typing import List, Optional

from continuous_test.config import BAD_START_METHOD, start_method

__all__ = [
    "get_context",
    "preload_modules",
    "start_method",
    "private_dir",
    "parent_pid",
    "died",
    "BAD_START_METHOD",
    "ENV_PRIVATE_DIR",
]

# The controller's private directory, exported so that the template can remove
# it when the controller dies without cleaning up.
ENV_PRIVATE_DIR = "CONTINUOUS_TEST_PRIVATE_DIR"
_context: Optional[BaseContext] = None


def preload_modules() -> List[str]:
    """Modules the template imports before forking any rank."""
    modules = ["torch", "torch.distributed", "numpy", "continuous_test.case", "continuous_test.worker",
               "continuous_test._template_exit", "continuous_test._preload_recorder"]
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    if main_file and getattr(main, "__spec__", None) is None:
        # A test file run as a script: the template imports it too.
        from continuous_test._preload_main import ENV_PRELOAD_MAIN

        os.environ[ENV_PRELOAD_MAIN] = os.path.abspath(main_file)
        modules.append("continuous_test._preload_main")
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


def get_context() -> BaseContext:
    """The multiprocessing context for rank processes; the controller calls this per world."""
    global _context
    method = start_method()
    if _context is not None and _context.get_start_method() == method:
        return _context
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        _short_temp_dir()
        from multiprocessing import util

        os.environ[ENV_PRIVATE_DIR] = util.get_temp_dir()
        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
        ctx.set_forkserver_preload(preload_modules())
    _context = ctx
    return ctx


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
    if _context is not None and _context.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()
        pid = _forkserver_pid()
        if pid is not None:
            return pid
    return os.getpid()


def died() -> bool:
    """True if the template process died (killed by a test, or by the OOM killer)."""
    from continuous_test.ranks import running

    pid = _forkserver_pid() if _context is not None and _context.get_start_method() == "forkserver" else None
    return pid is not None and not running(pid)
