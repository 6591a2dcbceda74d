"""Failure reports as a person reads them: real scenario runs (test/scenarios/test_reports.py)."""
from __future__ import annotations

import os
import pickle
import re
import stat
import subprocess
import sys

import helpers
import pytest
from helpers import describe, pytest_counts, unittest_counts

from continuous_test.controller import progress
from continuous_test.errors import ConfigError, RemoteError
from continuous_test.verdict.merge import merge
from continuous_test.verdict.report import rank_list
from continuous_test.wire import kept
from continuous_test.wire.outcome import ErrorRecord, Event, EventKind, RankOutcome

FAILING = ["ReportTest.test_a_same_everywhere", "ReportTest.test_b_key_error",
           "ReportTest.test_c_called_process_error", "ReportTest.test_d_constant_str",
           "ReportTest.test_e_raising_str", "ReportTest.test_f_unpicklable",
           "ReportTest.test_g_differing_tracebacks", "FreshFailureTest"]


def section(output: str, test: str) -> str:
    """The report block of one failed test in unittest's output."""
    match = re.search(rf"^(?:ERROR|FAIL): {test} .*?(?=^={{70}}|^-{{70}}\nRan )", output, re.M | re.S)
    assert match, f"no report for {test}\n{output}"
    return match.group(0)


def exception_line(block: str) -> str:
    """The line unittest prints for the raised exception itself: after the last chained traceback."""
    tail = block.rsplit("The above exception was the direct cause of the following exception:\n\n", 1)[-1]
    return [line for line in tail.splitlines() if line and not line.startswith(("=", "-", "ERROR:", "FAIL:"))][0]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tmp")
    # real: what the controller imported, and TMPDIR as the template and its ranks read it.
    proc = helpers.python("test_reports.py", *FAILING, env={"TMPDIR": str(tmp), "REPORT_IMPORTS": "1"}, real=True)
    return proc, tmp


@pytest.mark.e2e
def test_every_failure_is_reported(reports):
    proc, _ = reports
    assert proc.returncode == 1, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 9, "failures": 3, "errors": 6}, describe(proc)


@pytest.mark.e2e
@pytest.mark.parametrize("test, first", [
    ("test_a_same_everywhere", "AssertionError: ReportTest.test_a_same_everywhere failed on ranks 0-2 of 3"),
    ("test_b_key_error", "KeyError: ReportTest.test_b_key_error failed on rank 1 of 3 (ranks 0, 2 passed)"),
    ("test_c_called_process_error",
     "subprocess.CalledProcessError: ReportTest.test_c_called_process_error failed on rank 2 of 3 (ranks 0, 1 passed)"),
    ("test_d_constant_str", "ConstantStr: ReportTest.test_d_constant_str failed on rank 0 of 3 (ranks 1, 2 passed)"),
    ("test_e_raising_str", "RaisingStr: ReportTest.test_e_raising_str failed on rank 1 of 3 (ranks 0, 2 passed)"),
    ("test_f_unpicklable",
     "continuous_test.errors.RemoteError: ReportTest.test_f_unpicklable failed on rank 0 of 3 (ranks 1, 2 passed)"),
    ("test_g_differing_tracebacks", "ValueError: ReportTest.test_g_differing_tracebacks failed on ranks 0-2 of 3"),
    ("test_failing_rank", "AssertionError: FreshFailureTest.test_failing_rank failed on rank 1 of 2 (rank 0 passed)"),
])
def test_first_line_names_the_test_and_ranks_whatever_the_exception(reports, test, first):
    block = section(reports[0].stderr, test)
    assert exception_line(block) == first, block
    assert "\\n" not in block, block  # a message is lines, never one quoted string


@pytest.mark.e2e
def test_ranks_that_failed_alike_are_printed_once(reports):
    block = section(reports[0].stderr, "test_a_same_everywhere")
    assert block.count("Traceback (most recent call last)") == 1, block
    assert "[ranks 0-2] Traceback" in block, block
    assert re.search(r"^ranks 0-2: AssertionError: 1 != 2 \(test_reports.py:\d+\)$", block, re.M), block


@pytest.mark.e2e
def test_differing_tracebacks_are_all_shown(reports):
    block = section(reports[0].stderr, "test_g_differing_tracebacks")
    assert "[rank 0] Traceback" in block and "[ranks 1, 2] Traceback" in block, block
    assert re.search(r"^rank 0: ValueError: rank 0 went this way \(test_reports.py:\d+\)$", block, re.M), block
    assert re.search(r"^ranks 1, 2: ValueError: the others went that way \(test_reports.py:\d+\)$", block, re.M), block


@pytest.mark.e2e
def test_an_exception_that_cannot_travel_is_named(reports):
    block = section(reports[0].stderr, "test_f_unpicklable")
    assert re.search(r"^rank 0: __main__.Unpicklable: cannot travel", block, re.M), block


@pytest.mark.e2e
def test_failure_paths_do_not_import_torch_testing_internals(reports):
    proc, tmp = reports
    assert "torch testing internals imported: False" in proc.stdout, describe(proc)
    assert "torch testing internals imported: True" not in proc.stdout, describe(proc)
    assert "Fail to import hypothesis" not in proc.stderr, describe(proc)
    section(proc.stderr, "test_system_exit")  # a rank raising SystemExit(3) was judged
    assert os.listdir(tmp) == []  # no torchinductor_root


@pytest.mark.e2e
def test_a_caller_catches_the_ranks_own_exception_type():
    proc = helpers.python("report_caller.py")
    assert proc.returncode == 0, describe(proc)
    assert "caught CalledProcessError returncode=3" in proc.stdout, describe(proc)
    assert "first line: test_runs_a_failing_command failed on rank 1 of 2 (rank 0 passed)" in proc.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("xdist", [False, True])
def test_pytest_short_summary_carries_the_first_line(xdist):
    # Under xdist the summary line had no message: the controller rebuilds it from the report's chain.
    proc = helpers.pytest("test_reports.py", "-rf", "-k", "test_a_same or test_b_key", *(["-n", "2"] if xdist else []),
                          env={"COLUMNS": "300"})
    if xdist:
        assert "2 failed" in proc.stdout, describe(proc)
        assert ("FAILED test_reports.py::ReportTest::test_b_key_error - KeyError: "
                "ReportTest.test_b_key_error failed on rank 1 of 3 (ranks 0, 2 passed)") in proc.stdout, describe(proc)
        return
    assert pytest_counts(proc.stdout) == {"failed": 2, "deselected": 8}, describe(proc)
    assert ("FAILED test_reports.py::ReportTest::test_a_same_everywhere - AssertionError: "
            "ReportTest.test_a_same_everywhere failed on ranks 0-2 of 3") in proc.stdout, describe(proc)
    assert ("FAILED test_reports.py::ReportTest::test_b_key_error - KeyError: "
            "ReportTest.test_b_key_error failed on rank 1 of 3 (ranks 0, 2 passed)") in proc.stdout, describe(proc)
    # The ranks' tracebacks are the report: no frame of the controller (unittest's run, the replay).
    assert "testPartExecutor" not in proc.stdout and "raise_verdict" not in proc.stdout, describe(proc)
    # Ranks that failed alike share one section.
    assert re.search(r"-+ ranks 0-2: failed -+\nTraceback", proc.stdout), describe(proc)


# -- live progress ------------------------------------------------------------------

HEARTBEAT_LINE = r"continuous_test: ReportTest.test_h_slow still running after \d+ s \(time limit \d+ s\); ranks 0-2 not done"


@pytest.mark.world
def test_heartbeat_in_verbose_mode_only():
    env = {progress.ENV_HEARTBEAT: "1", "SLOW_SECONDS": "2.5"}
    verbose = helpers.python("test_reports.py", "-v", "ReportTest.test_h_slow", env=env)
    assert verbose.returncode == 0, describe(verbose)
    assert unittest_counts(verbose.stderr) == {"ran": 1}, describe(verbose)
    assert re.search(HEARTBEAT_LINE, verbose.stderr), describe(verbose)
    assert re.search(r"test_h_slow \(.*\) \.\.\. \n", verbose.stderr), describe(verbose)  # it starts its own line
    quiet = helpers.python("test_reports.py", "ReportTest.test_h_slow", env=env)
    assert quiet.returncode == 0 and "still running" not in quiet.stderr, describe(quiet)
    assert unittest_counts(quiet.stderr) == {"ran": 1}, describe(quiet)


@pytest.mark.e2e
@pytest.mark.parametrize("runner", ["python", "pytest", "pytest -n 2"])
def test_rank_warnings_and_log_records_reach_the_report(runner):
    # Under pytest, ranks inherited its collection-time catch_warnings(record=True)
    # and its log-capturing handlers: both vanished.
    if runner == "python":
        proc = helpers.python("test_rank_warnings.py")
        output = proc.stderr
        for rank in (0, 1):
            assert re.search(rf"\[rank{rank}\] .*test_rank_warnings.py:\d+: UserWarning: a warning from the rank",
                             output), describe(proc)
            assert f"[rank{rank}] a log record from the rank" in output, describe(proc)
        return
    proc = helpers.pytest("test_rank_warnings.py", *(["-n", "2"] if "-n" in runner else []))
    # pytest's idiom: one section per group of ranks, printed once (not again in the E block).
    section = re.search(r"-+ ranks 0, 1: failed -+\n(.*?)(?=\n=+ )", proc.stdout, re.S)
    assert section, describe(proc)
    assert re.search(r"--- output of ranks 0, 1 ---\n.*test_rank_warnings.py:\d+: UserWarning: a warning from the "
                     r"rank\n.*\na log record from the rank", section.group(1)), describe(proc)
    assert proc.stdout.count("a warning from the rank\n") == 1, describe(proc)
    assert proc.stdout.count('self.fail("on purpose")') == 1, describe(proc)  # the rank's traceback, once


def test_no_heartbeat_in_the_last_second_before_the_time_limit():
    # With a heartbeat every 10 s and a 10 s limit, the beat and the timeout's report
    # came in the same second.
    import time

    lines = []
    due = progress.Progress("T.test_x", 10.0, {}, 10.0, False, lambda line, first: lines.append(line),
                            start=time.monotonic() - 10.0)
    due.tick([0, 1])
    assert lines == []
    early = progress.Progress("T.test_x", 20.0, {}, 10.0, False, lambda line, first: lines.append(line),
                              start=time.monotonic() - 10.0)
    early.tick([0, 1])
    assert len(lines) == 1 and "still running after 10 s (time limit 20 s); ranks 0, 1 not done" in lines[0], lines


@pytest.mark.e2e
def test_live_output_is_shown_while_the_test_runs(tmp_path):
    release = tmp_path / "release"
    env = helpers.scenario_env({progress.ENV_LIVE_OUTPUT: "1", "RELEASE_FILE": str(release), "SLOW_SECONDS": "60"})
    proc = subprocess.Popen([helpers.interpreter(), "test_reports.py", "ReportTest.test_h_slow"], cwd=helpers.SCENARIOS,
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    seen = []
    try:
        for line in proc.stderr:  # the rank waits for the release file, which comes once its line was seen
            seen.append(line)
            if line.startswith("[rank2] hello from rank 2"):
                release.touch()
                break
        seen.extend(proc.stderr)
        proc.wait(timeout=helpers.RUN_TIMEOUT)
    finally:
        proc.kill()
        proc.wait()
    output = "".join(seen)
    assert proc.returncode == 0, output
    assert unittest_counts(output) == {"ran": 1}, output
    assert output.count("[rank2] hello from rank 2") == 1, output  # not forwarded a second time


@pytest.mark.world
def test_pytest_verbose_heartbeat_and_live_output_reach_the_terminal():
    proc = helpers.pytest("test_reports.py", "-vv", "-k", "test_h_slow", "--ct-live-output",  # -q -vv: verbose
                          env={progress.ENV_HEARTBEAT: "1"})
    assert pytest_counts(proc.stdout) == {"passed": 1, "deselected": 9}, describe(proc)
    assert re.search(HEARTBEAT_LINE, proc.stdout), describe(proc)
    assert "[rank1] hello from rank 1" in proc.stdout, describe(proc)


def test_bad_heartbeat_is_named():
    with pytest.raises(ConfigError, match="CONTINUOUS_TEST_HEARTBEAT"):
        progress.heartbeat_seconds({progress.ENV_HEARTBEAT: "soon"})
    assert progress.heartbeat_seconds({progress.ENV_HEARTBEAT: "0"}) == 0.0
    assert progress.heartbeat_seconds({}) == progress.DEFAULT_HEARTBEAT


# -- units --------------------------------------------------------------------------


def failed_with(exc: BaseException) -> RankOutcome:
    try:
        raise exc
    except BaseException as raised:  # noqa: B902
        return RankOutcome(0, [Event(EventKind.ERROR, errors=(ErrorRecord.from_exception(raised),))])


@pytest.mark.e2e
def test_the_ranks_exception_is_reraised_with_its_attributes():
    error = merge("T.test", 1, {0: failed_with(subprocess.CalledProcessError(3, ["false"]))}).error
    with pytest.raises(subprocess.CalledProcessError) as caught:
        raise error
    assert caught.value.returncode == 3 and caught.value.cmd == ["false"]
    assert str(caught.value).startswith("T.test failed on rank 0 of 1\n")
    assert type(pickle.loads(pickle.dumps(caught.value))) is subprocess.CalledProcessError


def test_an_exception_that_does_not_unpickle_falls_back_to_a_record():
    class NeedsTwo(Exception):
        def __init__(self, a, b):
            super().__init__(a)  # args lose b: unpickling calls NeedsTwo(a) and fails

    record = ErrorRecord.from_exception(NeedsTwo(1, 2))
    assert record.pickled is None
    error = merge("T.test", 1, {0: failed_with(NeedsTwo(1, 2))}).error
    assert type(error) is RemoteError and "NeedsTwo: 1" in str(error)


def test_rank_list():
    assert rank_list([1]) == "rank 1"
    assert rank_list([0, 1]) == "ranks 0, 1"
    assert rank_list([3, 0, 1, 2, 5]) == "ranks 0-3, 5"


@pytest.mark.e2e
@pytest.mark.parametrize("keep", [False, True])
def test_a_big_output_is_bounded_in_the_report_and_kept_whole_on_disk(keep):
    from continuous_test.controller import output

    env = {"CONTINUOUS_TEST_BISECT": "off", **({"CONTINUOUS_TEST_KEEP_OUTPUT": "1"} if keep else {})}
    assert output.ENV_KEEP_OUTPUT == "CONTINUOUS_TEST_KEEP_OUTPUT"
    # real: the whole texts are removed when the controller exits.
    proc = helpers.python("test_big_output.py", env=env, real=True)
    assert unittest_counts(proc.stderr) == {"ran": 1, "failures": 1}, describe(proc)
    assert len(proc.stderr) < 100_000, len(proc.stderr)  # 5 000 lines and a 50 000-character one, per rank
    paths = {}
    for rank in (0, 1):
        assert f"[rank{rank}] line 99 of rank {rank}\n" in proc.stderr and f"line 100 of rank {rank}" not in proc.stderr
        assert f"[rank{rank}] line 4999 of rank {rank}\n" in proc.stderr
        found = re.search(rf"\.\.\. (\d+) line\(s\), \d+ character\(s\) left out; the whole output of rank {rank}: (\S+)",
                          proc.stderr)
        assert found and int(found.group(1)) == 5001 - 200, describe(proc)
        paths[rank] = found.group(2)
    assert "(48000 characters more)" in proc.stderr, describe(proc)  # a long line is cut too
    try:
        if keep:
            with open(paths[1]) as f:
                whole = f.read()
            assert whole.count("of rank 1\n") == 5000 and "x" * 50000 in whole
            assert oct(os.stat(paths[1]).st_mode & 0o777) == "0o600"
        else:  # kept until the run ended, not after
            assert not any(os.path.exists(path) for path in paths.values()), paths
    finally:
        import shutil

        shutil.rmtree(os.path.dirname(paths[0]), ignore_errors=True)


@pytest.mark.e2e
@pytest.mark.parametrize("runner", ["python", "pytest", "python-keep"])
def test_a_huge_exception_message_is_cut_to_its_head_and_tail_and_kept_whole_on_disk(runner):
    # A 20 MB message was printed twice (40 MB on unittest's stream); the whole of it is in a file the report names.
    from continuous_test.wire.outcome import MAX_MESSAGE, MAX_TRACEBACK

    env = {"CONTINUOUS_TEST_BISECT": "off", **({"CONTINUOUS_TEST_KEEP_OUTPUT": "1"} if runner.endswith("keep") else {})}
    # real: the whole texts are removed when the controller exits.
    proc = (helpers.pytest if runner == "pytest" else helpers.python)("test_big_message.py", env=env, real=True)
    output = proc.stdout + proc.stderr
    assert "start of the message" in output and "end of the message" in output, describe(proc)
    notes = re.findall(r"\.\.\. \(\d+ characters of this (?:message|traceback) left out; "
                       r"the whole traceback and message: (\S+)\) \.\.\.", output)
    assert notes, describe(proc)
    assert len(output) < 4 * (MAX_MESSAGE + MAX_TRACEBACK), len(output)
    # The headline's 500 characters (wire/outcome.py's MAX_HEADLINE), written out: a
    # limit ten times that would pass a bound computed from the constant.
    assert all(len(line) < 500 + 100 for line in output.splitlines() if line.startswith("rank ")), output
    try:
        if runner.endswith("keep"):
            with open(notes[0]) as f:
                whole = f.read()
            assert "y" * 20_000_000 + " end of the message" in whole and "Traceback" in whole
            assert oct(os.stat(notes[0]).st_mode & 0o777) == "0o600"
        else:  # kept until the run ended, not after
            assert not any(os.path.exists(path) for path in notes), notes
    finally:
        import shutil

        shutil.rmtree(os.path.dirname(notes[0]), ignore_errors=True)


def test_kept_texts_never_go_to_a_directory_open_to_others(tmp_path, monkeypatch):
    """wire/kept.py: whole texts go to a private directory of this user (0700), each a 0600 file; a directory of
    that name made by someone else, open to others, or not a directory at all is refused, and nothing is written."""
    monkeypatch.setattr(kept, "_dir", None)
    made = tmp_path / "made"
    kept.use(str(made))
    saved = kept.save("whole text", "Test.test_a/b")
    assert os.path.dirname(saved) == str(made) and open(saved).read() == "whole text"
    assert stat.S_IMODE(os.stat(made).st_mode) == 0o700 and stat.S_IMODE(os.stat(saved).st_mode) == 0o600
    # Made by another process of this run, private: used as it is.
    private = tmp_path / "private"
    private.mkdir()
    os.chmod(private, 0o700)
    kept.use(str(private))
    assert kept.directory() == str(private)

    def refused(path, why, mode=None):
        try:
            written = kept.save("a secret", "x")
        except PermissionError as exc:
            assert str(exc) == f"{path} is not a private directory of this user", exc
        else:
            pytest.fail(f"a text was kept in {written}, a directory {why}")
        if mode is not None:  # left as it was, and empty
            assert stat.S_IMODE(os.stat(path).st_mode) == mode and os.listdir(path) == [], path

    for mode in (0o750, 0o705, 0o701, 0o770, 0o777):  # a bit for the group or for others: open to them
        os.chmod(private, mode)
        refused(private, f"of mode {mode:o}", mode)
    os.chmod(private, 0o700)
    with monkeypatch.context() as other:  # another user's, even private: this user is someone else
        uid = os.getuid()
        other.setattr(kept.os, "getuid", lambda: uid + 1)
        refused(private, "of another user", 0o700)
    assert kept.save("fine again", "y") == str(private / "y")
    link = tmp_path / "link"  # a link to a private directory of ours: whoever made it chose where texts go
    link.symlink_to(made)
    kept.use(str(link))
    refused(link, "reached through a symbolic link")
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    kept.use(str(not_a_directory))
    refused(not_a_directory, "that is a file")
    assert sorted(os.listdir(made)) == ["Test.test_a_b"]


@pytest.mark.e2e
def test_junit_bodies_are_bounded_too(tmp_path):
    # 5 MB of rank output once made a 5.6 MB junit body; a 20 MB message made a larger one.
    junit = tmp_path / "junit.xml"
    proc = helpers.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_big_output.py",
                        "test_big_message.py", f"--junitxml={junit}", "-o", "junit_logging=all"],
                       env={"CONTINUOUS_TEST_BISECT": "off"})
    assert helpers.pytest_counts(proc.stdout) == {"failed": 2}, describe(proc)
    body = junit.read_text()
    assert "start of the message" in body and "after a lot of output" in body, body[:2000]
    assert len(body) < 10_000, len(body)  # 3 213 bytes when written


@pytest.mark.world
@pytest.mark.parametrize("runner", ["python", "pytest"])
def test_the_runners_locals_option_reaches_rank_tracebacks(runner):
    # unittest's --locals and pytest's -l set CONTINUOUS_TEST_TB_LOCALS for the ranks.
    env = {"CONTINUOUS_TEST_BISECT": "off"}
    run = helpers.python if runner == "python" else helpers.pytest
    shown = run("test_locals.py", "--locals" if runner == "python" else "-l", env=env)
    assert "a_local_to_show = 12345" in shown.stdout + shown.stderr, describe(shown)
    plain = run("test_locals.py", env=env)
    assert "a_local_to_show = " not in plain.stdout + plain.stderr, describe(plain)


@pytest.mark.e2e
def test_docs_reports_page_shows_a_current_capture_of_each_kind_within_60_lines():
    # unittest, pytest, xdist, torchrun with one rank failing, torchrun with every rank hung.
    proc = helpers.run([sys.executable, str(helpers.ROOT / "docs" / "capture_reports.py"), "--check"], timeout=600)
    assert proc.returncode == 0, describe(proc)


@pytest.mark.world
def test_long_non_ascii_names_are_cut_by_bytes_and_their_texts_kept():
    # test_long_names.py: a CJK test name of 324 bytes whose big output is kept, an accented exception
    # class of 315 bytes whose big message is kept, a CJK class of 360 bytes that names its world's
    # directory.  Each file name fits 255 bytes; no rank dies and every verdict is the rank's own.
    proc = helpers.python("test_long_names.py", env={**helpers.QUIET, "CONTINUOUS_TEST_KEEP_OUTPUT": "1"})
    kept = re.findall(r"the whole output of rank 1: (\S+)", proc.stderr)
    kept += re.findall(r"the whole traceback and message: (\S+)\) \.\.\.", proc.stderr)
    try:
        assert unittest_counts(proc.stderr) == {"ran": 3, "failures": 1, "errors": 1}, describe(proc)
        assert "rank 1 fails after a big output" in proc.stderr and "died" not in proc.stderr, describe(proc)
        assert "failed on ranks 0, 1 of 2" in proc.stderr and "fin du message" in proc.stderr, describe(proc)
        assert "File name too long" not in proc.stderr and len(set(kept)) == 3, describe(proc)
        for path in set(kept):
            assert len(os.path.basename(path).encode()) <= 255 and os.path.getsize(path) > 5_000, path
        assert any("分布式测试" in path and path.endswith(".rank1.log") for path in kept), kept
        assert sum("Échecé" in path and path.endswith(".txt") for path in set(kept)) == 2, kept
    finally:
        import shutil

        for folder in {os.path.dirname(path) for path in kept}:
            shutil.rmtree(folder, ignore_errors=True)


def test_python_3_10s_note_joins_what_str_shows():
    # Python 3.10 has no BaseException.add_note: report.join_note (add_note's fallback there) appends the
    # note to what str() shows, the merged report's text for a rank's own exception, else its message.
    from continuous_test.verdict import report

    headed = report._with_report(AssertionError("lr 0.1 fails on rank 1"), "test_lr[0.1] failed on rank 1 of 2")
    report.join_note(headed, "      test_lr[0.1] fails alone as well")
    assert str(headed) == "test_lr[0.1] failed on rank 1 of 2\n      test_lr[0.1] fails alone as well"
    assert isinstance(headed, AssertionError)
    assert headed.ct_joined_notes == ["      test_lr[0.1] fails alone as well"]  # pytest's short report keeps them
    plain = ValueError("Default process group has not been initialized")
    report.join_note(plain, "continuous_test: the fixture ran in the controller")
    assert str(plain) == "Default process group has not been initialized\ncontinuous_test: the fixture ran in the controller"


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
