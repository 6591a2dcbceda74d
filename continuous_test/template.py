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

from continuous_test.config import ENV_START_METHOD

__all__ = ["get_context", "preload_modules", "start_method", "BAD_START_METHOD"]

BAD_START_METHOD = (
    "Invalid start method {value!r} from " + ENV_START_METHOD + " environment variable: "
    "expected one of {choices}"
)
_context: Optional[BaseContext] = None
TORCH_TESTING_MODULES = (
    "torch.testing._internal.common_utils",
    "torch.testing._internal.common_distributed",
    "torch.testing._internal.distributed._tensor.common_dtensor",
    "torch.testing._internal.common_fsdp",
)


def start_method() -> str:
    """The start method ranks use: the environment's choice, else forkserver, else spawn."""
    available = multiprocessing.get_all_start_methods()
    wanted = os.environ.get(ENV_START_METHOD, "").strip()
    if wanted:
        if wanted not in ("forkserver", "spawn") or wanted not in available:
            choices = ", ".join(m for m in ("forkserver", "spawn") if m in available)
            raise ValueError(BAD_START_METHOD.format(value=wanted, choices=choices))
        return wanted
    return "forkserver" if "forkserver" in available else "spawn"


def preload_modules() -> List[str]:
    """Modules the template imports before forking any rank."""
    modules = ["torch", "torch.distributed", "numpy", "continuous_test.case", "continuous_test.worker"]
    # torch's testing helpers cost a second per import (they import dynamo); a rank
    # that imports its test module under pytest finds them already loaded.
    modules += [name for name in TORCH_TESTING_MODULES if name in sys.modules]
    migrate = sys.modules.get("continuous_test.migrate")
    if migrate is not None and migrate.in_use():
        modules.append("continuous_test._migrate_template")
    main = sys.modules.get("__main__")
    if getattr(main, "__file__", None) and getattr(main, "__spec__", None) is None:
        # A test file run as a script: the template imports it too.
        from continuous_test._preload_main import ENV_PRELOAD_MAIN

        os.environ[ENV_PRELOAD_MAIN] = os.path.abspath(main.__file__)
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

    config = process.current_process()._config
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
        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
        ctx.set_forkserver_preload(preload_modules())
    _context = ctx
    return ctx
