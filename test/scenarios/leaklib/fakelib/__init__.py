"""A library that, at its first import, adds its vendored directory to sys.path and filters for its warnings.

It also sets a variable of its own and registers an object that is not a module
in ``sys.modules`` (a lazy-loading shim, as some libraries do).
"""
import os
import sys
import types
import warnings

VENDOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_vendor")
if VENDOR not in sys.path:
    sys.path.append(VENDOR)
warnings.filterwarnings("ignore", category=DeprecationWarning, module="fakelib")
# Filters that name no module of the library: set during its import all the same.
warnings.filterwarnings("ignore", message=".*fakelib's old api.*")
warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"fakelib\..*")

os.environ.setdefault("FAKELIB_HOME", os.path.dirname(os.path.abspath(__file__)))


class _Shim(types.SimpleNamespace):
    """Not a module: what ``import fakelib_shim`` finds in sys.modules."""


sys.modules["fakelib_shim"] = _Shim(ANSWER=42)  # type: ignore[assignment]

_POOL = []


def run_in_pool(fn):
    """Run ``fn`` on the library's thread pool, made at the first call and kept for the process (as torch.compile's)."""
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        _POOL.append(ThreadPoolExecutor(1, thread_name_prefix="fakelib-pool"))
    return _POOL[0].submit(fn).result()


def pool_kept():
    """Whether this process already has the pool (made by an earlier test of this world)."""
    return bool(_POOL)


def start_watcher(stop):
    """Start a daemon thread of the library's that runs until ``stop`` is set."""
    import threading

    threading.Thread(target=stop.wait, name="fakelib-watcher", daemon=True).start()
