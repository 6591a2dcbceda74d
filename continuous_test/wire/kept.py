"""Whole texts that a report cuts: where they are kept, and for how long.

A report shows a bounded part of a rank's output (``controller/output.py``)
and of a rank's exception message and traceback (``wire/outcome.py``); the
whole text goes to one private (0700) directory per run, as a 0600 file whose
path the report names.  The directory is removed when the process that made it
exits, unless ``CONTINUOUS_TEST_KEEP_OUTPUT=1`` keeps it (an empty one is
removed anyway).

The controller makes the directory and hands it to its ranks
(``RankSpec.output_dir``, :func:`use`), so that everything a run cut is in
one place and stays until the run ends.  A launched rank, which has no
controller, makes its own the first time it keeps a text.

Part of the wire format: its path crosses from the controller to its ranks (stdlib only).
"""
from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import tempfile
from typing import Optional

from continuous_test.wire.env import ENV_KEEP_OUTPUT, parse_switch

__all__ = ["directory", "use", "save"]

_dir: Optional[str] = None
_serial = itertools.count(1)


def directory() -> str:
    """This run's directory of whole texts, made the first time it is asked for."""
    global _dir
    if _dir is None:
        _dir = tempfile.mkdtemp(prefix="continuous_test-output-")  # mode 0700
        atexit.register(_remove, _dir)
    return _dir


def use(path: Optional[str]) -> None:
    """Keep texts in ``path`` (a rank: its controller's directory, which the controller removes)."""
    global _dir
    if path is not None and os.path.isdir(path):
        _dir = path


def save(text: str, name: str) -> str:
    """Write ``text`` whole to a new file named after ``name`` in this run's directory; its path."""
    name = re.sub(r"[^\w.-]", "_", name)[:150]
    path = os.path.join(directory(), name)
    if os.path.exists(path):  # the same name again (a rerun): a new file, the first one kept
        path = f"{path}.{os.getpid()}.{next(_serial)}"
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8",
              errors="backslashreplace") as f:
        f.write(text)
    return path


def _remove(path: str) -> None:
    if not parse_switch(ENV_KEEP_OUTPUT):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.rmdir(path)  # only if empty
        except OSError:
            pass
