"""Plain pytest classes in DeepSpeed's style, run on every rank by @continuous_test.distributed."""
import os
import threading

import pytest
import torch
import torch.distributed as dist

import continuous_test

SETUPS = {"module": 0}


@pytest.fixture(scope="session")
def session_value():
    return 10


@pytest.fixture(scope="module")
def module_value():
    SETUPS["module"] += 1  # in the controller: once for the whole module
    return SETUPS["module"]


@pytest.fixture
def function_value(request):
    return request.node.name


@pytest.fixture
def a_lock():
    return threading.Lock()  # cannot be pickled: the test using it fails with NOT_PICKLABLE


@pytest.fixture(scope="class")
def class_value():
    return [1, 2]


@continuous_test.distributed_fixture(world_size=4)
def saved(class_tmpdir):
    rank = dist.get_rank()
    torch.save(torch.full((1,), float(rank)), os.path.join(class_tmpdir, f"rank{rank}.pt"))
    dist.barrier()
    return {"dir": str(class_tmpdir), "world": dist.get_world_size()}


@continuous_test.distributed_fixture(world_size=3, per_rank=True)
def ranks_seen():
    return dist.get_rank()


@continuous_test.distributed(backend="gloo")
class TestPlain:
    world_size = 2
    shared = "on the class"

    def test_all_reduce(self, session_value, module_value, class_value, function_value):
        t = torch.ones(1) * session_value
        dist.all_reduce(t)
        assert t.item() == 20 and dist.get_world_size() == 2
        assert module_value == 1 and class_value == [1, 2] and function_value == "test_all_reduce"
        assert isinstance(self, TestPlain) and self.shared == "on the class"

    @pytest.mark.parametrize("n", [1, 3])
    def test_parametrized(self, n):
        t = torch.ones(n)
        dist.all_reduce(t)
        assert t.tolist() == [2.0] * n

    @pytest.mark.world_size(3)
    def test_marked(self):
        assert dist.get_world_size() == 3

    def test_class_tmpdir(self, class_tmpdir):
        assert oct(os.stat(class_tmpdir).st_mode & 0o777) == "0o700"
        with open(os.path.join(class_tmpdir, f"r{dist.get_rank()}"), "w"):
            pass
        dist.barrier()
        assert sorted(os.listdir(class_tmpdir)) == ["r0", "r1"]

    def test_loads_at_two(self, saved):
        # saved at 4 ranks; loaded at 2: rank r loads what ranks r and r + 2 wrote
        assert saved["world"] == 4 and dist.get_world_size() == 2
        rank = dist.get_rank()
        got = [torch.load(os.path.join(saved["dir"], f"rank{r}.pt")).item() for r in (rank, rank + 2)]
        assert got == [float(rank), float(rank + 2)]

    def test_per_rank(self, ranks_seen):
        assert ranks_seen == [0, 1, 2]

    @pytest.mark.skip(reason="skipped as pytest skips")
    def test_skipped(self):
        raise AssertionError("not run")

    @pytest.mark.xfail(reason="fails on purpose", strict=True)
    def test_xfail(self):
        assert dist.get_rank() == 5

    def test_not_picklable(self, a_lock):
        raise AssertionError("not run: its fixture value cannot reach the ranks")

    def test_fails_on_rank_1(self):
        assert dist.get_rank() == 0


@continuous_test.distributed(world_size=[1, 2], backend="gloo")
class TestSizes:
    def test_size(self):
        assert dist.get_world_size() in (1, 2)
