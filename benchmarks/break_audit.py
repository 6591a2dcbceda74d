"""Deliberate one-place breaks of the package, each with the test that must catch it (issue 34's audit).

Usage::

    python benchmarks/break_audit.py [N ...]

For each break (all, or the numbers given): replace one piece of a module's source,
run the test that should fail, put the source back.  Prints one line per break,
``CAUGHT`` or ``MISSED`` (or ``SETUP`` where the piece is no longer in the module:
update the entry), and writes them to ``benchmarks/results/break_audit.json``.  Run
it in a clean checkout: it edits the files in place and restores each one.  The
tests must pass on the unbroken code (run them once first); a break is only caught
if its test fails on it.
"""
import json
import os
import subprocess
import sys
import time

WT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
OUT = os.path.join(WT, "benchmarks", "results", "break_audit.json")
B = [
 ("config: DEFAULT_GRACE 3 -> 30", "continuous_test/config.py", "DEFAULT_GRACE = 3.0", "DEFAULT_GRACE = 30.0",
  ["test/test_config.py::test_documented_defaults"]),
 ("sizes: sized names sized again", "continuous_test/sizes.py", "if not attr.startswith(prefix) or parse(attr) is not None:", "if not attr.startswith(prefix):",
  ["test/test_world_sizes.py::test_a_subclass_of_a_sized_class_has_each_test_once_per_size"]),
 ("fresh_worlds: no ast.Delete", "continuous_test/fresh_worlds.py", "(ast.Assign, ast.AugAssign, ast.Delete)):", "(ast.Assign, ast.AugAssign)):",
  ["test/test_fresh_worlds.py::test_the_rule_reads_the_test_and_its_helpers"]),
 ("session/shard: world_of ignores the world size", "continuous_test/session/shard.py", 'return world if world_size is None else f"{world}[ws{world_size}]"', "return world",
  ["test/test_shard.py::test_world_of_is_the_class_or_the_function_itself"]),
 ("timeline: settled ignores unmatched p2p", "continuous_test/verdict/timeline.py", "divergence = _first_divergence(ranks) + _unmatched_p2p(ranks)", "divergence = _first_divergence(ranks)",
  ["test/test_timeline.py::test_settled_only_when_every_call_ended_and_the_point_to_point_calls_pair_up"]),
 ("bisect: replay time not charged", "continuous_test/controller/bisect.py", "_spent += took", "_spent += 0",
  ["test/test_isolate.py::test_replay_time_is_charged_to_the_bisect_budget"]),
 ("bisect: replay limit not cut", "continuous_test/controller/bisect.py", "limit = min(ran.time_limit, left)", "limit = ran.time_limit",
  ["test/test_isolate.py::test_a_replays_time_limit_is_cut_to_the_budget_left"]),
 ("merge: _settled always true", "continuous_test/verdict/merge.py", "return built is not None and built.settled", "return True",
  ["test/test_isolate.py::test_expected_failures_are_not_rerun"]),
 ("world: registry keyed by class alone", "continuous_test/controller/world.py",
  "    if world is None or world.settings != settings:\n        if world is not None:\n            world.stop()\n        world = _WORLDS[(key, size)] = World(cls, settings)\n    return world",
  "    world = _WORLDS.get((key, None))\n    if world is None or world.settings != settings:\n        if world is not None:\n            world.stop()\n        world = _WORLDS[(key, None)] = World(cls, settings)\n    return world",
  ["test/test_world_sizes.py", "-k", "test_each_test_runs_once_per_size_in_one_world_per_size"]),
 ("outcome: MAX_HEADLINE 500 -> 5000", "continuous_test/wire/outcome.py", "MAX_HEADLINE = 500", "MAX_HEADLINE = 5000",
  ["test/test_reports.py::test_junit_bodies_are_bounded_too"]),
 ("kept: directory mode not checked", "continuous_test/wire/kept.py", " or info.st_mode & 0o077:", ":",
  ["test/test_reports.py::test_kept_texts_never_go_to_a_directory_open_to_others"]),
 ("watch: grace period x10", "continuous_test/controller/watch.py", "state.grace_deadline = time.monotonic() + goal.grace", "state.grace_deadline = time.monotonic() + goal.grace * 10",
  ["test/test_world_faults.py::test_grace_period_waited_is_the_configured_one"]),
 ("world: shutdown bound x20", "continuous_test/controller/world.py", "deadline=time.monotonic() + self.shutdown_timeout,", "deadline=time.monotonic() + self.shutdown_timeout * 20,",
  ["test/test_world_faults.py::test_shutdown_bound_is_the_configured_one"]),
 ("ahead: the suite's own __iter__ not checked", "continuous_test/controller/ahead.py", "if type(suite).__iter__ is not unittest.TestSuite.__iter__:", "if False:",
  ["test/test_ahead.py", "-k", "test_the_next_test_is_read_from_the_suite_only_where_the_suite_runs_its_list"]),
 ("rank/run: class-from-file check removed", "continuous_test/rank/run.py", 'if module_file and not _same_file(getattr(mod, "__file__", None), module_file):', "if False:",
  ["test/test_template.py::test_a_rank_takes_the_class_from_the_controllers_file_when_its_name_is_another_file"]),
 ("_launch: Hydra across hosts without MASTER_PORT", "continuous_test/_launch.py", "        if port is None:\n            raise ConfigError(MPI_NO_JOB_ID.format(launcher=mpi.launcher))\n", "",
  ["test/test_mpi.py::test_hydra_across_hosts_needs_master_port_for_its_pmi_socket_names_one_proxy_per_host"]),
 ("run_log: diagnosis not recorded", "continuous_test/controller/run_log.py", "        if self._current is not None:\n            named = [self._runner_ids", "        if False:\n            named = [self._runner_ids",
  ["test/test_run_report.py::test_the_report_of_run_tests_validates_and_says_each_verdict"]),
 ("report_html: failing-ranks label never drawn", "continuous_test/report_html.py", "if ranks and sx >= label_end:", "if False:",
  ["test/test_run_report.py::test_each_failed_bar_is_labelled_with_its_failing_ranks_without_a_browser"]),
 ("session/repeat: shared world not stopped before a fresh run", "continuous_test/session/repeat.py", "    _stop(cls)\n    try:\n        with one_test_worlds(cls):", "    try:\n        with one_test_worlds(cls):",
  ["test/test_shard.py::test_the_world_a_fresh_run_started_is_stopped_after_it_and_never_reused"]),
 ("recorder: failed-call flag not reset", "continuous_test/rank/recorder.py", "    global _call_failed\n    _call_failed = False\n    on = _enabled_for", "    on = _enabled_for",
  ["test/test_recorder.py::test_a_caught_failed_call_marks_its_test_and_not_the_next"]),
 ("rank/leaks: version tag trusted without its self-test", "continuous_test/rank/leaks.py", "return tag if steady and all(a < b for a, b in zip(seen, seen[1:])) else None", "return tag",
  ["test/test_leaks.py::test_a_version_tag_that_fails_the_self_test_is_not_trusted"]),
 ("devices: per-device flock never taken", "continuous_test/controller/devices.py", "                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n            except OSError as exc:\n                os.close(fd)", "                pass\n            except OSError as exc:\n                os.close(fd)",
  ["test/test_devices.py", "-k", "test_leases_never_overlap_and_go_back"]),
 ("devices: queue lock skipped", "continuous_test/controller/devices.py", "            self._wait(lambda: _try_flock(queue))\n", "",
  ["test/test_devices.py", "-k", "test_worlds_waiting_at_once_are_served_one_at_a_time_through_the_queue"]),
 ("devices: a failed partial lease keeps what it took", "continuous_test/controller/devices.py", "        except BaseException:\n            _unlock(self.held.values())\n            raise", "        except BaseException:\n            raise",
  ["test/test_devices.py", "-k", "test_a_partial_lease_that_fails_gives_back_what_it_took"]),
 ("session/pytest_shards: shard hook loses trylast", "continuous_test/session/pytest_shards.py", "    @pytest.hookimpl(trylast=True)\n    def pytest_collection_modifyitems(self", "    def pytest_collection_modifyitems(self",
  ["test/test_shard.py", "-k", "test_pytest_shards_cover_the_selection_once_without_splitting_a_world"]),
 ("merge: a caught failed call keeps the world", "continuous_test/verdict/merge.py", "or ranks_died or any(o.call_failed for o in outcomes.values())", "or ranks_died",
  ["test/test_world_faults.py", "-k", "what_a_tests_outcome_makes_of_its_world"]),
 ("merge: a late death keeps the world", "continuous_test/verdict/merge.py", "(bool(faults) or ranks_died or", "(bool(faults) or",
  ["test/test_world_faults.py", "-k", "what_a_tests_outcome_makes_of_its_world"]),
 ("world: a stop waits for every rank's exit, Stopped or not", "continuous_test/controller/world.py", "Goal(replies=(Stopped,), accepts=(Stacks,),", "Goal(replies=(), accepts=(Stacks,),",
  ["test/test_world_faults.py::test_a_stopping_world_waits_for_stopped_not_for_the_kernel"]),
 ("rank/main: Stopped never said", "continuous_test/rank/main.py", "        channel.send(Stopped(spec.rank, 0))", "        pass",
  ["test/test_world_faults.py::test_a_stopping_world_waits_for_stopped_not_for_the_kernel"]),
 ("world: shared_temp_dir kept while a test sent ahead runs", "continuous_test/controller/world.py", "        if self.dir is not None:\n            # The test's shared_temp_dir", "        if self.dir is not None and then is None:\n            # The test's shared_temp_dir",
  ["test/test_ahead.py", "-k", "test_the_next_test_starts_while_the_runner_records_the_last and pytest"]),
 ("dispatch: no spares for the next test in a world of its own", "continuous_test/controller/dispatch.py", "            SPARES.refill(cls, own.settings)", "            pass",
  ["test/test_spares.py", "-k", "test_next_tests_ranks_are_forked_ahead_and_nothing_outlives_the_class"]),
 ("recorder: the groups a test used never let go", "continuous_test/rank/recorder.py", "        self.groups.clear()\n", "",
  ["test/test_recorder.py::test_a_group_the_test_used_and_dropped_lives_until_the_next_test_begins"]),
 # The suite's own tooling (test/zygote.py): a forked process must end and take Ctrl-C as a real one would.
 ("zygote: open files not flushed at a child's end", "test/zygote.py", "                    obj.flush()", "                    pass",
  ["test/test_zygote.py::test_an_open_file_a_running_thread_and_an_exit_message_end_as_in_a_real_interpreter"]),
 ("zygote: a child keeps the zygote's SIGINT", "test/zygote.py",
  '        signal.signal(signal.SIGINT, signal.SIG_IGN if spec["sigint_ignored"] else signal.default_int_handler)\n', "",
  ["test/test_zygote.py::test_ctrl_c_is_as_the_caller_had_it_not_as_the_zygote_has_it"]),
]
only = sys.argv[1:]
results: list = []
for i, (what, path, old, new, test) in enumerate(B, 1):
    if only and str(i) not in only:
        continue
    full = f"{WT}/{path}"
    src = open(full).read()
    n = src.count(old)
    if n != 1:
        results.append((i, what, f"SETUP: old text found {n} times"))
        print(results[-1], flush=True)
        continue
    open(full, "w").write(src.replace(old, new))
    t = time.monotonic()
    try:
        proc = subprocess.run([PY, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly", *test], cwd=WT,
                              env={**os.environ, "PYTHONPATH": WT}, capture_output=True, text=True, timeout=400)
        caught = proc.returncode != 0
        tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-200:]
    except subprocess.TimeoutExpired:
        caught, tail = True, "timed out (400 s)"
    finally:
        open(full, "w").write(src)
    results.append((i, what, "CAUGHT" if caught else "MISSED", " ".join(test), tail, round(time.monotonic() - t)))
    print(results[-1], flush=True)
with open(OUT, "w") as f:
    json.dump(results, f, indent=1)
