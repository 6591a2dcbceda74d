"""The tables: one section per scenario, each row our figure beside torch's and the floor's.

Every cell is ``median (min-max)`` over the repetitions.  ``ours/torch`` divides
the medians.  A row with a target says ``met`` or ``MISSED``; a target whose
figures are missing says ``MISSED (no data)``, never nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from benchlib import plan as plans
from benchlib.analyze import Stat

__all__ = ["Row", "Section", "build", "render", "render_section", "summary_lines"]

MET, MISSED = "met", "MISSED"
COLUMNS = ("measurement", "continuous_test", "torch", "floor", "ours/torch", "target", "status")
UNITS = {"s": 1.0, "ms": 1000.0, "MB": 1.0}


@dataclass
class Row:
    """One line of a table: the figures, their ratio, and the target's verdict."""

    measurement: str
    unit: str
    ours: Optional[Stat] = None
    torch: Optional[Stat] = None
    floor: Optional[Stat] = None
    torch_text: Optional[str] = None  # replaces the torch figure (not run, did not finish)
    ours_text: Optional[str] = None
    target: Optional[str] = None
    status: Optional[str] = None
    judged: str = "ratio"  # what the target limits: "ratio", "ours" (median) or "ours_max"

    def set_target(self, text: str, limit: float, judged: str = "ratio") -> None:
        """Attach a target and decide it: met, MISSED, or MISSED (no data)."""
        self.target, self.judged = text, judged
        self.status = _judge(self.judged_value, limit)

    @property
    def judged_value(self) -> Optional[float]:
        """The figure the target is decided on (seconds for ours, a plain number for ratios)."""
        if self.judged == "ratio":
            return self.ratio
        if self.ours is None or self.ours_text:
            return None
        return self.ours.hi if self.judged == "ours_max" else self.ours.median

    @property
    def ratio(self) -> Optional[float]:
        """ours / torch, medians; None where either is missing."""
        if self.ours is None or self.torch is None or self.torch.median == 0 or self.torch_text:
            return None
        return self.ours.median / self.torch.median

    def cells(self) -> List[str]:
        """The row as table cells."""
        return [self.measurement, self.ours_text or _fmt(self.ours, self.unit),
                self.torch_text or _fmt(self.torch, self.unit), _fmt(self.floor, self.unit),
                _fmt_ratio(self.ratio), self.target or "", self.status or ""]

    def as_dict(self) -> Dict[str, Any]:
        """For the JSON file: numbers, not formatted text."""
        def stat(s: Optional[Stat]) -> Optional[Dict[str, float]]:
            return None if s is None else {k: v * UNITS[self.unit] if k != "n" else v for k, v in s.as_dict().items()}
        return {"measurement": self.measurement, "unit": self.unit, "ours": stat(self.ours),
                "torch": stat(self.torch), "floor": stat(self.floor), "ratio": self.ratio,
                "torch_text": self.torch_text, "ours_text": self.ours_text,
                "target": self.target, "status": self.status}


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
    return text


def _digits(value: float) -> int:
    value = abs(value)
    return 0 if value >= 100 else 1 if value >= 10 else 2 if value >= 0.1 else 3


def _fmt_ratio(ratio: Optional[float]) -> str:
    if ratio is None:
        return "-"
    if ratio <= 0:
        return f"{ratio:.2f}"
    if ratio < 0.001:
        return f"1/{1 / ratio:.0f}"
    if ratio < 0.1:
        return f"{ratio:.3f} (1/{1 / ratio:.0f})"
    return f"{ratio:.2f}"


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

    @staticmethod
    def floor_key(ws: int, n: int) -> str:
        return f"floor/floor/n{n}/ws{ws}"

    def beyond_floor(self, system: str, ws: int, n: int, floor_metric: str) -> Optional[Stat]:
        """Per-test cost minus the floor's per-body cost (median floor, every repetition of the system)."""
        floor = self.stat(self.floor_key(ws, n), floor_metric)
        if floor is None:
            return None
        return self.stat(self.suite_key(system, ws, n), "per_test_s", lambda v: v - floor.median)


def build(values: Dict[str, Dict[str, List[Any]]], plan: plans.Plan) -> List[Section]:
    """Every scenario's section, in the order of the README."""
    b = _Builder(values, plan)
    return [_suite(b), _world_start(b), _negative(b), _faults(b), _memory(b)]


# -- scenario 1 --------------------------------------------------------------------------


def _suite(b: _Builder) -> Section:
    section = Section("suite", "1. Suite time", (
        "N trivial tests (all_reduce of 8 floats).  Whole suite: launch to exit of the test file's "
        "process.  Test phase: end of the first test to end of the last (N-1 tests; world start "
        "excluded), per test.  Beyond floor: per test minus the same body's cost in a plain loop "
        "in already-started ranks.  Fresh classes run init_process_group, the body and "
        "destroy_process_group in every test; their floor is that sequence in a plain loop.  torch's "
        "MultiProcessTestCase runs only at the smallest N, and above 2 ranks only once."))
    first_n, first_ws = min(b.plan.suite_sizes), min(b.plan.suite_world_sizes)
    for ws in b.plan.suite_world_sizes:
        for n in b.plan.suite_sizes:
            section.rows.extend(_suite_rows(b, ws, n, targeted=(ws, n) == (first_ws, first_n)))
    return section


def _suite_rows(b: _Builder, ws: int, n: int, targeted: bool) -> List[Row]:
    oc, tc = b.suite_key(plans.OURS_CONT, ws, n), b.suite_key(plans.TORCH_CONT, ws, n)
    of, tf = b.suite_key(plans.OURS_FRESH, ws, n), b.suite_key(plans.TORCH_FRESH, ws, n)
    floor = b.floor_key(ws, n)
    where = f"N={n}, {ws} ranks"
    rows = [
        Row(f"{where}, continuous: whole suite", "s", b.stat(oc, "wall_s"), b.stat(tc, "wall_s")),
        Row(f"{where}, continuous: test phase per test", "ms", b.stat(oc, "per_test_s"), b.stat(tc, "per_test_s"),
            b.stat(floor, "collective_per_body_s")),
        Row(f"{where}, continuous: per test beyond floor", "ms",
            b.beyond_floor(plans.OURS_CONT, ws, n, "collective_per_body_s"),
            b.beyond_floor(plans.TORCH_CONT, ws, n, "collective_per_body_s")),
        Row(f"{where}, ours continuous vs torch fresh: whole suite", "s", b.stat(oc, "wall_s"), b.stat(tf, "wall_s")),
        Row(f"{where}, ours continuous vs torch fresh: test phase per test", "ms", b.stat(oc, "per_test_s"),
            b.stat(tf, "per_test_s"), b.stat(floor, "collective_per_body_s")),
        Row(f"{where}, fresh: whole suite", "s", b.stat(of, "wall_s"), b.stat(tf, "wall_s")),
        Row(f"{where}, fresh: test phase per test", "ms", b.stat(of, "per_test_s"), b.stat(tf, "per_test_s"),
            b.stat(floor, "fresh_per_body_s")),
        Row(f"{where}, fresh: per test beyond floor", "ms", b.beyond_floor(plans.OURS_FRESH, ws, n, "fresh_per_body_s"),
            b.beyond_floor(plans.TORCH_FRESH, ws, n, "fresh_per_body_s")),
    ]
    rows[2].set_target("ours <= 0.5 ms", 0.0005, judged="ours")
    if targeted:
        for row, limit, text in ((rows[0], 0.6, "<= 0.6"), (rows[1], 0.6, "<= 0.6"),
                                 (rows[3], 1 / 40, "<= 1/40"), (rows[4], 1 / 40, "<= 1/40")):
            row.set_target(text, limit)
    if n not in b.plan.torch_fresh_sizes:
        _mark_not_run(b, rows, ws)
    if targeted:
        rows[1:1] = _breakdown_rows(b, where, oc, tc)
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
        if "torch fresh" in row.measurement or ", fresh:" in row.measurement:
            row.torch_text = text


# -- scenario 2 --------------------------------------------------------------------------


def _start_n(b: _Builder, ws: int) -> int:
    return min(b.plan.suite_sizes) if ws in b.plan.suite_world_sizes else b.plan.start_n


def _world_start(b: _Builder) -> Section:
    section = Section("world_start", "2. World start", (
        "First test: from the start of the class's first test in the controller to the end of that "
        "(trivial) test, i.e. starting the ranks, joining the process group and one all_reduce; the "
        "same point for both classes, which both start their ranks lazily in the first test.  Launch "
        "to first result adds the controller's own start (interpreter, imports).  Floor: "
        "init_process_group plus one all_reduce in plain ranks whose interpreter and torch are already up."))
    for ws in b.plan.start_world_sizes:
        n = _start_n(b, ws)
        oc, tc = b.suite_key(plans.OURS_CONT, ws, n), b.suite_key(plans.TORCH_CONT, ws, n)
        row = Row(f"{ws} ranks: first test", "s", b.stat(oc, "first_test_s"), b.stat(tc, "first_test_s"),
                  b.stat(b.floor_key(ws, n), "world_s"))
        if ws >= 4:
            row.set_target("<= 0.5", 0.5)
        section.rows.append(row)
        section.rows.append(Row(f"{ws} ranks: launch to first result", "s", b.stat(oc, "launch_to_first_s"),
                                b.stat(tc, "launch_to_first_s")))
    return section


# -- scenario 3 --------------------------------------------------------------------------


def _negative(b: _Builder) -> Section:
    n = min(b.plan.torch_fresh_sizes)
    ws = 2
    section = Section("negative", "3. Negative tests", (
        f"A fresh world per test at {ws} ranks (init_process_group, one all_reduce, destroy), measured "
        f"in the N={n} fresh suites of scenario 1: test phase per test.  Floor: the same sequence in a "
        "plain loop in already-started ranks."))
    of, tf = b.suite_key(plans.OURS_FRESH, ws, n), b.suite_key(plans.TORCH_FRESH, ws, n)
    row = Row(f"{ws} ranks: per test", "ms", b.stat(of, "per_test_s"), b.stat(tf, "per_test_s"),
              b.stat(b.floor_key(ws, n), "fresh_per_body_s"))
    row.set_target("<= 0.1", 0.1)
    section.rows.append(row)
    section.rows.append(Row(f"{ws} ranks: per test beyond floor", "ms",
                            b.beyond_floor(plans.OURS_FRESH, ws, n, "fresh_per_body_s"),
                            b.beyond_floor(plans.TORCH_FRESH, ws, n, "fresh_per_body_s")))
    return section


# -- scenario 4 --------------------------------------------------------------------------


def _faults(b: _Builder) -> Section:
    grace = b.plan.grace
    restart = b.stat(b.suite_key(plans.OURS_CONT, 2, _start_n(b, 2)), "first_test_s")
    p = b.plan
    section = Section("faults", "4. Faults", (
        "2 ranks; a healthy test, the faulty one, a healthy one.  assert: rank 0 fails while rank 1 "
        "waits in all_reduce; exit: rank 1 calls os._exit(3) while rank 0 waits; hang: rank 0 sleeps "
        f"while rank 1 waits.  Ours: grace period {grace:g} s, @continuous_test.timeout"
        f"({p.hang_limit_s:g}) on the hang.  torch: process-group timeout {p.torch_pg_timeout_s:g} s "
        f"(class attribute timeout) and its per-test limit DISTRIBUTED_TESTS_DEFAULT_TIMEOUT="
        f"{p.torch_test_timeout_s} (it also covers the first test's world start, so it cannot be 5 s "
        "here; its queue is checked every 10 s or more); after a failure torch's class skips every later "
        f"test (poison pill).  torch runs are capped at {p.torch_fault_cap_s:g} s; the hang, known never "
        "to finish, runs once.  Budget: grace period (or time limit) plus one world restart "
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
        text = f"> {cap:g} (did not finish within {cap:g} s, {finished.count(False)}/{len(finished)} runs)"
        if side == "torch":
            row.torch_text = text
        else:
            row.ours_text = text


# -- scenario 5 --------------------------------------------------------------------------


def _memory(b: _Builder) -> Section:
    n = b.plan.memory_n
    section = Section("memory", "5. Memory", (
        f"2 ranks, the N={n} suite of scenario 1; read from /proc in the controller after the last "
        "test while the ranks still live.  Peak RSS is VmHWM (it counts pages shared with the "
        "process a rank was forked from); PSS splits shared pages between their users.  Other "
        "processes: ours, the forkserver template ranks are forked from; both, multiprocessing's "
        "helpers.  Floor: a plain rank that imported torch and ran the bodies."))
    oc, tc, floor = b.suite_key(plans.OURS_CONT, 2, n), b.suite_key(plans.TORCH_CONT, 2, n), b.floor_key(2, n)
    section.rows.extend([
        Row("controller peak RSS", "MB", b.stat(oc, "controller_hwm_mb"), b.stat(tc, "controller_hwm_mb")),
        Row("per-rank peak RSS (max over ranks)", "MB", b.stat(oc, "rank_hwm_mb"), b.stat(tc, "rank_hwm_mb"),
            b.stat(floor, "rank_hwm_mb")),
        Row("other processes' peak RSS (sum)", "MB", b.stat(oc, "others_hwm_mb"), b.stat(tc, "others_hwm_mb")),
        Row("whole process tree PSS", "MB", b.stat(oc, "tree_pss_mb"), b.stat(tc, "tree_pss_mb"),
            b.stat(floor, "tree_pss_mb")),
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
                else:
                    who = "ours, slowest run" if row.judged == "ours_max" else "ours"
                    figure = f"{who} {value * UNITS[row.unit]:.{_digits(value * UNITS[row.unit])}f} {row.unit}"
                lines.append(f"{row.status:<7} {section.title}: {row.measurement}: {figure} (target {row.target})")
    return lines
