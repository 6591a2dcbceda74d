"""What one trivial RPC test costs here: torch alone (the floor) and on continuous_test, in warm and in fresh ranks.

Usage::

    python benchmarks/rpc_floor.py [--tests N] [--json PATH]

The test, the same in every row: 4 ranks, ``init_rpc`` on a ``file://`` rendezvous of
its own (TensorPipe, ``shm`` and ``uv``, on loopback), one ``rpc_sync`` to the next
rank, ``shutdown()``.  Rows, each N tests in a row:

* ``torch, warm processes``: 4 processes forked once, each running the N tests in a
  loop: the floor of a test that shares its ranks (no harness at all).
* ``torch, fresh processes``: for each test, 4 processes forked from a parent that
  imported torch, which exit after it: the floor of a test in fresh ranks made by fork.
* ``ours, shared world``: the N tests as one :class:`~continuous_test.torch_compat.rpc.RpcWorld`
  class, ``python -m pytest``.
* ``ours, fresh ranks``: the same class with ``fresh_world_tests = ["test_*"]``.

A test's cost is the median time from one test's start on its first rank to the next
one's (every rank stamps ``time.monotonic()``, one clock for all processes on Linux),
so it includes what the harness does between tests.  Prints the table and writes the
stamps and figures to JSON (default ``benchmarks/results/rpc_floor.json``).  A
benchmark, not a test: nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "rpc_floor.json"
WORLD = 4
TIMEOUT = 600  # seconds a row may take: a guard against hangs

# The test as a function of (rank, rendezvous path, stamp file): the same code in every row.
BODY = textwrap.dedent("""\
    def one_test(rank, rendezvous, stamps):
        import time
        import torch
        import torch.distributed.rpc as rpc
        start = time.monotonic()
        options = rpc.TensorPipeRpcBackendOptions(init_method="file://" + rendezvous, _transports=["shm", "uv"])
        rpc.init_rpc(f"worker{rank}", rank=rank, world_size=4, rpc_backend_options=options)
        rpc.rpc_sync(f"worker{(rank + 1) % 4}", torch.add, args=(torch.ones(2), 1))
        rpc.shutdown()
        with open(stamps, "a") as f:
            f.write(f"{rank} {start} {time.monotonic()}\\n")
    """)

SCENARIO = textwrap.dedent("""\
    import os
    from continuous_test.torch_compat.rpc import RpcWorld
    {body}

    class FloorTest(RpcWorld):
        world_size = 4
        fresh_world_tests = ["test_*"] if os.environ["RPC_FLOOR_FRESH"] == "1" else ()

    def _test(self):
        one_test(self.rank, self.file_name, os.environ["RPC_FLOOR_STAMPS"])

    for i in range(int(os.environ["RPC_FLOOR_TESTS"])):
        setattr(FloorTest, f"test_{{i:03d}}", _test)
    """)


def _namespace() -> Dict[str, object]:
    namespace: Dict[str, object] = {}
    exec(BODY, namespace)
    return namespace


def _warm_rank(rank: int, tests: int, directory: str, stamps: str) -> None:
    one_test = _namespace()["one_test"]
    for i in range(tests):
        one_test(rank, os.path.join(directory, f"rendezvous{i}"), stamps)  # type: ignore[operator]
    os._exit(0)


def _fresh_rank(rank: int, index: int, directory: str, stamps: str) -> None:
    _namespace()["one_test"](rank, os.path.join(directory, f"rendezvous{index}"), stamps)  # type: ignore[operator]
    os._exit(0)


def _join(processes: List[multiprocessing.process.BaseProcess]) -> None:
    for process in processes:
        process.join(TIMEOUT)
        if process.exitcode != 0:
            raise SystemExit(f"a rank ended with {process.exitcode}")


def torch_warm(tests: int, directory: str, stamps: str) -> None:
    import torch.distributed.rpc  # noqa: F401 - as for torch_fresh

    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=_warm_rank, args=(rank, tests, directory, stamps)) for rank in range(WORLD)]
    for process in processes:
        process.start()
    _join(processes)


def torch_fresh(tests: int, directory: str, stamps: str) -> None:
    import torch.distributed.rpc  # noqa: F401 - in the parent, as a template has it: no rank imports it

    context = multiprocessing.get_context("fork")
    for index in range(tests):
        processes = [context.Process(target=_fresh_rank, args=(rank, index, directory, stamps)) for rank in range(WORLD)]
        for process in processes:
            process.start()
        _join(processes)


def ours(tests: int, directory: str, stamps: str, fresh: bool) -> None:
    path = Path(directory) / "test_rpc_floor.py"
    path.write_text(SCENARIO.format(body=BODY))
    env = dict(os.environ, RPC_FLOOR_TESTS=str(tests), RPC_FLOOR_STAMPS=stamps, RPC_FLOOR_FRESH="1" if fresh else "0")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path.name], cwd=directory,
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT)
    if proc.returncode != 0:
        raise SystemExit(f"the scenario failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def per_test(stamps: str) -> Dict[str, object]:
    """Start-to-start seconds between consecutive tests, by each test's earliest rank start."""
    rows = [line.split() for line in Path(stamps).read_text().splitlines()]
    by_rank = [sorted(float(start) for r, start, _ in rows if r == str(rank)) for rank in range(WORLD)]
    if len({len(starts) for starts in by_rank}) != 1:
        raise SystemExit(f"ranks stamped different numbers of tests: {[len(starts) for starts in by_rank]}")
    firsts = [min(starts) for starts in zip(*by_rank)]  # each test's start on its earliest rank
    gaps = [b - a for a, b in zip(firsts, firsts[1:])]
    return {"median_s": statistics.median(gaps), "min_s": min(gaps), "max_s": max(gaps), "intervals": gaps}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tests", type=int, default=30, help="tests in a row per row of the table (default 30)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args()
    if args.tests < 3:
        parser.error("--tests must be at least 3")
    os.environ.setdefault("TP_SOCKET_IFNAME", "lo")  # loopback, as continuous_test's ranks pin it
    rows = {
        "torch, warm processes": lambda d, s: torch_warm(args.tests, d, s),
        "torch, fresh processes": lambda d, s: torch_fresh(args.tests, d, s),
        "ours, shared world": lambda d, s: ours(args.tests, d, s, fresh=False),
        "ours, fresh ranks": lambda d, s: ours(args.tests, d, s, fresh=True),
    }
    results: Dict[str, object] = {}
    for name, run in rows.items():
        with tempfile.TemporaryDirectory(prefix="rpc-floor-") as directory:
            stamps = os.path.join(directory, "stamps")
            began = time.monotonic()
            run(directory, stamps)
            figures = per_test(stamps)
            figures["wall_s"] = time.monotonic() - began
            results[name] = figures
            print(f"{name:24s} {figures['median_s'] * 1000:7.1f} ms a test (median; "
                  f"{figures['min_s'] * 1000:.1f}-{figures['max_s'] * 1000:.1f} ms), {figures['wall_s']:.1f} s in all",
                  file=sys.stderr, flush=True)
    warm, fresh = results["torch, warm processes"], results["torch, fresh processes"]
    shared, own = results["ours, shared world"], results["ours, fresh ranks"]
    print(f"\n{'':24s} {'ms a test':>10s} {'beyond torch':>13s}")
    for name, floor in (("torch, warm processes", None), ("ours, shared world", warm),
                        ("torch, fresh processes", None), ("ours, fresh ranks", fresh)):
        figure = results[name]["median_s"]  # type: ignore[index]
        extra = "" if floor is None else f"{(figure - floor['median_s']) * 1000:+.1f} ms"  # type: ignore[index]
        print(f"{name:24s} {figure * 1000:10.1f} {extra:>13s}".rstrip())
    print(f"fresh ranks beyond shared (ours): {(own['median_s'] - shared['median_s']) * 1000:+.1f} ms a test")  # type: ignore[index]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "tests": args.tests, "world_size": WORLD, "cpus": os.cpu_count(), "python": platform.python_version(),
        "torch": __import__("torch").__version__, "commit": _commit(), "rows": results}, indent=1) + "\n")
    return 0


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


if __name__ == "__main__":
    raise SystemExit(main())
