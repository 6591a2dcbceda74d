"""torchrun across two (local) nodes, and srun simulated by its environment variables."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time

import helpers
import pytest
from helpers import describe, unittest_counts, verbose_name

from continuous_test._launch import LAUNCH_HINTS, Mode
from continuous_test.launched.join import OTHER_RUN, PORT_IN_USE, UNRESOLVABLE, WORLD_BROKEN
from continuous_test.launched.run import world_size_mismatch

FAULTS = "test_launched_faults.py"
BREAKING_TEST = "BreaksTheWorld.test_b_rank_1_raises_while_rank_0_waits"
HEALTHY_TEST = "BreaksTheWorld.test_a_healthy"


def start(args, env=None) -> subprocess.Popen:
    return subprocess.Popen(args, cwd=helpers.SCENARIOS, env=helpers.scenario_env(env), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(procs) -> list:
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=helpers.RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


@pytest.mark.e2e
def test_torchrun_two_nodes_rank_0_reports_every_node():
    port = helpers.free_port()
    node = [helpers.interpreter(), "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "two-nodes",
            "test_multinode.py", "-v"]
    nodes = finish([start(node), start(node)])
    both = "".join(p.stderr for p in nodes)
    for proc in nodes:
        assert proc.returncode != 0, describe(proc)  # rank 3 fails on purpose, so every rank fails
    assert both.count("Ran 3 tests") == 1, both  # only global rank 0 prints the report
    assert unittest_counts(both) == {"ran": 3, "failures": 1}, both
    assert "FourRankTest.test_fails_on_rank_3 failed on rank 3 of 4 (ranks 0-2 passed)" in both
    assert f"{verbose_name('test_device_from_local_rank', 'FourRankTest')} ... ok" in both


def slurm_env(rank: int, ntasks: int, port: int) -> dict:
    return {"SLURM_STEP_ID": "0", "SLURM_JOB_ID": "4242", "SLURM_PROCID": str(rank), "SLURM_NTASKS": str(ntasks),
            "SLURM_LOCALID": str(rank % 2), "SLURM_NTASKS_PER_NODE": "2", "SLURM_STEP_NODELIST": "127.0.0.1",
            "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo"}


@pytest.mark.e2e
def test_srun_simulated_with_four_tasks():
    port = helpers.free_port()
    tasks = finish([start([helpers.interpreter(), "test_multinode.py", "-v"], slurm_env(r, 4, port)) for r in range(4)])
    assert unittest_counts(tasks[0].stderr) == {"ran": 3, "failures": 1}, describe(tasks[0])
    assert "failed on rank 3 of 4" in tasks[0].stderr
    assert all(t.returncode == 1 for t in tasks), [t.returncode for t in tasks]
    assert all("Ran 3 tests" not in t.stderr for t in tasks[1:])


@pytest.mark.e2e
def test_rendezvous_names_the_ranks_that_never_arrived():
    port = helpers.free_port()
    env = {"CONTINUOUS_TEST_START_TIMEOUT": "3"}
    tasks = finish([start([helpers.interpreter(), "test_multinode.py"], {**slurm_env(r, 4, port), **env}) for r in (0, 1)])
    assert all(t.returncode == 1 for t in tasks), [describe(t) for t in tasks]
    assert f"rank(s) 2, 3 of 4 never arrived at the rendezvous at 127.0.0.1:{port} within 3 s" in tasks[0].stderr
    assert unittest_counts(tasks[0].stderr) == {"ran": 3, "errors": 3}, describe(tasks[0])


@pytest.mark.e2e
def test_missing_store_host_is_named_on_other_ranks():
    proc = helpers.python("test_multinode.py", env={**slurm_env(1, 4, helpers.free_port()),
                                                    "CONTINUOUS_TEST_START_TIMEOUT": "2"})
    assert proc.returncode == 1, describe(proc)
    assert "continuous_test: rank 1: cannot reach the rendezvous store of rank 0 at 127.0.0.1:" in proc.stderr


@pytest.mark.e2e
def test_torchrun_a_test_that_breaks_the_world_leaves_later_tests_healthy(tmp_path):
    count = tmp_path / "runs"
    proc = helpers.torchrun(FAULTS, 2, "-v", "BreaksTheWorld", "FreshOnce",
                            env={"SCENARIO_PG_TIMEOUT": "3", "SCENARIO_COUNT_FILE": str(count)})
    out = proc.stderr
    assert proc.returncode != 0, describe(proc)
    assert unittest_counts(out) == {"ran": 6, "errors": 1, "failures": 1}, describe(proc)
    for healthy in ("test_c_healthy", "test_d_healthy"):
        assert f"{verbose_name(healthy, 'BreaksTheWorld')} ... ok" in out, describe(proc)
    assert f"{BREAKING_TEST} failed on rank 1 of 2 (rank 0 failed waiting for it in a collective)" in out, describe(proc)
    assert "rank 1: RuntimeError: rank 1 breaks on purpose" in out
    # MultiProcessTestCase: once per launch (2 fresh ranks), not once per launcher rank (4).
    assert sorted(count.read_text().split()) == ["0", "1"], describe(proc)  # the two ranks append in either order
    assert f"{verbose_name('test_counts_its_runs', 'FreshOnce')} ... ok" in out
    assert "AssertionError: 1 == 1 : fresh rank 1 fails on purpose" in out
    assert "exitcode  : 1 " in out  # rank 1 replays the failure: the launch fails on every rank


@pytest.mark.e2e
def test_torchrun_a_rank_that_times_out_prints_its_peers_errors():
    proc = helpers.torchrun(FAULTS, 2, BREAKING_TEST, env={"CONTINUOUS_TEST_TIMEOUT": "2"})
    out = proc.stderr
    assert proc.returncode != 0, describe(proc)
    assert f"{BREAKING_TEST} exceeded its time limit of 2 s on rank 0" in out, describe(proc)
    assert f"rank 1 had already failed {BREAKING_TEST} (rank 0 timed out)" in out, describe(proc)
    assert 'raise RuntimeError("rank 1 breaks on purpose")' in out
    assert "exitcode  : 75" in out


@pytest.mark.e2e
def test_torchrun_a_stuck_rank_is_reported_and_the_rest_skipped():
    proc = helpers.torchrun(FAULTS, 2, "-v", "StuckRank")
    out = proc.stderr
    assert unittest_counts(out) == {"ran": 2, "errors": 1, "skipped": 1}, describe(proc)
    assert "StuckRank.test_a_rank_1_is_stuck exceeded its time limit of 2 s on rank 1" in out
    assert "time.sleep(60)" in out  # rank 1's stack, in rank 0's report
    # Rank 1 exits in the test: what it printed in it comes to the terminal with its stacks.
    assert "rank 1 output:\n[rank1] rank 1 starts the test" in out, describe(proc)
    why = WORLD_BROKEN.format(test="StuckRank.test_a_rank_1_is_stuck", why="rank 1 timed out")
    assert f"{verbose_name('test_b_healthy', 'StuckRank')} ... skipped {why!r}" in out, describe(proc)


@pytest.mark.e2e
def test_torchrun_a_hang_in_a_shuffled_order_is_reported_and_the_rest_skipped():
    # Held up as working in issue 26: every launched rank shuffles alike (one seed), so a
    # hang is still one rank's time limit, and what comes after it is skipped, not hung.
    proc = helpers.torchrun(FAULTS, 2, "-v", "StuckRank", env={"CONTINUOUS_TEST_SHUFFLE": "1"})
    out = proc.stderr
    assert "test order shuffled with seed 1: CONTINUOUS_TEST_SHUFFLE=1 replays it" in out, describe(proc)
    order = re.findall(r"^(test_\w+) \(__main__\.StuckRank[.)]", out, re.M)  # 3.10 names no method there
    assert sorted(order) == ["test_a_rank_1_is_stuck", "test_b_healthy"], describe(proc)
    stuck_first = order[0] == "test_a_rank_1_is_stuck"
    expected = {"ran": 2, "errors": 1, **({"skipped": 1} if stuck_first else {})}
    assert unittest_counts(out) == expected, describe(proc)
    assert "StuckRank.test_a_rank_1_is_stuck exceeded its time limit of 2 s on rank 1" in out, describe(proc)
    assert ("skipped" if stuck_first else "ok") in out.split(f"{verbose_name('test_b_healthy', 'StuckRank')} ...")[1]


@pytest.mark.e2e
def test_srun_world_size_mismatch_names_srun_options():
    port = helpers.free_port()
    tasks = finish([start([helpers.interpreter(), "test_multinode.py", "-v"], slurm_env(r, 2, port)) for r in range(2)])
    message = world_size_mismatch("FourRankTest", 4, 2, LAUNCH_HINTS[Mode.SLURM])
    assert message in tasks[0].stderr, describe(tasks[0])
    assert "nproc" not in tasks[0].stderr


@pytest.mark.e2e
def test_srun_port_in_use_is_reported_as_such():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = helpers.python(FAULTS, HEALTHY_TEST, env={**slurm_env(0, 2, port), "CONTINUOUS_TEST_START_TIMEOUT": "2"})
    assert PORT_IN_USE.format(where=f"127.0.0.1:{port}") in proc.stderr, describe(proc)
    assert "cannot reach" not in proc.stderr


@pytest.mark.e2e
def test_a_rank_never_joins_another_runs_world():
    port = helpers.free_port()
    env = {"CONTINUOUS_TEST_START_TIMEOUT": "3"}
    other_job = {**slurm_env(1, 2, port), "SLURM_JOB_ID": "4343", **env}
    host, stray = finish([start([helpers.interpreter(), FAULTS, HEALTHY_TEST], {**slurm_env(0, 2, port), **env}),
                          start([helpers.interpreter(), FAULTS, HEALTHY_TEST], other_job)])
    where = f"127.0.0.1:{port}"
    assert OTHER_RUN.format(where=where, owner="slurm-4242.0", run="slurm-4343.0") in stray.stderr, describe(stray)
    assert stray.returncode == 1 and host.returncode == 1


@pytest.mark.e2e
def test_a_leak_under_a_launcher_is_reported_once_as_it_is_there():
    from continuous_test.verdict import leaks as verdict_leaks

    proc = helpers.torchrun("test_launched_leak.py", 2)
    both = proc.stdout + proc.stderr
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 2}, describe(proc)
    assert both.count("LeakWarning: LaunchedLeakTest.test_a_leaves_a_thread left process-global state changed") == 1, \
        describe(proc)
    assert verdict_leaks.NOT_RESTORED_LAUNCHED.format(items="threads the test started") in both, describe(proc)
    assert "the world is restarted" not in both, describe(proc)


@pytest.mark.e2e
def test_torchrun_a_skip_on_one_rank_is_an_inconsistent_skip_within_the_grace_period():
    # The skipping rank still takes part in the exchange; a peer stuck in a collective
    # for it gives up after the grace period, not at the time limit.
    start = time.monotonic()
    proc = helpers.torchrun(FAULTS, 2, "-v", "SkipsOnOneRank", env={"CONTINUOUS_TEST_TIMEOUT": "120"})
    elapsed = time.monotonic() - start
    both = proc.stdout + proc.stderr
    assert unittest_counts(proc.stderr) == {"ran": 4, "failures": 2, "skipped": 1}, describe(proc)
    assert f"{verbose_name('test_b_healthy', 'SkipsOnOneRank')} ... ok" in proc.stderr, describe(proc)
    for test in ("test_a_no_collective", "test_c_waits_for_the_skipper"):
        assert (f"InconsistentSkipError: SkipsOnOneRank.{test} was skipped on rank 0 but ran on rank 1"
                in proc.stderr), describe(proc)
    assert "never reported" not in both, describe(proc)
    assert elapsed < 60, f"{elapsed:.0f} s: the peer waited for its time limit, not the 2 s grace period"


@pytest.mark.e2e
@pytest.mark.parametrize("source", ["nodelist", "MASTER_ADDR"])
def test_srun_a_master_address_that_does_not_resolve_fails_at_once_naming_where_it_came_from(source):
    # Seen on a cluster whose node names resolve only through Slurm's NodeAddr: TCPStore
    # retried for minutes.  ".invalid" never resolves (RFC 2606); nor does the made-up node name.
    env = {**slurm_env(0, 2, helpers.free_port()), "CONTINUOUS_TEST_START_TIMEOUT": "120"}
    if source == "nodelist":
        env["SLURM_STEP_NODELIST"] = "ct-no-such-node[01-02]"
        where = "the first host of the Slurm node list 'ct-no-such-node[01-02]'"
        host = "ct-no-such-node01"
    else:
        env["MASTER_ADDR"] = host = "rendezvous.invalid"
        where = "MASTER_ADDR"
    start = time.monotonic()
    proc = helpers.python(FAULTS, HEALTHY_TEST, env=env)
    assert time.monotonic() - start < 60, "it waited for the start timeout"
    expected = UNRESOLVABLE.split("{error}")[0].format(addr=host, source=where)
    assert expected in proc.stderr, describe(proc)
    assert proc.returncode != 0, describe(proc)


def test_ranks_that_ran_different_tests_at_one_position_are_told_apart():
    # The exchange keys by the test's position; the names the ranks publish must agree.
    import pickle

    import torch.distributed as dist

    from continuous_test.errors import RendezvousError
    from continuous_test.launched import run as launched_run
    from continuous_test._launch import Launch
    from continuous_test.launched.join import Joined
    from continuous_test.wire.outcome import RankOutcome

    store = dist.HashStore()
    joined = Joined(store=store, rank=0, start_timeout=5.0, seq=3)
    launch = Launch(Mode.TORCHRUN, rank=0, world_size=2)
    key = launched_run._test_key(joined)
    assert key == "test/3"
    dist.PrefixStore(key, store).set("1", pickle.dumps(RankOutcome(1, test="test_x.py::test_b")))
    with pytest.raises(RendezvousError, match=r"as test 3 of this launch \(rank 0: test_x.py::test_a, "
                                              r"rank 1: test_x.py::test_b\)"):
        launched_run._exchange(joined, key, RankOutcome(0, test="test_x.py::test_a"), launch, 1.0)
    assert joined.broken is not None and "different tests" in joined.broken


@pytest.mark.e2e
def test_torchrun_a_ranks_output_is_in_the_merged_report_and_the_json_report_names_the_rank(tmp_path):
    # As without a launcher: each rank's output is in the failure's report, labelled by
    # rank, not printed raw above it; the JSON report names rank 1, which raised.
    report = tmp_path / "run.json"
    proc = helpers.torchrun(FAULTS, 2, "PrintsAndFails", env={"CONTINUOUS_TEST_REPORT": str(report)})
    out = proc.stdout + proc.stderr
    assert unittest_counts(proc.stderr) == {"ran": 1, "failures": 1}, describe(proc)
    assert "rank 0 output:\n[rank0] printed by rank 0\nrank 1 output:\n[rank1] printed by rank 1" in proc.stderr, \
        describe(proc)
    assert not re.search(r"^printed by rank", out, re.M), describe(proc)
    (test,) = json.loads(report.read_text())["tests"]
    assert (test["failing_ranks"], test["raising_ranks"]) == ([1], [1]), test


def test_a_world_size_mismatch_counts_one_rank_as_one():
    message = world_size_mismatch("OneRankTest", 1, 2, LAUNCH_HINTS[Mode.TORCHRUN])
    assert "started WORLD_SIZE=2 ranks" in message and "giving 1 rank, or run it" in message, message
    assert "started WORLD_SIZE=1 rank;" in world_size_mismatch("TwoRankTest", 2, 1, LAUNCH_HINTS[Mode.TORCHRUN])


def test_a_launched_tests_output_is_captured_whole_and_said_so_far(monkeypatch):
    # What reaches file descriptors 1 and 2 (a print to the process's stdout, a C library's writes).
    # Under pytest, as here, pytest's own capture takes sys.stdout's prints first.
    from continuous_test.launched import output

    monkeypatch.delenv("CONTINUOUS_TEST_LIVE_OUTPUT", raising=False)
    with output.Output() as captured:
        print("from print", file=sys.__stdout__, flush=True)
        os.write(2, b"from fd 2\n")
        assert output.so_far() == "from print\nfrom fd 2\n"
        assert output.terminal[0] is not None
    assert captured.text == "from print\nfrom fd 2\n" and output.terminal[0] is None and output.so_far() == ""
    text = "".join(f"line {i}\n" for i in range(output.MAX_LINES + 5))
    assert output.tail(text).splitlines()[:2] == ["... 5 line(s) left out", "line 5"]


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
