"""Imported by the template, forked or a fresh interpreter: make the torch.distributed functions record, once.

Every rank forked from the template then starts with them instrumented: no rank
of any world (a fresh world per test included) compiles torch's bodies again,
tens of milliseconds of CPU per rank start.  They only call the originals until a
rank opens its records file (:func:`continuous_test.rank.recorder.open_ring`).
A fresh-interpreter template imports this module with its preloads; a template
forked from the controller calls :func:`instrument` before it serves (the
controller itself never records).
"""
from __future__ import annotations

from continuous_test.rank import recorder

__all__ = ["instrument"]


def instrument() -> None:
    """Instrument torch.distributed in this process (the template), unless recording is off; never raises.

    A template that cannot leaves it to each rank (``open_ring``), as before.
    """
    try:
        recorder.patch()
    except Exception:  # noqa: BLE001 - a template that cannot instrument still serves: its ranks do it
        pass


instrument()
