"""Joining a launched world: the launcher's store, every rank's arrival, the default group.

Each launched process reaches the launcher's store once (torchrun's agent store, or
a store that rank 0 hosts under srun and mpiexec), waits until every rank announced
itself, and creates the default process group on its own keys.  After a failed test the
group is replaced by a new one (:func:`rebuild`): a broken gloo group's shutdown can
hang, so the old one is abandoned, not destroyed.  Every key lives under the
launch's ``run_id``, so a rank that reached another run's store never joins it.
At exit, the ranks other than 0 wait until rank 0 has printed the report
(:func:`_leave`).
"""
from __future__ import annotations

import atexit
import errno
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, List, Optional

from continuous_test import config
from continuous_test.errors import RendezvousError
from continuous_test._launch import Launch, export_env
from continuous_test.rank.run import remember_default_group


NO_STORE = (
    "cannot reach the rendezvous store of {owner} at {where} within {seconds:g} s ({error}); "
    "check MASTER_ADDR/MASTER_PORT or the rendezvous endpoint (CONTINUOUS_TEST_START_TIMEOUT sets this limit)"
)
PORT_IN_USE = (
    "rank 0 cannot host the rendezvous store at {where}: the port is already in use (EADDRINUSE), "
    "by another program or by another launch given the same port; set MASTER_PORT to a free port"
)
OTHER_RUN = (
    "the rendezvous store at {where} belongs to another launch ({owner}), not to this one ({run}); "
    "give each concurrent launch its own MASTER_PORT"
)
NEVER_ARRIVED = (
    "rank(s) {ranks} of {world_size} never arrived at the rendezvous at {where} within {seconds:g} s; "
    "check that every rank was launched with the same {hint} and rendezvous endpoint "
    "(CONTINUOUS_TEST_START_TIMEOUT sets this limit)"
)
WORLD_BROKEN = (
    "skipped: the launched world broke in {test} ({why}); no later test of this launch can run"
)
REBUILD_FAILED = "the default process group could not be rebuilt after {test} failed: {error}"
STORE_PREFIX = "continuous_test"


@dataclass
class Joined:
    """This process's membership in the launched world (one per process)."""

    store: Any  # the launcher's store, under this launch's run-scoped prefix
    rank: int
    start_timeout: float
    seq: int = 0  # tests of any class run so far; the same on every rank, so it keys the exchange
    generation: int = 0  # default groups created so far; each rendezvous on its own keys
    group: Any = None  # the default group this module created
    broken: Optional[str] = None  # why no later test can run (names the test that broke the world)
    # Broken default groups, kept referenced: their destructors could block like their shutdown.
    abandoned: List[Any] = field(default_factory=list)


_joined: Optional[Joined] = None
_join_error: Optional[BaseException] = None


def connect(cls, launch: Launch) -> Joined:
    """Reach the launcher's store and wait for every rank, once per process."""
    global _joined
    import torch.distributed as dist

    if _join_error is not None:
        raise RendezvousError(str(_join_error))
    if _joined is None:
        export_env(launch)  # run_tests() did, but pytest and ``python -m unittest`` did not
        try:
            timeout = config.start_timeout(cls)
            store = dist.PrefixStore(f"{STORE_PREFIX}/{launch.run_id}", _launcher_store(launch, timeout))
            _await_everyone(store, launch, timeout)
        except Exception as exc:
            _failed_to_join(exc, launch)
            raise
        _joined = Joined(store=store, rank=launch.rank, start_timeout=timeout)
        atexit.register(_leave)
    return _joined


def join(cls, launch: Launch) -> Joined:
    """Connect, and create the default group if there is none yet."""
    import torch.distributed as dist

    joined = connect(cls, launch)
    cls.rank = launch.rank
    if not dist.is_initialized() and not joined.broken:
        try:
            _init(cls, joined, launch)
        except Exception as exc:
            _failed_to_join(exc, launch)
            raise
    cls.pg = joined.group
    return joined


def _failed_to_join(exc: BaseException, launch: Launch) -> None:
    global _join_error
    _join_error = exc
    if launch.rank != 0:  # only rank 0 prints a report; this error must not go unseen
        print(f"continuous_test: rank {launch.rank}: {exc}", file=sys.stderr, flush=True)


def _launcher_store(launch: Launch, timeout: float):
    """A client of the launcher's store (torchrun's agent), or rank 0 hosting one (srun, mpiexec).

    Unlike ``env://``, the host does not block until every rank connected: the
    arrival check below waits instead, and can say who never came.
    """
    import torch.distributed as dist

    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    host = not agent and launch.rank == 0
    where = f"{launch.master_addr}:{launch.master_port}"
    assert launch.master_addr is not None and launch.master_port is not None, "a launch without MASTER_ADDR/PORT"
    _check_resolves(launch)
    try:
        listen_fd = _listen_socket(launch) if host else None
        store = dist.TCPStore(launch.master_addr, launch.master_port, launch.world_size if host else None, host,
                              timedelta(seconds=timeout), wait_for_workers=False, multi_tenant=True,
                              master_listen_fd=listen_fd)
    except Exception as exc:
        if host and _address_in_use(exc):
            raise RendezvousError(PORT_IN_USE.format(where=where)) from exc
        owner = "the launcher's agent" if agent else "rank 0"
        raise RendezvousError(NO_STORE.format(owner=owner, where=where, seconds=timeout, error=exc)) from exc
    if not agent:
        _check_owner(store, launch, host, where)
    return store


UNRESOLVABLE = (
    "Cannot reach the rendezvous host {addr!r} (from {source}): the name does not resolve on this node ({error}). "
    "Set MASTER_ADDR to an address every node of the job resolves, such as the first node's IP address "
    "(on clusters whose node names resolve only through Slurm, its NodeAddr: scontrol show node {addr})"
)


def _check_resolves(launch: Launch) -> None:
    """Fail at once, naming where the address came from, when the rendezvous host does not resolve.

    TCPStore would retry an unresolvable name until the start timeout (minutes),
    and say only that it could not connect.
    """
    import socket

    try:
        socket.getaddrinfo(launch.master_addr, launch.master_port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise RendezvousError(UNRESOLVABLE.format(addr=launch.master_addr, source=launch.master_addr_source,
                                                  error=exc.strerror or exc)) from exc


def listen_address(launch: Launch) -> Optional[str]:
    """Where rank 0's store listens: None (every interface) only when ranks run on other hosts.

    A world on this one host (the local size equals the world size) listens on the
    address its ranks connect to, ``MASTER_ADDR`` as this host resolves it (under
    mpiexec, loopback), never on every interface: TCPStore's own server would listen
    on ``::``, open to the network, and every process rank 0 forks inherits it.
    """
    import socket

    if launch.local_world_size != launch.world_size:
        return None
    infos = socket.getaddrinfo(launch.master_addr, launch.master_port, type=socket.SOCK_STREAM)
    ipv4 = [info for info in infos if info[0] == socket.AF_INET]
    return str((ipv4 or infos)[0][4][0])


def _listen_socket(launch: Launch) -> Optional[int]:
    """A listening socket on :func:`listen_address` for TCPStore to serve (it takes the fd); None: TCPStore's own."""
    import socket

    addr = listen_address(launch)
    if addr is None:
        return None
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)  # not inheritable across exec, as Python makes every socket
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((addr, launch.master_port))
        sock.listen(socket.SOMAXCONN)
    except BaseException:
        sock.close()
        raise
    return sock.detach()


def _address_in_use(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return True
    text = str(exc)
    return "EADDRINUSE" in text or "address already in use" in text.lower()


def _check_owner(store, launch: Launch, host: bool, where: str) -> None:
    """The host labels its store with the run id; the others check the label (bounded by the store timeout)."""
    key = f"{STORE_PREFIX}/owner"
    if host:
        store.set(key, launch.run_id)
        return
    owner = store.get(key).decode()
    if owner != launch.run_id:
        raise RendezvousError(OTHER_RUN.format(where=where, owner=owner, run=launch.run_id))


def _await_everyone(store, launch: Launch, timeout: float) -> None:
    """Wait until every rank announced itself in the store; name those that never did."""
    import torch.distributed as dist

    arrivals = dist.PrefixStore("arrived", store)
    arrivals.set(str(launch.rank), "1")
    deadline = time.monotonic() + timeout
    missing = [str(r) for r in range(launch.world_size)]
    while missing and time.monotonic() < deadline:
        missing = [r for r in missing if not arrivals.check([r])]
        if missing:
            time.sleep(0.05)
    if missing:
        where = f"{launch.master_addr}:{launch.master_port}"
        raise RendezvousError(NEVER_ARRIVED.format(ranks=", ".join(missing), world_size=launch.world_size,
                                                   where=where, seconds=timeout, hint=launch.hint))


def _leave() -> None:
    """At exit: rank 0 tells its peers that it reported; the others wait for that.

    A launcher may end the whole job as soon as one rank exits non-zero (Open MPI's
    mpiexec does), so no rank may exit before rank 0 printed the report.  The wait
    ends at once if rank 0, the store's host, is gone, and is bounded by the start
    timeout.  Then the default group is destroyed if it is healthy.
    """
    import torch.distributed as dist

    joined = _joined
    if joined is None:
        return
    try:
        if joined.rank == 0:
            joined.store.set("reported", "1")
        else:
            joined.store.set_timeout(timedelta(seconds=joined.start_timeout))
            joined.store.wait(["reported"])
    except Exception:  # the store's host is gone: nobody is waiting any more, nothing to wait for
        pass
    if dist.is_initialized() and not joined.broken and group_intact(joined):
        dist.destroy_process_group()


def _init(cls, joined: Joined, launch: Launch) -> None:
    import torch
    import torch.distributed as dist

    device = config.resolve_device_type(cls)
    if device != "cpu":
        torch.accelerator.set_device_index(launch.local_rank)
    joined.store.set_timeout(timedelta(seconds=joined.start_timeout))
    prefix = f"default_pg.{joined.generation}"
    joined.generation += 1
    store = dist.PrefixStore(prefix, joined.store)
    init_pg = getattr(cls, "_init_pg", None)
    if init_pg is not None and not getattr(getattr(init_pg, "__func__", None), "_ct_base", False):
        # The class overrides _init_pg (its subgroups, its device): it runs as without a
        # launcher, and the base's _init_pg it calls makes the group on this store.
        cls._ct_store = store
        try:
            init_pg(launch.rank, launch.world_size, "")
        finally:
            cls._ct_store = None
    else:
        backend = cls.backend_str()
        dist.init_process_group(backend=config.default_backend() if backend is None else backend, store=store,
                                rank=launch.rank,
                                world_size=launch.world_size, pg_options=cls.opts(), timeout=cls.timeout)
    joined.group = cls.pg = dist.distributed_c10d._get_default_group()
    remember_default_group()


def group_intact(joined: Joined) -> bool:
    """Whether the default group is still the one this module created (a test may replace it)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    return dist.is_initialized() and c10d._get_default_group() is joined.group


def rebuild(cls, joined: Joined, launch: Launch, test: str) -> None:
    """Replace the default group after a failed test; every rank is past the exchange, a known point."""
    _abandon_default_group(joined)
    try:
        _init(cls, joined, launch)
    except Exception as exc:
        reason = REBUILD_FAILED.format(test=test, error=exc)
        joined.broken = WORLD_BROKEN.format(test=test, why=reason)
        print(f"continuous_test: rank {launch.rank}: {reason}", file=sys.stderr, flush=True)


def _abandon_default_group(joined: Joined) -> None:
    """Forget every process group without shutting it down: a broken gloo group's shutdown can hang.

    This is ``destroy_process_group()`` (torch/distributed/distributed_c10d.py) minus
    its ``pg.shutdown()`` calls; the groups stay referenced so they are never destructed.
    """
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    if not dist.is_initialized():
        return
    world = c10d._world
    try:
        joined.abandoned.extend(world.pg_names)
        c10d._update_default_pg(None)
        for name in ("pg_map", "pg_names", "pg_group_ranks", "pg_backend_config", "pg_to_tag", "tags_to_pg",
                     "pg_coalesce_state"):
            getattr(world, name).clear()
        c10d._unregister_all_process_groups()
        world.group_count = 0
    except AttributeError:  # another torch's internals: fall back to the public call
        dist.destroy_process_group()
