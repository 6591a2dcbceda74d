"""Processes as ``/proc`` shows them: the one answer to "is this pid alive?" and "whose children?".

Used where the process is not our child, so no sentinel or ``waitpid`` can tell:
a controller checking ranks forked by the template, a rank checking its
controller, the template finding the ranks it forked.  Stdlib only.
"""
from __future__ import annotations

__all__ = [
    "running",
    "children",
]

import os
from typing import List


def running(pid: int) -> bool:
    """True if process ``pid`` exists and is not a zombie; also for processes that are not our children."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except OSError:  # no /proc: ask the kernel, which cannot tell a zombie
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True


def children(parent: int) -> List[int]:
    """Pids of the live children of ``parent``, from /proc (empty where there is none)."""
    found: List[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == parent:
            found.append(int(entry))
    return found
