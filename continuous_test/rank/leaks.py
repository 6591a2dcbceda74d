"""State leaks between tests: what a test left changed in its rank process.

How data flows::

    rank (rank.run.run_case)                        controller (verdict.merge, verdict.leaks)
      before = take()                                 one LeakReport per rank
      run the test, tearDown, cleanups                    │ the same change on several
      leaks = check(before, policy)   ──RankOutcome──►    │ ranks becomes one line "(ranks 0, 1)"
        restore what can be restored     .leaks           ▼
                                                      Verdict: warning text (restore), a failure
                                                      (fail), restart_world if anything stayed

A snapshot is a handful of cheap reads (most are C calls returning a scalar; the
environment, ``sys.path``, the warnings filters and the hook dicts are shallow
copies), compared with ``==`` first; only a difference is described.  What is
watched is listed in :data:`WATCHED`.  ``sys.modules`` is watched for entries
replaced or removed, and for added entries that are not modules (a mock, or
``None`` blocking an import); added modules are not reported: imports are caches
that torch itself fills lazily (C extensions add modules without an import spec),
and removing them would break later tests.

Policies (:data:`POLICIES`): ``restore`` puts back what can be put back and reports
the leak as a warning; ``fail`` also fails the test; ``off`` takes no snapshot.
What cannot be put back (a live thread, interop threads once parallel work
started) is reported, and the world is restarted before the next test.

This is the rank's half: it takes and checks snapshots.  Formatting and judging
the reports is the verdict's (:mod:`continuous_test.verdict.leaks`).
"""
from __future__ import annotations

import gc
import os
import signal
import socket
import sys
import sysconfig
import time
import threading
import warnings
import weakref
from types import ModuleType
from typing import AbstractSet, Any, Callable, Dict, List, Optional, Tuple

import torch

try:
    import resource
except ImportError:  # not on this platform: the limit is not watched
    resource = None  # type: ignore[assignment]

from continuous_test._procfs import running
from continuous_test.config import LEAK_POLICIES
from continuous_test.wire.outcome import Leak, LeakReport

__all__ = [
    "Snapshot",
    "POLICIES",
    "WATCHED",
    "take",
    "check",
]

POLICIES = LEAK_POLICIES  # restore, fail, off (continuous_test.config)
# WATCHED, what is watched, is read from the watchers' tables at the end of this module.

# Variables torch's compile stack sets for itself the first time it is used (its
# cache directories, a process-unique pointer): once set, a process keeps them.
LIBRARY_ENV = frozenset({"TORCHINDUCTOR_CACHE_DIR", "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR", "TRITON_CACHE_DIR"})
MAX_VALUE = 120
# A thread that is just finishing is not a leak: how long to let it end.
THREAD_GRACE = 0.1


# -- scalar items: (label, read, write) ----------------------------------------------


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:  # the test removed the directory it moved into
        return "(a removed directory)"


def _device() -> Any:
    ctx = getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
    return None if ctx is None else ctx.device


def _deterministic() -> Tuple[bool, bool]:
    return torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()


def _set_deterministic(value: Tuple[bool, bool]) -> None:
    torch.use_deterministic_algorithms(value[0], warn_only=value[1])


_CUDNN = ("enabled", "benchmark", "deterministic", "allow_tf32")


def _cudnn() -> Tuple[bool, ...]:
    flags = torch.backends.cudnn
    return tuple(getattr(flags, name) for name in _CUDNN)


def _set_cudnn(value: Tuple[bool, ...]) -> None:
    """Put the cudnn flags back, also where torch's testing internals froze them (``disable_global_flags()``,
    which ``common_utils`` calls at import): through the unfreezing that torch's own ``flags()`` uses."""
    import contextlib

    frozen = torch.backends.flags_frozen()
    # The context manager lives in torch.backends' own globals (the module object may be a proxy of them).
    allow = torch.backends.flags_frozen.__globals__.get("__allow_nonbracketed_mutation") if frozen else None
    with allow() if allow is not None else contextlib.nullcontext():
        for name, flag in zip(_CUDNN, value):
            setattr(torch.backends.cudnn, name, flag)


def _proc_read(path: str) -> Optional[bytes]:
    """The content of a /proc file of this process, read again through a descriptor kept open (None: unreadable).

    Opening costs more than the rest of a snapshot; a procfs file read from
    offset 0 is generated afresh.  A descriptor opened before a fork names the
    parent's entry, so it is kept per process.
    """
    pid = os.getpid()
    cached = _proc_fds.get(path)
    try:
        if cached is None or cached[0] != pid:
            cached = _proc_fds[path] = (pid, os.open(path, os.O_RDONLY))
        return os.pread(cached[1], 65536, 0)
    except OSError:
        _proc_fds.pop(path, None)
        return None


# /proc path -> (the pid that opened it, its descriptor).
_proc_fds: Dict[str, Tuple[int, int]] = {}


def _umask() -> int:
    status = _proc_read("/proc/self/status")  # Linux 4.7 and later say it without changing it
    at = status.find(b"\nUmask:") if status else -1
    if status and at >= 0:
        try:
            return int(status[at + 7:status.index(b"\n", at + 1)].strip(), 8)
        except ValueError:
            pass
    mask = os.umask(0o022)  # reading the mask sets it: put it back at once
    os.umask(mask)
    return mask


def _timer() -> bool:
    # Whether a real-time timer is pending: its remaining time shrinks by itself, so a
    # timer pending before the test (a runner's own, pytest-timeout's) is no change.
    return signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0)


def _cancel_timer(pending: bool) -> None:
    # A pending alarm or interval timer (signal.alarm, setitimer) the test left would fire in a later test.
    if not pending:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _handler(signum: int) -> Callable[[], Any]:
    return lambda: signal.getsignal(signum)


def _set_handler(signum: int) -> Callable[[Any], Any]:
    # None: a handler not installed from Python, which cannot be put back from here.
    return lambda handler: signal.signal(signum, handler)


def _nofile() -> Any:
    return resource.getrlimit(resource.RLIMIT_NOFILE) if resource is not None else None


def _set_nofile(value: Any) -> None:
    if resource is not None and value is not None:  # raising a lowered hard limit needs privilege: fails
        resource.setrlimit(resource.RLIMIT_NOFILE, value)


def _numpy() -> Any:
    return sys.modules.get("numpy")  # read only where a test or library imported it: never imported here


def _np_err() -> Any:
    np = _numpy()
    return None if np is None or not hasattr(np, "geterr") else np.geterr()


def _set_np_err(value: Any) -> None:
    _numpy().seterr(**value)


def _np_print() -> Any:
    np = _numpy()
    return None if np is None or not hasattr(np, "get_printoptions") else np.get_printoptions()


def _set_np_print(value: Any) -> None:
    _numpy().set_printoptions(**value)


_TORCH_PRINT = ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")


def _torch_print() -> Tuple[Any, ...]:
    options = torch._tensor_str.PRINT_OPTS
    return tuple(getattr(options, name) for name in _TORCH_PRINT)


def _set_torch_print(value: Tuple[Any, ...]) -> None:
    torch.set_printoptions(**dict(zip(_TORCH_PRINT, value)))


def _anomaly() -> Tuple[bool, bool]:
    return torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()


def _set_anomaly(value: Tuple[bool, bool]) -> None:
    torch.set_anomaly_enabled(value[0], value[1])


_SCALARS: Tuple[Tuple[str, Callable[[], Any], Callable[[Any], Any]], ...] = (
    ("current directory", _cwd, os.chdir),
    ("umask", _umask, os.umask),
    ("trace function (sys.settrace)", sys.gettrace, sys.settrace),
    ("profile function (sys.setprofile)", sys.getprofile, sys.setprofile),
    ("pending alarm or interval timer (ITIMER_REAL)", _timer, _cancel_timer),
    ("SIGCHLD handler", _handler(signal.SIGCHLD), _set_handler(signal.SIGCHLD)),
    ("SIGTERM handler", _handler(signal.SIGTERM), _set_handler(signal.SIGTERM)),
    ("open-file limit (RLIMIT_NOFILE soft, hard)", _nofile, _set_nofile),
    ("gc thresholds", gc.get_threshold, lambda value: gc.set_threshold(*value)),
    ("default socket timeout", socket.getdefaulttimeout, socket.setdefaulttimeout),
    ("numpy error handling (np.seterr)", _np_err, _set_np_err),
    ("numpy print options", _np_print, _set_np_print),
    ("torch print options (precision, threshold, edgeitems, linewidth, sci_mode)", _torch_print, _set_torch_print),
    ("autograd anomaly mode (enabled, check_nan)", _anomaly, _set_anomaly),
    ("torch default dtype", torch.get_default_dtype, torch.set_default_dtype),
    ("torch default device", _device, torch.set_default_device),
    ("grad mode", torch.is_grad_enabled, torch.set_grad_enabled),
    ("torch intra-op threads", torch.get_num_threads, torch.set_num_threads),
    ("torch inter-op threads", torch.get_num_interop_threads, torch.set_num_interop_threads),
    ("deterministic algorithms (enabled, warn_only)", _deterministic, _set_deterministic),
    ("float32 matmul precision", torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
) + (
    # Reading them costs a C call each: only where cudnn is present.
    (("cudnn flags (enabled, benchmark, deterministic, allow_tf32)", _cudnn, _set_cudnn),)
    if torch.backends.cudnn.is_available() else ()
)


def _hook_dicts() -> Tuple[Tuple[str, dict], ...]:
    import torch.nn.modules.module as module_mod
    import torch.optim.optimizer as optim_mod

    found = []
    for mod, kind in ((module_mod, "module"), (optim_mod, "optimizer")):
        for name, value in vars(mod).items():
            if name.startswith("_global_") and isinstance(value, dict):
                found.append((f"global {kind} hooks ({mod.__name__}.{name})", value))
    return tuple(found)


_HOOKS = _hook_dicts()


# -- snapshots -----------------------------------------------------------------------


class Snapshot:
    """Process-global state before a test; taken by the rank, compared after the test."""

    __slots__ = ("scalars", "recursion", "env", "path", "modules", "modules_tag", "streams", "filters", "hooks", "threads", "pg",
                 "groups", "modes", "children")

    def __init__(self) -> None:
        self.scalars = tuple([read() for _, read, _ in _SCALARS])
        self.recursion = sys.getrecursionlimit()
        self.env = dict(os.environ._data)  # type: ignore[attr-defined]  # raw copy: no decoding
        self.path = list(sys.path)
        self.modules, self.modules_tag = _modules_copy()
        self.streams = (sys.stdout, sys.stderr)
        self.filters = list(warnings.filters)
        self.hooks = tuple([tuple(d.items()) if d else () for _, d in _HOOKS])
        self.threads = set(threading.enumerate())  # objects: a new thread may reuse an ended one's ident
        self.pg, self.groups = _groups()
        self.modes = _modes()
        self.children = _children()


# Copying sys.modules (over a thousand entries in a rank) is the largest part of
# a snapshot, and comparing it the largest part of a check: after a collective
# the caches are cold, and a look at every entry costs more than all the rest.
# Where CPython keeps a dict's version tag (PEP 509), which changes with every
# change to the dict, an unchanged tag proves sys.modules unchanged;
# the copy of the previous test is then reused, and the check reads one number.
# Without the tag, the copy is reused when the check after it found sys.modules
# equal to it: nothing between two tests replaces a module, and an import adds
# one, which changes the length.
_modules_cache: Optional[Dict[str, Any]] = None
# sys.modules' version tag when _modules_cache was copied (None: no tag to read).
_modules_cache_tag: Optional[int] = None
# Set by a check that found sys.modules equal to the cached copy; a snapshot uses it once.
_modules_verified = False


def _version_tag_reader() -> Optional[Callable[[dict], int]]:
    """A reader of a dict's PEP 509 version tag, if this interpreter provably keeps one; else None.

    The tag is a private field (``ma_version_tag``, after the object header and
    ``ma_used``), kept by CPython 3.10 to 3.12.  It is trusted only if it changes,
    here and now, on each kind of change a test could make to sys.modules.
    """
    if (sys.implementation.name != "cpython" or not (3, 10) <= sys.version_info[:2] <= (3, 12)
            or hasattr(sys, "gettotalrefcount") or sys.maxsize < 2**32):
        return None  # not CPython, another layout, or a debug build (a longer object header)
    import ctypes

    def tag(d: dict) -> int:
        return ctypes.c_uint64.from_address(id(d) + 24).value

    probe: Dict[str, Any] = {"a": ModuleType("a"), "b": ModuleType("b")}
    seen = [tag(probe)]
    for change in (lambda: probe.__setitem__("a", ModuleType("a")), lambda: probe.pop("b"),
                   lambda: probe.__setitem__("c", None), lambda: probe.update(b=None), probe.clear):
        change()
        seen.append(tag(probe))
    steady = tag(sys.modules) == tag(sys.modules)
    return tag if steady and all(a < b for a, b in zip(seen, seen[1:])) else None


_modules_tag = _version_tag_reader()


def _modules_copy() -> Tuple[Dict[str, Any], Optional[int]]:
    """A copy of sys.modules for a snapshot, and its version tag (None: no tag)."""
    global _modules_cache, _modules_cache_tag, _modules_verified
    tag = _modules_tag(sys.modules) if _modules_tag is not None else None
    if tag is not None:
        reuse = _modules_cache is not None and tag == _modules_cache_tag
    else:
        reuse = _modules_verified and _modules_cache is not None and len(_modules_cache) == len(sys.modules)
    if not reuse:
        _modules_cache, _modules_cache_tag = dict(sys.modules), tag
    _modules_verified = False
    assert _modules_cache is not None
    return _modules_cache, tag


def _modules_unchanged(before: Snapshot) -> bool:
    """Whether sys.modules holds what it held when ``before`` was taken."""
    if before.modules_tag is not None and _modules_tag is not None:
        return _modules_tag(sys.modules) == before.modules_tag
    return len(sys.modules) == len(before.modules) and before.modules.items() <= sys.modules.items()


def take() -> Snapshot:
    """Snapshot the process-global state (:data:`WATCHED`) as it is now, for :func:`check` after a test."""
    global _active, _active_thread
    if not _watching_starts:
        _watch_thread_starts()
        _watch_first_imports()
    _import_entries.clear()  # those of earlier tests are in the snapshot now
    _active_thread = threading.get_ident()
    _active = Snapshot()
    return _active


def _c10d() -> Any:
    global _C10D
    if _C10D is None:
        import torch.distributed as dist

        _C10D = False
        if dist.is_available():
            from torch.distributed import distributed_c10d

            _C10D = distributed_c10d
    return _C10D


_C10D: Any = None


def _groups() -> Tuple[Optional[Tuple[Any, int, int]], frozenset]:
    c10d = _c10d()
    if not c10d:
        return None, frozenset()
    world = c10d._world
    pg = world.default_pg
    default = None if pg is None else (pg, pg.rank(), pg.size())
    return default, frozenset(world.pg_names)


def check(before: Snapshot, policy: str,
          own_files: Optional[Callable[[], AbstractSet[str]]] = None) -> Optional[LeakReport]:
    """Compare with ``before``, put back what can be, and report (None: no change); due after tearDown and cleanups.

    ``own_files``: gives the test's own code files (absolute paths), which tell a
    thread the test started from one a library started (:func:`_check_threads`);
    asked only when a new thread is still running.  None counts every new
    thread as the test's.
    """
    global _active
    _active = None  # what is imported from now on is the check's, not the test's
    found: List[Leak] = []
    _check_scalars(before, found)
    for _, check_one in _CHECKS:
        check_one(before, found, own_files)
    return LeakReport(policy, tuple(found)) if found else None


def _check_recursion_limit(old: int, found: List[Leak]) -> None:
    # A raise is what libraries do for themselves (torch's inductor raises it to 2000
    # when it compiles) and harms no later test; a lower limit would.
    new = sys.getrecursionlimit()
    if new < old:
        sys.setrecursionlimit(old)
        found.append(Leak("recursion limit (lowered)", str(old), str(new), True))


def _check_scalars(before: Snapshot, found: List[Leak]) -> None:
    for (label, read, write), old in zip(_SCALARS, before.scalars):
        new = read()
        if new != old:
            found.append(Leak(label, _show(old), _show(new), _attempt(write, old)))


def _attempt(write: Callable[[Any], Any], value: Any) -> bool:
    try:
        write(value)
    except Exception:  # e.g. inter-op threads once parallel work started: cannot go back
        return False
    return True


def _check_env(old: Dict[Any, Any], found: List[Leak]) -> None:
    new = os.environ._data  # type: ignore[attr-defined]
    if new == old:
        return
    for key in sorted(set(old) | set(new)):
        if old.get(key) == new.get(key):
            continue
        name = os.fsdecode(key)
        if key not in old and name in LIBRARY_ENV:
            continue  # set by torch for itself, once per process: kept
        before = "unset" if key not in old else repr(os.fsdecode(old[key]))
        after = "unset" if key not in new else repr(os.fsdecode(new[key]))
        if key in old:
            os.environ[name] = os.fsdecode(old[key])
        else:
            del os.environ[name]
        if name == "TZ":
            time.tzset()  # the C library reads TZ only then: local time as it was before the test
        found.append(Leak(f"environment variable {name}", _cut(before), _cut(after), True))


def _check_path(before: Snapshot, found: List[Leak]) -> None:
    """sys.path, less what a module first imported during the test added for itself (kept, as the import is)."""
    path = list(sys.path)
    kept = [p for p in path if p not in before.path and _within_new_import(p, before.modules)]
    rest = [p for p in path if p not in kept]
    if rest != before.path:
        found.append(_put_back_list("sys.path", before.path, rest))
        sys.path[:] = before.path + kept


def _within_new_import(entry: str, modules_before: Any) -> bool:
    """Whether a path entry lies in the directory of a module first imported since ``modules_before``.

    ``import setuptools`` (which torch.compile does inside a rank) appends its own
    ``setuptools/_vendor``; a later test that imports from there needs it.
    """
    where = os.path.abspath(entry) if entry else ""
    for name, module in list(sys.modules.items()):
        if name in modules_before:
            continue
        dirs = list(getattr(module, "__path__", None) or ())
        file = getattr(module, "__file__", None)
        if file:
            dirs.append(os.path.dirname(file))
        if any(where == d or where.startswith(os.path.join(d, "")) for d in map(os.path.abspath, dirs)):
            return True
    return False


def _put_back_list(item: str, old: list, new: list) -> Leak:
    added = [p for p in new if p not in old]
    removed = [p for p in old if p not in new]
    parts = ([f"added {added!r}"] if added else []) + ([f"removed {removed!r}"] if removed else [])
    after = f"{len(new)} entries" + (f" ({'; '.join(parts)})" if parts else " (reordered)")
    new[:] = old
    return Leak(item, f"{len(old)} entries", _cut(after), True)


def _modules_verified_equal(copy: Dict[str, Any]) -> None:
    global _modules_verified
    _modules_verified = copy is _modules_cache


def _check_modules(old: Dict[str, Any], found: List[Leak]) -> None:
    new = sys.modules
    kept = _import_entries  # set by a first import during the test: the import's
    for name in [n for n in old if new.get(n) is not old[n] and not (n in kept and new.get(n) is kept[n])]:
        after = "removed" if name not in new else _show(new[name])
        new[name] = old[name]
        found.append(Leak(f"sys.modules[{name!r}]", _show(old[name]), after, True))
    for name in [n for n in new if n not in old and not isinstance(new[n], ModuleType)
                 and not (n in kept and new[n] is kept[n])]:
        found.append(Leak(f"sys.modules[{name!r}]", "absent", _show(new.pop(name)), True))


def _check_streams(old: Tuple[Any, Any], found: List[Leak]) -> None:
    for name, value in zip(("stdout", "stderr"), old):
        current = getattr(sys, name)
        if current is not value:
            setattr(sys, name, value)
            found.append(Leak(f"sys.{name}", _show(value), _show(current), True))


def _put_back_filters(old: list, modules_before: Any) -> Optional[Leak]:
    """The warnings filters, less those a module first imported during the test set (kept, as the import is).

    A library sets filters for its own warnings at import (sympy, which torch
    imports lazily, does; others name themselves with ``module=``, or a message):
    that import's setup, not something the test left behind.  Those set while a
    module was first imported are in ``old`` already (:func:`_watch_first_imports`);
    also kept: one about a module first imported during the test (:func:`_set_by_import`).
    """
    new = list(warnings.filters)
    imported = [name for name in list(sys.modules) if name not in modules_before]
    kept = [f for f in new if f not in old and _set_by_import(f, imported)]
    rest = [f for f in new if f not in kept]
    if rest == old:
        return None
    added = [f for f in rest if f not in old]
    after = f"{len(new)} filters" + (f" (added {_filter_text(added[0])}{' ...' if len(added) > 1 else ''})" if added else "")
    warnings.filters[:] = kept + old  # type: ignore[index]  # a list at runtime
    warnings._filters_mutated()  # type: ignore[attr-defined]  # the module's cache key
    return Leak("warnings filters", f"{len(old)} filters", _cut(after), True)


def _set_by_import(entry: tuple, imported: List[str]) -> bool:
    """Whether a filter is about a module first imported during the test: its category's, or its ``module=``."""
    category_module = getattr(entry[2], "__module__", None)
    if category_module in imported:
        return True
    pattern = entry[3]
    # module= names the library itself (a regex matched at the module name's start):
    # it must be exactly a module first imported during the test, not a prefix of one.
    return pattern is not None and pattern.pattern.removesuffix("\\Z").removesuffix("$") in imported


# -- what a first import does ---------------------------------------------------------

# The snapshot of the test running now (set by take(), cleared when its check starts).
_active: Optional[Snapshot] = None
_active_thread: Optional[int] = None  # the thread that took the running test's snapshot (its imports fold)
# sys.modules entries a first import set during the test (name -> the object): the import's, kept.
_import_entries: Dict[str, Any] = {}
# Per thread: whether a first import is in progress (only the outermost one is watched).
_in_import = threading.local()


class _ImportState:
    """What a module's first import may change, read just before and just after it.

    The snapshot's items but those that have their own rule (threads: who started
    them; groups, modes and children: no import makes them).
    """

    __slots__ = ("scalars", "recursion", "env", "path", "filters", "streams", "hooks", "entries")

    def __init__(self) -> None:
        self.scalars = tuple([read() for _, read, _ in _SCALARS])
        self.recursion = sys.getrecursionlimit()
        self.env = dict(os.environ._data)  # type: ignore[attr-defined]
        self.path = list(sys.path)
        self.filters = list(warnings.filters)
        self.streams = (sys.stdout, sys.stderr)
        self.hooks = tuple([tuple(d.items()) if d else () for _, d in _HOOKS])
        self.entries = {n: m for n, m in list(sys.modules.items()) if not isinstance(m, ModuleType)}


def _watch_first_imports() -> None:
    """Fold what each module's first import changes into the running test's snapshot (a rank, at its first snapshot).

    A process of the test's own would have the import's changes too: a library
    that sets a variable, registers a ``sys.modules`` entry, appends to
    ``sys.path``, sets a warnings filter or a handler while it is first imported
    keeps them for the tests after it.  Wraps importlib's ``_find_and_load``,
    which every import statement and ``importlib.import_module`` call for a
    module not yet in ``sys.modules``: the wrapper reads the watched state before
    and after the outermost such import and calls the original with the same
    arguments; a module already imported costs nothing.  Only the imports of the
    thread that took the snapshot fold: while another thread imports, the test's
    own thread may change the same state.
    """
    bootstrap = sys.modules["_frozen_importlib"]  # importlib._bootstrap, as the interpreter calls it
    original = getattr(bootstrap, "_find_and_load")

    def _find_and_load(name: str, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # noqa: F841  # pytest: not the user's frame
        # Only the test's own thread's imports: what changes while another thread imports (a library's
        # worker, the runner's I/O thread) may be the test's own change, made at the same time.
        if _active is None or getattr(_in_import, "on", False) or threading.get_ident() != _active_thread:
            return original(name, *args, **kwargs)
        _in_import.on = True
        try:
            pre = _import_state()
            try:
                return original(name, *args, **kwargs)
            finally:
                post = _import_state() if pre is not None and _active is not None else None
                if post is not None and pre is not None and _active is not None:
                    _fold(_active, pre, post)
        finally:
            _in_import.on = False

    _find_and_load.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(bootstrap, "_find_and_load", _find_and_load)


def _import_state() -> Optional[_ImportState]:
    try:
        return _ImportState()
    except Exception:  # a reader failing must never fail an import: that import is then not folded
        return None


def _fold(before: Snapshot, pre: _ImportState, post: _ImportState) -> None:
    """Apply to ``before`` what changed from ``pre`` to ``post`` (an import's changes): the check keeps them."""
    if pre.scalars != post.scalars:
        before.scalars = tuple(b if p == q else q for b, p, q in zip(before.scalars, pre.scalars, post.scalars))
    if pre.recursion != post.recursion:
        before.recursion = post.recursion
    if pre.env != post.env:
        _fold_dict(before.env, pre.env, post.env)
    if pre.path != post.path:
        before.path = _fold_list(before.path, pre.path, post.path)
    if pre.filters != post.filters:
        before.filters = _fold_list(before.filters, pre.filters, post.filters)
    if pre.streams != post.streams:
        before.streams = (post.streams[0] if pre.streams[0] is not post.streams[0] else before.streams[0],
                          post.streams[1] if pre.streams[1] is not post.streams[1] else before.streams[1])
    if pre.hooks != post.hooks:
        hooks = []
        for items, p, q in zip(before.hooks, pre.hooks, post.hooks):
            merged = dict(items)
            _fold_dict(merged, dict(p), dict(q))
            hooks.append(tuple(merged.items()))
        before.hooks = tuple(hooks)
    for name, entry in post.entries.items():
        if pre.entries.get(name) is not entry:
            _import_entries[name] = entry


def _fold_dict(base: dict, pre: dict, post: dict) -> None:
    for key in set(pre) | set(post):
        if key not in post:
            base.pop(key, None)
        elif key not in pre or pre[key] is not post[key] and pre[key] != post[key]:
            base[key] = post[key]


def _fold_list(base: list, pre: list, post: list) -> list:
    """``base`` with the entries added (in front or behind) and removed from ``pre`` to ``post``."""
    if base == pre:
        return list(post)
    removed = [x for x in pre if x not in post]
    added = [x for x in post if x not in pre]
    lead = []
    for x in post:  # added in front of what was there
        if x in pre:
            break
        lead.append(x)
    return lead + [x for x in base if x not in removed and x not in added] + [x for x in added if x not in lead]


def _filter_text(entry: tuple) -> str:
    action, _message, category, _module, _lineno = entry
    return f"{action!r} for {getattr(category, '__name__', category)}"


def _check_hooks(old: Tuple[tuple, ...], found: List[Leak]) -> None:
    for (label, hooks), items in zip(_HOOKS, old):
        if len(hooks) == len(items) and (not hooks or tuple(hooks.items()) == items):
            continue
        after = f"{len(hooks)} hook(s) ({', '.join(_show(h) for h in hooks.values())})" if hooks else "0 hooks"
        hooks.clear()
        hooks.update(items)
        found.append(Leak(label, f"{len(items)} hook(s)", _cut(after), True))


def _check_threads(old: set, found: List[Leak], own_files: Optional[Callable[[], AbstractSet[str]]]) -> None:
    """Threads started during the test and still running: the test's are a leak, a library's are kept.

    Whose a thread is depends on the code that started it: the innermost frame
    outside the standard library when ``Thread.start()`` ran (recorded by
    :func:`_watch_thread_starts`), or else the code the thread runs.  In one of
    the test's own files (the test method's, the test class's), the thread is the
    test's, daemon or not: it would run on into later tests (a timer that kills
    the rank, a loop that writes), so it is reported and the world is restarted.
    Anywhere else (torch, an installed package, a helper module), it is a
    library's: libraries start pool and monitor threads once per process and keep
    them (torch.compile's thread pool), and restarting the world would not make
    them go away for long; they are left alone.
    """
    own: Optional[AbstractSet[str]] = None
    for thread in threading.enumerate():
        if thread in old:
            continue
        site = _started_at.get(thread) or _code_site(thread)
        if own_files is not None:
            own = own_files() if own is None else own
            if site is None or site[0] not in own:
                continue
        thread.join(THREAD_GRACE)
        if thread.is_alive():
            kind = "daemon" if thread.daemon else "non-daemon"
            where = f", started at {os.path.basename(site[0])}:{site[1]}" if site is not None else ""
            found.append(Leak("threads the test started", "none running",
                              _cut(f"{thread.name!r} ({kind}{where}) still running"), False))


# -- torch modes --------------------------------------------------------------------


def _modes() -> Tuple[tuple, tuple, Any]:
    """The torch function and dispatch modes entered now (``with torch.device(...)``, ``LocalTensorMode``).

    And the device ``torch.device`` contexts made current (``torch.utils._device.CURRENT_DEVICE``).
    """
    function: tuple = ()
    dispatch: tuple = ()
    if torch._C._len_torch_function_stack():  # a C call; the stacks are read only when not empty
        from torch.overrides import _get_current_function_mode_stack

        function = tuple(_get_current_function_mode_stack())
    if torch._C._len_torch_dispatch_stack():
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        dispatch = tuple(_get_current_dispatch_mode_stack())
    return function, dispatch, _current_device()


def _current_device() -> Any:
    device_module = sys.modules.get("torch.utils._device")  # imported by the first torch.device context
    return getattr(device_module, "CURRENT_DEVICE", None)


def _check_modes(old: Tuple[tuple, tuple, Any], found: List[Leak]) -> None:
    """Put the mode stacks back as they were (the modes the test left entered are dropped); report them."""
    now = _modes()
    if now[0] != old[0]:
        # torch.device(...).__enter__ pushes from C++, and its __exit__ needs the
        # object entered: rebuild the stack from the modes that were there.
        for _ in range(torch._C._len_torch_function_stack()):
            torch._C._pop_torch_function_stack()
        for mode in old[0]:
            torch._C._push_on_torch_function_stack(mode)
        found.append(Leak("torch function modes (torch.device(...) contexts, TorchFunctionMode)",
                          _describe_modes(old[0]), _describe_modes(now[0]), _modes()[0] == old[0]))
    if now[1] != old[1]:
        for mode in reversed([m for m in now[1] if m not in old[1]]):
            try:
                mode.__exit__(None, None, None)
            except Exception:
                break
        found.append(Leak("torch dispatch modes", _describe_modes(old[1]), _describe_modes(now[1]),
                          _modes()[1] == old[1]))
    if _current_device() is not old[2]:
        setattr(sys.modules["torch.utils._device"], "CURRENT_DEVICE", old[2])


def _describe_modes(modes: tuple) -> str:
    if not modes:
        return "none entered"
    names = [f"{type(m).__name__}({m.device})" if hasattr(m, "device") else type(m).__name__ for m in modes]
    return _cut(", ".join(names) + " entered")


# -- child processes ------------------------------------------------------------------


def _children() -> Optional[bytes]:
    """The children of the thread that runs tests, as the kernel lists them (None where it does not)."""
    return _proc_read(f"/proc/self/task/{threading.get_native_id()}/children")


def _check_children(old: bytes, found: List[Leak]) -> None:
    """A child the test started that left the rank's process group would outlive the run: end it and report it."""
    new = [int(pid) for pid in (_children() or b"").split() if pid not in old.split()]
    for pid in new:
        description = _end_if_outside_group(pid)
        if description is not None:
            found.append(Leak("child processes in a session of their own", "none running",
                              _cut(f"{description!r} still running; ended"), True))


def end_children_outside_group() -> None:
    """End every child of this process that left its process group (at a rank's normal end)."""
    for pid in (_children() or b"").split():
        _end_if_outside_group(int(pid))


def _end_if_outside_group(pid: int) -> Optional[str]:
    """SIGKILL the group of child ``pid`` if it is not this process's group and still runs; its command line then."""
    try:
        group = os.getpgid(pid)
        if group == os.getpgrp() or not running(pid):  # in the rank's group, or a zombie
            return None
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip() or "?"
        if group == pid:
            os.killpg(group, signal.SIGKILL)  # its own group: whatever it started too
        else:
            os.kill(pid, signal.SIGKILL)
    except OSError:  # it ended meanwhile
        return None
    _wait_exited(pid)
    return command


def _wait_exited(pid: int, bound: float = 2.0) -> None:
    """Wait (up to ``bound`` seconds) until child ``pid`` has exited, leaving it unreaped.

    A SIGKILL is delivered asynchronously: the next test must find the child
    ended (``Popen.poll()`` not None), so wait for the kernel to finish it.
    ``WNOWAIT`` leaves the exit status for the test's own ``Popen`` to collect.
    """
    deadline = time.monotonic() + bound
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return
        except ChildProcessError:  # already reaped by someone
            return
        if time.monotonic() > deadline:
            return
        time.sleep(0.001)


# -- where threads were started --------------------------------------------------------

# Thread -> (absolute file, line) of the code that started it, for threads started
# since _watch_thread_starts ran.
_started_at: "weakref.WeakKeyDictionary[threading.Thread, Tuple[str, int]]" = weakref.WeakKeyDictionary()
_watching_starts = False
_STDLIB = tuple({os.path.join(os.path.abspath(sysconfig.get_paths()[key]), "") for key in ("stdlib", "platstdlib")})
_PACKAGES = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


def _watch_thread_starts() -> None:
    """Note where each thread is started from now on, in this process (a rank, at its first snapshot).

    The one thing this module wraps: ``threading``'s private function that
    ``Thread.start()`` calls to start the OS thread (``_start_new_thread``, or
    ``_start_joinable_thread`` from Python 3.13).  The wrapper notes the starting
    frame and calls the original with the same arguments; nothing else about
    threads changes.
    """
    global _watching_starts
    _watching_starts = True
    name = next((n for n in ("_start_joinable_thread", "_start_new_thread") if hasattr(threading, n)), None)
    if name is None:
        return
    original = getattr(threading, name)

    def start_thread(function: Any, *args: Any, **kwargs: Any) -> Any:
        thread = getattr(function, "__self__", None)
        if isinstance(thread, threading.Thread):
            site = _start_site(sys._getframe(1))
            if site is not None:
                _started_at[thread] = site
        return original(function, *args, **kwargs)

    setattr(threading, name, start_thread)


def _start_site(frame: Optional[Any]) -> Optional[Tuple[str, int]]:
    """The innermost frame outside the standard library (threading, concurrent.futures, ...), as (file, line)."""
    while frame is not None:
        file = frame.f_code.co_filename
        if not _in_stdlib(file):
            return os.path.abspath(file), frame.f_lineno or 0
        frame = frame.f_back
    return None


def _in_stdlib(file: str) -> bool:
    if file.startswith("<"):  # <frozen ...>, <string>
        return True
    path = os.path.abspath(file)
    return path.startswith(_STDLIB) and not any(part in path for part in _PACKAGES)


def _code_site(thread: threading.Thread) -> Optional[Tuple[str, int]]:
    """Where the code a thread runs is defined (its target, a Timer's function, or its run method)."""
    for fn in (getattr(thread, "_target", None), getattr(thread, "function", None), type(thread).run):
        code = getattr(fn, "__code__", None)
        if code is not None and not _in_stdlib(code.co_filename):
            return os.path.abspath(code.co_filename), code.co_firstlineno
    return None


def _check_groups(before: Snapshot, found: List[Leak]) -> None:
    pg, groups = _groups()
    old = before.pg
    if (pg is None and old is not None) or (pg is not None and (old is None or pg[0] is not old[0])):
        restored = True
        if pg is not None and old is not None:  # replaced: the rank re-initializes its own
            restored = _destroy_default()
        found.append(Leak("default process group", _describe_pg(old), _describe_pg(pg), restored))


def _destroy_default() -> bool:
    import torch.distributed as dist

    try:
        dist.destroy_process_group()
    except Exception:
        return False
    return True


def _describe_pg(entry: Optional[Tuple[Any, int, int]]) -> str:
    if entry is None:
        return "none (destroyed)"
    return f"rank {entry[1]} of {entry[2]} (object {id(entry[0]):#x})"


def _show(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<unreprable {type(value).__name__}>"
    return _cut(text)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE - 3] + "..."


# -- the watchers ---------------------------------------------------------------------
# A value read and written back is one entry of _SCALARS (label, read, write).  Anything else is one
# entry here, in the order check() runs them: (what is watched, its check), the check comparing the
# snapshot's field with the state now, putting back what it can and adding a Leak for each change.


def _filters(before: Snapshot, found: List[Leak]) -> None:
    if warnings.filters != before.filters:
        leak = _put_back_filters(before.filters, before.modules)
        if leak is not None:
            found.append(leak)


def _modules(before: Snapshot, found: List[Leak]) -> None:
    if not _modules_unchanged(before):
        _check_modules(before.modules, found)
    else:
        _modules_verified_equal(before.modules)


_Check = Callable[[Snapshot, List[Leak], Optional[Callable[[], AbstractSet[str]]]], None]
_CHECKS: Tuple[Tuple[str, _Check], ...] = (
    ("a lowered recursion limit", lambda b, found, _: _check_recursion_limit(b.recursion, found)),
    ("environment variables", lambda b, found, _: _check_env(b.env, found)),
    ("sys.path", lambda b, found, _: _check_path(b, found) if sys.path != b.path else None),
    ("sys.modules (replaced or removed modules, added non-modules)", lambda b, found, _: _modules(b, found)),
    ("sys.stdout and sys.stderr",
     lambda b, found, _: _check_streams(b.streams, found) if (sys.stdout, sys.stderr) != b.streams else None),
    ("warnings filters", lambda b, found, _: _filters(b, found)),
    ("global module and optimizer hooks", lambda b, found, _: _check_hooks(b.hooks, found)),
    ("threads the test's own code started (daemon or not), not a library's",
     lambda b, found, own_files: _check_threads(b.threads, found, own_files)),
    ("torch function and dispatch modes left entered (a torch.device(...) context)",
     lambda b, found, _: _check_modes(b.modes, found) if _modes() != b.modes else None),
    ("child processes the test started in a session or process group of their own",
     lambda b, found, _: _check_children(b.children, found)
     if b.children is not None and _children() != b.children else None),
    ("default process group (object, rank, size)", lambda b, found, _: _check_groups(b, found)),
)
# What is watched: every watcher's label, this host's (cudnn flags only where cudnn is present).
WATCHED = tuple(label for label, _, _ in _SCALARS) + tuple(label for label, _ in _CHECKS)
