"""The collective timeline in real reports: divergent ranks in worlds, fresh ranks, pytest and torchrun."""
from __future__ import annotations

import re
import sys

import helpers
import pytest
from helpers import describe, unittest_counts
from test_faults import section

from continuous_test.verdict import timeline
from continuous_test.verdict.merge import Status, merge
from continuous_test.verdict.timeline import DIVERGENCE, HEADING, MISMATCH
from continuous_test.wire import records
from continuous_test.wire.outcome import ErrorRecord, Event, EventKind, FaultKind, RankFault, RankOutcome


def _outcome(rank: int, failed: bool) -> RankOutcome:
    if not failed:
        return RankOutcome(rank, [Event(EventKind.SUCCESS)])
    error = ErrorRecord("builtins", "AssertionError", "boom", "Traceback: boom", True)
    return RankOutcome(rank, [Event(EventKind.FAILURE, errors=(error,))])


def _timeline(divergent: bool, calls: list):
    def build():
        calls.append(1)
        return timeline.Timeline("rank 0: barrier #1 at t.py:1 (waiting)", divergent)
    return build


def test_merge_never_builds_a_timeline_for_a_pass():
    calls: list = []
    verdict = merge("T.test", 2, {0: _outcome(0, False), 1: _outcome(1, False)}, timeline=_timeline(True, calls))
    assert verdict.status is Status.PASS and not calls


@pytest.mark.parametrize("failed, divergent, shown", [
    ((0,), False, True),  # a failure on some ranks: always
    ((0, 1), False, False),  # the same failure everywhere, calls alike: not
    ((0, 1), True, True),  # everywhere, but the calls differ: yes
])
def test_merge_shows_the_timeline_where_it_helps(failed, divergent, shown):
    outcomes = {r: _outcome(r, r in failed) for r in (0, 1)}
    error = merge("T.test", 2, outcomes, timeline=_timeline(divergent, [])).error
    assert (HEADING in str(error)) is shown
    assert (getattr(error, "ct_timeline", None) is not None) is shown


def test_merge_shows_the_timeline_with_a_fault():
    faults = [RankFault(1, FaultKind.DIED, exitcode=-9)]
    error = merge("T.test", 2, {0: _outcome(0, True)}, faults, timeline=_timeline(False, [])).error
    assert f"{HEADING}\n    rank 0: barrier #1 at t.py:1 (waiting)" in str(error)
    assert error.ct_timeline == "rank 0: barrier #1 at t.py:1 (waiting)"




@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return helpers.python("test_timeline.py", "-v", env={"TMPDIR": str(tmp_path_factory.mktemp("tmp"))})


@pytest.mark.world
def test_every_test_ran(world):
    assert unittest_counts(world.stderr) == {"ran": 10, "failures": 4, "errors": 5}, describe(world)
    assert re.search(r"test_h_healthy .* \.\.\. ok$", world.stderr, re.M), describe(world)


@pytest.mark.world
def test_ranks_calling_different_collectives(world):
    report = section(world.stderr, "test_a_different_collectives")
    assert HEADING in report
    assert re.search(r"rank 0: all_reduce #2 \[float32\(8\)\] at test_timeline.py:\d+ \(waiting\)\n"
                     r"    rank 1: broadcast #2 \[float32\(8\)\] at test_timeline.py:\d+ \(waiting\)\n"
                     r"    first divergence at #2\n", report), report


@pytest.mark.world
def test_same_collective_different_shapes_is_called_out(world):
    report = section(world.stderr, "test_b_different_shapes")
    assert "rank 0: all_reduce #1 [float32(8)]" in report
    assert "rank 1: all_reduce #1 [float32(4)]" in report
    assert MISMATCH.format(seq=1, group="", op="all_reduce") in report, report


@pytest.mark.world
def test_rank_that_skips_a_barrier(world):
    report = section(world.stderr, "test_c_skipped_barrier")
    assert re.search(r"rank 0: barrier #2 at test_timeline.py:\d+ \(waiting\)", report), report
    assert re.search(r"rank 1: all_reduce #2 \[float32\(2,3\)\] at test_timeline.py:\d+ \(waiting\)", report), report
    assert DIVERGENCE.format(seq=2, group="") in report


@pytest.mark.world
def test_rank_dying_inside_a_collective(world):
    report = section(world.stderr, "test_d_dies_inside")
    assert "rank 1 died with signal SIGKILL" in report
    assert "rank 1: all_reduce #1 [float32(8)] at test_timeline.py:" in report
    assert "(waiting; the rank died)" in report, report


@pytest.mark.world
def test_failure_on_some_ranks_shows_the_timeline(world):
    report = section(world.stderr, "test_e_fails_on_one_rank")
    assert re.search(r"ranks 0, 1: all_reduce #1 \[float32\(8\)\] at test_timeline.py:\d+ \(returned\)", report), report


@pytest.mark.world
def test_point_to_point_calls_are_numbered_apart_from_collectives(world):
    report = section(world.stderr, "test_i_point_to_point_after_a_collective")
    assert re.search(r"rank 0: send\(peer 1\) #1 \[float32\(4\)\] at test_timeline.py:\d+ \(returned\)\n"
                     r"    rank 1: recv\(peer 0\) #1 \[float32\(4\)\] at test_timeline.py:\d+ \(returned\)\n", report), report
    assert "divergence" not in report and "point-to-point:" not in report, report


@pytest.mark.world
def test_a_rank_whose_only_communication_is_ddps_reducer_says_what_is_not_recorded(world):
    report = section(world.stderr, "test_j_only_ddps_reducer_communicates")
    assert ("ranks 0, 1: no calls through torch.distributed's functions in this test (DDP's reducer and other C++ "
            "callers are not recorded)") in report, report


@pytest.mark.world
def test_same_failure_everywhere_without_divergence_has_no_timeline(world):
    assert HEADING not in section(world.stderr, "test_f_fails_everywhere_alike")


@pytest.mark.world
def test_rank_holding_the_gil_still_has_its_records_read(world):
    report = section(world.stderr, "test_g_holds_the_gil")
    assert "(dumped by faulthandler)" in report  # its Python could not answer
    assert re.search(r"rank 1: all_reduce #1 \[float32\(8\)\] at test_timeline.py:\d+ \(returned\)", report), report
    assert re.search(r"rank 0: barrier #2 at test_timeline.py:\d+ \(waiting\)", report), report


@pytest.mark.world
def test_passing_tests_print_no_timeline(world):
    assert world.stderr.count(HEADING) == 8, describe(world)


@pytest.fixture(scope="module")
def in_pytest(tmp_path_factory):
    return helpers.pytest("test_timeline_pytest.py", "-rN", env={"TMPDIR": str(tmp_path_factory.mktemp("tmp"))})


def _pytest_section(output: str, test: str) -> str:
    match = re.search(rf"^_+ {re.escape(test)} _+$(.*?)(?=^_{{3,}} |^=+ |\Z)", output, re.M | re.S)
    assert match, f"no report for {test}\n{output}"
    return match.group(1)


@pytest.mark.world
def test_pytest_report_has_a_timeline_section(in_pytest):
    report = _pytest_section(in_pytest.stdout, "test_fn_diverges")
    assert re.search(r"-+ collective timeline -+\nrank 0: all_reduce #1 \[float32\(4\)\] at test_timeline_pytest.py:\d+ "
                     r"\(waiting\)\nrank 1: broadcast #1 \[float32\(4\)\] .*\nfirst divergence at #1\n", report), report


@pytest.mark.world
def test_fresh_ranks_rank_dying_inside_a_collective(in_pytest):
    report = _pytest_section(in_pytest.stdout, "FreshTest.test_dies_inside")
    assert "rank 1: all_reduce #2 [int64(3)] at test_timeline_pytest.py:" in report
    assert "(waiting; the rank died)" in report, report


@pytest.mark.world
@pytest.mark.parametrize("test", ["test_fn_marked_off", "OffByAttribute.test_diverges"])
def test_recording_turned_off_by_marker_or_class_attribute(in_pytest, test):
    report = _pytest_section(in_pytest.stdout, test)
    assert "exceeded its time limit" in report
    assert "collective timeline" not in report, report


@pytest.mark.world
def test_recording_turned_off_by_environment(tmp_path):
    proc = helpers.python("test_timeline.py", "DivergeTest.test_a_different_collectives",
                          env={"TMPDIR": str(tmp_path), "CONTINUOUS_TEST_RECORD": "0"})
    assert "exceeded its time limit" in proc.stderr, describe(proc)
    assert HEADING not in proc.stderr, describe(proc)


@pytest.mark.e2e
def test_torchrun_merged_verdict_calls_out_shapes_gloo_did_not_notice():
    proc = helpers.torchrun("test_timeline_launched.py", 2, "LaunchedDivergeTest.test_a_different_shapes")
    report = section(proc.stderr, "test_a_different_shapes")
    assert "rank 0: all_reduce #2 [float32(2,4)]" in report
    assert "rank 1: all_reduce #2 [float32(4,2)]" in report
    assert MISMATCH.format(seq=2, group="", op="all_reduce") in report, describe(proc)


@pytest.mark.e2e
def test_torchrun_time_limit_report_gathers_every_rank():
    proc = helpers.torchrun("test_timeline_launched.py", 2, "LaunchedDivergeTest.test_b_different_collectives")
    assert re.search(r"rank 0: all_reduce #1 \[float32\(8\)\] at test_timeline_launched.py:\d+ \(waiting\)\n"
                     r"rank 1: broadcast #1 \[float32\(8\)\] at test_timeline_launched.py:\d+ \(waiting\)\n"
                     r"first divergence at #1", proc.stderr), describe(proc)
    # Every rank hangs: rank 0 prints each rank's stacks, labelled, and unittest's summary.
    assert re.search(r"rank 0 stacks \(timed out\):\n.*in test_b_different_collectives\n\s+dist.all_reduce", proc.stderr,
                     re.S), describe(proc)
    assert re.search(r"rank 1 stacks \(timed out\):\n.*in test_b_different_collectives\n\s+dist.broadcast", proc.stderr,
                     re.S), describe(proc)
    assert re.search(r"\nRan 1 test in [\d.]+s\n\nFAILED \(LaunchedDivergeTest.test_b_different_collectives exceeded",
                     proc.stderr), describe(proc)
    assert proc.stderr.count("first divergence at #1") == 1, describe(proc)  # rank 0 prints the timeline, once


def test_timeline_groups_ranks_and_finds_the_first_divergence():
    def call(seq, op, status=records.STATUS_WAITING, shape=(8,)):
        return records.Call(seq, seq, op, 0, status, "float32", shape, -1, -1, "", "test_x.py", 40 + seq)

    done = records.STATUS_RETURNED
    same = (call(1, "barrier", done),)
    ranks = {r: records.RankCalls(r, 1, same + (call(2, "all_reduce"),)) for r in (0, 2, 3)}
    ranks[1] = records.RankCalls(1, 1, same + (call(2, "broadcast"),))
    assert timeline.build(ranks).text == (
        "ranks 0, 2, 3: all_reduce #2 [float32(8)] at test_x.py:42 (waiting)\n"
        "rank 1:        broadcast #2 [float32(8)] at test_x.py:42 (waiting)\n"
        "first divergence at #2")
    skipped = {0: records.RankCalls(0, 1, same + (call(2, "barrier"),)), 1: records.RankCalls(1, 1, same)}
    built = timeline.build(skipped)
    assert built.divergent and "  rank 1: no call #2" in built.text
    alike = {r: records.RankCalls(r, 1, same) for r in (0, 1)}
    assert not timeline.build(alike).divergent


def test_docs_page_shows_a_current_capture():
    sys.path.insert(0, str(helpers.ROOT / "docs"))
    try:
        import capture_timeline
    finally:
        sys.path.pop(0)
    output = capture_timeline.run_example()
    page = (helpers.ROOT / "docs" / "timeline.rst").read_text()
    assert capture_timeline._indent(capture_timeline.excerpt(output, "TrainStepTest.test_step")) in page, output
    assert MISMATCH.format(seq=1, group="", op="all_reduce") in capture_timeline.excerpt(output, "TrainStepTest.test_shapes")


def test_point_to_point_calls_that_do_not_pair_up_are_a_divergence():
    def call(seq, op, peer, status=records.STATUS_ASYNC):
        return records.Call(seq, seq, op, records.FLAG_P2P, status, "float32", (4,), -1, peer, "", "test_x.py", 40 + seq)

    ranks = {0: records.RankCalls(0, 1, (call(1, "isend", 1), call(2, "isend", 1))),
             1: records.RankCalls(1, 1, (call(1, "irecv", 0), call(2, "send", 0, records.STATUS_WAITING)))}
    built = timeline.build(ranks)
    assert built.divergent, built.text
    assert timeline.P2P_UNMATCHED.format(src=0, dst=1, sent=2, received=1) in built.text
    assert timeline.P2P_UNMATCHED.format(src=1, dst=0, sent=1, received=0) in built.text
    assert "isend(peer 1) #2 [float32(4)] at test_x.py:42 (returned a work handle; its wait is not recorded)" in built.text
    paired = {0: records.RankCalls(0, 1, (call(1, "isend", 1),)), 1: records.RankCalls(1, 1, (call(1, "irecv", 0),))}
    assert not timeline.build(paired).divergent



def test_settled_only_when_every_call_ended_and_the_point_to_point_calls_pair_up():
    def call(seq, op, peer=-1, status=records.STATUS_RETURNED):
        flags = records.FLAG_P2P if peer >= 0 else 0
        return records.Call(seq, seq, op, flags, status, "float32", (4,), -1, peer, "", "test_x.py", 40 + seq)

    def ranks(*per_rank):
        return {r: records.RankCalls(r, 1, tuple(calls)) for r, calls in enumerate(per_rank)}

    barrier = call(1, "barrier")
    paired = ranks([barrier, call(1, "send", 1)], [barrier, call(1, "recv", 0)])
    assert timeline.build(paired).settled, timeline.build(paired).text
    # Every call returned, but rank 0 sent once more than rank 1 received: not settled.
    unmatched = ranks([barrier, call(1, "send", 1), call(2, "send", 1)], [barrier, call(1, "recv", 0)])
    built = timeline.build(unmatched)
    assert not built.settled and timeline.P2P_UNMATCHED.format(src=0, dst=1, sent=2, received=1) in built.text
    assert not timeline.build(ranks([barrier, call(1, "isend", 1, records.STATUS_ASYNC)],
                                    [barrier, call(1, "recv", 0)])).settled  # a work handle not waited for
    assert not timeline.build(ranks([barrier], [call(1, "barrier", status=records.STATUS_WAITING)])).settled
    assert not timeline.build(paired, dead=[1]).settled
    assert not timeline.build({0: paired[0], 1: None}).settled  # a rank's calls unknown

if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
