"""The figure: suite time against N, and world start against world size, from one run.

Drawn with matplotlib (the optional ``bench`` extra: ``pip install .[bench]``);
without it :func:`draw` says so and draws nothing.  Every point is a median over
the repetitions, with its min-max range as an error bar.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

from benchlib import plan as plans
from benchlib.analyze import Stat

__all__ = ["draw", "NO_MATPLOTLIB"]

NO_MATPLOTLIB = "no figure: matplotlib is not installed (pip install .[bench])"
_SYSTEMS = (plans.OURS_CONT, plans.TORCH_CONT, plans.OURS_FRESH, plans.TORCH_FRESH)
_STYLE = {plans.OURS_CONT: ("C0", "o", "-"), plans.TORCH_CONT: ("C1", "s", "-"),
          plans.OURS_FRESH: ("C0", "o", "--"), plans.TORCH_FRESH: ("C1", "s", "--")}


def _stat(values: Dict[str, Dict[str, List[Any]]], key: str, metric: str) -> Optional[Stat]:
    return Stat.of(v for v in values.get(key, {}).get(metric, []) if isinstance(v, (int, float)))


def _series(values, keys: List[tuple], metric: str) -> tuple:
    """x, medians, and the error bars' (below, above) of the keys that have data."""
    xs, ys, lo, hi = [], [], [], []
    for x, key in keys:
        stat = _stat(values, key, metric)
        if stat is not None:
            xs.append(x)
            ys.append(stat.median)
            lo.append(stat.median - stat.lo)
            hi.append(stat.hi - stat.median)
    return xs, ys, [lo, hi]


def draw(values: Dict[str, Dict[str, List[Any]]], plan: plans.Plan, path: Path, title: str) -> Optional[str]:
    """Write the figure to ``path``; returns why not, or None once written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return NO_MATPLOTLIB
    panels = len(plan.suite_world_sizes) + 1
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.4))
    for ax, ws in zip(axes, plan.suite_world_sizes):
        for system in _SYSTEMS:
            keys = [(n, f"suite/{system}/n{n}/ws{ws}") for n in plan.suite_sizes]
            xs, ys, err = _series(values, keys, "wall_s")
            color, marker, line = _STYLE[system]
            if xs:
                ax.errorbar(xs, ys, yerr=err, color=color, marker=marker, linestyle=line, capsize=3,
                            label=plans.LABELS[system])
        ax.set(xscale="log", yscale="log", xlabel="N (tests in the file)", ylabel="whole suite, launch to exit (s)",
               title=f"Suite time, {ws} ranks")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    _draw_world_start(axes[-1], values, plan)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def _draw_world_start(ax, values, plan: plans.Plan) -> None:
    def n_for(ws: int) -> int:
        return plan.start_n if ws in plan.suite_world_sizes else plan.dispatch_n

    for system in (plans.OURS_CONT, plans.TORCH_CONT):
        color, marker, _ = _STYLE[system]
        keys = [(ws, f"suite/{system}/n{n_for(ws)}/ws{ws}") for ws in plan.start_world_sizes]
        for metric, line, what in (("first_test_s", "-", "first test"), ("launch_to_first_s", ":", "launch to first result")):
            xs, ys, err = _series(values, keys, metric)
            if xs:
                ax.errorbar(xs, ys, yerr=err, color=color, marker=marker, linestyle=line, capsize=3,
                            label=f"{plans.LABELS[system]}: {what}")
    floor = _stat(values, f"import/floor/module{plans.IMPORT_MODULES[plans.OURS_CONT]}", "imported_s")
    if floor is not None:
        ax.axhline(floor.lo, color="gray", linestyle="--", label="floor: python -c 'import torch; import <test>' (best)")
    ax.set(xscale="log", yscale="log", xlabel="world size (ranks)", ylabel="seconds", title="World start")
    ax.set_xticks(list(plan.start_world_sizes))
    ax.set_xticklabels([str(ws) for ws in plan.start_world_sizes])
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
