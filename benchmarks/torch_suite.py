"""torch's distributed suite on torch's spawn runner and on continuous_test's engine: each test's verdict and time.

Usage::

    python benchmarks/torch_suite.py [--subset ci | --all | -k EXPR] [--engine both|torch|ours]
                                     [--torch-from PATH] [--json PATH] [--record]

How data flows::

    test names ──► one pytest run per engine, one after the other:
                   python -m pytest examples/test_torch_distributed_suite.py --junitxml
                   (CT_SUITE_ENGINE=torch: torch's bases, spawned interpreters per test;
                    CT_SUITE_ENGINE=ours: continuous_test's, through the migration)
    JUnit XML  ──► verdict (passed, skipped, failed, error) and seconds per test
               ──► one row per test (both verdicts, both times), the totals,
                   JSON in benchmarks/results/ (default torch_suite.json)

The suite is ``DistributedTest._DistTestBase`` from torch's wheel, at
``BACKEND=gloo WORLD_SIZE=3`` unless the environment says otherwise, as torch's
CPU CI runs it.  ``--subset ci`` is :data:`CI_SUBSET`, the tests CI runs on this
engine against torch's verdicts; ``--record`` writes those verdicts (from the
torch run of this invocation) to ``benchmarks/results/torch_suite_verdicts.json``,
which ``test/test_torch_suite.py`` reads.  ``--torch-from PATH`` takes torch's run
from an earlier JSON of this script instead of running it again (torch's spawn
runner takes 38 minutes for the whole suite here, and its verdicts do not depend on
this package); the JSON then says so (``torch_from``).  Wall time is each pytest process's, from
its start to its end; per-test seconds are pytest's own (setUp to tearDown).

A benchmark, not a test: the exit status is 0 unless a run produced no report.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "examples" / "test_torch_distributed_suite.py"
CLASS = "TestDistBackendWithSpawn"
RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_JSON = RESULTS / "torch_suite.json"
VERDICTS = RESULTS / "torch_suite_verdicts.json"
TIMEOUT = 6 * 3600  # a guard against hangs of a whole run

# About forty tests that cover what the suite exercises on gloo: collectives with
# and without groups, point-to-point and batched isend/irecv, object collectives,
# DDP, SyncBatchNorm, monitored barrier, join, and tests that skip in their ranks.
# Left out: tests that assert on wall time between ranks (test_barrier checks that
# a barrier returned 0.3 s after a peer's clock reading), which a loaded machine fails
# on either engine.
CI_SUBSET = [
    "test_all_reduce_sum", "test_all_reduce_max", "test_all_reduce_sum_async", "test_all_reduce_group_sum",
    "test_all_reduce_full_group_sum", "test_all_reduce_coalesced_sum", "test_broadcast", "test_broadcast_group",
    "test_reduce_sum", "test_reduce_group_max", "test_all_gather", "test_all_gather_group",
    "test_all_gather_object_default_pg", "test_gather_object", "test_scatter", "test_scatter_object_list",
    "test_send_recv", "test_send_recv_any_source", "test_isend", "test_irecv", "test_batch_isend_irecv_gloo",
    "test_batch_isend_irecv_gloo_tags", "test_send_recv_with_tag", "test_all_gather_coalesced_simple", "test_barrier_group",
    "test_monitored_barrier_gloo", "test_new_subgroups", "test_get_backend", "test_get_rank_size_group",
    "test_batch_isend_irecv_op_err", "test_broadcast_object_list", "test_DistributedDataParallel_requires_grad",
    "test_ddp_join_model_equivalence", "test_SyncBatchNorm_process_group", "test_ddp_logging_data_cpu",
    "test_all_to_all_single_equal_split", "test_gather_checks", "test_dump_DDP_relevant_env_vars",
    "test_ddp_grad_div_uneven_inputs", "test_destroy_group",
]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--subset", choices=["ci"], help="the CI subset of about 40 tests")
    which.add_argument("--all", action="store_true", help="every test of the suite (torch's run takes hours)")
    which.add_argument("-k", dest="expr", help="a pytest -k expression over the test names")
    parser.add_argument("--engine", choices=["both", "torch", "ours"], default="both")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--torch-from", type=Path, help="torch's run from an earlier JSON of this script")
    parser.add_argument("--record", action="store_true", help="write torch's verdicts for CI (needs the torch run)")
    args = parser.parse_args(argv)
    if not (args.subset or args.all or args.expr):
        args.subset = "ci"
    names = CI_SUBSET if args.subset else None
    engines = ["torch", "ours"] if args.engine == "both" else [args.engine]
    if args.torch_from is not None:
        earlier = Run.from_json("torch", json.loads(args.torch_from.read_text())["runs"]["torch"])
        engines = [e for e in engines if e != "torch"]
    runs = {engine: run_engine(engine, names, args.expr) for engine in engines}
    if args.torch_from is not None:
        runs = {"torch": earlier.only(next(iter(runs.values())).tests if runs else None,
                                      " (--all for torch_suite_all.json)"), **runs}
    report(runs)
    payload = {"backend": _env()["BACKEND"], "world_size": int(_env()["WORLD_SIZE"]), "cpus": os.cpu_count(),
               "selection": args.subset or ("all" if args.all else f"-k {args.expr}"),
               "runs": {engine: run.as_json() for engine, run in runs.items()}}
    if args.torch_from is not None:
        payload["torch_from"] = str(args.torch_from)
    write_json(args.json, payload)
    print(f"raw results: {args.json}")
    if args.record:
        if "torch" not in runs:
            parser.error("--record needs the torch run (--engine both or torch)")
        record_verdicts(VERDICTS, runs["torch"], CI_SUBSET, backend=payload["backend"],
                        world_size=payload["world_size"])
    return 0 if all(run.tests for run in runs.values()) else 1


def write_json(path: Path, payload: dict) -> None:
    """``payload`` as this script's JSON (sorted keys, one space of indent) at ``path``, its folder made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")


def record_verdicts(path: Path, torch_run: "Run", ci_subset: List[str], **fields: object) -> None:
    """Write the CI subset's torch verdicts to ``path`` (with ``fields``): ``torch_run``'s replace those
    already recorded for the same tests, and the file keeps only the subset's."""
    previous = json.loads(path.read_text())["torch_verdicts"] if path.exists() else {}
    merged = {**previous, **{name: verdict for name, (verdict, _) in torch_run.tests.items()}}
    recorded = {name: merged[name] for name in sorted(ci_subset) if name in merged}
    write_json(path, {**fields, "torch_verdicts": recorded})
    print(f"torch's verdicts recorded: {path}")


def verdicts_that_differ(torch_verdicts: Dict[str, str], run: "Run") -> Dict[str, Tuple[str, Optional[str]]]:
    """Test -> (torch's recorded verdict, ``run``'s) for each recorded test whose verdict ``run`` does not repeat."""
    ours = {name: verdict for name, (verdict, _) in run.tests.items()}
    return {name: (want, ours.get(name)) for name, want in torch_verdicts.items() if ours.get(name) != want}


def _env() -> Dict[str, str]:
    env = dict(os.environ)
    env.setdefault("BACKEND", "gloo")
    env.setdefault("WORLD_SIZE", "3")
    return env


class Run:
    """One engine's pytest run: per test (verdict, seconds), and the run's wall time."""

    def __init__(self, engine: str, tests: Dict[str, Tuple[str, float]], wall: float, returncode: int,
                 messages: Optional[Dict[str, str]] = None) -> None:
        self.engine, self.tests, self.wall, self.returncode = engine, tests, wall, returncode
        self.messages = messages or {}  # test -> the first line of its failure or error

    @classmethod
    def from_json(cls, engine: str, data: dict) -> "Run":
        """A run as :meth:`as_json` wrote it."""
        tests = {name: (t["verdict"], float(t["seconds"])) for name, t in data["tests"].items()}
        messages = {name: t["message"] for name, t in data["tests"].items() if t.get("message")}
        return cls(engine, tests, float(data["wall_s"]), int(data["returncode"]), messages)

    def only(self, names: Optional[Iterable[str]], hint: str = "") -> "Run":
        """This run, which must have run exactly the tests ``names`` (any when None): its wall time is for them."""
        if names is not None and set(names) != set(self.tests):
            raise SystemExit(f"--torch-from: the earlier torch run has {len(self.tests)} tests, this selection "
                             f"{len(set(names))}; take it with the same selection{hint}")
        return self

    def as_json(self) -> dict:
        tests: Dict[str, dict] = {}
        for name, (verdict, seconds) in sorted(self.tests.items()):
            tests[name] = {"verdict": verdict, "seconds": round(seconds, 3)}
            if self.messages.get(name):
                tests[name]["message"] = self.messages[name].splitlines()[0][:300]
        return {"wall_s": round(self.wall, 2), "returncode": self.returncode, "tests": tests}

def run_engine(engine: str, names: Optional[List[str]], expr: Optional[str]) -> Run:
    """Run the selected tests of the suite on one engine, under pytest, and read its JUnit report."""
    with tempfile.TemporaryDirectory(prefix="torch-suite-") as tmp:
        report_file = os.path.join(tmp, "junit.xml")
        targets = [f"{SUITE}::{CLASS}::{name}" for name in names] if names else [str(SUITE)]
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rN",
                   f"--junitxml={report_file}", *targets, *(["-k", expr] if expr else [])]
        env = {**_env(), "CT_SUITE_ENGINE": engine, "TEMP_DIR": tmp}
        start = time.perf_counter()
        proc = subprocess.run(command, cwd=str(ROOT), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT)
        wall = time.perf_counter() - start
        print(f"--- {engine}: exit {proc.returncode} in {wall:.1f} s; last lines of its output:")
        print("\n".join(proc.stdout.strip().splitlines()[-5:]))
        tests, messages = read_junit(report_file) if os.path.exists(report_file) else ({}, {})
    return Run(engine, tests, wall, proc.returncode, messages)


def read_junit(path: str) -> Tuple[Dict[str, Tuple[str, float]], Dict[str, str]]:
    """Test name -> (verdict, seconds), and test name -> its failure's message, from a JUnit XML report."""
    tests: Dict[str, Tuple[str, float]] = {}
    messages: Dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "?")
        verdict, message = case_verdict(case)
        if message is not None:
            messages[name] = message
        tests[name] = (verdict, float(case.get("time", "0")))
    return tests, messages


def case_verdict(case: ET.Element) -> Tuple[str, Optional[str]]:
    """A JUnit testcase's verdict (passed, skipped, failed, error) and its failure's message (None if none)."""
    verdict, message = "passed", None
    for child, word in (("skipped", "skipped"), ("failure", "failed"), ("error", "error")):
        element = case.find(child)
        if element is not None:
            verdict = word
            if word != "skipped":
                message = (element.get("message") or element.text or "")[:2000]
    return verdict, message


def report(runs: Dict[str, Run], width: int = 60) -> None:
    """One row per test (each engine's verdict and seconds; names cut to ``width``), the differences, and the
    totals."""
    engines = list(runs)
    names = sorted(set().union(*(run.tests for run in runs.values())))
    header = f"{'test':{width}}" + "".join(f" {engine + ' verdict':>15} {engine + ' s':>9}" for engine in engines)
    print(header)
    differ = []
    for name in names:
        cells = [runs[e].tests.get(name, ("missing", 0.0)) for e in engines]
        print(f"{name[:width]:{width}}" + "".join(f" {v:>15} {s:9.2f}" for v, s in cells))
        if len({v for v, _ in cells}) > 1:
            differ.append(name)
            for engine in engines:
                if name in runs[engine].messages:
                    print(f"    {engine}: {runs[engine].messages[name].splitlines()[0][:200]}")
    print()
    for engine in engines:
        run = runs[engine]
        counts: Dict[str, int] = {}
        for verdict, _ in run.tests.values():
            counts[verdict] = counts.get(verdict, 0) + 1
        summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        print(f"{engine}: {len(run.tests)} tests ({summary}) in {run.wall:.1f} s wall "
              f"({sum(s for _, s in run.tests.values()):.1f} s in tests)")
    if len(engines) == 2:
        torch_run, ours = runs["torch"], runs["ours"]
        print(f"verdicts that differ: {len(differ)}" + (f" ({', '.join(differ)})" if differ else ""))
        if ours.wall > 0:
            print(f"wall time: ours is 1/{torch_run.wall / ours.wall:.1f} of torch's")


if __name__ == "__main__":
    raise SystemExit(main())
