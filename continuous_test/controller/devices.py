"""Device leases: a per-host pool of accelerator devices, shared by every run of one user.

A world whose ranks use accelerator devices leases the devices it needs when it
starts and gives them back when it stops; its ranks see only those devices (the
device type's visibility variable, :data:`VISIBILITY`).  So worlds that run at the
same time (pytest-xdist workers, several pytest runs) never share a device::

    World.start / FreshRanks.start ─► need(...) devices (controller/device_needs.py) ─► Pool.lease(need) ──► Lease
         │                                                  │ one lock file per device,
         │ RankSpec.env: CUDA_VISIBLE_DEVICES=3,5 ◄─────────┘ flock()ed by this process
         ▼
    ranks: LOCAL_RANK 0, 1 ─► cuda:0, cuda:1 (physical 3, 5)
    World._discard / FreshRanks.stop ─► Lease.release()

The pool is a directory (``CONTINUOUS_TEST_DEVICE_DIR``, else
``<tmp>/continuous_test-devices-<uid>``, mode 0700) holding one lock file per device
(0600).  A lease is an exclusive ``flock`` on each of its files, held by the
controller for the life of the world: the kernel drops it when the process ends,
however it ends, so a killed worker's devices go back to the pool at once.  (``flock``
and not ``fcntl`` record locks: record locks belong to the process, so two worlds of
one process would both get the same device.)  Every lease goes through the pool's
queue lock; its holder takes devices as they free up, so a big world is not starved
by small ones.  A world that finds too few free first stops this process's other
idle worlds (they restart when next needed: a process runs one test at a time, and
would wait for itself), then waits at most ``CONTINUOUS_TEST_DEVICE_WAIT`` seconds,
with a heartbeat naming what it waits for and who holds it.  A world larger than the pool skips.

``CONTINUOUS_TEST_SIMULATE_DEVICES=N`` makes every world lease one device per rank
from a simulated pool of N, and its ranks see ``CUDA_VISIBLE_DEVICES`` set to their
lease while they run on the CPU: leases are tested without GPUs.

Under a launcher (torchrun, srun) the launcher owns the devices: nothing here runs.
This module touches only its pool directory and the environment it reads.
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from continuous_test import config
from continuous_test.errors import ConfigError, DeviceWaitError
from continuous_test.wire.env import ENV_DEVICE_DIR, ENV_DEVICE_WAIT, ENV_SIMULATE_DEVICES

__all__ = [
    "Pool",
    "Lease",
    "VISIBILITY",
    "DEFAULT_DEVICE_WAIT",
    "pool_for",
    "pool_directory",
    "simulated_devices",
    "device_wait",
    "lease_for",
    "TOO_MANY",
    "WAITING",
    "WAITED_TOO_LONG",
]

DEFAULT_DEVICE_WAIT = 600.0
# Which variable makes a device type's devices visible to a process, by torch's device type.
# ROCm builds of torch report "cuda" and honour HIP_VISIBLE_DEVICES (see _variable).
VISIBILITY = {
    "cuda": "CUDA_VISIBLE_DEVICES",
    "xpu": "ZE_AFFINITY_MASK",
    "npu": "ASCEND_RT_VISIBLE_DEVICES",
    "hpu": "HABANA_VISIBLE_MODULES",
    "mlu": "MLU_VISIBLE_DEVICES",
}
SIMULATED = "simulated"
SIMULATED_VARIABLE = "CUDA_VISIBLE_DEVICES"
# Between two looks at a busy pool: no kernel event says that another process
# released a lock, and a waiting world has nothing else to do.
POLL_FIRST, POLL_MAX = 0.02, 0.25

TOO_MANY = "{owner} needs {need} {kind} device(s), this host has {total}{where}; skipped"
WAITING = ("continuous_test: {owner} waits for {need} {kind} device(s) of {total} ({free} free{holders}) "
           "for {elapsed:.0f} s (at most {bound:g} s, " + ENV_DEVICE_WAIT + ")")
WAITED_TOO_LONG = ("{owner} waited {bound:g} s for {need} {kind} device(s) of this host's {total} "
                   "({free} free{holders}); set " + ENV_DEVICE_WAIT + " to wait longer, or run fewer "
                   "workers at once (pytest -n)")
# A simulated host has a lease file per device: more than any host has is a mistake, not a pool to make.
MAX_SIMULATED_DEVICES = 1024
BAD_SIMULATE = ("Invalid {value!r} from " + ENV_SIMULATE_DEVICES + " environment variable: expected a positive int "
                f"of at most {MAX_SIMULATED_DEVICES}")
NOT_PRIVATE = ("the device pool directory {path} (" + ENV_DEVICE_DIR + ", or the default) {why}; "
               "point " + ENV_DEVICE_DIR + " at a directory of your own")


# -- the pool ------------------------------------------------------------------------


def simulated_devices(env: Mapping[str, str] = os.environ) -> Optional[int]:
    """``CONTINUOUS_TEST_SIMULATE_DEVICES``: the simulated host's device count, or None."""
    raw = env.get(ENV_SIMULATE_DEVICES, "").strip()
    if not raw:
        return None
    count = config.digits(raw)
    if count is None or not 0 < count <= MAX_SIMULATED_DEVICES:
        raise ConfigError(BAD_SIMULATE.format(value=env.get(ENV_SIMULATE_DEVICES)))
    return count


def device_wait(env: Mapping[str, str] = os.environ) -> float:
    """How long a world waits for devices (``CONTINUOUS_TEST_DEVICE_WAIT``, default :data:`DEFAULT_DEVICE_WAIT`)."""
    raw = env.get(ENV_DEVICE_WAIT, "").strip()
    if not raw:
        return DEFAULT_DEVICE_WAIT
    return config.parse_seconds(raw, "device wait", f"{ENV_DEVICE_WAIT} environment variable")


def pool_directory(env: Mapping[str, str] = os.environ) -> str:
    """The pool's directory, made private (0700) if new; ConfigError if it is not this user's own."""
    path = env.get(ENV_DEVICE_DIR, "").strip() or os.path.join(tempfile.gettempdir(),
                                                                f"continuous_test-devices-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(NOT_PRIVATE.format(path=path, why="is not a directory"))
    if info.st_uid != os.getuid():
        raise ConfigError(NOT_PRIVATE.format(path=path, why=f"belongs to another user (uid {info.st_uid})"))
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o700)
    return path


@dataclass(frozen=True)
class Pool:
    """The devices of one kind on this host, as ids the visibility variable takes."""

    kind: str  # "cuda", ..., or "simulated"
    ids: Tuple[str, ...]
    variable: Optional[str]  # what the ranks get: CUDA_VISIBLE_DEVICES=<their ids>
    directory: str
    # Where the ids came from, for messages: " (CUDA_VISIBLE_DEVICES=0,1)".
    source: str = ""

    def lease(self, need: int, owner: str, bound: float, beat: Optional[Callable[[str], None]] = None,
              make_room: Optional[Callable[[], None]] = None, heartbeat: float = 10.0) -> "Lease":
        """Take ``need`` devices, waiting at most ``bound`` s; SkipTest if the pool is smaller, DeviceWaitError
        when the bound passes.  ``make_room`` is called once before waiting; ``beat`` gets a line now and then."""
        if need > len(self.ids):
            raise config.DeviceSkip(TOO_MANY.format(owner=owner, need=need, kind=self.kind, total=len(self.ids),
                                                     where=self.source))
        return _Acquire(self, need, owner, bound, beat, make_room, heartbeat).run()

    def _file(self, device: str) -> str:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", device)
        return os.path.join(self.directory, f"{self.kind}-{safe}.lock")

    def holders(self, ids: Iterable[str]) -> str:
        """Who holds ``ids``, as their lock files say: "pid 123 (TestA)", each once."""
        seen: List[str] = []
        for device in ids:
            try:
                with open(self._file(device)) as f:
                    text = f.read().strip()
            except OSError:
                continue
            if text and text not in seen:
                seen.append(text)
        return ", ".join(seen)


@dataclass
class Lease:
    """Devices held by this process until :meth:`release` (or until it ends, whichever comes first)."""

    pool: Pool
    ids: Tuple[str, ...]
    fds: List[int]

    def env(self) -> Dict[str, str]:
        """What the ranks' environment gets: the visibility variable naming the leased devices."""
        return {self.pool.variable: ",".join(self.ids)} if self.pool.variable else {}

    def release(self) -> None:
        """Give the devices back; safe twice."""
        fds, self.fds = self.fds, []
        _unlock(fds)


def _unlock(fds: Iterable[int]) -> None:
    for fd in fds:
        try:
            # Explicitly: a process forked meanwhile (a template) shares the lock otherwise.
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


class _Acquire:
    """One lease being taken: try every free device, else queue (see the module docstring)."""

    def __init__(self, pool: Pool, need: int, owner: str, bound: float, beat: Optional[Callable[[str], None]],
                 make_room: Optional[Callable[[], None]], heartbeat: float) -> None:
        self.pool, self.need, self.owner, self.bound = pool, need, owner, bound
        self.beat, self.make_room, self.heartbeat = beat, make_room, heartbeat
        self.held: Dict[str, int] = {}  # device id -> the locked file's descriptor
        self.start = time.monotonic()

    def run(self) -> Lease:
        queue = os.open(os.path.join(self.pool.directory, f"{self.pool.kind}.queue"),
                        os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            # Every lease goes through the queue, so devices freed while a world waits
            # go to it, not to a newcomer: only the queue's head holds a partial lease.
            self._wait(lambda: _try_flock(queue))
            if not self._take():
                if self.make_room is not None:
                    self.make_room()
                self._wait(self._take)
        except BaseException:
            _unlock(self.held.values())
            raise
        finally:
            os.close(queue)  # unlocks the queue
        ids = tuple(d for d in self.pool.ids if d in self.held)
        return Lease(self.pool, ids, [self.held[d] for d in ids])

    def _take(self) -> bool:
        """Lock free devices until the lease is complete; whether it is."""
        for device in self.pool.ids:
            if len(self.held) == self.need:
                break
            if device in self.held:
                continue
            fd = os.open(self.pool._file(device), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} ({self.owner})".encode(), 0)
            self.held[device] = fd
        return len(self.held) == self.need

    def _wait(self, done: Callable[[], bool]) -> None:
        poll, next_beat = POLL_FIRST, self.start
        while not done():
            now = time.monotonic()
            if now - self.start >= self.bound:
                raise DeviceWaitError(WAITED_TOO_LONG.format(bound=self.bound, **self._state()))
            if self.beat is not None and self.heartbeat and now >= next_beat:
                self.beat(WAITING.format(elapsed=now - self.start, bound=self.bound, **self._state()))
                next_beat = now + self.heartbeat
            time.sleep(min(poll, max(0.0, self.start + self.bound - now)))
            poll = min(poll * 2, POLL_MAX)

    def _state(self) -> Dict[str, Any]:
        busy = [d for d in self.pool.ids if d not in self.held and _busy(self.pool._file(d))]
        holders = self.pool.holders(busy)
        return dict(owner=self.owner, need=self.need, kind=self.pool.kind, total=len(self.pool.ids),
                    free=len(self.pool.ids) - len(busy), holders=f"; held by {holders}" if holders else "")


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        return False


def _busy(path: str) -> bool:
    """Whether another open file holds the lock on ``path`` (a look, not a lease)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if _try_flock(fd):
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        return True
    finally:
        os.close(fd)


def pool_for(device_type: str, env: Mapping[str, str] = os.environ) -> Optional[Pool]:
    """The pool worlds of ``device_type`` lease from, or None when its devices cannot be told apart
    (a device type without a visibility variable: its worlds run as before, unleased)."""
    count = simulated_devices(env)
    if count is not None:
        return Pool(SIMULATED, tuple(str(i) for i in range(count)), SIMULATED_VARIABLE, pool_directory(env),
                    f" (simulated: {ENV_SIMULATE_DEVICES}={count})")
    variable = _variable(device_type, env)
    if variable is None:
        return None
    visible = env.get(variable)
    if visible is not None and visible.strip():
        ids: Sequence[str] = [part.strip() for part in visible.split(",") if part.strip()]
        source = f" ({variable}={visible.strip()})"
    else:
        ids, source = [str(i) for i in range(config.device_count(device_type))], ""
    return Pool(device_type, tuple(ids), variable, pool_directory(env), source)


def _variable(device_type: str, env: Mapping[str, str]) -> Optional[str]:
    variable = VISIBILITY.get(device_type)
    if device_type == "cuda" and not env.get(variable or ""):
        import torch

        if getattr(torch.version, "hip", None):  # ROCm: the parent's restriction, if any, is HIP's
            return "HIP_VISIBLE_DEVICES"
    return variable


def lease_for(device_type: str, need: Callable[[int], int], owner: str,
              make_room: Optional[Callable[[], None]] = None, env: Mapping[str, str] = os.environ) -> Optional[Lease]:
    """The lease of a world of ``device_type``; ``need(pool size)`` says how many devices it needs.

    None when it needs none, or when this host's devices cannot be leased (no
    accelerator, or one without a visibility variable).  A CPU world that needs
    devices (its test asks for GPUs) leases from the host's accelerator.  The
    controller's one entry point, with the run's bound and heartbeat.
    """
    kind = device_type if device_type != "cpu" or simulated_devices(env) is not None else config.accelerator()
    pool = pool_for(kind, env) if kind is not None else None
    if pool is None:
        return None
    count = need(len(pool.ids))
    if count <= 0:
        return None
    from continuous_test.controller import progress

    return pool.lease(count, owner, device_wait(env), progress.note_waiting(), make_room,
                      progress.heartbeat_seconds(env))
