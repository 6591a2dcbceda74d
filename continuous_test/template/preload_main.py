"""Imported only by the forkserver template: import the test file that runs as a script.

``multiprocessing``'s own ``'__main__'`` preload never fires on the Pythons we
support (it looks for a preparation key that is not set), so every rank would
otherwise re-execute the test file.  With it imported here, a forked rank finds
``__main__`` already in place and skips that.
"""
from __future__ import annotations

import os
from multiprocessing import process, spawn
from typing import Any

from continuous_test.wire.env import ENV_PRELOAD_MAIN


def _preload(path: str) -> None:
    # multiprocessing's own flag for "importing __main__ of a parent", private API.
    current: Any = process.current_process()
    current._inheriting = True
    try:
        spawn.import_main_path(path)
    except Exception:  # the ranks import it again and report the error where it belongs
        pass
    finally:
        del current._inheriting


if os.environ.get(ENV_PRELOAD_MAIN):
    _preload(os.environ[ENV_PRELOAD_MAIN])
