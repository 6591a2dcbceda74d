"""Imported only by the forkserver template: import the test file that runs as a script.

``multiprocessing``'s own ``'__main__'`` preload never fires on the Pythons we
support (it looks for a preparation key that is not set), so every rank would
otherwise re-execute the test file.  With it imported here, a forked rank finds
``__main__`` already in place and skips that.
"""
from __future__ import annotations

import os
from multiprocessing import process, spawn

ENV_PRELOAD_MAIN = "CONTINUOUS_TEST_PRELOAD_MAIN"


def _preload(path: str) -> None:
    process.current_process()._inheriting = True
    try:
        spawn.import_main_path(path)
    except Exception:  # the ranks import it again and report the error where it belongs
        pass
    finally:
        del process.current_process()._inheriting


if os.environ.get(ENV_PRELOAD_MAIN):
    _preload(os.environ[ENV_PRELOAD_MAIN])
