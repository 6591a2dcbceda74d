"""A picture of a run: one self-contained HTML page from the JSON run report.

Usage::

    python -m continuous_test.report_html run.json -o run.html

(``--ct-report-html=FILE`` under pytest and ``CONTINUOUS_TEST_REPORT_HTML=FILE``
for ``run_tests()`` write the same page at the end of a run.)  The page has one
lane per world (a class's shared world, a class's fresh ranks, the fresh worlds
of one rerun and bisect), and one for the tests that ran without ranks.  Tests are
bars in time, coloured by outcome, a failure labelled with its failing ranks;
world starts are marks, restarts marks of their own (with the test after which
the world started again), and reruns and bisects are dashed bars on their own
lane.  Under the picture, a table lists every test with its diagnosis.

Everything is inline (CSS and SVG, no script, no network): the page can be kept as
a CI artifact and opened anywhere.  Reads the report only; stdlib only.
"""
from __future__ import annotations

import argparse
import html
import json
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from continuous_test.verdict.text import short_test_name
from continuous_test.wire import files

__all__ = ["render", "write", "main", "TITLE"]

TITLE = "continuous_test run"
LABEL_WIDTH = 230  # pixels left of the time axis, for the lanes' names
PLOT_WIDTH = 1000
LANE_HEIGHT = 36
BAR_HEIGHT = 18
TOP = 34  # room for the axis
COLOURS = {"passed": "#3b9b4c", "failed": "#d2382f", "error": "#a0202a", "skipped": "#a3a3a3",
           "xfailed": "#7aa5c9", "xpassed": "#e08a2b", "unknown": "#777777"}

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 18px; color: #222; }
h1 { font-size: 20px; margin: 0 0 6px; }
.summary span { margin-right: 16px; }
svg { background: #fafafa; border: 1px solid #ddd; }
svg text { font: 11px system-ui, sans-serif; }
.lane-name { font-weight: 600; }
.lane-kind { fill: #666; }
.rank-label { fill: #b01e17; font-weight: 700; }
.bar-label { fill: #fff; }
.axis { stroke: #bbb; }
.legend span { display: inline-block; margin-right: 14px; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -1px; }
table { border-collapse: collapse; margin-top: 16px; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
td.id { overflow-wrap: anywhere; max-width: 480px; }
tr.failed td.outcome, tr.error td.outcome { color: #b01e17; font-weight: 700; }
"""


def render(report: Dict[str, Any]) -> str:
    """The whole page for ``report`` (a dict laid out as ``run_report.schema.json`` says)."""
    lanes = _lanes(report)
    started = float(report.get("started", 0.0))
    finished = max(float(report.get("finished", started)), started)
    # The axis starts at the first world start or test: before it, the runner collected and imported.
    start = min(_first_events(report), default=started)
    span = max(finished - start, 1e-3)
    svg = _svg(lanes, start, span)
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f"<title>{TITLE}</title>", f"<style>{CSS}</style>", "</head>", "<body>",
        f"<h1>{TITLE}</h1>", _summary(report, finished - started, start - started), _legend(), svg,
        _table(report, start), "</body>", "</html>", ""])


def _first_events(report: Dict[str, Any]) -> List[float]:
    firsts = [begun["time"] for world in report.get("worlds", []) for begun in world.get("starts", [])[:1]]
    return firsts + [test["start"] for test in report.get("tests", [])[:1]]


def write(report: Dict[str, Any], path: str) -> None:
    """Write the page for ``report`` to ``path``."""
    files.write_text(path, render(report))


# -- the lanes ------------------------------------------------------------------------


def _lanes(report: Dict[str, Any]) -> List[Tuple[Dict[str, Any], List[Dict[str, Any]]]]:
    """(world, its runs) for every world in the order they first started, then one lane of tests without ranks."""
    runs_of: Dict[str, List[Dict[str, Any]]] = {}
    for run in report.get("runs", []):
        runs_of.setdefault(run["world"], []).append(run)
    worlds = sorted(report.get("worlds", []), key=lambda w: w["starts"][0]["time"] if w["starts"] else 0.0)
    lanes = [(world, runs_of.get(world["id"], [])) for world in worlds]
    plain: Dict[Optional[str], List[Dict[str, Any]]] = {}
    for test in report.get("tests", []):
        if test.get("world") is None:
            plain.setdefault(test.get("worker"), []).append(
                {"test": test["id"], "start": test["start"], "end": test["end"], "outcome": test["outcome"],
                 "failing_ranks": [], "raising_ranks": [], "purpose": "tests"})
    for worker, runs in sorted(plain.items(), key=lambda kv: str(kv[0])):
        name = f"{worker}: without ranks" if worker else "without ranks"
        lanes.append(({"id": name, "class": "", "world_size": 0, "kind": "plain", "starts": [], "for_test": None,
                       "stopped": None}, runs))
    return lanes


def _svg(lanes: Sequence[Tuple[Dict[str, Any], List[Dict[str, Any]]]], start: float, span: float) -> str:
    height = TOP + LANE_HEIGHT * max(len(lanes), 1) + 10
    width = LABEL_WIDTH + PLOT_WIDTH + 20
    parts = [f'<svg class="timeline" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
             f'role="img" aria-label="tests in time, one lane per world">']
    parts += _axis(span, height)

    def x(t: float) -> float:
        return LABEL_WIDTH + (t - start) / span * PLOT_WIDTH

    for index, (world, runs) in enumerate(lanes):
        y = TOP + index * LANE_HEIGHT
        parts.append(f'<g class="lane lane-{_e(world["kind"])}" data-world="{_e(world["id"])}">')
        shade = "#f0f0f0" if index % 2 else "#fafafa"
        parts.append(f'<rect x="0" y="{y}" width="{width}" height="{LANE_HEIGHT}" fill="{shade}"/>')
        parts.append(f'<text class="lane-name" x="6" y="{y + 15}">{_e(_cut(world["id"], 34))}</text>')
        parts.append(f'<text class="lane-kind" x="6" y="{y + 29}">{_e(_kind_words(world))}</text>')
        for begun in world.get("starts", []):
            parts.append(_start_mark(begun, x, y))
        label_end = 0.0  # where the last failing-ranks label ends: labels never overlap
        for run in sorted(runs, key=lambda r: r["start"]):
            bar, label_end = _bar(run, x, y, label_end)
            parts.append(bar)
        if world.get("stopped"):
            sx = x(world["stopped"])
            parts.append(f'<line class="marker stop" x1="{sx:.1f}" y1="{y + 5}" x2="{sx:.1f}" y2="{y + LANE_HEIGHT - 5}" '
                         f'stroke="#444" stroke-width="2"><title>world stopped</title></line>')
        parts.append("</g>")
    parts.append("</svg>")
    return "\n".join(parts)


def _axis(span: float, height: int) -> List[str]:
    step = _nice_step(span / 8)
    parts = []
    tick = 0.0
    while tick <= span + 1e-9:
        tx = LABEL_WIDTH + tick / span * PLOT_WIDTH
        parts.append(f'<line class="axis" x1="{tx:.1f}" y1="{TOP - 6}" x2="{tx:.1f}" y2="{height - 6}"/>')
        parts.append(f'<text x="{tx + 2:.1f}" y="{TOP - 10}">{tick:g} s</text>')
        tick += step
    return parts


def _nice_step(raw: float) -> float:
    for scale in (1e-3, 1e-2, 1e-1, 1, 10, 100, 1000, 10000):
        for mantissa in (1, 2, 5):
            if mantissa * scale >= raw:
                return mantissa * scale
    return raw


def _start_mark(begun: Dict[str, Any], x: Any, y: int) -> str:
    """A world start: its start-up time shaded, and a mark (a restart's says after which test)."""
    sx, ex = x(begun["time"]), x(begun["time"] + begun.get("seconds", 0.0))
    restart = begun.get("restart")
    kind = "restart" if restart else "start"
    purpose = begun.get("purpose", "tests")
    words = f"world {'restarted' if restart else 'started'} ({begun.get('seconds', 0.0):.2f} s to start)"
    if restart and begun.get("after"):
        words += f" after {begun['after']}"
    if purpose != "tests":
        words += f"; {purpose} of {begun.get('for_test')}"
        kind += f" {purpose}"
    if begun.get("failed"):
        words = f"world failed to start: {begun['failed']}"
        kind += " failed"
    colour = "#e08a2b" if restart else ("#6a4fb3" if purpose != "tests" else "#2f6db5")
    if begun.get("failed"):
        colour = COLOURS["error"]
    mid = y + LANE_HEIGHT / 2
    shape = f"M{sx:.1f},{mid - 9:.1f} L{sx + 7:.1f},{mid:.1f} L{sx:.1f},{mid + 9:.1f} Z"
    return (f'<g class="marker {kind}"><title>{_e(words)}</title>'
            f'<rect x="{sx:.1f}" y="{mid - 7:.1f}" width="{max(ex - sx, 1):.1f}" height="14" fill="{colour}" '
            f'opacity="0.25"/><path d="{shape}" fill="{colour}"/></g>')


def _bar(run: Dict[str, Any], x: Any, y: int, label_end: float) -> Tuple[str, float]:
    """The bar of one run, and where its failing-ranks label ends (``label_end`` if it has none)."""
    sx, ex = x(run["start"]), x(run["end"])
    w = max(ex - sx, 2.0)
    outcome = run.get("outcome", "unknown")
    colour = COLOURS.get(outcome, COLOURS["unknown"])
    by = y + (LANE_HEIGHT - BAR_HEIGHT) / 2
    purpose = run.get("purpose", "tests")
    ranks = run.get("failing_ranks") or []
    raised = [r for r in run.get("raising_ranks") or [] if r in ranks]
    tip = f"{run['test']}: {outcome}, {run['end'] - run['start']:.2f} s"
    if ranks:
        tip += f", failing ranks {', '.join(map(str, ranks))}"
    if raised and raised != ranks:  # the others only waited for them
        tip += f" (raised on {'rank' if len(raised) == 1 else 'ranks'} {', '.join(map(str, raised))}; the others waited)"
    if purpose != "tests":
        tip += f" ({purpose} for {run.get('for_test')})"
    dash = ' stroke="#222" stroke-dasharray="3,2"' if purpose != "tests" else ""
    parts = [f'<g class="run {_e(outcome)} {_e(purpose)}" data-test="{_e(run["test"])}" '
             f'data-ranks="{",".join(map(str, ranks))}"><title>{_e(tip)}</title>',
             f'<rect x="{sx:.1f}" y="{by:.1f}" width="{w:.1f}" height="{BAR_HEIGHT}" rx="2" fill="{colour}"{dash}/>']
    name = short_test_name(run["test"])
    if w > 7 * len(name):
        parts.append(f'<text class="bar-label" x="{sx + 3:.1f}" y="{by + 13:.1f}">{_e(name)}</text>')
    label = ("rank " if len(ranks) == 1 else "ranks ") + ",".join(map(str, ranks))
    if raised and raised != ranks:
        label += f" ({','.join(map(str, raised))} raised)"
    if ranks and sx >= label_end:  # else the tooltip still says them
        near_end = sx > LABEL_WIDTH + PLOT_WIDTH - 70  # keep the label inside the picture
        anchor = f' x="{ex:.1f}" text-anchor="end"' if near_end else f' x="{sx:.1f}"'
        parts.append(f'<text class="rank-label"{anchor} y="{by - 2:.1f}">{_e(label)}</text>')
        label_end = sx + 7 * len(label)
    parts.append("</g>")
    return "".join(parts), label_end


def _kind_words(world: Dict[str, Any]) -> str:
    kind = world["kind"]
    if kind == "plain":
        return "tests without ranks"
    size = f"{world['world_size']} rank{'' if world['world_size'] == 1 else 's'}"
    if kind == "replay":
        return f"{size}, rerun/bisect of {short_test_name(world.get('for_test') or '')}"
    starts = len(world.get("starts", []))
    if kind == "fresh":
        return f"{size}, fresh per test ({starts})"
    return f"{size}, {starts} start{'s' if starts != 1 else ''}"


# -- the words around it ----------------------------------------------------------------


def _summary(report: Dict[str, Any], span: float, before: float) -> str:
    counts: Dict[str, int] = {}
    for test in report.get("tests", []):
        counts[test["outcome"]] = counts.get(test["outcome"], 0) + 1
    items = [f"<span>{n} {_e(outcome)}</span>" for outcome, n in sorted(counts.items())]
    items.append(f"<span>{span:.1f} s in all, {before:.1f} s of them before the first test or world "
                 f"(collecting, importing)</span>")
    items.append(f"<span>{len(report.get('worlds', []))} worlds</span>")
    if report.get("shuffle_seed") is not None:
        items.append(f"<span>shuffle seed {report['shuffle_seed']}</span>")
    if report.get("workers"):
        items.append(f"<span>workers {_e(', '.join(report['workers']))}</span>")
    return f'<p class="summary">{"".join(items)}</p>'


def _legend() -> str:
    entries = [(COLOURS["passed"], "passed"), (COLOURS["failed"], "failed (failing ranks above; those that raised in brackets)"),
               (COLOURS["error"], "error, or a world that failed to start"),
               (COLOURS["skipped"], "skipped"), ("#2f6db5", "world start"), ("#e08a2b", "world restart"),
               ("#6a4fb3", "rerun / bisect world")]
    items = "".join(f'<span><span class="swatch" style="background:{c}"></span>{_e(w)}</span>' for c, w in entries)
    return f'<p class="legend">{items}<span>dashed bars: reruns and bisects</span></p>'


def _table(report: Dict[str, Any], start: float) -> str:
    rows = ["<table class=\"tests\"><tr><th>test</th><th>outcome</th><th>start</th><th>seconds</th><th>world</th>"
            "<th>failing ranks</th><th>raised on</th><th>diagnosis</th><th>leaks</th></tr>"]
    for test in report.get("tests", []):
        diagnosis = test.get("diagnosis") or {}
        words = diagnosis.get("verdict", "")
        if diagnosis.get("polluters"):
            words += " after " + ", ".join(diagnosis["polluters"])
        repeat = test.get("repeat") or {}
        if repeat.get("diagnosis"):  # --ct-repeat: what the test's failures follow, on each of its runs
            words = "; ".join(w for w in (words, f"repeats {repeat['passed']}/{repeat['runs']} passed: "
                                                 f"{repeat['diagnosis']}") if w)
        leaks = ", ".join(leak["item"] for leak in test.get("leaks", []))
        if leaks:
            leaks += " (restored)" if test.get("leaks_restored") else " (not restored)"
        world = test.get("world") or ""
        if test.get("world_restarts"):
            world += f" (restart {test['world_restarts']})"
        cells = [test["id"], test["outcome"], f"{test['start'] - start:.2f}", f"{test['seconds']:.2f}", world,
                 ",".join(map(str, test.get("failing_ranks", []))), ",".join(map(str, test.get("raising_ranks", []))),
                 words, leaks]
        classes = ["id", "outcome", "start", "seconds", "world", "ranks", "raising", "diagnosis", "leaks"]
        tds = "".join(f'<td class="{c}">{_e(str(v))}</td>' for c, v in zip(classes, cells))
        rows.append(f'<tr class="{_e(test["outcome"])}" data-test="{_e(test["id"])}">{tds}</tr>')
    rows.append("</table>")
    return "\n".join(rows)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m continuous_test.report_html run.json -o run.html``."""
    parser = argparse.ArgumentParser(prog="python -m continuous_test.report_html",
                                     description="Draw a continuous_test JSON run report as one HTML page.")
    parser.add_argument("report", help="the JSON report (--ct-report=FILE, CONTINUOUS_TEST_REPORT=FILE)")
    parser.add_argument("-o", "--output", default=None, help="the page to write (default: the report's name, .html)")
    args = parser.parse_args(argv)
    try:
        with open(args.report, encoding="utf-8") as stream:
            report = json.load(stream)
    except (OSError, ValueError) as exc:
        parser.exit(2, f"{parser.prog}: cannot read {args.report}: {exc}\n")
    if not isinstance(report, dict) or "version" not in report:
        parser.exit(2, f"{parser.prog}: {args.report} is not a continuous_test run report (no 'version' field)\n")
    output = args.output or os.path.splitext(args.report)[0] + ".html"
    write(report, output)
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
