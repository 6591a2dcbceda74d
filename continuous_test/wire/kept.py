"""Whole texts that a report cuts: where they are kept, and for how long.

A report shows a bounded part of a rank's output (``controller/output.py``)
and of a rank's exception message and traceback (``wire/outcome.py``); the
whole text goes to one private (0700) directory per run, as a 0600 file whose
path the report names.  The directory is removed when the process that made it
exits (at its exit, or when SIGTERM ends it), unless ``CONTINUOUS_TEST_KEEP_OUTPUT=1`` keeps it (an empty one is
removed anyway).

The controller names the directory and hands the name to its ranks
(``RankSpec.output_dir``, :func:`use`), so that everything a run cut is in
one place and stays until the run ends; whichever process keeps a text first
makes it, so a run that cuts nothing leaves nothing, even when it is killed.  A
launched rank, which has no controller, names its own.

Part of the wire format: its path crosses from the controller to its ranks (stdlib only).
"""
from __future__ import annotations

import atexit
import itertools
import os
import secrets
import shutil
import signal
import stat
import tempfile
from typing import Optional

from continuous_test.wire import files
from continuous_test.wire.env import ENV_KEEP_OUTPUT, parse_switch

__all__ = ["planned", "directory", "use", "save"]

_dir: Optional[str] = None
_serial = itertools.count(1)


def planned() -> str:
    """The path of this run's directory of whole texts, made only when a text is first kept.

    The controller hands it to its ranks: a run that cuts nothing leaves nothing,
    even when the controller is killed.  Removed at this process's exit.
    """
    global _dir
    if _dir is None:
        token = secrets.token_hex(6)
        _dir = os.path.join(tempfile.gettempdir(), f"continuous_test-output-{os.getpid()}-{token}")
        atexit.register(_remove, _dir)
        _remove_on_sigterm(_dir)
    return _dir


def _remove_on_sigterm(path: str) -> None:
    """SIGTERM ends a process without its atexit handlers: remove ``path`` then, and end by SIGTERM.

    Only where SIGTERM has its default action (a handler of the program's own is left alone) and
    only in this process: a process forked from it (the template, its ranks) starts with the
    default action again, so that SIGTERM still ends a rank stuck in C code at once.
    """
    owner = os.getpid()

    def on_sigterm(signum: int, frame: object) -> None:
        if os.getpid() == owner:
            _remove(path)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def in_child() -> None:
        if signal.getsignal(signal.SIGTERM) is on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

    try:
        if signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
            return
        signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread: signal handlers are the main thread's to set
        return
    os.register_at_fork(after_in_child=in_child)


def directory() -> str:
    """This run's directory of whole texts, made (mode 0700) the first time it is asked for."""
    path = planned() if _dir is None else _dir
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:  # made by another process of this run: it must be a private directory of ours
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise PermissionError(f"{path} is not a private directory of this user") from None
    return path


def use(path: Optional[str]) -> None:
    """Keep texts in ``path`` (a rank: its controller's directory, which the controller removes)."""
    global _dir
    if path is not None:
        _dir = path


def save(text: str, name: str, suffix: str = "") -> str:
    """Write ``text`` whole to a new file named after ``name`` (a test's id, an exception's class),
    ending in ``suffix``, in this run's directory; its path.

    The name is cut to fit the file system's limit in bytes (``wire/files.name_part``), however
    long the test's or class's name is and whatever its characters.
    """
    ending = files.name_part(suffix, _ROOM)
    stem = files.name_part(name, files.MAX_NAME_BYTES - _ROOM - len(ending.encode("utf-8")))
    path = os.path.join(directory(), stem + ending)
    if os.path.exists(path):  # the same name again (a rerun): a new file, the first one kept
        path = os.path.join(directory(), f"{stem}.{os.getpid()}.{next(_serial)}{ending}")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8",
              errors="backslashreplace") as f:
        f.write(text)
    return path


# Bytes of a kept file's name left for its suffix and for the ".PID.N" of a second file of the same name.
_ROOM = 40


def _remove(path: str) -> None:
    if not parse_switch(ENV_KEEP_OUTPUT):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.rmdir(path)  # only if empty
        except OSError:
            pass
