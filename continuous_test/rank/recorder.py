"""The collective recorder: every rank keeps its last calls where a reader can see them.

How data flows::

    test code ── dist.all_reduce(t) ──► torch's all_reduce: torch's body, compiled again from its source
                                        between HOOK.begin (record: waiting) and HOOK.end / HOOK.raised
                                        (status: returned / raised); no frame of its own
                                           ▼
                       mmap'd ring of fixed-size records (wire.records HEADER / RECORD)
                       ├─ a controller's ranks: <world dir>/rankN.records, read by the controller
                       │  directly, so a rank stuck holding the GIL still gets its timeline
                       └─ launched ranks (torchrun, srun): in memory; snapshot() travels with the outcome

:func:`patch` makes the public ``torch.distributed`` collectives and
point-to-point functions record, call the original and return its result (or
let its exception through) untouched.  The functions stay the same objects
(only their code is swapped), so identity checks, ``pickle``, signatures and
dynamo see torch's functions.  It runs in ranks only: in the template process
ranks are forked from (forked from the controller or a fresh interpreter, before
it forks any rank: compiling torch's bodies costs tens of milliseconds of CPU,
which every rank of every fresh world would pay again), in a rank at start where
the template could not, and in a launched rank at its first test.  Until :func:`open_ring` runs, and in a test where recording is off, a
call only goes on to the original.

Recording is off with ``CONTINUOUS_TEST_RECORD=0``, for a class whose
``record_collectives`` attribute is False, and for a test, class or module marked
``@pytest.mark.ct_record(False)``.

Rank side only: never imports the controller.
"""
from __future__ import annotations

import functools
import inspect
import mmap
import os
import re
import struct
import sys
import threading
import types
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, Dict, List, Optional, Tuple

import continuous_test
from continuous_test.errors import ConfigError
from continuous_test.rank import rewrite
from continuous_test.wire import records as tl
from continuous_test.wire.env import ENV_RECORD, parse_switch

__all__ = [
    "ENV_RECORD",
    "CLASS_ATTR",
    "MARKER",
    "DEFAULT_CAPACITY",
    "enabled_by_env",
    "HOOK",
    "patch",
    "instrument",
    "instrumented_here",
    "open_ring",
    "begin_test",
    "snapshot",
    "current_calls",
    "recording",
]

CLASS_ATTR = "record_collectives"
MARKER = "ct_record"
DEFAULT_CAPACITY = 64


@dataclass(frozen=True)
class _Op:
    """How to read one function's arguments: positions and names of what a record keeps."""

    code: int
    flags: int
    tensor: Optional[Tuple[int, str]] = None
    group: Optional[Tuple[int, str]] = None
    peer: Optional[Tuple[int, str]] = None
    objects: Optional[Tuple[int, str]] = None
    simple: bool = False  # one tensor argument and nothing to count: the fast path


# function name -> (flags, the tensor argument, the peer argument, the object list argument)
_TABLE: Dict[str, Tuple[int, Optional[str], Optional[str], Optional[str]]] = {
    "all_reduce": (0, "tensor", None, None),
    "all_gather": (0, "tensor", None, None),
    "all_gather_into_tensor": (0, "input_tensor", None, None),
    "reduce_scatter": (tl.FLAG_LIST, "input_list", None, None),
    "reduce_scatter_tensor": (0, "input", None, None),
    "all_to_all": (tl.FLAG_LIST, "input_tensor_list", None, None),
    "all_to_all_single": (0, "input", None, None),
    "broadcast": (0, "tensor", "src", None),
    "reduce": (0, "tensor", "dst", None),
    "gather": (0, "tensor", "dst", None),
    "scatter": (0, "tensor", "src", None),
    "barrier": (0, None, None, None),
    "monitored_barrier": (0, None, None, None),
    "all_gather_object": (tl.FLAG_OBJECTS, None, None, "object_list"),
    "gather_object": (tl.FLAG_OBJECTS, None, "dst", None),
    "broadcast_object_list": (tl.FLAG_OBJECTS, None, "src", "object_list"),
    "scatter_object_list": (tl.FLAG_OBJECTS, None, "src", "scatter_object_output_list"),
    "send_object_list": (tl.FLAG_OBJECTS | tl.FLAG_P2P, None, "dst", "object_list"),
    "recv_object_list": (tl.FLAG_OBJECTS | tl.FLAG_P2P, None, "src", "object_list"),
    "send": (tl.FLAG_P2P, "tensor", "dst", None),
    "recv": (tl.FLAG_P2P, "tensor", "src", None),
    "isend": (tl.FLAG_P2P, "tensor", "dst", None),
    "irecv": (tl.FLAG_P2P, "tensor", "src", None),
    "batch_isend_irecv": (tl.FLAG_P2P, None, None, "p2p_op_list"),
    "all_reduce_coalesced": (tl.FLAG_LIST, "tensors", None, None),
    "all_gather_coalesced": (tl.FLAG_LIST, "input_tensor_list", None, None),
}
# The record layout for a tensor of each rank (0 to MAX_DIMS): the unused dims are
# written as pad bytes (zeros), so no tuple is built per call.
_BY_NDIM = tuple(struct.Struct(tl.RECORD.format.replace(f"{tl.MAX_DIMS}q", f"{n}q{8 * (tl.MAX_DIMS - n)}x"))
                 for n in range(tl.MAX_DIMS + 1))
_DEFAULT = object()  # key of the default group's counters

# The ring calls record into, or None: not recording (controller, template, off).
_active: Optional["_Ring"] = None
# The open ring of this process (kept while a test has recording off).
_ring: Optional["_Ring"] = None
# The global name, in torch's module, through which instrumented bodies reach _call.
HOOK = "__continuous_test_record__"
# A copy of the original function of every name patch() instrumented, by name.
_originals: Dict[str, Callable] = {}
# Instrumented function -> its original code (to put back); hook index -> (copy of the original, how to read it).
_by_function: Dict[Callable, types.CodeType] = {}
_hooks: List[Tuple[Callable, "_Op"]] = []
# How many functions each process instrumented itself (pid -> count): a rank forked
# from a template that instrumented torch before forking it instruments none.
_instrumented_by: Dict[int, int] = {}
# torch.compiler.is_compiling, once torch is loaded.
_compiling: Callable[[], bool] = bool
# Per (class, method name): whether recording is on for that test.
_enabled_cache: Dict[Tuple[type, str], bool] = {}


def enabled_by_env(env: Any = os.environ) -> bool:
    """False when ``CONTINUOUS_TEST_RECORD`` turns recording off; checked before patching.

    A word the switch does not know is reported by whoever controls the test
    (``config.check_switches``) before any test runs; here, in a rank or the
    template, it leaves recording on.
    """
    try:
        return parse_switch(ENV_RECORD, env)
    except ConfigError:
        return True


def patch() -> None:
    """Make the public torch.distributed functions record, once (ranks and the template only).

    Each function keeps its identity: the code of torch's own function object
    (the innermost one, under torch's logging decorator) is replaced by torch's
    body compiled again from its source with the recording around it
    (:func:`continuous_test.rank.rewrite.recording_code`), so no frame comes between the caller and torch's
    body: a warning's ``stacklevel`` and tracebacks point where they did.  Where
    the source is not found as compiled, the body is a one-line call of
    :func:`_call`, which records and calls a copy of the original.  So
    ``dist.isend is distributed_c10d.isend``,
    ``P2POp(dist.isend, ...)``, ``op in (dist.isend, dist.irecv)``, ``partial``,
    ``pickle``, ``inspect.signature`` and ``inspect.getsource`` and dynamo's
    rewrite of collectives see torch's function, and a name any module imported
    from ``torch.distributed``, before or after, records too.  A function this
    cannot be done for (a closure, an unusual signature) is left alone: it is not
    recorded.  The one name added, :data:`HOOK`, is a global of torch's
    ``distributed_c10d`` module.
    """
    if _originals or not enabled_by_env():
        return
    import torch.distributed as dist

    if not dist.is_available():
        return
    for name, (flags, tensor, peer, objects) in _TABLE.items():
        target = rewrite.innermost(getattr(dist, name, None))
        if target is None:
            continue
        copy = instrument(target, functools.partial(_op_for, code=tl.OPS.index(name), flags=flags, tensor=tensor,
                                                    peer=peer, objects=objects))
        if copy is not None:
            _originals[name] = copy


def instrument(target: Callable, make_op: Callable[[Callable], "_Op"]) -> Optional[Callable]:
    """Make the plain function ``target`` record each call, in place; a copy of the original, or None if it cannot be."""
    if not isinstance(target, types.FunctionType) or target.__closure__ or target in _by_function:
        return None
    copy = types.FunctionType(target.__code__, target.__globals__, target.__name__, target.__defaults__)
    copy.__kwdefaults__ = target.__kwdefaults__
    for attribute in ("__qualname__", "__module__", "__doc__", "__annotations__"):
        setattr(copy, attribute, getattr(target, attribute))
    copy.__dict__.update(target.__dict__)
    try:
        code = (rewrite.recording_code(target.__code__, len(_hooks), HOOK)
                or rewrite.calling_code(target.__code__, len(_hooks), HOOK))
    except (SyntaxError, ValueError):
        return None
    global _compiling
    _compiling = _compiling_check()
    _skipped_by_dynamo()
    _hooks.append((copy, make_op(copy)))
    target.__globals__[HOOK] = _call
    _by_function[target] = target.__code__
    target.__code__ = code
    pid = os.getpid()
    _instrumented_by[pid] = _instrumented_by.get(pid, 0) + 1
    return copy


def instrumented_here() -> int:
    """How many functions this process instrumented itself (each body compiled again), not inherited from its parent.

    Zero in a rank whose template instrumented torch before forking it: both
    templates do (``template/preload_recorder.py``), so a fresh world's ranks
    start with torch's functions recording.
    """
    return _instrumented_by.get(os.getpid(), 0)


def _restore() -> None:
    """Undo :func:`patch` and forget the ring, leaving this process as it was before."""
    global _ring, _active
    for fn, code in _by_function.items():
        fn.__code__ = code
        fn.__globals__.pop(HOOK, None)
    _by_function.clear()
    _hooks.clear()
    _originals.clear()
    _enabled_cache.clear()
    _ring = _active = None


def _op_for(fn: Callable, code: int, flags: int, tensor: Optional[str], peer: Optional[str],
            objects: Optional[str]) -> _Op:
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []

    def where(name: Optional[str]) -> Optional[Tuple[int, str]]:
        return (params.index(name), name) if name in params else None

    found = where(tensor)
    simple = found is not None and not flags & (tl.FLAG_LIST | tl.FLAG_OBJECTS) and objects is None
    return _Op(code, flags, found, where("group"), where(peer), where(objects), simple)


def _call(index: int, *args: Any, **kwargs: Any) -> Any:
    """What an instrumented function's body calls: record, call the original, mark how it ended.

    A call made while another recorded call of this thread is under way
    (``all_gather_object`` gathering, ``batch_isend_irecv`` sending) is torch's
    own work, not the test's: it is not recorded again.
    """
    __tracebackhide__ = True  # noqa: F841 - reports start at torch's own frame
    original, op = _hooks[index]
    ring = _active
    if ring is None or _inside.depth or _compiling():
        return original(*args, **kwargs)
    try:
        status = ring.record(op, args, kwargs)
    except Exception:  # a record is never worth failing the user's call for
        return original(*args, **kwargs)
    _inside.depth = 1
    try:
        result = original(*args, **kwargs)
    except BaseException as exc:
        ring.mm[status] = tl.STATUS_RAISED
        _note_failed_call(exc)
        raise
    finally:
        _inside.depth = 0
    ring.mm[status] = tl.STATUS_RETURNED if result is None or not _is_work(result) else tl.STATUS_ASYNC
    return result


def _begin(index: int, *args: Any, **kwargs: Any) -> Any:
    """What a rewritten body (:func:`continuous_test.rank.rewrite.recording_code`) calls first: record the call; its token for :func:`_end`."""
    ring = _active
    if ring is None or _inside.depth or _compiling():
        return None
    try:
        status = ring.record(_hooks[index][1], args, kwargs)
    except Exception:  # a record is never worth failing the user's call for
        return None
    _inside.depth = 1
    return ring, status


def _end(token: Any, result: Any) -> Any:
    """What a rewritten body returns through: mark how the call ended and give back its result."""
    if token is not None:
        _inside.depth = 0
        ring, status = token
        ring.mm[status] = tl.STATUS_RETURNED if result is None or not _is_work(result) else tl.STATUS_ASYNC
    return result


def _raised(token: Any) -> None:
    """What a rewritten body calls when its call raises, before the exception goes on."""
    if token is not None:
        _inside.depth = 0
        ring, status = token
        ring.mm[status] = tl.STATUS_RAISED
        _note_failed_call(sys.exc_info()[1])


# Whether a call of the current test failed in a way that may leave its group's
# connections broken: one of torch's distributed errors, or a message of the
# transport (gloo raises a RuntimeError for a timeout or a closed connection).  Not
# what torch raises while it checks the arguments ("invalid root rank"), before any
# communication.
_call_failed = False
_COMMUNICATION_FAILED = re.compile(
    r"timed? ?out|monitoredBarrier|connection|closed|reset by peer|transport|nccl|watchdog|abort", re.IGNORECASE)
_DISTRIBUTED_ERRORS = ("DistBackendError", "DistNetworkError", "DistStoreError")


def _note_failed_call(exc: Optional[BaseException]) -> None:
    global _call_failed
    if exc is None or isinstance(exc, (ValueError, TypeError)):
        return
    if type(exc).__name__ in _DISTRIBUTED_ERRORS or _COMMUNICATION_FAILED.search(str(exc)[:4000]):
        _call_failed = True


def a_call_failed() -> bool:
    """Whether a recorded call of the current test failed in its communication (not in its argument checks).

    The test may have caught it and passed, but the group's connections may be
    broken (gloo closes a pair whose operation timed out: every later call on that
    group fails with "Application timeout caused pair closure"), so the world
    starts new ranks before the next test (a launch makes its group again).
    Nothing is known where recording is off.
    """
    return _call_failed


_call.begin, _call.end, _call.raised = _begin, _end, _raised  # type: ignore[attr-defined]


class _Inside(threading.local):
    depth = 0


_inside = _Inside()


def _is_work(result: Any) -> bool:
    """Whether a call returned a work handle (or a list of them): it is then still under way."""
    if isinstance(result, list):
        return bool(result) and hasattr(result[0], "wait")
    return hasattr(result, "wait")


def _compiling_check() -> Callable[[], bool]:
    """Whether dynamo is tracing a call: then only the original is called, which dynamo rewrites."""
    import torch

    check = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return check if check is not None else (lambda: False)


def _skipped_by_dynamo() -> None:
    """Make dynamo run this module's frames without tracing them, as it runs torch's collectives' frames.

    Code that torch.compile runs eagerly after a graph break still passes each new
    Python frame to dynamo, which skips torch's ``distributed_c10d`` by its file but
    would trace :func:`_call` and the recording it does: more graph breaks per call
    than torch's, seen by a test that counts frames or graph breaks.  Each code
    object of this module is marked in torch's C extension (its per-code execution
    strategy: run this frame as it is; frames it calls, such as torch's original,
    are judged as usual), which costs no import of dynamo.  Where torch has no such
    call, nothing is marked.
    """
    try:
        from torch._C._dynamo import eval_frame
    except ImportError:
        return
    try:
        strategy = eval_frame._FrameExecStrategy(eval_frame._FrameAction.SKIP, eval_frame._FrameAction.DEFAULT)
        for code in _own_code():
            eval_frame.set_code_exec_strategy(code, strategy)
    except (AttributeError, TypeError, RuntimeError):
        return


def _own_code() -> List[types.CodeType]:
    """Every code object defined in this module: its functions, its classes' methods and their nested functions."""
    found: List[types.CodeType] = []
    pending = [fn.__code__ for value in list(globals().values())
               for fn in ([value] if isinstance(value, types.FunctionType) else
                          vars(value).values() if isinstance(value, type) else [])
               if isinstance(fn, types.FunctionType) and fn.__module__ == __name__]
    while pending:
        code = pending.pop()
        found.append(code)
        pending.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return found


def open_ring(path: Optional[str], rank: int, capacity: int = DEFAULT_CAPACITY) -> None:
    """Start keeping records, in the file ``path`` (mode 0600) or in memory; later calls do nothing."""
    global _ring
    if not enabled_by_env() or _ring is not None:
        return
    patch()
    try:
        _ring = _Ring(path, rank, capacity)
    except OSError:
        _ring = None  # no records is better than no test


def begin_test(case: Any) -> None:
    """Mark the start of test ``case``: only its calls are reported from now on (none when recording is off for it)."""
    global _active
    ring = _ring
    if ring is None:
        return
    global _call_failed
    _call_failed = False
    on = _enabled_for(type(case), getattr(case, "_testMethodName", ""))
    ring.begin(on)
    _active = ring if on else None


def recording() -> bool:
    """True while the current test's calls are being recorded."""
    return _active is not None


def snapshot() -> Optional[bytes]:
    """The current test's records in the file format, for a reader in another process (launched ranks)."""
    ring = _active
    return ring.snapshot() if ring is not None else None


def current_calls() -> Optional[tl.RankCalls]:
    """This rank's calls in the current test, decoded; None when this rank is not recording."""
    data = snapshot()
    return tl.parse(data) if data is not None else None


# -- turning recording off ----------------------------------------------------------


def _enabled_for(cls: type, method: str) -> bool:
    key = (cls, method)
    enabled = _enabled_cache.get(key)
    if enabled is None:
        enabled = _enabled_cache[key] = _decide(cls, method)
    return enabled


def _decide(cls: type, method: str) -> bool:
    """Marker on the test (or on the module's function of that name), class or module; then the class attribute."""
    module = sys.modules.get(cls.__module__)
    holders = [getattr(cls, method, None), getattr(module, method, None), *cls.__mro__, module]
    for holder in holders:
        for mark in _marks(holder):
            if getattr(mark, "name", None) == MARKER:
                args = getattr(mark, "args", ()) or tuple(getattr(mark, "kwargs", {}).values())
                return bool(args[0]) if args else True
    return bool(getattr(cls, CLASS_ATTR, True))


def _marks(holder: Any) -> list:
    if holder is None:
        return []
    marks = holder.__dict__.get("pytestmark", []) if isinstance(holder, type) else getattr(holder, "pytestmark", [])
    return marks if isinstance(marks, list) else [marks]


# -- the ring -----------------------------------------------------------------------


class _Ring:
    """Fixed-size records in a shared mapping, written in place; the layout is :mod:`continuous_test.wire.records`."""

    def __init__(self, path: Optional[str], rank: int, capacity: int) -> None:
        size = tl.HEADER.size + capacity * tl.RECORD.size
        if path:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.ftruncate(fd, size)
                self.mm = mmap.mmap(fd, size)
            finally:
                os.close(fd)
        else:
            self.mm = mmap.mmap(-1, size)
        self.rank, self.capacity = rank, capacity
        self.records, self.size = tl.HEADER.size, tl.RECORD.size  # where records start, and each one's size
        self.count = 0  # records written so far, by this process's life
        self.test = 0  # tests begun so far
        self.test_start = 0  # self.count when the current test began
        self.seqs: Dict[Any, int] = {}  # calls of the current test per (group, p2p) key
        # group object -> (collective counter key, point-to-point counter key, label), this test.
        # Held until the next test begins, on purpose (docs/isolation.rst): a group dropped then
        # goes through its Python object's destructor, which releases the GIL, not through one
        # that keeps it (DDP's Reducer), which deadlocks with a gloo thread waiting for it.
        self.groups: Dict[Any, Tuple[Any, Any, bytes]] = {}
        self.files: Dict[str, Optional[bytes]] = {}  # code file -> its name in records, None: skipped
        self.dtypes = _dtype_codes()
        self.skip = _skipped_dirs()
        tl.HEADER.pack_into(self.mm, 0, tl.MAGIC, capacity, tl.RECORD.size, rank, 0, 0, 0, 0)

    def begin(self, on: bool) -> None:
        """A new test: numbering restarts, and readers ignore earlier records (all of them if ``on`` is False)."""
        self.test += 1
        self.test_start = self.count
        self.seqs.clear()
        self.groups.clear()
        tl.HEADER.pack_into(self.mm, 0, tl.MAGIC, self.capacity, tl.RECORD.size, self.rank, int(on),
                            self.count, self.test, self.count)

    def record(self, op: _Op, args: tuple, kwargs: dict) -> int:
        """Write the record of a call about to be made; the offset of its status byte.

        The hot path of every collective: one function, no helper calls for the
        common single-tensor case.
        """
        n = len(args)
        group = args[op.group[0]] if op.group is not None and op.group[0] < n else kwargs.get("group")
        info = self.groups.get(group)
        if info is None:
            info = self.groups[group] = _group_info(group)
        key = info[op.flags & tl.FLAG_P2P]
        seq = self.seqs[key] = self.seqs.get(key, 0) + 1
        count = -1
        tensor: Any
        if op.simple:
            tensor = args[op.tensor[0]] if op.tensor[0] < n else kwargs.get(op.tensor[1])  # type: ignore[index]
        else:
            tensor, count = _tensor_and_count(op, args, kwargs)
        try:
            shape, ndim, dtype = tensor.shape, tensor.dim(), self.dtypes.get(tensor.dtype, 0)
        except AttributeError:  # no tensor: a barrier, objects
            shape, ndim, dtype = (), -1, 0
        if ndim > tl.MAX_DIMS:
            shape = tuple(shape)[:tl.MAX_DIMS]
        peer = -1
        if op.peer is not None:
            peer = args[op.peer[0]] if op.peer[0] < n else kwargs.get(op.peer[1], -1)
        frame: Optional[FrameType] = sys._getframe(2)  # record <- recorded <- the caller
        files, line = self.files, 0
        file: Optional[bytes] = b"?"
        while frame is not None:
            file = files.get(frame.f_code.co_filename, b"")
            if file == b"":
                file = files[frame.f_code.co_filename] = self._name(frame.f_code.co_filename)
            if file is not None:
                line = frame.f_lineno or 0
                break
            frame = frame.f_back
        index = self.count
        offset = self.records + (index % self.capacity) * self.size
        _BY_NDIM[max(ndim, 0)].pack_into(self.mm, offset, index, self.test, seq, op.code, op.flags,
                                          tl.STATUS_WAITING, dtype, ndim, count,
                                          peer if type(peer) is int else -1, line, *shape, info[2], file or b"?")
        self.count = index + 1  # the header's count is left stale: readers count the records themselves
        return offset + tl.STATUS_OFFSET

    def _name(self, filename: str) -> Optional[bytes]:
        """How a code file appears in records; None for torch's and this package's files."""
        return None if filename.startswith(self.skip) else os.path.basename(filename).encode()[:64]

    def snapshot(self) -> bytes:
        """The header and the current test's records (at most the ring's), in the records file format."""
        n = min(self.count - self.test_start, self.capacity)
        header = tl.HEADER.pack(tl.MAGIC, max(n, 1), tl.RECORD.size, self.rank, 1, self.count, self.test,
                                self.test_start)
        records = []
        for index in range(self.count - n, self.count):
            offset = tl.HEADER.size + (index % self.capacity) * tl.RECORD.size
            records.append(self.mm[offset:offset + tl.RECORD.size])
        return header + (b"".join(records) if records else bytes(tl.RECORD.size))


def _tensor_and_count(op: _Op, args: tuple, kwargs: dict) -> Tuple[Any, int]:
    """The tensor a record describes and the count of tensors or objects, for list and object calls."""
    count = -1
    if op.objects is not None:
        objects = _arg(op.objects, args, kwargs)
        count = len(objects) if objects is not None else -1
    elif op.flags & tl.FLAG_OBJECTS:
        count = 1
    tensor = _arg(op.tensor, args, kwargs)
    if op.flags & tl.FLAG_LIST and isinstance(tensor, (list, tuple)):
        count = len(tensor)
        tensor = tensor[0] if tensor else None
    return tensor, count


def _arg(where: Optional[Tuple[int, str]], args: tuple, kwargs: dict) -> Any:
    if where is None:
        return None
    position, name = where
    return args[position] if position < len(args) else kwargs.get(name)


def _group_info(group: Any) -> Tuple[Any, Any, bytes]:
    """(collective counter key, point-to-point counter key, label) of a group; the default one is unlabelled."""
    from torch.distributed import distributed_c10d as c10d

    if group is None or group is getattr(c10d.GroupMember, "WORLD", None):
        return _DEFAULT, (_DEFAULT, "p2p"), b""
    desc = getattr(group, "group_desc", "") or ""
    if desc and desc != "undefined" and not desc.startswith("default"):
        return group, (group, "p2p"), desc.encode()[:40]
    try:
        label = ("ranks " + ",".join(map(str, c10d.get_process_group_ranks(group)))).encode()[:40]
    except Exception:
        label = b"a subgroup"
    return group, (group, "p2p"), label


def _dtype_codes() -> Dict[Any, int]:
    import torch

    codes = {}
    for code, name in enumerate(tl.DTYPES):
        dtype = getattr(torch, name, None)
        if isinstance(dtype, torch.dtype):
            codes[dtype] = code
    return codes


def _skipped_dirs() -> Tuple[str, ...]:
    """Frames in torch and in this package are not "the caller"; the user's code is."""
    import torch

    return (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
            os.path.dirname(os.path.abspath(continuous_test.__file__)) + os.sep)
