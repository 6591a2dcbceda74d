"""Imported only by the forkserver template: make the torch.distributed functions record, once.

Every rank forked from the template then starts with them instrumented (about
a millisecond saved per rank start).  They only call the originals until a rank
opens its records file (:func:`continuous_test.rank.recorder.open_ring`).
"""
from __future__ import annotations

from continuous_test.rank import recorder

recorder.patch()
