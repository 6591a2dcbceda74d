"""What to measure: the systems, the scenario settings, and the jobs in run order.

Jobs that are compared with each other form a *group* (the same scenario and
settings for every system, plus the floor).  Each repetition runs every group,
with the systems in alternating order (forward in even repetitions, reversed in
odd ones), so slow drifts of a shared machine hit every system alike.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from benchlib.measure import SCENARIOS, Job

__all__ = [
    "OURS_CONT",
    "TORCH_CONT",
    "OURS_FRESH",
    "TORCH_FRESH",
    "FLOOR",
    "LABELS",
    "FAULT_KINDS",
    "NEGATIVE_METHODS",
    "IMPORT_MODULES",
    "Plan",
    "groups",
    "schedule",
    "describe",
]

OURS_CONT = "ours-continuous"
TORCH_CONT = "torch-continuous"
OURS_FRESH = "ours-fresh"
TORCH_FRESH = "torch-fresh"
FLOOR = "floor"

LABELS = {
    OURS_CONT: "continuous_test.MultiProcContinuousTest",
    TORCH_CONT: "torch MultiProcContinuousTest",
    OURS_FRESH: "continuous_test.MultiProcessTestCase",
    TORCH_FRESH: "torch MultiProcessTestCase",
    FLOOR: "floor",
}
_SCRIPTS = {
    OURS_CONT: "ours_continuous.py",
    TORCH_CONT: "torch_continuous.py",
    OURS_FRESH: "ours_fresh.py",
    TORCH_FRESH: "torch_fresh.py",
    FLOOR: "floor.py",
}
FAULT_KINDS = ("assert", "exit", "hang")
# The start methods (CONTINUOUS_TEST_START_METHOD) a fresh world's cost is measured
# under.  Not spawn: there every rank is a new interpreter that imports torch, no
# fork of a template at all.
NEGATIVE_METHODS = ("fork", "forkserver")


@dataclass(frozen=True)
class Plan:
    """The settings of one benchmark run (full or smoke)."""

    repeat: int = 3
    suite_sizes: Tuple[int, ...] = (1, 4, 240)
    suite_world_sizes: Tuple[int, ...] = (2, 4)
    # torch's MultiProcessTestCase costs seconds per test: only the small suites.
    torch_fresh_sizes: Tuple[int, ...] = (1, 4)
    start_world_sizes: Tuple[int, ...] = (2, 4, 8)
    # Where per-test dispatch is judged against torch's (at the largest suite size).
    dispatch_world_sizes: Tuple[int, ...] = (4, 8)
    fault_kinds: Tuple[str, ...] = FAULT_KINDS
    torch_fault_kinds: Tuple[str, ...] = FAULT_KINDS
    grace_s: Optional[float] = None  # None: continuous_test's default grace period
    hang_limit_s: float = 5.0
    torch_pg_timeout_s: float = 10.0
    # torch's per-test limit (DISTRIBUTED_TESTS_DEFAULT_TIMEOUT) also covers the first
    # test's world start, which can take over 10 s on a loaded 2-core machine; a lower
    # value fails that first test and, through the poison pill, skips the class.
    torch_test_timeout_s: int = 30
    torch_fault_cap_s: float = 60.0
    ours_fault_cap_s: float = 120.0
    floor_n: int = 240  # suite bodies in the floor's loop
    floor_fresh_n: int = 24  # fresh-world bodies in the floor's loop
    negative_n: int = 40  # tests of a negative run: each stamped, their median is the figure
    negative_methods: Tuple[str, ...] = NEGATIVE_METHODS
    smoke: bool = False

    @classmethod
    def full(cls, repeat: int) -> "Plan":
        """The plan ``python benchmarks/run.py`` runs."""
        return cls(repeat=repeat)

    @classmethod
    def smoke_plan(cls) -> "Plan":
        """Tiny sizes, one repetition, one world size, short limits: keeps the scripts working in CI.

        torch's fault runs are left out: each costs its 10 s process-group timeout or
        more, and they run the same scenario file as the suite.
        """
        return cls(repeat=1, suite_sizes=(2,), suite_world_sizes=(2,), torch_fresh_sizes=(2,),
                   start_world_sizes=(2,), dispatch_world_sizes=(2,), torch_fault_kinds=(), grace_s=1.0,
                   hang_limit_s=2.0, torch_fault_cap_s=60.0, floor_n=2, floor_fresh_n=3, negative_n=3, smoke=True)

    @property
    def grace(self) -> float:
        """The grace period our fault runs use."""
        from continuous_test import config

        return config.DEFAULT_GRACE if self.grace_s is None else self.grace_s

    @property
    def start_n(self) -> int:
        """Suite size of the world-start runs: one trivial test, where suites ran; else the dispatch size."""
        return min(self.suite_sizes)

    @property
    def dispatch_n(self) -> int:
        """Suite size of the runs per-test dispatch is judged on."""
        return max(self.suite_sizes)

    @property
    def fresh_n(self) -> int:
        """Suite size torch's fresh-world figures come from: the largest one its fresh class runs."""
        return max(self.torch_fresh_sizes)

    @property
    def memory_n(self) -> int:
        """Suite size of the runs that also measure memory (at 2 ranks)."""
        return max(self.suite_sizes)

    @property
    def world_sizes(self) -> Tuple[int, ...]:
        """Every world size some job runs at."""
        return tuple(sorted(set(self.suite_world_sizes) | set(self.start_world_sizes) | set(self.dispatch_world_sizes)))


IMPORT_MODULES = {OURS_CONT: "ours_continuous", TORCH_CONT: "torch_continuous"}


def _suite_job(system: str, ws: int, n: int, plan: Plan) -> Job:
    env = {"BENCH_KIND": "suite", "BENCH_N": str(n), "BENCH_WORLD_SIZE": str(ws)}
    if ws == 2 and n == plan.memory_n and system in (OURS_CONT, TORCH_CONT):
        env["BENCH_MEMORY"] = "1"
    # A guard against hangs, never a measurement limit: torch's fresh ranks take seconds per test.
    cap = 120.0 + n * (40.0 if system == TORCH_FRESH else 2.0) * max(1, ws // 2)
    once = not _judged(system, ws, n, plan)
    return Job("suite", system, {"ws": ws, "n": n}, str(SCENARIOS / _SCRIPTS[system]), env, cap, once=once)


def _judged(system: str, ws: int, n: int, plan: Plan) -> bool:
    """Whether a target is judged on this run's figures: those repeat, the others run once.

    A repetition costs minutes on a busy 2-core machine (torch's fresh class alone
    takes seconds per test), so only the targets' figures get their medians.
    """
    if system == OURS_CONT and n == plan.start_n and ws in LAUNCH_TARGET_WORLD_SIZES:
        return True
    if system in (OURS_CONT, TORCH_CONT, TORCH_FRESH) and n == plan.fresh_n and ws == min(plan.suite_world_sizes):
        return True  # scenario 1's targets (report._suite_rows)
    if system in (OURS_CONT, TORCH_CONT) and n == plan.dispatch_n and ws in plan.dispatch_world_sizes:
        return True
    return system == OURS_FRESH and n == plan.dispatch_n and ws == min(plan.suite_world_sizes)


# World sizes whose launch to first result has a target (report.LAUNCH_TARGETS).
LAUNCH_TARGET_WORLD_SIZES = (2, 4)


def _negative_job(method: str, plan: Plan) -> Job:
    """What one user's negative test costs: a MultiProcessTestCase suite, every test stamped, under ``method``."""
    ws = min(plan.suite_world_sizes)
    env = {"BENCH_KIND": "negative", "BENCH_N": str(plan.negative_n), "BENCH_WORLD_SIZE": str(ws),
           "CONTINUOUS_TEST_START_METHOD": method}
    return Job("negative", OURS_FRESH, {"ws": ws, "n": plan.negative_n, "method": method},
               str(SCENARIOS / _SCRIPTS[OURS_FRESH]), env, 120.0 + 2.0 * plan.negative_n)


def _floor_job(ws: int, plan: Plan) -> Job:
    fresh = plan.floor_fresh_n if ws in plan.suite_world_sizes else 1  # 1: only the join
    env = {"BENCH_N": str(plan.floor_n), "BENCH_N_FRESH": str(fresh), "BENCH_WORLD_SIZE": str(ws)}
    return Job("floor", FLOOR, {"ws": ws}, str(SCENARIOS / _SCRIPTS[FLOOR]), env, 300.0)


def _import_job(system: str) -> Job:
    """The launch floor: ``python -c "import torch; import <test module>"``, up to the imports' end."""
    module = IMPORT_MODULES[system]
    # Timed from launch to the stamp after the imports: the interpreter's exit
    # (over a second with torch loaded, on a busy machine) is no part of a floor.
    code = f"import torch; import {module}; import scenario_common; scenario_common.stamp('imported')"
    return Job("import", FLOOR, {"module": module}, "-c", {}, 120.0, argv=["-c", code], once=system != OURS_CONT)


def _fault_job(system: str, kind: str, plan: Plan) -> Job:
    env = {"BENCH_KIND": kind, "BENCH_N": "3", "BENCH_WORLD_SIZE": "2"}
    if system == OURS_CONT:
        env["BENCH_HANG_LIMIT"] = f"{plan.hang_limit_s:g}"
        env["CONTINUOUS_TEST_BISECT"] = "off"  # the recovery alone: no rerun of the failed test
        if plan.grace_s is not None:
            env["CONTINUOUS_TEST_GRACE"] = f"{plan.grace_s:g}"
        cap = plan.ours_fault_cap_s
    else:
        env["BENCH_PG_TIMEOUT"] = f"{plan.torch_pg_timeout_s:g}"
        env["DISTRIBUTED_TESTS_DEFAULT_TIMEOUT"] = str(plan.torch_test_timeout_s)
        cap = plan.torch_fault_cap_s
    # torch's fault runs take their process-group timeout or more each (and the
    # hang is known never to finish): one run shows how they end.
    once = system == TORCH_CONT
    return Job("fault", system, {"kind": kind}, str(SCENARIOS / _SCRIPTS[system]), env, cap,
               expect_success=False, once=once)


def groups(plan: Plan) -> List[List[Job]]:
    """Every group of side-by-side jobs, in run order."""
    result: List[List[Job]] = [[_import_job(OURS_CONT), _import_job(TORCH_CONT)]]
    for ws in plan.suite_world_sizes:
        for n in plan.suite_sizes:
            systems = [OURS_CONT, TORCH_CONT]
            if n != plan.dispatch_n or ws == min(plan.suite_world_sizes):  # ours fresh at 4 ranks: minutes
                systems.append(OURS_FRESH)
            if n in plan.torch_fresh_sizes:
                systems.append(TORCH_FRESH)
            result.append([_suite_job(s, ws, n, plan) for s in systems])
    for ws in plan.world_sizes:
        if ws not in plan.suite_world_sizes:
            result.append([_suite_job(s, ws, plan.dispatch_n, plan) for s in (OURS_CONT, TORCH_CONT)])
    # The negative runs beside the floors they are judged against, alternating with them.
    result.append([_floor_job(ws, plan) for ws in plan.world_sizes]
                  + [_negative_job(method, plan) for method in plan.negative_methods])
    for kind in plan.fault_kinds:
        systems = [OURS_CONT] + ([TORCH_CONT] if kind in plan.torch_fault_kinds else [])
        result.append([_fault_job(s, kind, plan) for s in systems])
    return result


def schedule(plan: Plan) -> List[Tuple[int, Job]]:
    """(repetition, job) pairs in run order, systems alternating between repetitions."""
    order: List[Tuple[int, Job]] = []
    for rep in range(plan.repeat):
        for group in groups(plan):
            jobs = group if rep % 2 == 0 else list(reversed(group))
            order.extend((rep, job) for job in jobs if rep == 0 or not job.once)
    return order


def describe(job: Job) -> str:
    """A short human name of a job, for progress lines."""
    settings = ", ".join(f"{k}={v}" for k, v in job.params.items())
    return f"{job.scenario} [{settings}] {LABELS[job.system]}"

