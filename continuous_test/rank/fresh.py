"""The rank side of a :class:`~continuous_test.multiprocess.MultiProcessTestCase` test.

A fresh rank enters through the class's ``_run`` (torch's per-rank entry, which a
suite may override), which runs exactly one test method through ``run_test`` (not
``setUp``/``tearDown``, which run in the controller, as in torch's class).  Then
it destroys a default group the test left (unless ``destroy_pg_upon_exit`` is
False), saves its coverage, reports its outcome with the code it exits with, and
exits: the code the test asked for (``sys.exit(code)``), else
``TEST_ERROR_EXIT_CODE`` when the test failed (or could not be loaded), else 0.
Never imports the controller.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Optional

from continuous_test.rank.result import RankResult, take_expect_values
from continuous_test.wire.messages import RankSpec, TestDone
from continuous_test.wire.outcome import (
    TEST_ERROR_EXIT_CODE,
    ErrorRecord,
    Event,
    EventKind,
    RankOutcome,
    torch_skip_code_message,
)

__all__ = ["run_single", "run_case", "ENV_TORCH_INIT_BARRIER"]

ENV_TORCH_INIT_BARRIER = "TORCH_DIST_INIT_BARRIER"


def run_single(spec: RankSpec, send: Callable[[object], None]) -> int:
    """Run ``spec.method`` on this rank, send its outcome, and return the exit code.

    The outcome carries that code, and nothing but ``os._exit`` follows it (output
    flushed, coverage saved): the controller takes it as the rank's ending and
    reaps the process later, off the test's path, so no test waits for the
    kernel to tear a rank down.
    """
    from continuous_test.rank import run as rank_run

    try:
        cls = rank_run.import_test_class(spec.module, spec.qualname, spec.module_file, spec.method)
        rank_run.set_world_size(cls, spec.world_size)
    except BaseException as exc:  # noqa: B902 - reported as this rank's error
        event = Event(EventKind.ERROR, errors=(ErrorRecord.from_exception(exc),))
        return _report(spec, send, RankOutcome(spec.rank, [event]), TEST_ERROR_EXIT_CODE)
    # torch's own switch: init_process_group returns once every rank created its group,
    # so a rank that ends its test first cannot close its connections while a peer
    # still makes them (gloo: "connectFullMesh failed ... Connection closed by peer").
    os.environ.setdefault(ENV_TORCH_INIT_BARRIER, "1")
    rank_run.seed_everything(rank_run.SEED)
    global _current
    state = _current = _Single(RankResult(exits_allowed=True))
    exit_code: Optional[int] = None
    try:
        getattr(cls, "_run")(spec.rank, spec.method, spec.rendezvous_file, None)
    except SystemExit as exc:  # a suite's _run ends with sys.exit(0), or skips before the test
        exit_code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:  # noqa: B902 - an error of the suite's _run, around the test
        state.result.events.append(Event(EventKind.ERROR, errors=(ErrorRecord.from_exception(exc),)))
    result = state.result
    if state.case is None and not result.events and exit_code:
        skip = torch_skip_code_message(exit_code)  # torch's skip codes, before the test ran
        if skip is not None:
            result.events.append(Event(EventKind.SKIP, reason=skip))
    if state.case is not None:
        _maybe_destroy(state.case)
    outcome = RankOutcome(spec.rank, result.events, requested_exit=result.requested_exit,
                          expect_values=take_expect_values())
    if result.requested_exit is not None:
        code = result.requested_exit
    elif outcome.has_failure():
        # As torch's class: a rank whose test failed exits with TEST_ERROR_EXIT_CODE.
        code = TEST_ERROR_EXIT_CODE
    elif exit_code and not state.ended and not result.events:
        code = exit_code  # the suite's _run ended the rank before its test, with a code of its own
    else:
        code = 0
    return _report(spec, send, outcome, code)


class _Single:
    """The one test of this fresh rank: its result, and the case ``run_test`` ran (None before it ran)."""

    def __init__(self, result: RankResult) -> None:
        self.result = result
        self.case: Any = None
        self.ended = False  # run_test ended the rank (the test failed or skipped)


_current: Optional[_Single] = None


def run_case(case: Any) -> None:
    """Run ``case``'s test for real, recording into this rank's result (``run_test``'s body).

    Raises ``SystemExit`` when the test failed or skipped, as torch's ``run_test``
    ends its rank then.
    """
    from continuous_test.rank import recorder
    from continuous_test.rank import run as rank_run

    state = _current
    if state is None or state.case is not None:
        raise RuntimeError("run_test() runs once, in a fresh rank, from the class's _run")
    state.case = case
    recorder.begin_test(case)
    rank_run.run_real(case, state.result)
    kinds = {event.kind for event in state.result.events}
    if state.result.requested_exit is not None:  # the test's own sys.exit(code) ends the rank
        state.ended = True
        raise SystemExit(state.result.requested_exit)
    if kinds & {EventKind.FAILURE, EventKind.ERROR}:
        state.ended = True
        raise SystemExit(TEST_ERROR_EXIT_CODE)
    if EventKind.SKIP in kinds:
        state.ended = True
        raise SystemExit(0)


def _report(spec: RankSpec, send: Callable[[object], None], outcome: RankOutcome, code: int) -> int:
    from continuous_test.rank import run as rank_run

    rank_run.before_exit()  # the test's atexit handlers and finalizers: its process ends here
    send(TestDone(spec.rank, 0, outcome, exit_code=code))
    return code


def _maybe_destroy(case) -> None:
    import torch.distributed as dist

    if getattr(case, "destroy_pg_upon_exit", True) and dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # a group the test broke on purpose; the process ends anyway
            pass
