"""The recorder in one process: a world of one gloo rank, records read back as the controller reads them."""
from __future__ import annotations

import gc
import sys
import weakref

import pytest
import torch
import torch.distributed as dist

from continuous_test.rank import recorder
from continuous_test.verdict import timeline
from continuous_test.wire import records


@pytest.fixture
def ring(tmp_path, monkeypatch):
    monkeypatch.delenv(recorder.ENV_RECORD, raising=False)
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    path = str(tmp_path / "rank0.records")
    recorder.open_ring(path, 0, capacity=8)
    try:
        yield path
    finally:
        recorder._restore()
        dist.destroy_process_group()


class Case:
    """Stands for a test case: begin_test reads its class and method name."""

    _testMethodName = "test_x"


def test_records_what_was_called_where_and_that_it_returned(ring):
    recorder.begin_test(Case())
    t = torch.ones(2, 3, dtype=torch.float64)
    line = sys._getframe().f_lineno + 1
    out = dist.all_reduce(t)
    dist.all_gather_object([None], {"a": 1})
    dist.barrier()
    calls = records.read_file(ring)
    assert out is None and t.tolist() == [[1.0] * 3] * 2
    first, objects, barrier = calls.calls
    assert first.describe() == f"all_reduce #1 [float64(2,3)] at test_recorder.py:{line} (returned)"
    assert (objects.op, objects.signature(), objects.seq) == ("all_gather_object", "[1 object]", 2)
    assert barrier.describe().startswith("barrier #3 at test_recorder.py:")


def test_subgroups_are_named_by_their_ranks_and_numbered_apart(ring):
    recorder.begin_test(Case())
    sub = dist.new_group([0])
    dist.all_reduce(torch.ones(1), group=sub)
    dist.all_reduce(torch.ones(1))
    on_sub, on_default = records.read_file(ring).calls
    assert on_sub.name() == "all_reduce #1 on ranks 0"
    assert on_default.name() == "all_reduce #1"


def test_a_group_the_test_used_and_dropped_lives_until_the_next_test_begins(ring):
    # On purpose (docs/isolation.rst): dropped then, it goes through its Python object's
    # destructor, which releases the GIL; DDP's Reducer, dropped after the test's
    # destroy_process_group(), would otherwise destroy it holding the GIL.
    recorder.begin_test(Case())
    sub = dist.new_group([0])
    dist.all_reduce(torch.ones(1), group=sub)
    dist.destroy_process_group(sub)
    kept = weakref.ref(sub)
    del sub
    gc.collect()
    assert kept() is not None
    recorder.begin_test(Case())
    gc.collect()
    assert kept() is None


def test_exceptions_pass_through_unchanged_and_are_marked(ring):
    recorder.begin_test(Case())
    bad = torch.ones(2)
    with pytest.raises(Exception) as caught:
        dist.broadcast(bad, src=5)  # no rank 5 in a world of 1
    original = recorder._originals["broadcast"]
    with pytest.raises(type(caught.value)):
        original(bad, src=5)
    (call,) = records.read_file(ring).calls
    assert call.status == records.STATUS_RAISED and call.describe().endswith("(raised)")


def test_no_frame_of_the_recorder_between_the_caller_and_torchs_body(ring):
    # torch warns with stacklevel=2 (a float timeout): the warning must name this line,
    # as on torch alone, not a recorder frame; a traceback shows torch's frames only.
    import traceback
    import warnings

    recorder.begin_test(Case())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        dist.monitored_barrier(timeout=30.0)
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)], [str(w) for w in caught]
    with pytest.raises(Exception) as raised:
        dist.broadcast(torch.ones(2), src=5)  # no rank 5 in a world of 1
    files = [frame.filename for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert not [f for f in files if "continuous_test" in f], files
    assert [call.describe()[:20] for call in records.read_file(ring).calls] == [
        "monitored_barrier #1", "broadcast #2 [float3"]


def test_only_the_current_test_and_the_last_calls_are_kept(ring):
    recorder.begin_test(Case())
    dist.barrier()
    recorder.begin_test(Case())
    for _ in range(11):
        dist.all_reduce(torch.ones(1))
    calls = records.read_file(ring)
    assert [c.seq for c in calls.calls] == list(range(4, 12))  # capacity 8
    assert calls.dropped == 3
    assert "(3 earlier calls of this test not kept)" in timeline.build({0: calls}).text
    assert records.parse(recorder.snapshot()).calls == calls.calls  # what torchrun ranks send


def test_functions_stay_torchs_objects_with_torchs_signature_source_and_pickle(ring):
    import inspect
    import pickle

    from torch.distributed import distributed_c10d as c10d

    assert dist.isend is c10d.isend and "isend" in recorder._originals
    assert dist.P2POp(dist.isend, torch.ones(1), 0).op is c10d.isend  # torch checks the op by identity
    for name in ("all_reduce", "isend", "batch_isend_irecv", "monitored_barrier"):
        original = recorder._originals[name]  # a copy of torch's function, its code untouched
        assert inspect.signature(getattr(dist, name)) == inspect.signature(original)
        assert inspect.getsource(getattr(dist, name)) == inspect.getsource(original)
    assert pickle.loads(pickle.dumps(dist.all_reduce)) is dist.all_reduce
    assert recorder.HOOK in dist.isend.__code__.co_names
    recorder._restore()
    assert recorder.HOOK not in vars(c10d) and recorder.HOOK not in dist.isend.__code__.co_names


def test_dynamo_sees_torchs_graph_breaks_and_the_eager_call_after_one_is_recorded(ring):
    # Code torch.compile runs eagerly after a graph break passes each new frame to
    # dynamo: the recorder's frames must be run as torch's own are, not traced (they
    # added a graph break per call, which a test counting breaks would see).
    import torch._dynamo
    from torch._dynamo.utils import counters

    def compiled_breaks():
        torch._dynamo.reset()
        counters.clear()

        def fn(t):
            dist.broadcast(t, 0)  # not traceable: torch's own graph break
            return t * 2

        assert torch.compile(fn, backend="eager")(torch.ones(2)).tolist() == [2.0, 2.0]
        return sum(counters["graph_break"].values())

    compiled_breaks()  # a first compile warms dynamo up: the two compared below are alike
    recorder.begin_test(Case())
    recorded = compiled_breaks()
    calls = records.read_file(ring).calls
    recorder._restore()
    assert recorded == compiled_breaks() >= 1
    assert [call.describe()[:26] for call in calls] == ["broadcast #1 [float32(2)] "]  # the eager call after the break


def test_environment_turns_patching_off(monkeypatch):
    monkeypatch.setenv(recorder.ENV_RECORD, "0")
    code = dist.all_reduce.__wrapped__.__code__
    recorder.patch()
    assert dist.all_reduce.__wrapped__.__code__ is code and not recorder._originals


def test_names_bound_before_patching_record_too(ring):
    from helpers import SCENARIOS

    sys.path.insert(0, str(SCENARIOS))
    try:
        import recorder_helper  # binds all_reduce by name, as library code does
    finally:
        sys.path.remove(str(SCENARIOS))
    recorder.begin_test(Case())
    recorder_helper.reduce_in_helper(torch.ones(2))
    (call,) = records.read_file(ring).calls
    assert call.describe() == "all_reduce #1 [float32(2)] at recorder_helper.py:6 (returned)"


def test_marker_and_class_attribute_turn_a_test_off():
    import types

    marked = types.SimpleNamespace(name=recorder.MARKER, args=(False,), kwargs={})

    class Plain:
        def test_x(self):
            pass

    class Off(Plain):
        record_collectives = False

    class Marked(Plain):
        def test_x(self):
            pass

    Marked.test_x.pytestmark = [marked]
    assert recorder._decide(Plain, "test_x") is True
    assert recorder._decide(Off, "test_x") is False
    assert recorder._decide(Marked, "test_x") is False


def test_a_call_that_returns_a_work_handle_is_marked_as_under_way(ring):
    recorder.begin_test(Case())
    work = dist.all_reduce(torch.ones(2), async_op=True)
    work.wait()
    dist.all_reduce(torch.ones(2))
    started, done = records.read_file(ring).calls
    assert started.status == records.STATUS_ASYNC and done.status == records.STATUS_RETURNED
    assert started.describe().endswith("(returned a work handle; its wait is not recorded)")


def test_a_caught_failed_call_marks_its_test_and_not_the_next(ring, monkeypatch):
    # A call that failed in its communication (the transport closed the connection), which the
    # test caught, marks that test's outcome (the world then starts new ranks); the next test
    # starts unmarked, and an argument check that failed ("invalid root rank") is no failed call.
    import unittest

    from continuous_test.rank import run as rank_run
    from continuous_test.wire.outcome import EventKind

    group_class = type(dist.distributed_c10d._get_default_group())

    def closed(self, *args, **kwargs):
        raise RuntimeError("Connection closed by peer")

    class Calls(unittest.TestCase):
        def test_catches_a_failed_call(self):
            with monkeypatch.context() as patched:
                patched.setattr(group_class, "allreduce", closed)
                with self.assertRaisesRegex(RuntimeError, "Connection closed by peer"):
                    dist.all_reduce(torch.ones(1))

        def test_next(self):
            dist.all_reduce(torch.ones(1))

        def test_bad_argument(self):
            with self.assertRaisesRegex(RuntimeError, "invalid root rank"):
                dist.broadcast(torch.ones(1), src=5)  # no rank 5 in a world of 1

    ran = [rank_run.run_case(Calls(name), 0, "off")
           for name in ("test_catches_a_failed_call", "test_next", "test_catches_a_failed_call", "test_bad_argument")]
    assert [[e.kind for e in o.events] for o in ran] == [[EventKind.SUCCESS]] * 4, [o.events for o in ran]
    assert [o.call_failed for o in ran] == [True, False, True, False]
    assert [c.status for c in records.read_file(ring).calls] == [records.STATUS_RAISED]  # the last test's call


@pytest.mark.world
@pytest.mark.parametrize("runner", ["python", "pytest"])
def test_code_that_inspects_torch_distributed_does_not_see_the_recorder(runner):
    import re

    import helpers

    if runner == "python":
        # no heartbeat line inside a verbose "... ok" line (a compile may take 10 s on a loaded machine)
        result = helpers.python("test_recorder_invisible.py", "-v", env={"CONTINUOUS_TEST_HEARTBEAT": "0"})
        # A passing test's rank output comes where unittest puts a test's own prints, between its name
        # and its "ok" (Python 3.13.0's dynamo warns "Guards may run slower" there); only such lines may.
        passed = re.findall(r"^(test_\w+) .* \.\.\. (?:\[rank\d+\] .*\n)*ok$", result.stderr, re.M)
    else:
        result = helpers.pytest("test_recorder_invisible.py", "-rA")
        passed = re.findall(r"^PASSED \S+::(test_\w+)$", result.stdout, re.M)
    output = result.stdout + result.stderr
    assert sorted(passed) == ["test_batched_point_to_point", "test_compiled_collective",
                              "test_identity_and_equality", "test_pickle_and_signature"], helpers.describe(result)
    # the call made through a helper module's name is in the timeline of the test that hangs
    assert re.search(r"rank 0: all_reduce #1 \[float32\(3\)\] at recorder_helper.py:6 \(waiting\)", output), output
    # its stacks go from the test's call to torch's body, the wrappers between folded into one line
    stacks = output[output.index("in test_z_helper_module_diverges\n"):]  # rank 0's stacks (a section under pytest)
    assert re.search(r"in reduce_in_helper\n +all_reduce\(tensor\)\n +\(1 frame\(s\) of continuous_test and torch's "
                     r"logging wrappers\)\n +File .*distributed_c10d.py", stacks), stacks
    assert "c10d_logger.py" not in stacks and "in _call" not in stacks, stacks


@pytest.mark.parametrize("method", [pytest.param("fork", marks=pytest.mark.world),
                                    # a fresh-interpreter template runs in a real process, as in test_template.py
                                    pytest.param("forkserver", marks=pytest.mark.e2e)])
def test_a_fresh_worlds_ranks_inherit_the_instrumented_functions(method):
    # Compiling torch's bodies again costs tens of milliseconds per rank: the
    # template does it once, before forking, under either start method.
    import re

    import helpers

    result = helpers.python("test_recorder_inherited.py", "-v", env={"CONTINUOUS_TEST_START_METHOD": method},
                            real=method == "forkserver")
    passed = re.findall(r"^(test_\w+) .* \.\.\. ok$", result.stderr, re.M)
    assert passed == ["test_first_world", "test_second_world"], helpers.describe(result)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
