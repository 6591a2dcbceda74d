"""torch's RPC suite (rpc_utils.generate_tests, from the torch wheel) on this engine.

``examples/test_torch_rpc_suite.py`` builds torch's RPC classes, with torch's
names, on :mod:`continuous_test.torch_compat.rpc`.  The CI subset of
``benchmarks/torch_rpc_suite.py`` runs here under pytest and must give, test by
test, the verdicts torch's spawn runner gave, as that script recorded them
(``benchmarks/results/torch_rpc_suite_verdicts.json``).
"""
from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import pytest

import helpers

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch_rpc_suite  # noqa: E402
import torch_suite  # noqa: E402 - its sibling: the verdict comparison


def test_the_rule_picks_rref_users_default_groups_and_rank_enders_only():
    # Imported here, not at collection: torch's RPC test modules cost every xdist worker 1 s of CPU.
    with warnings.catch_warnings():  # torch's RPC tests use torch.jit.script at import: 363 deprecation warnings
        warnings.simplefilter("ignore", DeprecationWarning)
        from torch.testing._internal.distributed.rpc.dist_autograd_test import DistAutogradTest
        from torch.testing._internal.distributed.rpc.rpc_test import RpcTest

        from continuous_test.torch_compat.rpc import needs_fresh_ranks

    # RRefs: torch's RRefContext binds the first agent of a process.
    assert needs_fresh_ranks(RpcTest, "test_nested_rref")
    assert needs_fresh_ranks(RpcTest, "test_py_rref_args")  # rpc.remote in the test
    assert needs_fresh_ranks(RpcTest, "test_rref_leak")  # through self._test_rref_leak
    # A default group of the test's own: initialize_pg (dist_utils), init_process_group.
    assert needs_fresh_ranks(RpcTest, "test_handle_send_exceptions")
    assert needs_fresh_ranks(RpcTest, "test_init_pg_then_rpc")
    # A rank that exits (sys.exit in the test).
    assert needs_fresh_ranks(DistAutogradTest, "test_clean_context_during_backward")
    # Plain RPC shares warm ranks.
    for name in ("test_add", "test_self_add", "test_worker_id", "test_wait_all", "test_py_function_exception"):
        assert not needs_fresh_ranks(RpcTest, name), name
    assert not needs_fresh_ranks(DistAutogradTest, "test_autograd_context")
    assert needs_fresh_ranks(DistAutogradTest, "test_backward_simple")  # its helper's ExecMode.REMOTE: rpc.remote


@pytest.mark.e2e
def test_the_ci_subset_keeps_torchs_verdicts():
    torch_verdicts = json.loads(torch_rpc_suite.VERDICTS.read_text())["torch_verdicts"]
    assert sorted(torch_verdicts) == sorted(torch_rpc_suite.CI_SUBSET)
    # Its pytest processes forked from this process's zygote (helpers.interpreter), not fresh interpreters.
    run = torch_rpc_suite.run_engine("ours", torch_rpc_suite.CI_SUBSET, None, python=helpers.interpreter(),
                                     base_env=helpers.scenario_env())
    differ = torch_suite.verdicts_that_differ(torch_verdicts, run)
    assert not differ, f"(torch's verdict, ours) where they differ: {differ}; ours said: " + str(
        {name: run.messages.get(name) for name in differ})
    assert [verdict for verdict, _ in run.tests.values()].count("passed") >= 12  # a run where every test skipped cannot match


@pytest.mark.e2e
def test_python_file_v_with_k_patterns_prints_torchs_names():
    # As torch's test_tensorpipe_agent.py runs: python FILE -v -k PATTERN ...; an RRef test
    # after a plain one in the same class gets fresh ranks and passes.
    proc = helpers.run([sys.executable, str(torch_rpc_suite.SUITE), "-v", "-k", "*.TensorPipeRpcTest.test_add",
                        "-k", "*.TensorPipeRpcTest.test_nested_rref"], cwd=ROOT, env={"RPC_AGENT": "tensorpipe"})
    for name in ("test_add", "test_nested_rref"):
        assert f"{name} (__main__.TensorPipeRpcTest.{name}) ... " in proc.stderr, helpers.describe(proc)
    assert helpers.unittest_counts(proc.stderr) == {"ran": 2} and proc.returncode == 0, helpers.describe(proc)


@pytest.mark.e2e
def test_rpc_init_with_tcp_gives_every_rank_one_master_port():
    # torch's CI variant RPC_INIT_WITH_TCP=1: init_rpc over tcp://MASTER_ADDR:MASTER_PORT, where torch's
    # SpawnHelper.setUp picks the port; here it runs on every rank, and the ranks take rank 0's.  Two tests
    # share warm ranks (the second after the first put the ranks' variables back), the RRef test gets its own.
    proc = helpers.run([sys.executable, str(torch_rpc_suite.SUITE), "-v", "-k", "*.TensorPipeRpcTest.test_add",
                        "-k", "*.TensorPipeRpcTest.test_self_add", "-k", "*.TensorPipeRpcTest.test_nested_rref"],
                       cwd=ROOT, env={"RPC_AGENT": "tensorpipe", "RPC_INIT_WITH_TCP": "1"}, timeout=240)
    assert helpers.unittest_counts(proc.stderr) == {"ran": 3} and proc.returncode == 0, helpers.describe(proc)


@pytest.mark.e2e
def test_the_faulty_agent_runs_in_a_process_of_its_own():
    proc = helpers.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(torch_rpc_suite.SUITE),
                        "-k", "test_custom_messages_to_delay"], cwd=ROOT,
                       env={"RPC_AGENT": "faulty", "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    assert helpers.pytest_counts(proc.stdout) == {"passed": 1, "deselected": 27}, helpers.describe(proc)
