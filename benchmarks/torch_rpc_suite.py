"""torch's RPC suite on torch's spawn runner and on continuous_test's engine: each test's verdict and time.

Usage::

    python benchmarks/torch_rpc_suite.py [--subset compared|ci|recorded | --all | -k EXPR | --sample N [--seed S]]
                                         [--engine both|torch|ours] [--torch-from PATH]
                                         [--json PATH] [--record]

How data flows::

    test ids ──► per agent (tensorpipe, faulty: never in one process, see below) and
                 per engine, one pytest run, one after the other:
                 RPC_AGENT=... CT_SUITE_ENGINE=... python -m pytest examples/test_torch_rpc_suite.py
                 (torch: torch's SpawnHelper, spawned interpreters per test;
                  ours: warm ranks per class, fresh ranks where the rule says so)
    JUnit XML ──► verdict (passed, skipped, failed, error) and seconds per ``Class::test``
              ──► one row per test (both verdicts, both times), the totals,
                  JSON in benchmarks/results/ (default torch_rpc_suite.json)

The suite is what ``torch.testing._internal.distributed.rpc_utils.generate_tests``
builds on CPU: 436 TensorPipe tests (``GENERIC_TESTS + TENSORPIPE_TESTS``) and 28
faulty-agent tests.  The two agents run in separate pytest processes, as torch's two
files do: importing the faulty fixture re-creates rpc's ``BackendType`` enum.
``--subset compared`` is :data:`COMPARED`, the tests whose torch verdicts were
recorded (torch's runner takes about 9 s a test here, 70 minutes for all);
``--subset ci`` is :data:`CI_SUBSET`; ``--subset recorded`` the tests of the
torch run that ``--torch-from`` names.  ``--record`` writes torch's verdicts of this
invocation to ``benchmarks/results/torch_rpc_suite_verdicts.json``, which
``test/test_torch_rpc_suite.py`` reads.  ``--torch-from PATH`` and ``--ours-from PATH``
take an engine's run from an earlier JSON of this script (with both, nothing runs).  Wall time is the sum of the pytest processes', from
start to end; per-test seconds are pytest's own.

A benchmark, not a test: the exit status is 0 unless a run produced no report.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from torch_suite import Run, case_verdict, record_verdicts, report, write_json  # the sibling script

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "examples" / "test_torch_rpc_suite.py"
RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_JSON = RESULTS / "torch_rpc_suite.json"
VERDICTS = RESULTS / "torch_rpc_suite_verdicts.json"
AGENTS = ("tensorpipe", "faulty")
TIMEOUT = 3 * 3600  # a guard against hangs of a whole run


def _ids(cls: str, names: str) -> List[str]:
    return [f"{cls}::{name}" for name in names.split()]


# The tests whose verdicts on torch's runner were recorded: a sample of every class,
# with the tests whose ranks leave early or that wait on timeouts, and all 28 of the
# faulty agent's.
COMPARED = [
    *_ids("TensorPipeRpcTest", """
        test_add test_add_done_callback test_all_gather test_all_gather_timeout test_async_add
        test_async_function_chained test_async_function_raise test_async_function_simple
        test_builtin_remote_ret test_custom_exception_throw_during_reconstruction test_default_timeout_used
        test_future_done_exception test_graceful_shutdown_with_uneven_workload test_handle_send_exceptions
        test_init_pg_then_rpc test_init_rpc_then_pg test_init_rpc_twice test_local_shutdown
        test_local_shutdown_with_rpc test_multi_layer_nested_async_rpc test_nested_remote test_nested_rref
        test_owner_equality test_py_built_in test_py_function_exception test_py_raise_in_user_func
        test_remote_with_exception test_return_future test_rpc_timeouts test_rref_context_debug_info
        test_rref_timeout test_rref_leak test_scalar_add test_self_add test_send_to_rank
        test_shutdown_errors test_shutdown_followed_by_rpc test_stress_heavy_rpc test_use_rref_after_shutdown
        test_wait_all test_wait_all_timeout test_wait_all_with_exception test_wait_all_workers_timeout
        test_world_size_one test_worker_id test_worker_info_pickle test_profiler_remote_events_profiled
        test_user_rrefs_confirmed test_rref_py_pickle_not_supported test_py_user_defined"""),
    *_ids("TensorPipeDistAutogradTest", """
        test_autograd_context test_backward_simple test_backward_multiple_round_trips
        test_backward_rref test_error_in_context test_graph_for_builtin_call test_nested_context
        test_no_graph_with_tensors_not_require_grad test_thread_local_context_id test_backward_unused_tensors"""),
    *_ids("TensorPipeDistOptimizerTest", "test_dist_optim test_dist_optim_exception"),
    *_ids("TensorPipeJitRpcTest", """
        test_torchscript_function test_rref_as_arg_and_return test_call_rpc_with_profiling
        test_remote_script_module test_async_script_udf test_torchscript_functions_not_supported"""),
    *_ids("TensorPipeJitDistAutogradTest", "test_get_gradients test_restore_context_after_swtich_to_jit_thread"),
    *_ids("TensorPipeRemoteModuleTest", "test_forward_sync test_remote_parameters test_bad_module test_train_eval"),
    *_ids("TensorPipeThreeWorkersRemoteModuleTest", "test_send_remote_module_over_the_wire"),
    *_ids("TensorPipeDdpUnderDistAutogradTest", "test_backward_no_ddp"),
    *_ids("TensorPipeDdpComparisonTest", "test_ddp_comparison"),
    *_ids("TensorPipeParameterServerTest", "test_batch_updating_parameter_server"),
    *_ids("TensorPipeReinforcementLearningRpcTest", "test_rl_rpc"),
    *_ids("TensorPipeTensorPipeAgentRpcTest", """
        test_infer_backend_from_options test_tensorpipe_set_default_timeout test_tensorpipe_options_throw_on_timedelta_timeout
        test_set_and_get_num_worker_threads test_mismatched_type_for_options"""),
    *_ids("TensorPipeTensorPipeAgentDistAutogradTest", "test_backward_simple_sparse test_embedding_bag_with_no_grad_tensors"),
    # The faulty agent's: every one.
    *_ids("FaultyFaultyAgentRpcTest", """
        test_builtin_remote_message_dropped_timeout test_builtin_remote_message_dropped_timeout_to_self
        test_check_failed_messages test_custom_faulty_messages test_custom_messages_to_delay
        test_no_faulty_messages test_remote_message_builtin_delay_timeout
        test_remote_message_dropped_pickle test_remote_message_dropped_pickle_to_self
        test_remote_message_script_delay_timeout_to_self test_udf_remote_message_delay_timeout_to_self
        test_remote_message_script_delay_timeout test_rpc_builtin_timeout test_rpc_script_timeout
        test_rref_to_here_timeout test_udf_remote_message_delay_timeout test_udf_remote_message_dropped_timeout
        test_verify_backend_options test_udf_remote_message_dropped_timeout_to_self test_remote_message_builtin_delay_timeout_to_self"""),
    *_ids("FaultyFaultyAgentDistAutogradTest", "test_context_cleanup_tensor_with_grad test_verify_backend_options"),
    *_ids("FaultyJitFaultyAgentRpcTest", """
        test_remote_timeout_to_here_in_jit test_rref_timeout_pickle_in_jit test_rref_timeout_pickle_script_func
        test_rref_to_here_timeout_in_jit test_timeout_in_python test_timeout_in_torchscript_function"""),
]

# What CI runs against torch's recorded verdicts: quick tests of each kind.
CI_SUBSET = [
    *_ids("TensorPipeRpcTest", """
        test_add test_async_function_simple test_nested_rref test_py_function_exception test_self_add
        test_worker_id test_wait_all test_rref_leak test_handle_send_exceptions test_local_shutdown
        test_init_pg_then_rpc test_world_size_one"""),
    *_ids("TensorPipeDistAutogradTest", "test_backward_simple test_autograd_context test_clean_context_during_backward"),
    *_ids("TensorPipeRemoteModuleTest", "test_forward_sync"),
    *_ids("TensorPipeJitRpcTest", "test_torchscript_function"),
    # Each failed in our first full run, before the fix that docs/rpc.rst names.
    *_ids("TensorPipeRpcTest", "test_my_parameter_server test_function_not_on_callee"),
    *_ids("TensorPipeTensorPipeAgentRpcTest", """
        test_infer_backend_from_options test_mismatched_type_for_options test_dynamic_rpc_init_rpc
        test_dynamic_rpc_init_rpc_without_rank"""),
    # The faulty agent's quickest test, and one that depends on its delays (torch: 7.7 and 17.7 s; here 0.4 and
    # 2.4 s); test_check_failed_messages and test_verify_backend_options, once here, took 17 s of it.
    *_ids("FaultyFaultyAgentRpcTest", "test_custom_messages_to_delay test_rref_to_here_timeout"),
]


def agent_of(test_id: str) -> str:
    return "faulty" if test_id.startswith("Faulty") else "tensorpipe"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--subset", choices=["compared", "ci", "recorded"],
                       help="COMPARED (114 tests), CI_SUBSET, or the tests of --torch-from's torch run")
    which.add_argument("--all", action="store_true", help="every test of both agents (torch's run takes 70 minutes)")
    which.add_argument("-k", dest="expr", help="a pytest -k expression over the test names (both agents)")
    which.add_argument("--sample", type=int, metavar="N",
                       help="N tests drawn at random from the whole suite, each agent's share in proportion")
    parser.add_argument("--seed", type=int, default=0, help="the random draw of --sample (default 0)")
    parser.add_argument("--engine", choices=["both", "torch", "ours"], default="both")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--torch-from", type=Path, help="torch's run from an earlier JSON of this script")
    parser.add_argument("--ours-from", type=Path, help="our run from an earlier JSON of this script")
    parser.add_argument("--record", action="store_true", help="write torch's verdicts for CI (needs the torch run)")
    args = parser.parse_args(argv)
    if not (args.subset or args.all or args.expr or args.sample):
        args.subset = "compared"
    ids: Optional[List[str]] = {"compared": COMPARED, "ci": CI_SUBSET}.get(args.subset or "")
    if args.sample:
        ids = sample(args.sample, args.seed)
    engines = ["torch", "ours"] if args.engine == "both" else [args.engine]
    earlier = {engine: Run.from_json(engine, json.loads(path.read_text())["runs"][engine])
               for engine, path in (("torch", args.torch_from), ("ours", args.ours_from)) if path is not None}
    if args.subset == "recorded":
        if "torch" not in earlier:
            parser.error("--subset recorded needs --torch-from")
        ids = sorted(earlier["torch"].tests)
    wanted = set(ids) if ids is not None else None
    runs = {engine: earlier[engine].only(wanted) if engine in earlier else run_engine(engine, ids, args.expr)
            for engine in engines}
    report(runs, width=80)
    print_medians(runs)
    if args.sample:
        print_estimates(runs)
    payload = {"cpus": os.cpu_count(), "selection": _selection(args),
               "runs": {engine: run.as_json() for engine, run in runs.items()}}
    if args.sample:
        payload["suite_size"] = SUITE_SIZE
    for engine, path in (("torch", args.torch_from), ("ours", args.ours_from)):
        if path is not None:
            payload[f"{engine}_from"] = str(path)
    write_json(args.json, payload)
    print(f"raw results: {args.json}")
    if args.record:
        if "torch" not in runs:
            parser.error("--record needs the torch run (--engine both or torch, or --torch-from)")
        record_verdicts(VERDICTS, runs["torch"], CI_SUBSET)
    return 0 if all(run.tests for run in runs.values()) else 1


def suite_ids(agent: str, python: str = sys.executable) -> List[str]:
    """Every test of ``agent``'s classes, ``Class::test``, as pytest collects the suite file."""
    proc = subprocess.run([python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", str(SUITE)],
                          cwd=str(ROOT), env={**os.environ, "RPC_AGENT": agent}, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=600)
    found = [line.split("::", 1)[1] for line in proc.stdout.splitlines() if "::" in line]
    if not found:
        raise SystemExit(f"collecting {SUITE} with RPC_AGENT={agent} found no tests:\n{proc.stdout}{proc.stderr}")
    return found


# The suite on CPU with torch 2.13 (the count): 436 TensorPipe tests and 28 of the faulty agent.
SUITE_SIZE = {"tensorpipe": 436, "faulty": 28}


SAMPLE_FLOOR = 8  # tests of each agent a sample has at least: the faulty agent's share of 40 would be 2


def sample(n: int, seed: int) -> List[str]:
    """About ``n`` tests drawn at random (``seed``) from the whole suite: each agent's share in proportion to its
    size, and at least :data:`SAMPLE_FLOOR` of each, so that an estimate per agent has more than one or two."""
    import random

    everything = {agent: suite_ids(agent) for agent in AGENTS}
    total = sum(len(ids) for ids in everything.values())
    chosen: List[str] = []
    rng = random.Random(seed)
    for ids in everything.values():
        share = max(SAMPLE_FLOOR, round(n * len(ids) / total))
        chosen += rng.sample(sorted(ids), min(share, len(ids)))
    return chosen


def _selection(args: argparse.Namespace) -> str:
    if args.sample:
        return f"sample {args.sample}, seed {args.seed}"
    return args.subset or ("all" if args.all else f"-k {args.expr}")


def print_medians(runs: Dict[str, Run]) -> None:
    """Per agent: each engine's median seconds a test and, with both, the median of torch's minus ours."""
    import statistics

    for agent in AGENTS:
        names = sorted(set.intersection(*(set(n for n in run.tests if agent_of(n) == agent) for run in runs.values())))
        if not names:
            continue
        medians = [f"{engine} {statistics.median(run.tests[n][1] for n in names):.2f} s"
                   for engine, run in runs.items()]
        line = f"{agent}, median seconds a test over {len(names)}: " + ", ".join(medians)
        if {"torch", "ours"} <= set(runs):
            saved = statistics.median(runs["torch"].tests[n][1] - runs["ours"].tests[n][1] for n in names)
            line += f"; torch's minus ours: {saved:.2f} s"
        print(line)


def print_estimates(runs: Dict[str, Run]) -> None:
    """Each engine's time for the whole suite, estimated from its run on a sample, and their ratio."""
    estimates = {engine: estimate(run) for engine, run in runs.items()}
    for engine, seconds in estimates.items():
        print(f"{engine}: the whole suite ({sum(SUITE_SIZE.values())} tests) estimated at {seconds:.0f} s in tests "
              f"(each agent's mean test time in this sample times its size)")
    if len(estimates) == 2 and estimates["ours"]:
        print(f"estimated time in tests: ours is 1/{estimates['torch'] / estimates['ours']:.1f} of torch's")


def estimate(run: Run) -> float:
    """The seconds in tests of the whole suite, from ``run`` on a sample: per agent, its mean times its size."""
    total = 0.0
    for agent, size in SUITE_SIZE.items():
        seconds = [s for name, (_, s) in run.tests.items() if agent_of(name) == agent]
        total += size * sum(seconds) / len(seconds) if seconds else 0.0
    return total


def run_engine(engine: str, ids: Optional[List[str]], expr: Optional[str], python: str = sys.executable,
               base_env: Optional[Dict[str, str]] = None) -> Run:
    """Run the selected tests on one engine: one pytest process per agent, one after the other, with
    ``python`` in ``base_env`` (this process's environment by default)."""
    tests: Dict[str, Tuple[str, float]] = {}
    messages: Dict[str, str] = {}
    wall, returncode = 0.0, 0
    for agent in AGENTS:
        chosen = None if ids is None else [i for i in ids if agent_of(i) == agent]
        if chosen == []:
            continue
        with tempfile.TemporaryDirectory(prefix="torch-rpc-suite-") as tmp:
            report_file = os.path.join(tmp, "junit.xml")
            targets = [f"{SUITE}::{i}" for i in chosen] if chosen else [str(SUITE)]
            command = [python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rN",
                       f"--junitxml={report_file}", *targets, *(["-k", expr] if expr else [])]
            env = {**(os.environ if base_env is None else base_env), "CT_SUITE_ENGINE": engine, "RPC_AGENT": agent,
                   "TMPDIR": tmp}
            start = time.perf_counter()
            proc = subprocess.run(command, cwd=str(ROOT), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT)
            elapsed = time.perf_counter() - start
            wall += elapsed
            returncode = returncode or proc.returncode
            print(f"--- {engine}, {agent}: exit {proc.returncode} in {elapsed:.1f} s; last lines of its output:")
            print("\n".join(proc.stdout.strip().splitlines()[-5:]), flush=True)
            if os.path.exists(report_file):
                found, said = read_junit(report_file)
                tests.update(found)
                messages.update(said)
    return Run(engine, tests, wall, returncode, messages)


def read_junit(path: str) -> Tuple[Dict[str, Tuple[str, float]], Dict[str, str]]:
    """``Class::test`` -> (verdict, seconds), and -> its failure's message, from a JUnit XML report."""
    tests: Dict[str, Tuple[str, float]] = {}
    messages: Dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        cls = case.get("classname", "?").rsplit(".", 1)[-1]
        name = f"{cls}::{case.get('name', '?')}"
        verdict, message = case_verdict(case)
        if message is not None:
            messages[name] = message
        if verdict == "error" and name in tests:
            verdict = "failed+error"  # pytest reports a teardown error as a second testcase
        tests[name] = (verdict, tests.get(name, ("", 0.0))[1] + float(case.get("time", "0")))
    return tests, messages


if __name__ == "__main__":
    raise SystemExit(main())
