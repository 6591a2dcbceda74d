"""The tables: one section per scenario, each row our figure beside torch's and the floor's.

Every cell carries its unit: figures are ``median (min-max) unit`` over the
repetitions; a floor is the best (lowest) of its repetitions, since it bounds
from below; ratios divide medians and end in ``x``.  A row with a target says
``met`` or ``MISSED``; a target whose figures are missing says ``MISSED (no
data)``.  A row whose figure lies below its floor, or whose overhead beyond the
floor is negative, says ``invalid measurement`` (never ``met``): a floor that does
not bound is not a floor.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from benchlib import plan as plans
from benchlib.analyze import Stat

__all__ = ["Row", "Section", "build", "render", "render_section", "summary_lines", "COLUMNS", "UNITS",
           "MET", "MISSED", "INVALID"]

MET, MISSED, INVALID = "met", "MISSED", "invalid measurement"
COLUMNS = ("measurement", "continuous_test", "torch", "floor (best)", "ours/torch", "ours/floor", "target", "status")
UNITS = {"s": 1.0, "ms": 1000.0, "MB": 1.0}
RATIO_UNIT = "x"


@dataclass
class Row:
    """One line of a table: the figures, their ratios, and the target's verdict."""

    measurement: str
    unit: str
    ours: Optional[Stat] = None
    torch: Optional[Stat] = None
    floor: Optional[Stat] = None
    torch_text: Optional[str] = None  # replaces the torch figure (not run, did not finish)
    ours_text: Optional[str] = None
    target: Optional[str] = None
    status: Optional[str] = None
    # What the target limits: "ratio" (ours/torch), "floor_ratio" (ours/floor),
    # "ours" (median) or "ours_max" (slowest repetition).
    judged: str = "ratio"
    overhead: bool = False  # the figures are costs beyond a floor: never negative

    def set_target(self, text: str, limit: float, judged: str = "ratio") -> None:
        """Attach a target and decide it: met, MISSED, or MISSED (no data)."""
        self.target, self.judged = text, judged
        self.status = _judge(self.judged_value, limit)

    @property
    def judged_value(self) -> Optional[float]:
        """The figure the target is decided on (seconds for ours, a plain number for ratios)."""
        if self.judged == "ratio":
            return self.ratio
        if self.judged == "floor_ratio":
            return self.floor_ratio
        if self.ours is None or self.ours_text:
            return None
        return self.ours.hi if self.judged == "ours_max" else self.ours.median

    @property
    def ratio(self) -> Optional[float]:
        """ours / torch, medians; None where either is missing."""
        if self.ours is None or self.torch is None or self.torch.median <= 0 or self.torch_text or self.ours_text:
            return None
        return self.ours.median / self.torch.median

    @property
    def floor_ratio(self) -> Optional[float]:
        """ours (median) / floor (best); None where either is missing."""
        if self.ours is None or self.floor is None or self.floor.lo <= 0 or self.ours_text:
            return None
        return self.ours.median / self.floor.lo

    def invalid_because(self) -> Optional[str]:
        """Why this row's figures cannot be right, or None."""
        for who, stat, text in (("ours", self.ours, self.ours_text), ("torch", self.torch, self.torch_text)):
            if stat is None or text:
                continue
            if self.floor is not None and stat.median < self.floor.lo:
                return f"{who} below the floor"
            if self.overhead and stat.median < 0:
                return f"{who} negative"
        return None

    def check_floor(self) -> None:
        """Mark the row invalid where a figure lies below its floor (or an overhead is negative)."""
        if self.invalid_because() is not None:
            self.status = INVALID

    def cells(self) -> List[str]:
        """The row as table cells, each figure with its unit."""
        return [self.measurement, self.ours_text or _fmt(self.ours, self.unit),
                self.torch_text or _fmt(self.torch, self.unit), _fmt_best(self.floor, self.unit),
                _fmt_ratio(self.ratio), _fmt_ratio(self.floor_ratio), self.target or "", self.status or ""]

    def as_dict(self) -> Dict[str, Any]:
        """For the JSON file: numbers, not formatted text (figures in the row's unit)."""
        def stat(s: Optional[Stat]) -> Optional[Dict[str, float]]:
            return None if s is None else {k: v * UNITS[self.unit] if k != "n" else v for k, v in s.as_dict().items()}
        return {"measurement": self.measurement, "unit": self.unit, "ours": stat(self.ours),
                "torch": stat(self.torch), "floor": stat(self.floor), "ratio": self.ratio,
                "floor_ratio": self.floor_ratio, "overhead": self.overhead,
                "torch_text": self.torch_text, "ours_text": self.ours_text,
                "target": self.target, "status": self.status, "cells": self.cells()}


@dataclass
class Section:
    """One scenario's table with the definitions needed to read it."""

    key: str
    title: str
    intro: str
    rows: List[Row] = field(default_factory=list)


def _fmt(stat: Optional[Stat], unit: str) -> str:
    if stat is None:
        return "-"
    scale = UNITS[unit]
    digits = _digits(stat.median * scale)
    text = f"{stat.median * scale:.{digits}f}"
    if stat.n > 1:
        text += f" ({stat.lo * scale:.{digits}f}-{stat.hi * scale:.{digits}f})"
    return f"{text} {unit}"


def _fmt_best(stat: Optional[Stat], unit: str) -> str:
    if stat is None:
        return "-"
    value = stat.lo * UNITS[unit]
    return f"{value:.{_digits(value)}f} {unit}"


def _digits(value: float) -> int:
    value = abs(value)
    return 0 if value >= 100 else 1 if value >= 10 else 2 if value >= 0.1 else 3


def _fmt_ratio(ratio: Optional[float]) -> str:
    if ratio is None:
        return "-"
    if ratio <= 0:
        return f"{ratio:.2f}{RATIO_UNIT}"
    if ratio < 0.001:
        return f"1/{1 / ratio:.0f}{RATIO_UNIT}"
    if ratio < 0.1:
        return f"{ratio:.3f}{RATIO_UNIT} (1/{1 / ratio:.0f})"
    return f"{ratio:.2f}{RATIO_UNIT}"


def _judge(value: Optional[float], limit: float) -> str:
    if value is None:
        return f"{MISSED} (no data)"
    return MET if value <= limit else MISSED


class _Builder:
    """Builds the sections from the collected metric values."""

    def __init__(self, values: Dict[str, Dict[str, List[Any]]], plan: plans.Plan) -> None:
        self.values = values
        self.plan = plan

    def stat(self, key: str, metric: str, transform: Callable[[float], float] = lambda v: v) -> Optional[Stat]:
        return Stat.of(transform(v) for v in self.values.get(key, {}).get(metric, []) if isinstance(v, (int, float)))

    def raw(self, key: str, metric: str) -> List[Any]:
        return self.values.get(key, {}).get(metric, [])

    @staticmethod
    def suite_key(system: str, ws: int, n: int) -> str:
        return f"suite/{system}/n{n}/ws{ws}"

    def negative_key(self, method: str) -> str:
        return f"negative/{plans.OURS_FRESH}/method{method}/n{self.plan.negative_n}/ws{min(self.plan.suite_world_sizes)}"

    @staticmethod
    def floor_key(ws: int) -> str:
        return f"floor/floor/ws{ws}"

    @staticmethod
    def import_key(system: str) -> str:
        return f"import/floor/module{plans.IMPORT_MODULES[system]}"

    def floor(self, ws: int, metric: str) -> Optional[Stat]:
        return self.stat(self.floor_key(ws), metric)

    def beyond_floor(self, system: str, ws: int, n: int, floor_metric: str) -> Optional[Stat]:
        """Per-test cost minus the floor's best per-body cost, for every repetition of the system."""
        floor = self.floor(ws, floor_metric)
        if floor is None:
            return None
        return self.stat(self.suite_key(system, ws, n), "per_test_s", lambda v: v - floor.lo)


def build(values: Dict[str, Dict[str, List[Any]]], plan: plans.Plan) -> List[Section]:
    """Every scenario's section, in the order of the README."""
    b = _Builder(values, plan)
    sections = [_suite(b), _world_start(b), _negative(b), _dispatch(b), _faults(b), _memory(b)]
    for section in sections:
        for row in section.rows:
            row.check_floor()
    return sections


# -- suite time ----------------------------------------------------------------------------


def _suite(b: _Builder) -> Section:
    p = b.plan
    section = Section("suite", "1. Suite time", (
        "N trivial tests (all_reduce of 8 floats).  Whole suite: launch to exit of the test file's "
        "process.  Per test: end of the first test to end of the last, over N-1 tests (world start "
        "excluded).  Fresh classes run init_process_group, the body and destroy_process_group in "
        "every test.  Floors: the same bodies in a loop inside one test of a running world "
        f"(scenarios/floor.py).  torch's MultiProcessTestCase runs only at N = "
        f"{', '.join(map(str, p.torch_fresh_sizes))}, ours at N={p.dispatch_n} only at "
        f"{min(p.suite_world_sizes)} ranks.  Only the runs targets are judged on repeat (here N={p.fresh_n} at "
        f"{min(p.suite_world_sizes)} ranks, and scenarios 2 to 4); the others run once, so their cells have no range."))
    targeted = (min(p.suite_world_sizes), p.fresh_n)
    for ws in p.suite_world_sizes:
        for n in p.suite_sizes:
            section.rows.extend(_suite_rows(b, ws, n, targeted=(ws, n) == targeted))
    return section


def _suite_rows(b: _Builder, ws: int, n: int, targeted: bool) -> List[Row]:
    oc, tc = b.suite_key(plans.OURS_CONT, ws, n), b.suite_key(plans.TORCH_CONT, ws, n)
    of, tf = b.suite_key(plans.OURS_FRESH, ws, n), b.suite_key(plans.TORCH_FRESH, ws, n)
    where = f"N={n}, {ws} ranks"
    cont_whole = Row(f"{where}, continuous: whole suite", "s", b.stat(oc, "wall_s"), b.stat(tc, "wall_s"))
    fresh_whole = Row(f"{where}, fresh: whole suite", "s", b.stat(of, "wall_s"), b.stat(tf, "wall_s"))
    rows = [cont_whole]
    if targeted:
        rows.extend(_breakdown_rows(b, where, oc, tc))
    if n > 1:
        per_test = Row(f"{where}, continuous: per test", "ms", b.stat(oc, "per_test_s"), b.stat(tc, "per_test_s"),
                       b.floor(ws, "collective_per_body_s"))
        rows.append(per_test)
        if targeted:
            cont_whole.set_target("ours/torch <= 0.6", 0.6)
            per_test.set_target("ours/torch <= 0.6", 0.6)
    rows.append(fresh_whole)
    if n > 1:
        rows.append(Row(f"{where}, fresh: per test", "ms", b.stat(of, "per_test_s"), b.stat(tf, "per_test_s"),
                        b.floor(ws, "fresh_per_body_s")))
    if targeted:
        vs = Row(f"{where}, ours continuous vs torch fresh: whole suite", "s", b.stat(oc, "wall_s"), b.stat(tf, "wall_s"))
        vs.set_target("ours/torch <= 1/40", 1 / 40)
        rows.append(vs)
    if n not in b.plan.torch_fresh_sizes:
        _mark_not_run(b, rows, ws)
    return rows


def _breakdown_rows(b: _Builder, where: str, oc: str, tc: str) -> List[Row]:
    """Where the whole suite's time goes, part by part (they add up to it)."""
    parts = (("launch to first test", "startup_s"), ("first test (world start)", "first_test_s"),
             ("test phase (N-1 tests)", "phase_s"), ("tearDownClass (stop)", "stop_s"),
             ("then to process exit", "exit_s"))
    return [Row(f"{where}, continuous: suite part: {label}", "s", b.stat(oc, metric), b.stat(tc, metric))
            for label, metric in parts]


def _mark_not_run(b: _Builder, rows: List[Row], ws: int) -> None:
    """torch's fresh class at this N would take too long: say so, with its measured pace."""
    measured = [b.stat(b.suite_key(plans.TORCH_FRESH, ws, m), "per_test_s") for m in b.plan.torch_fresh_sizes]
    pace = next((s for s in measured if s is not None), None)
    text = "not run" if pace is None else f"not run: ~{pace.median:.1f} s/test"
    for row in rows:
        if ", fresh:" in row.measurement:
            row.torch_text = text


# -- world start ---------------------------------------------------------------------------


def _start_n(b: _Builder, ws: int) -> int:
    return b.plan.start_n if ws in b.plan.suite_world_sizes else b.plan.dispatch_n


LAUNCH_TARGETS = {2: 1.3, 4: 1.5}  # keep plans.LAUNCH_TARGET_WORLD_SIZES in step


def _world_start(b: _Builder) -> Section:
    section = Section("world_start", "2. World start", (
        "Launch to first result: from launching python <test file> (N=1: one trivial test) to the end "
        "of its first test; its floor is python -c \"import torch; import <test module>\" (ours) from "
        "launch to the end of its imports, which both systems pay, measured in the same run.  First test: from the start of the class's "
        "first test in the controller to its end, i.e. starting the ranks, joining the process group "
        "and one all_reduce (both classes start their ranks lazily there); its floor is the join "
        "only: init_process_group plus one all_reduce in ranks whose interpreter and torch are "
        "already up."))
    section.rows.append(Row("launch floor: import torch and the test module", "s",
                            b.stat(b.import_key(plans.OURS_CONT), "imported_s"),
                            b.stat(b.import_key(plans.TORCH_CONT), "imported_s")))
    for ws in b.plan.start_world_sizes:
        n = _start_n(b, ws)
        oc, tc = b.suite_key(plans.OURS_CONT, ws, n), b.suite_key(plans.TORCH_CONT, ws, n)
        launch = Row(f"{ws} ranks: launch to first result", "s", b.stat(oc, "launch_to_first_s"),
                     b.stat(tc, "launch_to_first_s"), b.stat(b.import_key(plans.OURS_CONT), "imported_s"))
        if ws in LAUNCH_TARGETS:
            launch.set_target(f"ours/floor <= {LAUNCH_TARGETS[ws]:g}", LAUNCH_TARGETS[ws], judged="floor_ratio")
        first = Row(f"{ws} ranks: first test", "s", b.stat(oc, "first_test_s"), b.stat(tc, "first_test_s"),
                    b.floor(ws, "world_s"))
        if ws >= 4:
            first.set_target("ours/torch <= 0.5", 0.5)
        section.rows.extend([launch, first])
    return section


# -- fresh worlds --------------------------------------------------------------------------


def _negative(b: _Builder) -> Section:
    n, torch_n, ws = b.plan.dispatch_n, b.plan.fresh_n, min(b.plan.suite_world_sizes)
    section = Section("negative", "3. Fresh world per test", (
        f"MultiProcessTestCase: fresh ranks for every test at {ws} ranks (init_process_group, one "
        f"all_reduce, destroy).  Per test (median), under each start method: the median over "
        f"{b.plan.negative_n - 1} tests of a {b.plan.negative_n}-test suite (the first left out) of one test's "
        "start to its end in the controller, what one user's negative test costs; its floor is the median "
        "fresh body in a loop inside one test of a running world (the same world made in processes already "
        f"up).  Per test: the mean over the N={n} fresh suite's tests, and torch's N={torch_n} one "
        "(scenario 1); its floor the loop's mean."))
    for method in b.plan.negative_methods:
        median = Row(f"{ws} ranks, {method} template: per test (median)", "ms",
                     b.stat(b.negative_key(method), "negative_test_s"), None, b.floor(ws, "fresh_median_s"))
        median.set_target("ours/floor <= 2", 2.0, judged="floor_ratio")
        section.rows.append(median)
    of, tf = b.suite_key(plans.OURS_FRESH, ws, n), b.suite_key(plans.TORCH_FRESH, ws, torch_n)
    row = Row(f"{ws} ranks: per test", "ms", b.stat(of, "per_test_s"), b.stat(tf, "per_test_s"),
              b.floor(ws, "fresh_per_body_s"))
    row.set_target("ours/floor <= 2", 2.0, judged="floor_ratio")
    vs_torch = Row(f"{ws} ranks: per test, against torch", "ms", b.stat(of, "per_test_s"), b.stat(tf, "per_test_s"))
    vs_torch.set_target("ours/torch <= 0.1", 0.1)
    floor = b.floor(ws, "fresh_per_body_s")
    minus = (lambda v: v - floor.lo) if floor is not None else None
    beyond = Row(f"{ws} ranks: per test beyond floor", "ms",
                 b.stat(of, "per_test_s", minus) if minus else None,
                 b.stat(tf, "per_test_s", minus) if minus else None, overhead=True)
    section.rows.extend([row, vs_torch, beyond])
    return section


# -- per-test dispatch ---------------------------------------------------------------------


def _dispatch(b: _Builder) -> Section:
    n = b.plan.dispatch_n
    section = Section("dispatch", "4. Per-test dispatch", (
        f"Continuous classes, N={n}: per test (end of the first test to end of the last, over N-1 "
        "tests), and beyond the floor: per test minus the best per-body time of the same body in a "
        "loop inside one test of a running world of the same size.  Ours sends each next test "
        "while the runner records the last, once every rank passed it (docs/design.rst, "
        "\"Tests sent ahead\")."))
    for ws in b.plan.world_sizes:
        oc, tc = b.suite_key(plans.OURS_CONT, ws, n), b.suite_key(plans.TORCH_CONT, ws, n)
        if oc not in b.values and tc not in b.values:
            continue
        per_test = Row(f"{ws} ranks: per test", "ms", b.stat(oc, "per_test_s"), b.stat(tc, "per_test_s"),
                       b.floor(ws, "collective_per_body_s"))
        beyond = Row(f"{ws} ranks: per test beyond floor", "ms",
                     b.beyond_floor(plans.OURS_CONT, ws, n, "collective_per_body_s"),
                     b.beyond_floor(plans.TORCH_CONT, ws, n, "collective_per_body_s"), overhead=True)
        if ws in b.plan.dispatch_world_sizes:
            beyond.set_target("ours/torch <= 0.5", 0.5)
        section.rows.extend([per_test, beyond])
    return section


# -- faults --------------------------------------------------------------------------


def _faults(b: _Builder) -> Section:
    grace = b.plan.grace
    restart = b.stat(b.suite_key(plans.OURS_CONT, 2, _start_n(b, 2)), "first_test_s")
    p = b.plan
    section = Section("faults", "5. Faults", (
        "2 ranks; a healthy test, the faulty one, a healthy one.  assert: rank 0 fails while rank 1 "
        "waits in all_reduce; exit: rank 1 calls os._exit(3) while rank 0 waits; hang: rank 0 sleeps "
        f"while rank 1 waits.  Ours: grace period {grace:g} s, @continuous_test.timeout"
        f"({p.hang_limit_s:g}) on the hang, and CONTINUOUS_TEST_BISECT=off: by default a failed test "
        "is also rerun in a fresh world to tell a polluted world from a real failure, which adds the "
        "rerun (a diagnosis, not the recovery measured here).  torch: process-group timeout {p.torch_pg_timeout_s:g} s "
        f"(class attribute timeout) and its per-test limit DISTRIBUTED_TESTS_DEFAULT_TIMEOUT="
        f"{p.torch_test_timeout_s} (it also covers the first test's world start, so it cannot be 5 s "
        "here; its queue is checked every 10 s or more); after a failure torch's class skips every later "
        f"test (poison pill).  torch runs are capped at {p.torch_fault_cap_s:g} s and run once (each "
        "costs its timeouts; the hang never finishes).  Budget: grace period (or time limit) plus one world restart "
        "(= world start at 2 ranks, scenario 2), judged on the slowest repetition."))
    for kind in p.fault_kinds:
        section.rows.extend(_fault_rows(b, kind, grace, restart))
    return section


def _fault_rows(b: _Builder, kind: str, grace: float, restart: Optional[Stat]) -> List[Row]:
    ours, torch = f"fault/{plans.OURS_CONT}/kind{kind}", f"fault/{plans.TORCH_CONT}/kind{kind}"
    wait = b.plan.hang_limit_s if kind == "hang" else grace
    to_body = Row(f"{kind}: fault to next test's body", "s", b.stat(ours, "next_start_s"), b.stat(torch, "next_start_s"))
    to_result = Row(f"{kind}: fault to next test's result", "s", b.stat(ours, "next_result_s"),
                    b.stat(torch, "next_result_s"))
    whole = Row(f"{kind}: whole file", "s", b.stat(ours, "wall_s"), b.stat(torch, "wall_s"))
    if restart is not None:
        to_body.set_target(f"ours max <= {wait:g} + {restart.median:.2f} s", wait + restart.median, judged="ours_max")
    else:
        to_body.set_target(f"ours max <= {wait:g} s + restart", 0.0, judged="ours_max")
        to_body.status = f"{MISSED} (no data)"
    _describe_torch_fault(b, torch, to_body, to_result, whole)
    _describe_unfinished(b, ours, whole, "ours")
    return [to_body, to_result, whole]


def _describe_torch_fault(b: _Builder, key: str, to_body: Row, to_result: Row, whole: Row) -> None:
    statuses = [s for s in b.raw(key, "next_status") if s]
    if to_body.torch is None and statuses and all(s == "skipped" for s in statuses):
        to_body.torch_text = "never: skipped"
    if to_result.torch is not None and statuses and all(s == "skipped" for s in statuses):
        to_result.torch_text = _fmt(to_result.torch, "s") + " (skipped)"
    _describe_unfinished(b, key, whole, "torch")


def _describe_unfinished(b: _Builder, key: str, row: Row, side: str) -> None:
    finished = b.raw(key, "finished")
    if finished and not all(finished):
        cap = b.plan.torch_fault_cap_s if side == "torch" else b.plan.ours_fault_cap_s
        text = f"> {cap:g} s (did not finish within {cap:g} s, {finished.count(False)}/{len(finished)} runs)"
        if side == "torch":
            row.torch_text = text
        else:
            row.ours_text = text


# -- memory ----------------------------------------------------------------------------------


def _memory(b: _Builder) -> Section:
    n = b.plan.memory_n
    section = Section("memory", "6. Memory", (
        f"2 ranks, the N={n} suite of scenario 1; read from /proc in the controller after the last "
        "test while the ranks still live.  Peak RSS is VmHWM (it counts pages shared with the "
        "process a rank was forked from); PSS splits shared pages between their users.  Other "
        "processes: ours, the template ranks are forked from; both, multiprocessing's helpers."))
    oc, tc = b.suite_key(plans.OURS_CONT, 2, n), b.suite_key(plans.TORCH_CONT, 2, n)
    section.rows.extend([
        Row("controller peak RSS", "MB", b.stat(oc, "controller_hwm_mb"), b.stat(tc, "controller_hwm_mb")),
        Row("per-rank peak RSS (max over ranks)", "MB", b.stat(oc, "rank_hwm_mb"), b.stat(tc, "rank_hwm_mb")),
        Row("other processes' peak RSS (sum)", "MB", b.stat(oc, "others_hwm_mb"), b.stat(tc, "others_hwm_mb")),
        Row("whole process tree PSS", "MB", b.stat(oc, "tree_pss_mb"), b.stat(tc, "tree_pss_mb")),
    ])
    return section


# -- rendering ---------------------------------------------------------------------------


def render_section(section: Section) -> str:
    """An RST simple table under the section's title and definitions."""
    rows = [list(COLUMNS)] + [row.cells() for row in section.rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    rule = "  ".join("=" * w for w in widths)

    def line(cells: List[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    body = [rule, line(rows[0]), rule] + [line(r) for r in rows[1:]] + [rule]
    return "\n".join([section.title, "~" * len(section.title), "", _wrap(section.intro), ""] + body)


def _wrap(text: str, width: int = 92) -> str:
    import textwrap

    return textwrap.fill(text, width, break_on_hyphens=False, break_long_words=False)


def render(sections: List[Section]) -> str:
    """Every section, separated by blank lines."""
    return "\n\n".join(render_section(s) for s in sections) + "\n"


def summary_lines(sections: List[Section]) -> List[str]:
    """One line per target: its verdict, where, and the figure."""
    lines = []
    for section in sections:
        for row in section.rows:
            if row.status:
                value = row.judged_value
                if value is None:
                    figure = "no data"
                elif row.judged == "ratio":
                    figure = f"ours/torch {_fmt_ratio(value)}"
                elif row.judged == "floor_ratio":
                    figure = f"ours/floor {_fmt_ratio(value)}"
                else:
                    who = "ours, slowest run" if row.judged == "ours_max" else "ours"
                    figure = f"{who} {value * UNITS[row.unit]:.{_digits(value * UNITS[row.unit])}f} {row.unit}"
                if row.status == INVALID:
                    figure += f"; {row.invalid_because()}"
                lines.append(f"{row.status:<7} {section.title}: {row.measurement}: {figure} (target {row.target or 'none'})")
    return lines
