"""Imported only by the forkserver template: wrap the torch.distributed functions once.

Every rank forked from the template then starts with the recording wrappers in
place (about a millisecond saved per rank start), and a test file the template
imports (:mod:`continuous_test.template.preload_main`) binds names it imports from
``torch.distributed`` to the wrappers.  They only call the originals until a rank
opens its records file (:func:`continuous_test.rank.recorder.open_ring`).
"""
from __future__ import annotations

from continuous_test.rank import recorder

recorder.patch()
