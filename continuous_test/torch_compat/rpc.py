"""torch's RPC test bases on continuous_test: warm ranks per class, a rendezvous per test, fresh ranks by rule.

torch's RPC suite (``torch.testing._internal.distributed.rpc_utils``) mixes each
of its suites (``RpcTest``, ``DistAutogradTest``, ...) with an agent's fixture and
``SpawnHelper``, a ``MultiProcessTestCase`` that spawns fresh interpreters for
every test.  Here:

* :class:`RpcWorld` is the shared world those suites run on: one world of ranks per
  class (:class:`~continuous_test.MultiProcContinuousTest`) *without* a default
  process group (torch's ``MultiProcessTestCase`` makes none, and some tests make
  their own), and ``file_name``, the file torch's fixture turns into ``init_rpc``'s
  ``file://`` rendezvous, a fresh path per test in the test's ``shared_temp_dir``.
  So every test keeps its own ``init_rpc`` and ``shutdown`` (``dist_init``), on a
  rendezvous no earlier test touched.
* :data:`SpawnHelper` is torch's ``rpc_utils.SpawnHelper`` rebuilt from torch's
  class body on :class:`RpcWorld` (:func:`~continuous_test.torch_compat.derived.rebase`):
  torch's ``setUp``/``tearDown`` run in each rank; ``_spawn_processes`` starts
  nothing, the ranks are already there.
* :func:`needs_fresh_ranks` is the rule (``fresh_world_tests``) for the tests that
  cannot share: those :func:`~continuous_test.changes_its_world` picks (they end a
  rank or make or destroy the default group), and those whose ranks reach
  ``initialize_pg`` (``dist_utils``: a default group of the test's own).
* :func:`generate_tests` is ``rpc_utils.generate_tests`` on :data:`SpawnHelper`.

TensorPipe's listeners stay on loopback in a controller's world: each rank sets
``TP_SOCKET_IFNAME`` to the loopback interface unless it is set
(``continuous_test.rank.main``; docs/isolation.rst).

What this module touches: nothing beyond the classes it builds and, in a rank during
each of their tests only, the variables ``RpcWorld.setUp`` names (docs/isolation.rst).
"""
from __future__ import annotations

import ast
import functools
import inspect
import os
import textwrap
import time
import types
from typing import Any, Dict, FrozenSet, List, Set

from torch.testing._internal import common_distributed as _torch_distributed
from torch.testing._internal.distributed import rpc_utils as _torch_rpc_utils

from continuous_test.case import MultiProcContinuousTest
from continuous_test.fresh_worlds import changes_its_world
from continuous_test.torch_compat.derived import rebase

__all__ = ["RpcWorld", "SpawnHelper", "needs_fresh_ranks", "generate_tests", "RENDEZVOUS_FILE", "TCP_INIT"]

# The per-test rendezvous file's name in the test's shared_temp_dir.
RENDEZVOUS_FILE = "rpc_init_file"


class RpcWorld(MultiProcContinuousTest):
    """A shared world for torch's RPC suites: no default group, and a rendezvous file per test."""

    @classmethod
    def _init_pg(cls, rank: int, world_size: int, rdvz_file: str) -> None:
        """Make no default group, as torch's ``MultiProcessTestCase`` ranks start without one."""
        cls.rdvz_file = rdvz_file

    @property
    def file_name(self) -> str:
        """The test's own rendezvous file (torch's fixture makes ``init_method`` ``file://`` of it); the same on every rank."""
        return os.path.join(self.shared_temp_dir, RENDEZVOUS_FILE)

    def _spawn_processes(self) -> None:
        """Nothing to start: the test already runs in the world's ranks.

        With ``RPC_INIT_WITH_TCP=1`` torch's ``SpawnHelper.setUp``, just before this, picked
        a free ``MASTER_PORT`` for ``init_rpc``'s ``tcp://`` rendezvous: in torch, once, in the
        process that spawns the ranks; here on every rank.  Every rank takes rank 0's.
        """
        if os.environ.get(TCP_INIT) == "1":
            _agree_on_master_port(self.rank, os.path.join(self.shared_temp_dir, TCP_PORT_FILE))

    def setUp(self) -> None:
        """Hide the launcher variables a rank has (``RANK``, ``WORLD_SIZE``, ...) for the test, as torch's spawned ranks lack them.

        ``init_rpc(init_method="env://")`` without a rank must fail as it does there
        (torch's ``test_dynamic_rpc_init_rpc_without_rank``); they are put back after the test,
        and so are ``MASTER_ADDR`` and ``MASTER_PORT``, which torch's ``tearDown`` deletes
        under ``RPC_INIT_WITH_TCP=1``.
        """
        super().setUp()
        for name in _HIDDEN_VARIABLES:
            if name in os.environ:
                self.addCleanup(os.environ.__setitem__, name, os.environ.pop(name))
        for name in _TCP_VARIABLES:
            self.addCleanup(_put_back, name, os.environ.get(name))

    def _callTestMethod(self, method: Any) -> None:  # noqa: N802 - unittest's seam
        """A test that ends its rank with ``sys.exit(0)`` passed there, as torch's runner reads a rank's exit code 0.

        (torch's ``test_clean_context_during_backward``; ``needs_fresh_ranks`` gives such
        a test ranks of its own, which are discarded after it.)
        """
        try:
            super()._callTestMethod(method)
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise

    def tearDown(self) -> None:
        """End an RPC agent the test left running (torch's spawned ranks exit after each test), without waiting for peers."""
        try:
            import torch.distributed.rpc as rpc

            if rpc.is_available() and rpc.api._is_current_rpc_agent_set():
                rpc.shutdown(graceful=False)
        finally:
            super().tearDown()

    def __getstate__(self) -> Dict[str, Any]:
        """The test case without unittest's state of the running test (its result's streams, its cleanups do not pickle).

        torch's tests send bound methods of ``self`` over RPC (``rpc_async(...,
        self._trainer_func)``); torch's spawned ranks call the test method without
        ``unittest.TestCase.run``, so there the case has no ``_outcome``.
        """
        state = dict(self.__dict__)
        state.pop("_outcome", None)
        state.pop("_cleanups", None)
        return state


SpawnHelper = rebase(_torch_rpc_utils.SpawnHelper, {_torch_distributed.MultiProcessTestCase: RpcWorld}, __name__)


# What a controller's rank has in its environment and torch's spawned ranks do not.
_HIDDEN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
# torch's switch for init_rpc over tcp:// (rpc_agent_test_fixture.init_method), and what it sets.
TCP_INIT = "RPC_INIT_WITH_TCP"
_TCP_VARIABLES = ("MASTER_ADDR", "MASTER_PORT")
# In the test's shared_temp_dir: rank 0's MASTER_PORT, which the other ranks take.
TCP_PORT_FILE = "rpc_tcp_port"
# Seconds a rank waits for rank 0's port: rank 0 writes it in its setUp, as the others run theirs.
TCP_PORT_WAIT = 60.0
NO_TCP_PORT = "rank {rank} waited {seconds:g} s for rank 0's MASTER_PORT for RPC_INIT_WITH_TCP=1 in {path}"


def _agree_on_master_port(rank: int, path: str) -> None:
    """Rank 0 writes its ``MASTER_PORT`` to ``path``; every other rank waits for it and takes it."""
    if rank == 0:
        partial = f"{path}.partial"
        with open(partial, "w") as f:
            f.write(os.environ["MASTER_PORT"])
        os.replace(partial, path)  # whole or absent to a reader
        return
    deadline = time.monotonic() + TCP_PORT_WAIT
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise RuntimeError(NO_TCP_PORT.format(rank=rank, seconds=TCP_PORT_WAIT, path=path))
        time.sleep(0.005)
    with open(path) as f:
        os.environ["MASTER_PORT"] = f.read()


def _put_back(name: str, value: Any) -> None:
    """Set the variable ``name`` to ``value`` again, or remove it where it was unset (None)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


# Functions of torch's RPC helpers that make a default process group.
_GROUP_MAKERS = {"initialize_pg", "init_process_group"}
# Names that mean the code holds an RRef: rpc.remote, RRef, to_here, RemoteModule, anything named *rref*.
_RREF_WORDS = ("rref", "remote", "to_here")
# torch's rpc_test module's futures, which complete once per process (set_value, wait_for_value_future).
_ONCE_PER_PROCESS = {"value_future", "done_future"}
# Where the functions a test calls are followed: torch's testing code, not torch itself.
_FOLLOWED = "torch.testing._internal"


def needs_fresh_ranks(cls: type, name: str) -> bool:
    """The rule for ``fresh_world_tests``: a test that cannot share a rank process with an earlier RPC test.

    * :func:`changes_its_world` picks it (it ends a rank, or makes or destroys the
      default group, read from the test and its ``self.<helper>`` calls);
    * it, or a function of torch's testing code it names (followed through any
      depth), calls ``initialize_pg`` or ``init_process_group`` (``dist_utils``'
      helper makes the default group from the test's rendezvous);
    * it holds an RRef (``rpc.remote``, ``RRef``, ``to_here``, ``RemoteModule``, a
      name with ``rref``): torch's RRef context is a process-wide singleton bound to
      the first RPC agent the process ever had (``RRefContext::getInstance``), so
      in a rank whose earlier test ran ``init_rpc`` and ``shutdown``, an RRef sends
      through that dead agent ("RPC is no longer running on this node");
    * it calls ``init_rpc`` without ``world_size`` (dynamic RPC): on torch 2.13 such a
      test fails after a static ``init_rpc`` and ``shutdown`` in the same process;
    * it uses ``VALUE_FUTURE`` or ``DONE_FUTURE`` of torch's ``rpc_test`` (through
      ``set_value``, ``wait_for_value_future``): module-level futures that complete
      once per process, so a second test in the same ranks finds them done.
    """
    if changes_its_world(cls, name):
        return True
    words = _words(cls, name.split("[", 1)[0])
    if _dynamic_rpc(cls, name.split("[", 1)[0]):
        return True
    return bool(words & (_GROUP_MAKERS | _ONCE_PER_PROCESS)) or any(token in word for word in words for token in _RREF_WORDS)


def _dynamic_rpc(cls: type, name: str) -> bool:
    """Whether the test itself calls ``init_rpc`` without ``world_size`` (dynamic RPC)."""
    func = inspect.getattr_static(cls, name, None)
    func = inspect.unwrap(getattr(func, "__func__", func)) if func is not None else None
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))  # type: ignore[arg-type]
    except (OSError, TypeError, SyntaxError):
        return False
    return any(isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "init_rpc"
               and not any(k.arg == "world_size" for k in node.keywords) and len(node.args) < 4
               for node in ast.walk(tree))


def _words(cls: type, name: str) -> Set[str]:
    """The lower-cased names the test ``name`` of ``cls`` uses, with those of what it calls in torch's testing code."""
    seen: Set[int] = set()
    words: Set[str] = set()
    todo: List[Any] = [inspect.getattr_static(cls, name, None)]
    while todo:
        func = todo.pop()
        func = inspect.unwrap(getattr(func, "__func__", func)) if func is not None else None
        if not isinstance(func, types.FunctionType) or id(func) in seen:
            continue
        seen.add(id(func))
        found = _names_in(func)
        words |= {word.lower() for word in found}
        for word in found:
            helper = inspect.getattr_static(cls, word, None)
            target = helper if helper is not None else func.__globals__.get(word)
            if getattr(getattr(target, "__func__", target), "__module__", "").startswith(_FOLLOWED):
                todo.append(target)
    return words


@functools.lru_cache(maxsize=None)
def _names_in(func: types.FunctionType) -> FrozenSet[str]:
    """Every name and attribute name in ``func``'s source but its decorators; empty without source."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        return frozenset()
    for node in ast.walk(tree):  # its decorators (dist_init) are not what it does
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.decorator_list = []
    return frozenset(node.id if isinstance(node, ast.Name) else node.attr
                     for node in ast.walk(tree) if isinstance(node, (ast.Name, ast.Attribute)))


def generate_tests(prefix: str, mixin: type, tests: List[type], module_name: str) -> Dict[str, type]:
    """torch's ``rpc_utils.generate_tests`` on :data:`SpawnHelper`: ``{prefix + suite name: class}``, in ``module_name``."""
    classes: Dict[str, Any] = {}
    for suite in tests:
        name = f"{prefix}{suite.__name__}"
        cls = type(name, (suite, mixin, SpawnHelper), {"fresh_world_tests": needs_fresh_ranks})
        cls.__module__ = module_name
        classes[name] = cls
    return classes
