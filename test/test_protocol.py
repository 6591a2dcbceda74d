"""The messages between the controller and its ranks: compact on the hot path, complete when it matters."""
from __future__ import annotations

import pickle

import pytest

from continuous_test import config
from continuous_test.wire import messages
from continuous_test.wire.messages import RankSpec, RunTest, TestDone
from continuous_test.wire.outcome import ErrorRecord, Event, EventKind, RankOutcome


def roundtrip(message):
    return pickle.loads(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))


def test_a_plain_pass_travels_compact_and_expands_to_the_same_outcome():
    outcome = RankOutcome(1, [Event(EventKind.SUCCESS)])
    message = TestDone.of(1, 7, outcome)
    assert message.outcome is None
    assert roundtrip(message).full_outcome() == outcome


@pytest.mark.parametrize("outcome", [
    RankOutcome(0, [Event(EventKind.FAILURE, errors=(ErrorRecord("builtins", "AssertionError", "x", "tb", True),))]),
    RankOutcome(0, [Event(EventKind.SUCCESS)], group_changed=True),
    RankOutcome(0, [Event(EventKind.SKIP, reason="why")]),
])
def test_anything_but_a_plain_pass_travels_whole(outcome):
    message = roundtrip(TestDone.of(0, 1, outcome))
    assert message.outcome == outcome and message.full_outcome() == outcome


def test_a_rank_spec_carries_the_resolved_settings():
    settings = config.ClassSettings("T", 2, "cpu", "gloo", 3.0, 120.0, 10.0)
    spec = RankSpec(0, 2, "m", "T", None, "/d", "/d/r", "/d/l", settings=settings)
    assert roundtrip(spec).settings == settings


def test_send_and_recv_over_a_pipe():
    import multiprocessing

    a, b = multiprocessing.Pipe()
    messages.send(a, RunTest("test_x", 3, None, {"n": 1}))
    assert messages.recv(b) == RunTest("test_x", 3, None, {"n": 1})
    a.close()
    with pytest.raises(EOFError):
        messages.recv(b)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
