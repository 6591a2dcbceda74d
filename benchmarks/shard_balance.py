"""How even are the shards?  The slowest of N shards against the mean, on recorded and generated durations.

::

    python benchmarks/shard_balance.py                       # both suites, N=4, raw results in benchmarks/results/
    python benchmarks/shard_balance.py --durations FILE      # this project's suite from a --ct-store-durations file
    python benchmarks/shard_balance.py --shards 3 --json PATH

Two suites, each cut into N shards by :func:`continuous_test.session.shard.split`
(the code ``--ct-shard`` runs), whole worlds only:

* **project**: this project's own tests, from a durations file written by
  ``pytest --ct-store-durations=FILE`` over some test files
  (``benchmarks/results/shard_project_durations.json`` by default);
* **generated**: 40 test classes with skewed durations (per class 1 to 30 tests
  of Pareto-distributed seconds, times a log-normal factor per class, and a world
  start of 1 to 4 s), for several seeds.

For each it prints the estimated seconds of every shard, the slowest shard over the
mean (target: at most 1.15x), and whether every test is in exactly one shard and
every world in one shard.  Beside it, for comparison, a split that ignores worlds
(each test alone, longest first, as a per-test splitter would): how many worlds it
splits, so how many extra world starts it pays.  Stdout gets the table; the JSON
file gets every shard's seconds and units.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from continuous_test.session import shard  # noqa: E402 - after the checkout is on the path

RESULTS = ROOT / "benchmarks" / "results"
PROJECT_DURATIONS = RESULTS / "shard_project_durations.json"
TARGET = 1.15
SEEDS = (1, 2, 3, 4, 5)

Test = Tuple[str, str]  # (world, test id)


def generated_suite(seed: int, classes: int = 40) -> Tuple[List[Test], shard.Durations]:
    """``classes`` test classes of skewed sizes and test times, and their recorded durations."""
    rng = random.Random(seed)
    tests: List[Test] = []
    durations = shard.Durations()
    for c in range(classes):
        world = f"test_gen_{c // 5}.py::Class{c}"
        durations.worlds[world] = round(rng.uniform(1.0, 4.0), 3)
        scale = rng.lognormvariate(0.0, 1.0)  # some classes are slow throughout
        for t in range(rng.randint(1, 30)):
            test = f"{world}::test_{t}"
            durations.tests[test] = round(min(rng.paretovariate(1.3) * 0.2 * scale, 60.0), 3)
            tests.append((world, test))
    return tests, durations


def project_suite(path: Path) -> Tuple[List[Test], shard.Durations]:
    """The tests of a stored durations file, each in its world (a class, or the test function itself)."""
    durations = shard.Durations.load(str(path), missing_ok=False)
    tests: List[Test] = []
    for test in sorted(durations.tests):
        head, _, _ = test.rpartition("::")
        world = head if head in durations.worlds or "::" in head else test
        tests.append((world, test))
    return tests, durations


def measure(tests: List[Test], durations: shard.Durations, count: int) -> Dict[str, object]:
    """Split ``tests`` into ``count`` shards and say how even and how whole they are."""
    cut = shard.split(tests, lambda t: t[0], lambda t: t[1], lambda t: t[0] in durations.worlds, count, durations)
    seconds = cut.seconds()
    mean = statistics.mean(seconds)
    parts = [cut.tests(i) for i in range(1, count + 1)]
    everything = [t for part in parts for t in part]
    homes: Dict[str, set] = {}
    for index, part in enumerate(parts):
        for world, _ in part:
            homes.setdefault(world, set()).add(index)
    return {
        "shards": [round(s, 3) for s in seconds],
        "units": [[unit.world for unit in part] for part in cut.shards],
        "slowest_over_mean": round(max(seconds) / mean, 4) if mean else 1.0,
        "tests": len(tests),
        "worlds": len(homes),
        "union_is_selection": sorted(everything) == sorted(tests),
        "worlds_in_two_shards": sum(1 for h in homes.values() if len(h) > 1),
        "per_test_split_worlds_split": per_test_split(tests, durations, count),
        "largest_world_over_mean": round(max(u.seconds for part in cut.shards for u in part) / mean, 4) if mean else 0,
        "longest_first_only_slowest_over_mean": longest_first_only(cut, count),
    }


def longest_first_only(cut: "shard.Split", count: int) -> float:
    """The slowest shard over the mean with longest-first alone, without the moves and swaps after it."""
    weights = {unit.world: unit.seconds for part in cut.shards for unit in part}
    placed = shard.assign(weights, count, improve=False)
    loads = [sum(w for k, w in weights.items() if placed[k] == i) for i in range(count)]
    return round(max(loads) / statistics.mean(loads), 4)


def per_test_split(tests: List[Test], durations: shard.Durations, count: int) -> int:
    """Worlds a split of single tests (longest first, no worlds) would put in more than one shard."""
    weights = {t: durations.test_seconds(t) for _, t in tests}
    placed = shard.assign(weights, count)
    homes: Dict[str, set] = {}
    for world, test in tests:
        homes.setdefault(world, set()).add(placed[test])
    return sum(1 for h in homes.values() if len(h) > 1 and world_has_ranks(world, durations))


def world_has_ranks(world: str, durations: shard.Durations) -> bool:
    return world in durations.worlds


def row(name: str, result: Dict[str, object]) -> str:
    ratio = float(result["slowest_over_mean"])  # type: ignore[arg-type]
    verdict = "met" if ratio <= TARGET else "MISSED"
    whole = "yes" if result["union_is_selection"] and not result["worlds_in_two_shards"] else "NO"
    shards = " ".join(f"{s:.1f}" for s in result["shards"])  # type: ignore[attr-defined]
    return (f"{name:<22} {result['tests']:>5} {result['worlds']:>6}  {shards:<30} {ratio:>6.3f}x {verdict:<7}"
            f" {whole:<5} {result['per_test_split_worlds_split']:>6} {result['largest_world_over_mean']:>7.3f}x"
            f" {result['longest_first_only_slowest_over_mean']:>7.3f}x")


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--durations", type=Path, default=PROJECT_DURATIONS)
    parser.add_argument("--json", type=Path, default=RESULTS / "shard_balance.json")
    args = parser.parse_args(argv)
    results: Dict[str, object] = {"shards": args.shards, "target_slowest_over_mean": TARGET}
    print(f"N={args.shards} shards; target: slowest shard <= {TARGET}x the mean shard (estimated seconds)")
    print(f"{'suite':<22} {'tests':>5} {'worlds':>6}  {'shards (s)':<30} {'ratio':>7} {'target':<7} {'whole':<5}"
          f" {'split*':>6} {'biggest':>8} {'LPT':>8}")
    if args.durations.exists():
        tests, durations = project_suite(args.durations)
        results["project"] = measure(tests, durations, args.shards)
        results["project_durations_file"] = os.path.relpath(args.durations, ROOT)
        print(row("project", results["project"]))  # type: ignore[arg-type]
    else:
        print(f"project: no durations file {args.durations} (write one with pytest --ct-store-durations=FILE)")
    generated = {}
    for seed in SEEDS:
        tests, durations = generated_suite(seed)
        generated[str(seed)] = measure(tests, durations, args.shards)
        print(row(f"generated 40 (seed {seed})", generated[str(seed)]))
    results["generated"] = generated
    print("whole: every test in one shard and no world in two; split*: worlds a per-test split would cut apart;")
    print("biggest: the largest world over the mean shard (no split of whole worlds beats it); LPT: longest-first alone")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1) + "\n")
    print(f"raw results: {os.path.relpath(args.json, ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
