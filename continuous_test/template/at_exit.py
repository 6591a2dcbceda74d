"""Imported only by the forkserver template: leave nothing behind when it exits.

multiprocessing's forkserver exits when the pipe its controller holds closes,
that is as soon as the controller is gone, even killed by SIGKILL.  (Ranks close
their inherited copy of that pipe at start, see :mod:`continuous_test.rank.main`, so
neither they nor the processes their tests fork keep the template alive.)  At
that exit the template kills the process group of every rank it forked, which
includes whatever those ranks' tests started, and removes the controller's
private directory.  A rank stuck in C code holding the GIL cannot run Python to
notice anything itself; SIGKILL needs no cooperation.
"""
from __future__ import annotations

import atexit
import os
import shutil
import signal

from continuous_test._procfs import children
from continuous_test.wire.env import ENV_PRIVATE_DIR, ENV_TEMPLATE_PID

__all__ = [
    "kill_children",
]


def kill_children() -> None:
    """Kill the process group of every rank this template forked, then remove the controller's files."""
    for pid in children(os.getpid()):
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:  # not a group leader yet
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    private = os.environ.get(ENV_PRIVATE_DIR)
    if private:
        shutil.rmtree(private, ignore_errors=True)


_TEMPLATE_PID = os.getpid()
# This process is the template: only here does a fork freeze the objects that exist.
os.environ[ENV_TEMPLATE_PID] = str(_TEMPLATE_PID)


def _at_exit() -> None:
    # Forked ranks inherit this handler; they leave through os._exit, but be sure.
    if os.getpid() == _TEMPLATE_PID:
        kill_children()


atexit.register(_at_exit)
