"""Scenario: shrink, grow and compile-rebind one DDP module across 4 real ranks.

Run it as a script (test/test_ddp.py does): ``python test/scenarios/ddp_rebind.py``::

    parent ──spawn──► rank 0..3  (gloo on loopback, FileStore in a private tmp dir)
      ▲                 │ world    : DDP over the 4-rank world, one training step
      │ StepReport      │ shrink   : ranks 0,1 rebind to new_group([0, 1]), step,
      │ (one pipe       │            compare with a fresh DDP over that group
      │  per rank)      │ grow     : all rebind to the world, re-broadcast states,
      │                 │            step, compare with a fresh DDP over the world
      └─────────────────┘ compile  : torch.compile(ddp); ranks 0,1 rebind, step,
                                     assert no recompilation, compare
    parent prints one line per report and a summary; exit 0 only if all ranks pass.

Every rank bounds its collectives with a 60 s process-group timeout and the parent
kills ranks that outlive SCENARIO_TIMEOUT_S, or FAILURE_GRACE_S after a failure.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.connection import Connection, wait
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

__all__ = ["PASSED_MARKER", "SHRUNK_RANKS", "STEPS", "WORLD_SIZE", "main"]

WORLD_SIZE = 4
SHRUNK_RANKS = [0, 1]
STEPS = ("setup", "world", "shrink", "grow", "compile", "finish")
PG_TIMEOUT = timedelta(seconds=60)
SCENARIO_TIMEOUT_S = 240.0
FAILURE_GRACE_S = 10.0
PASSED_MARKER = "ddp_rebind: PASSED"
FAILED_MARKER = "ddp_rebind: FAILED"
DDP_FILE = Path(__file__).resolve().parents[2] / "continuous_test" / "ddp.py"


@dataclass
class StepReport:
    """One rank's outcome for one step, sent from the rank to the parent."""

    rank: int
    step: str
    detail: str = ""
    error: str | None = None
    seconds: float = 0.0


@dataclass
class RankState:
    """What the parent knows about one rank."""

    passed: list[str] = field(default_factory=list)
    failure: StepReport | None = None
    exitcode: int | None = None
    killed: bool = False


class TinyNet(nn.Module):
    """Two linear layers and a buffer; forward lives here so dynamo compiles it."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(8, 16)
        self.out = nn.Linear(16, 4)
        self.register_buffer("offset", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x))) + self.offset


# --------------------------------------------------------------------------- rank


@dataclass
class Rank:
    """Per-rank state threaded through the steps."""

    rank: int
    store_dir: str
    ctd: Any = None  # continuous_test/ddp.py, loaded by step_setup
    shrunk: Any = None
    ddp: DistributedDataParallel | None = None
    compiled: Any = None
    iteration: int = 0

    @property
    def in_shrunk(self) -> bool:
        return self.rank in SHRUNK_RANKS


def load_ddp_module() -> ModuleType:
    """Load continuous_test/ddp.py by path; ranks call it so a broken package __init__ can't interfere."""
    spec = importlib.util.spec_from_file_location("continuous_test_ddp", DDP_FILE)
    assert spec is not None and spec.loader is not None, f"cannot load {DDP_FILE}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def batch(rank: int, iteration: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * iteration + rank)
    return torch.randn(6, 8, generator=gen), torch.randn(6, 4, generator=gen)


def train_step(model: Any, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """Run one SGD step on ``model``; returns the all-reduced gradients."""
    params = list(model.parameters())
    for p in params:
        p.grad = None
    F.mse_loss(model(x), y).backward()
    grads = [p.grad.detach().clone() for p in params]
    with torch.no_grad():
        for p in params:
            p -= 0.1 * p.grad
    return grads


def fresh_reference(st: Rank, group: Any) -> DistributedDataParallel:
    """A newly built DDP over ``group`` with the same starting state as st.ddp."""
    assert st.ddp is not None
    module = TinyNet()
    module.load_state_dict(st.ddp.module.state_dict())
    return DistributedDataParallel(module, process_group=group)


def assert_same(what: str, actual: list[torch.Tensor], expected: list[torch.Tensor]) -> None:
    assert len(actual) == len(expected), f"{what}: {len(actual)} vs {len(expected)} tensors"
    for i, (a, e) in enumerate(zip(actual, expected)):
        torch.testing.assert_close(a, e, rtol=0, atol=0, msg=lambda m: f"{what}[{i}]: {m}")


def step_and_compare(st: Rank, model: Any, ref: DistributedDataParallel) -> None:
    """Train model and ref on the same batch; gradients and parameters must match exactly."""
    assert st.ddp is not None
    assert_same("params before step", list(st.ddp.parameters()), list(ref.parameters()))
    x, y = batch(st.rank, st.iteration)
    st.iteration += 1
    grads = train_step(model, x, y)
    ref_grads = train_step(ref, x, y)
    assert_same("grads", grads, ref_grads)
    assert_same("params after step", list(st.ddp.parameters()), list(ref.parameters()))


def step_setup(st: Rank) -> str:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    store = dist.FileStore(os.path.join(st.store_dir, "store"), WORLD_SIZE)
    dist.init_process_group(
        "gloo", store=store, rank=st.rank, world_size=WORLD_SIZE, timeout=PG_TIMEOUT
    )
    st.ctd = load_ddp_module()
    st.shrunk = dist.new_group(SHRUNK_RANKS)  # every rank must take part
    return f"joined a {WORLD_SIZE}-rank gloo world"


def step_world(st: Rank) -> str:
    torch.manual_seed(0)
    st.ddp = DistributedDataParallel(TinyNet())
    x, y = batch(st.rank, st.iteration)
    st.iteration += 1
    train_step(st.ddp, x, y)
    return f"trained over {dist.get_world_size()} ranks"


def step_shrink(st: Rank) -> str:
    if not st.in_shrunk:
        return "sat out; kept its replica bound to the world group"
    assert st.ddp is not None
    ref = fresh_reference(st, st.shrunk)
    st.ctd.update_process_group(st.ddp, st.shrunk)
    assert st.ddp.process_group is st.shrunk, "DDP still holds the old group"
    # Each rank diverges its buffer; DDP must broadcast group rank 0's over the new group.
    for module in (st.ddp.module, ref.module):
        module.offset.fill_(float(st.rank))
    step_and_compare(st, st.ddp, ref)
    assert float(st.ddp.module.offset.sum()) == 0.0, "buffer not broadcast from group rank 0"
    return f"rebound to ranks {SHRUNK_RANKS}; matches a fresh DDP exactly"


def step_grow(st: Rank) -> str:
    assert st.ddp is not None
    st.ctd.update_process_group(st.ddp, dist.group.WORLD)
    # Ranks 2,3 hold the world-step replica; ranks 0,1 trained once more.
    st.ctd.broadcast_module_states(st.ddp)
    ref = fresh_reference(st, dist.group.WORLD)
    step_and_compare(st, st.ddp, ref)
    return f"rebound to {dist.get_world_size()} ranks; matches a fresh DDP exactly"


def compile_counts() -> tuple[int, int]:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"], counters["frames"]["total"]


def step_compile(st: Rank) -> str:
    assert st.ddp is not None
    st.compiled = torch.compile(st.ddp, backend="eager")
    for _ in range(2):  # the first two iterations take different DDP paths
        x, y = batch(st.rank, st.iteration)
        st.iteration += 1
        train_step(st.compiled, x, y)
    if not st.in_shrunk:
        return "compiled and trained over the world, then sat out"
    return rebind_compiled(st)


def rebind_compiled(st: Rank) -> str:
    before = compile_counts()
    assert before[0] >= 1, f"torch.compile produced no graph: {before}"
    ref = fresh_reference(st, st.shrunk)
    st.ctd.update_process_group(st.compiled, st.shrunk)
    step_and_compare(st, st.compiled, ref)
    after = compile_counts()
    assert after == before, f"rebinding recompiled: (unique_graphs, frames) {before} -> {after}"
    # Control: the same counter must move when dynamo really compiles again.
    torch._dynamo.reset()
    step_and_compare(st, st.compiled, ref)
    control = compile_counts()
    assert control[0] > after[0], f"counter blind to recompilation: {after} -> {control}"
    return f"no recompilation after rebind (unique_graphs={before[0]}, frames={before[1]})"




def step_finish(st: Rank) -> str:
    dist.barrier()  # ranks 2,3 must not tear down while 0,1 still train
    return "all ranks done"


STEP_FUNCS: dict[str, Callable[[Rank], str]] = {
    "setup": step_setup,
    "world": step_world,
    "shrink": step_shrink,
    "grow": step_grow,
    "compile": step_compile,
    "finish": step_finish,
}


def run_rank(rank: int, store_dir: str, conn: Connection) -> None:
    """Process target of one spawned rank: run the steps, report each, exit 1 on failure."""
    st = Rank(rank=rank, store_dir=store_dir)
    ok = False
    try:
        ok = run_steps(st, conn)
    finally:
        conn.close()
        exit_rank(st, ok)


def exit_rank(st: Rank, ok: bool) -> None:
    # torch 2.13 can deadlock when the last reference to a gloo group goes away
    # (under the GIL) while a worker thread still needs the GIL to free an
    # all-reduce that DDP launched inside backward. So: free the DDP modules while
    # the groups are still registered, destroy the groups only after a clean run,
    # and skip interpreter teardown; everything has been reported by now.
    st.ddp = st.compiled = None
    gc.collect()
    if ok and dist.is_initialized():
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if ok else 1)


def run_steps(st: Rank, conn: Connection) -> bool:
    for name in STEPS:
        started = time.monotonic()
        try:
            report = StepReport(st.rank, name, detail=STEP_FUNCS[name](st))
        except Exception:
            report = StepReport(st.rank, name, error=traceback.format_exc())
        report.seconds = time.monotonic() - started
        conn.send(report)
        if report.error is not None:
            return False  # peers will fail or be killed; going on would only hang
    return True


# ------------------------------------------------------------------------- parent


def start_ranks(store_dir: str) -> tuple[list[Any], dict[Connection, int]]:
    """Spawn the ranks, each with its own report pipe; main calls it once."""
    ctx = mp.get_context("spawn")
    procs, readers = [], {}
    for rank in range(WORLD_SIZE):
        reader, writer = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=run_rank, args=(rank, store_dir, writer), daemon=True)
        proc.start()
        writer.close()  # so the reader sees EOF once the rank exits
        procs.append(proc)
        readers[reader] = rank
    return procs, readers


def record(states: list[RankState], report: StepReport) -> None:
    state = states[report.rank]
    if report.error is None:
        state.passed.append(report.step)
        line = f"[rank {report.rank}] PASS {report.step}: {report.detail}"
    else:
        state.failure = report
        line = f"[rank {report.rank}] FAIL {report.step}"
    print(f"{line} ({report.seconds:.1f}s)", flush=True)


def watch(procs: list[Any], readers: dict[Connection, int], states: list[RankState]) -> None:
    """Collect reports until every pipe closes; kill ranks past the deadline."""
    deadline = time.monotonic() + SCENARIO_TIMEOUT_S
    open_readers = dict(readers)
    while open_readers:
        if any(s.failure for s in states):
            deadline = min(deadline, time.monotonic() + FAILURE_GRACE_S)
        remaining = deadline - time.monotonic()
        ready = wait(list(open_readers), timeout=max(remaining, 0))
        if not ready:
            kill_alive(procs, states)
            return
        for reader in ready:
            try:
                record(states, reader.recv())
            except EOFError:
                del open_readers[reader]


def kill_alive(procs: list[Any], states: list[RankState]) -> None:
    for rank, proc in enumerate(procs):
        if proc.is_alive():
            proc.kill()
            states[rank].killed = True


def summarize(procs: list[Any], states: list[RankState]) -> bool:
    """Print one line per rank and the verdict; returns True when every rank passed."""
    for rank, (proc, state) in enumerate(zip(procs, states)):
        proc.join(timeout=30)
        state.exitcode = proc.exitcode
    ok = all(s.passed == list(STEPS) and s.exitcode == 0 for s in states)
    if ok:
        print(PASSED_MARKER, flush=True)
        return True
    print(FAILED_MARKER, file=sys.stderr, flush=True)
    for rank, state in enumerate(states):
        print(describe(rank, state), file=sys.stderr, flush=True)
    return False


def describe(rank: int, state: RankState) -> str:
    last = state.passed[-1] if state.passed else "nothing"
    if state.failure is not None:
        return f"rank {rank}: failed in step {state.failure.step!r}:\n{state.failure.error}"
    if state.killed:
        return f"rank {rank}: killed by the scenario after passing {last!r} (hung or too slow)"
    if state.exitcode != 0:
        return f"rank {rank}: exited with code {state.exitcode} after passing {last!r}, no report"
    return f"rank {rank}: passed {', '.join(state.passed)}"


def main() -> int:
    """Run the scenario; test/test_ddp.py runs this file as a subprocess."""
    started = time.monotonic()
    store_dir = tempfile.mkdtemp(prefix="ddp_rebind_")
    try:
        procs, readers = start_ranks(store_dir)
        states = [RankState() for _ in range(WORLD_SIZE)]
        watch(procs, readers, states)
        ok = summarize(procs, states)
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    print(f"ddp_rebind: {time.monotonic() - started:.1f}s wall", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
