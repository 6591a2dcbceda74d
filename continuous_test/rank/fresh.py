"""The rank side of a :class:`~continuous_test.multiprocess.MultiProcessTestCase` test.

A fresh rank runs exactly one test method (not ``setUp``/``tearDown``, which run in
the controller, as in torch's class), destroys a default group the test left (unless
``destroy_pg_upon_exit`` is False), saves its coverage, reports its outcome with the
code it exits with, and exits: the code the test asked for (``sys.exit(code)``), else
``TEST_ERROR_EXIT_CODE`` when the test failed (or could not be loaded), else 0.
Never imports the controller.
"""
from __future__ import annotations

import os
from typing import Callable

from continuous_test.rank.result import RankResult, take_expect_values
from continuous_test.wire.messages import RankSpec, TestDone
from continuous_test.wire.outcome import TEST_ERROR_EXIT_CODE, ErrorRecord, Event, EventKind, RankOutcome

__all__ = ["run_single", "ENV_TORCH_INIT_BARRIER"]

ENV_TORCH_INIT_BARRIER = "TORCH_DIST_INIT_BARRIER"


def run_single(spec: RankSpec, send: Callable[[object], None]) -> int:
    """Run ``spec.method`` on this rank, send its outcome, and return the exit code.

    The outcome carries that code, and nothing but ``os._exit`` follows it (output
    flushed, coverage saved): the controller takes it as the rank's ending and
    reaps the process later, off the test's path, so no test waits for the
    kernel to tear a rank down.
    """
    from continuous_test.rank import recorder
    from continuous_test.rank import run as rank_run

    try:
        cls = rank_run.import_test_class(spec.module, spec.qualname, spec.module_file)
        rank_run.set_world_size(cls, spec.world_size)
        case = cls(spec.method)
    except BaseException as exc:  # noqa: B902 - reported as this rank's error
        event = Event(EventKind.ERROR, errors=(ErrorRecord.from_exception(exc),))
        return _report(spec, send, RankOutcome(spec.rank, [event]), TEST_ERROR_EXIT_CODE)
    case.rank = spec.rank
    case.file_name = spec.rendezvous_file
    # torch's own switch: init_process_group returns once every rank created its group,
    # so a rank that ends its test first cannot close its connections while a peer
    # still makes them (gloo: "connectFullMesh failed ... Connection closed by peer").
    os.environ.setdefault(ENV_TORCH_INIT_BARRIER, "1")
    rank_run.seed_everything(rank_run.SEED)
    recorder.begin_test(case)
    result = RankResult(exits_allowed=True)
    rank_run.run_real(case, result)
    _maybe_destroy(case)
    outcome = RankOutcome(spec.rank, result.events, requested_exit=result.requested_exit,
                          expect_values=take_expect_values())
    if result.requested_exit is not None:
        code = result.requested_exit
    else:
        # As torch's class: a rank whose test failed exits with TEST_ERROR_EXIT_CODE.
        code = TEST_ERROR_EXIT_CODE if outcome.has_failure() else 0
    return _report(spec, send, outcome, code)


def _report(spec: RankSpec, send: Callable[[object], None], outcome: RankOutcome, code: int) -> int:
    from continuous_test.rank import coverage as rank_coverage
    from continuous_test.rank import run as rank_run

    rank_run.run_cleanup()  # the test's atexit handlers and finalizers: its process ends here
    rank_run.flush_output()
    rank_coverage.save_in_rank()
    send(TestDone(spec.rank, 0, outcome, exit_code=code))
    return code


def _maybe_destroy(case) -> None:
    import torch.distributed as dist

    if getattr(case, "destroy_pg_upon_exit", True) and dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # a group the test broke on purpose; the process ends anyway
            pass
