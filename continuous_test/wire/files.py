"""Files the harness writes for users (run reports, their pages, durations) and names it makes.

:func:`check` is called when a run starts, for every path a user gave for such a
file: a path that cannot be written is a usage error naming the option and why,
before any test runs, never a traceback at the end.  It returns the path made
absolute, so that a test that changes the working directory does not move the
file.

:func:`write_text` writes one such file.  A regular file (or a new one) is written
to a temporary file beside it and renamed over it, so that a reader never sees
half of it; a symbolic link is written through (its target is replaced, the link
kept).  Anything else that exists and is not a directory (``/dev/null``,
``/dev/stdout``, a FIFO, a character device) is opened and written in place:
it is never replaced by a regular file.

:func:`name_part` cuts a text (a test's id, a class's name) into a part of a file
name that fits the file system's limit of 255 bytes, counted in UTF-8.

Part of the wire format's leaf modules (stdlib only): anyone may import it.
"""
from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
from typing import Optional, Tuple

from continuous_test.errors import ConfigError

__all__ = ["check", "write_text", "name_part", "MAX_NAME_BYTES", "UNWRITABLE"]

# The most bytes of one file name on Linux and macOS file systems (NAME_MAX).
MAX_NAME_BYTES = 255
UNWRITABLE = "{option}: cannot write {path!r}: {why}; give the path of a file that can be written"


def check(path: str, option: str) -> str:
    """``path`` made absolute, if a file can be written there; else a ConfigError naming ``option``.

    Creates nothing: a missing directory is made when the file is written, if its
    nearest existing parent is a directory that can be written.
    """
    absolute = os.path.abspath(os.path.expanduser(path))
    why = "it names a directory" if path.endswith(os.sep) else _unwritable(absolute)
    if why is not None:
        raise ConfigError(UNWRITABLE.format(option=option, path=path, why=why))
    return absolute


def _unwritable(path: str) -> Optional[str]:
    """Why no file can be written at ``path`` (absolute), or None."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):  # a parent that is not a directory: named below
        info = None
    except OSError as exc:  # a loop of links, no permission
        return exc.strerror or str(exc)
    if info is not None:
        if stat.S_ISDIR(info.st_mode):
            return "it is a directory"
        if not stat.S_ISREG(info.st_mode):  # a device, a FIFO: written in place
            return None if os.access(path, os.W_OK) else "no permission to write it"
    target = os.path.realpath(path)
    parent = os.path.dirname(target)
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"{parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"no permission to write in {parent}"
    return None


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` (UTF-8): in place for what is not a regular file, else by a rename."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(f"{path} is a directory")
    target, open_file = _follow(path)
    if info is not None and (not stat.S_ISREG(info.st_mode) or open_file):
        # A device or a FIFO, or one of a process's open files (/dev/stdout, /proc/self/fd/N, to a
        # pipe or to a file the shell holds open): written where it is, never replaced.
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(text)
        return
    folder = os.path.dirname(target)
    os.makedirs(folder, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{name_part(os.path.basename(target), 100)}.", suffix=".tmp",
                                     dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            stream.write(text)
        # The old file's mode, else what the umask gives a new file (mkstemp's is 0600).
        os.chmod(temporary, info.st_mode & 0o7777 if info is not None else 0o666 & ~_umask())
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _follow(path: str) -> Tuple[str, bool]:
    """The path ``path``'s symbolic links lead to (it may not exist yet), and whether one of them is a
    process's open file in ``/proc`` (``/dev/stdout`` is ``/proc/self/fd/1``), whose target is no path."""
    current = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        current = os.path.join(os.path.realpath(os.path.dirname(current)), os.path.basename(current))
        if not os.path.islink(current):
            return current, False
        if current.startswith(_PROC):
            return current, True
        current = os.path.join(os.path.dirname(current), os.readlink(current))
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)


_MAX_LINKS = 40
_PROC = "/proc" + os.sep


def _same(info: os.stat_result, target: str) -> bool:
    try:
        other = os.stat(target)
    except OSError:
        return False
    return (other.st_dev, other.st_ino) == (info.st_dev, info.st_ino)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def name_part(text: str, max_bytes: int = MAX_NAME_BYTES) -> str:
    """``text`` as part of a file name: characters other than letters, digits, ``.``, ``_`` and ``-``
    become ``_``, cut to at most ``max_bytes`` bytes of UTF-8 without splitting a character."""
    encoded = re.sub(r"[^\w.-]", "_", text).encode("utf-8", errors="replace")
    return encoded[:max_bytes].decode("utf-8", errors="ignore")
