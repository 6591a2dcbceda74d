"""Device leases (continuous_test.controller.devices): the pool, waiting, crashes, and worlds under pytest -n 4.

The pool is tested on the CPU with ``CONTINUOUS_TEST_SIMULATE_DEVICES``: every world
leases one device per rank as a GPU world would, and its ranks see
``CUDA_VISIBLE_DEVICES``; each test points ``CONTINUOUS_TEST_DEVICE_DIR`` at a pool
of its own, so runs of other suites on this machine do not share it.
"""
from __future__ import annotations

import glob
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import types
import unittest

import helpers
import pytest
from helpers import describe, pytest_counts, unittest_counts

from continuous_test.controller import device_needs, devices
from continuous_test.errors import ConfigError, DeviceWaitError
from continuous_test.wire.env import ENV_DEVICE_DIR, ENV_DEVICE_WAIT, ENV_SIMULATE_DEVICES

SCENARIO = "test_devices.py"


def _env(tmp_path, count=4, **extra):
    return {ENV_SIMULATE_DEVICES: str(count), ENV_DEVICE_DIR: str(tmp_path / "pool"), **extra}


def _pool(tmp_path, count=4):
    pool = devices.pool_for("cpu", _env(tmp_path, count))
    assert pool is not None
    return pool


# -- what a test needs ---------------------------------------------------------------


def test_a_cpu_world_needs_none_an_accelerator_world_one_device_per_rank():
    assert device_needs.devices_needed(3, "cpu", "gloo", env={}) == 0
    assert device_needs.devices_needed(3, "cpu", None, env={}) == 0
    assert device_needs.devices_needed(3, "cuda", None, env={}) == 3
    assert device_needs.devices_needed(3, "cpu", "nccl", env={}) == 3
    assert device_needs.devices_needed(2, "cpu", "cpu:gloo,cuda:nccl", env={}) == 2
    assert device_needs.devices_needed(2, "cuda", "nccl", required=4, env={}) == 4
    assert device_needs.devices_needed(2, "cpu", "gloo", required=4, env={}) == 4
    # Simulated: every world is an accelerator world.
    assert device_needs.devices_needed(3, "cpu", "gloo", env={ENV_SIMULATE_DEVICES: "4"}) == 3


# -- which accelerator: the one rule (config.accelerator) ------------------------------------


@pytest.fixture
def cuda_build(monkeypatch):
    """Make torch look like a CUDA build (its compile-time accelerator is cuda) with ``gpus[0]`` GPUs."""
    import torch

    gpus = [0]
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda check_available=False: torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus[0])
    return gpus


def test_a_cuda_build_uses_cuda_only_where_this_host_has_a_gpu(cuda_build):
    from continuous_test import MultiProcContinuousTest, config, multiprocess

    # No GPU here: cpu and gloo, everywhere a device or a backend is picked.
    assert config.accelerator() is None
    assert MultiProcContinuousTest.device_type() == "cpu"
    assert config.default_backend() == "gloo"
    assert multiprocess._default_world_size() == 4
    assert devices.lease_for("cpu", lambda size: size, "owner", env={}) is None
    cuda_build[0] = 2
    assert config.accelerator() == "cuda"
    assert MultiProcContinuousTest.device_type() == "cuda"
    assert config.default_backend() is None  # torch's pick for the device: nccl for cuda
    assert multiprocess._default_world_size() == 2


def test_a_class_that_names_nccl_or_cuda_skips_saying_why(cuda_build):
    from continuous_test import MultiProcContinuousTest, config

    class NamesCuda(MultiProcContinuousTest):
        world_size = 2

        @classmethod
        def device_type(cls):
            return "cuda"

    class NamesNccl(MultiProcContinuousTest):
        world_size = 2

        @classmethod
        def backend_str(cls):
            return "nccl"

    with pytest.raises(unittest.SkipTest, match=r"\.NamesCuda needs 2 cuda device\(s\), found 0$"):
        config.resolve(NamesCuda, check_importable=False)
    with pytest.raises(unittest.SkipTest) as skipped:
        config.resolve(NamesNccl, check_importable=False)
    import torch.distributed as dist

    if dist.is_nccl_available():  # a CUDA build: nccl is there, its devices are not
        assert str(skipped.value).endswith(".NamesNccl needs 2 cuda device(s) for backend 'nccl', found 0")
    else:
        assert "backend 'nccl' is not available" in str(skipped.value)


def test_asking_which_accelerator_initializes_no_cuda():
    # On a CUDA build, torch.cuda.is_available() (without PYTORCH_NVML_BASED_CUDA_CHECK=1) initializes the
    # driver, and a template forked from this process could not use CUDA: the rule asks NVML's count.
    import torch

    from continuous_test import MultiProcContinuousTest, config

    def driver_loaded():
        with open("/proc/self/maps") as maps:
            return any("libcuda.so" in line for line in maps)

    before = (torch.cuda.is_initialized(), driver_loaded())
    config.accelerator()
    MultiProcContinuousTest.device_type()
    config.default_backend()
    assert (torch.cuda.is_initialized(), driver_loaded()) == before == (False, False)


@pytest.mark.e2e
def test_a_cuda_build_without_a_gpu_runs_on_cpu_and_gloo():
    # real: the scenario makes every process that imports it look like a CUDA build.
    proc = helpers.python("test_cuda_build_no_gpu.py", "-v", real=True)
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 2}, describe(proc)


# -- a run that skipped everything says so -------------------------------------------------


def _all_skipped_line():
    import torch.distributed as dist

    from continuous_test import config
    from continuous_test.controller import run_log

    nccl = (config.BACKEND_NEEDS_DEVICES.format(cls="NamedNccl", needed=2, device="cuda", name="nccl", found=0)
            if dist.is_nccl_available() else config.BACKEND_UNAVAILABLE.format(cls="NamedNccl", name="nccl"))
    cuda = config.NO_DEVICES.format(cls="NamedCuda", needed=2, device="cuda", found=0)
    return run_log.ALL_SKIPPED.format(n=3, s="s", reasons=f"{cuda}; {nccl}")


def _no_gpu_here():
    from continuous_test import config

    return config.accelerator() is None


needs_no_gpu = pytest.mark.skipif(not _no_gpu_here(), reason="this host has the devices test_all_skipped.py asks for")


@pytest.mark.world
@needs_no_gpu
def test_a_run_whose_every_distributed_test_skipped_ends_saying_why():
    proc = helpers.python("test_all_skipped.py", "NamedCuda", "NamedNccl")
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 3, "skipped": 3}, describe(proc)
    assert proc.stderr.splitlines()[-1] == _all_skipped_line(), describe(proc)
    # One test that ran: no such line.
    proc = helpers.python("test_all_skipped.py")
    assert unittest_counts(proc.stderr) == {"ran": 4, "skipped": 3}, describe(proc)
    assert "distributed test" not in proc.stderr, describe(proc)


@pytest.mark.world
@needs_no_gpu
def test_under_pytest_the_terminal_summary_says_why_every_distributed_test_skipped():
    proc = helpers.pytest("test_all_skipped.py", "-rs", "-k", "Named")
    assert proc.returncode == 0, describe(proc)
    lines = proc.stdout.splitlines()
    assert lines[-2:] == [_all_skipped_line(), lines[-1]] and "3 skipped, 1 deselected" in lines[-1], describe(proc)
    proc = helpers.pytest("test_all_skipped.py")
    assert "distributed test" not in proc.stdout, describe(proc)


@pytest.mark.e2e
@needs_no_gpu
def test_under_xdist_the_workers_skips_add_up():
    proc = helpers.pytest("test_all_skipped.py", "-n", "2", "--dist", "loadscope", "-k", "Named")
    assert proc.returncode == 0, describe(proc)
    assert _all_skipped_line() in proc.stdout.splitlines()[-2:], describe(proc)


def test_torchs_decorators_say_what_a_test_requires():
    from torch.testing._internal.common_distributed import requires_world_size, skip_if_lt_x_gpu

    @skip_if_lt_x_gpu(3)
    def three(self):
        pass

    @skip_if_lt_x_gpu(4, allow_cpu=True)
    def runs_on_cpu(self):
        pass

    @requires_world_size(5)
    def five(self):
        pass

    def plain(self):
        pass

    assert [device_needs.required_devices(f) for f in (three, runs_on_cpu, five, plain, None)] == [3, 0, 5, 0, 0]

    class Case(unittest.TestCase):
        test_three, test_five, test_plain = three, five, plain

    methods = ["test_three", "test_five", "test_plain"]
    # A world leases for the largest requirement the host can meet; a test asking more skips by itself.
    assert device_needs.class_need(Case, 2, "cuda", None, methods, pool_size=4) == 3
    assert device_needs.class_need(Case, 2, "cuda", None, methods, pool_size=8) == 5
    assert device_needs.class_need(Case, 2, "cpu", "gloo", ["test_plain"], pool_size=8) == 0


# -- the pool --------------------------------------------------------------------------


def test_leases_never_overlap_and_go_back(tmp_path):
    pool = _pool(tmp_path)
    first = pool.lease(3, "first", bound=5)
    second = pool.lease(1, "second", bound=5)
    assert first.env() == {"CUDA_VISIBLE_DEVICES": "0,1,2"} and second.ids == ("3",)
    with pytest.raises(DeviceWaitError) as caught:
        pool.lease(1, "third", bound=0.3)
    message = str(caught.value)
    assert "third waited 0.3 s for 1 simulated device(s) of this host's 4 (0 free; held by pid" in message, message
    assert f"pid {os.getpid()} (first), pid {os.getpid()} (second)" in message and ENV_DEVICE_WAIT in message
    second.release()
    second.release()  # safe twice
    assert pool.lease(1, "third", bound=0.3).ids == ("3",)
    first.release()


def test_the_pool_is_private(tmp_path):
    pool = _pool(tmp_path)
    pool.lease(1, "x", bound=1).release()
    assert stat.S_IMODE(os.stat(pool.directory).st_mode) == 0o700
    files = glob.glob(os.path.join(pool.directory, "*"))
    assert files and all(stat.S_IMODE(os.stat(f).st_mode) == 0o600 for f in files)
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="is not a directory"):
        devices.pool_directory({ENV_DEVICE_DIR: str(tmp_path / "file")})


def test_a_world_larger_than_the_host_skips(tmp_path):
    with pytest.raises(unittest.SkipTest, match=r"big needs 5 simulated device\(s\), this host has 4"):
        _pool(tmp_path).lease(5, "big", bound=1)


def test_a_world_of_exactly_the_hosts_devices_gets_them_all_and_one_more_skips(tmp_path):
    env = _env(tmp_path, **{ENV_DEVICE_WAIT: "2"})  # a world that waited instead of skipping fails soon
    # What a world leases is need(pool size): all 4 of 4 is a lease, not a skip.
    try:
        lease = devices.lease_for("cpu", lambda total: total, "all", env=env)
    except unittest.SkipTest as exc:  # pytest would count it as a skip, not a failure
        pytest.fail(f"a world of all 4 devices of 4 was skipped: {exc}")
    assert lease is not None and lease.ids == ("0", "1", "2", "3") and lease.env() == {
        "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    lease.release()
    with pytest.raises(unittest.SkipTest) as caught:
        devices.lease_for("cpu", lambda total: total + 1, "one more", env=env)
    assert str(caught.value) == ("one more needs 5 simulated device(s), this host has 4 "
                                 f"(simulated: {ENV_SIMULATE_DEVICES}=4); skipped"), caught.value
    # The refused world took nothing: every device is free at once.
    again = _pool(tmp_path).lease(4, "again", bound=0.3)  # (4 of 4 again: a skip here failed above already)
    assert again.ids == ("0", "1", "2", "3")
    again.release()
    from torch.testing._internal.common_distributed import skip_if_lt_x_gpu

    class Case(unittest.TestCase):
        @skip_if_lt_x_gpu(4)
        def test_all(self):
            pass

        @skip_if_lt_x_gpu(5)
        def test_more(self):
            pass

    # A test asking for exactly the host's count sets the world's lease; one asking one more skips by itself.
    assert device_needs.class_need(Case, 2, "cuda", None, ["test_all", "test_more"], pool_size=4) == 4
    assert device_needs.class_need(Case, 2, "cuda", None, ["test_more"], pool_size=4) == 2


def test_a_partial_lease_that_fails_gives_back_what_it_took(tmp_path):
    pool = _pool(tmp_path)
    first = pool.lease(2, "first", bound=5)  # 0 and 1
    free = ("2", "3")

    def took_nothing(after):
        assert not [d for d in free if devices._busy(pool._file(d))], f"the lease that {after} kept its devices"
        assert pool.holders(free) == "", pool.holders(free)  # nor does a lock file still name it
        lease = pool.lease(2, "after", bound=0.5)  # the queue is free too
        assert lease.ids == free
        lease.release()

    # It takes 2 and 3, then waits in vain for a third.
    with pytest.raises(DeviceWaitError, match="partial waited 0.3 s for 3 simulated device"):
        pool.lease(3, "partial", bound=0.3)
    took_nothing("waited too long")

    def interrupted():
        assert devices._busy(pool._file("2")) and devices._busy(pool._file("3")), "not a partial lease"
        raise KeyboardInterrupt

    # Stopping the process's idle worlds (make_room) raises: even a BaseException gives them back.
    with pytest.raises(KeyboardInterrupt):
        pool.lease(3, "interrupted", bound=5, make_room=interrupted)
    took_nothing("was interrupted")
    first.release()


def test_worlds_waiting_at_once_are_served_one_at_a_time_through_the_queue(tmp_path, monkeypatch):
    """The queue's head alone takes devices as they free up: a small world queued behind a big one
    never takes a device the big one waits for, and is served when the big one has its lease and the
    queue is free."""
    pool = _pool(tmp_path)
    holders = [pool.lease(1, f"holder {i}", bound=5) for i in range(4)]  # every device, one lease each
    gate, big_sleeps = threading.Event(), threading.Event()

    def sleep(seconds):
        # The big world's first poll for devices parks here until the gate opens: a freed device stays
        # free until the small world, which polls freely, had its chance.
        if threading.current_thread().name == "big" and not gate.is_set():
            big_sleeps.set()
            gate.wait(helpers.RUN_TIMEOUT)
        else:
            time.sleep(seconds)

    monkeypatch.setattr(devices, "time", types.SimpleNamespace(monotonic=time.monotonic, sleep=sleep))
    served, leases, errors = [], {}, []
    small_waits = threading.Event()

    def world(name, need, beat=None):
        try:
            leases[name] = pool.lease(need, name, bound=helpers.RUN_TIMEOUT, beat=beat, heartbeat=60)
            served.append(name)
        except BaseException as exc:  # noqa: BLE001 - the test thread reports it
            errors.append(f"{name}: {exc!r}")

    big = threading.Thread(target=world, args=("big", 4), name="big", daemon=True)
    small = threading.Thread(target=world, args=("small", 1, lambda line: small_waits.set()), name="small",
                             daemon=True)
    try:
        big.start()
        assert big_sleeps.wait(60), errors  # the big world holds the queue and waits for 4 devices
        holders[0].release()  # device 0 is free now
        small.start()
        deadline = time.monotonic() + 60
        while not (small_waits.is_set() or served or errors) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not served and not errors and small_waits.is_set(), (served, errors, pool.holders(["0"]))
        assert not devices._busy(pool._file("0")), f"device 0 was taken by {pool.holders(['0'])}"
        gate.set()
        for holder in holders[1:]:
            holder.release()
        big.join(60)
        assert served == ["big"] and leases["big"].ids == ("0", "1", "2", "3"), (served, errors)
        time.sleep(0.3)  # the small world has the queue now, and nothing free
        assert served == ["big"], (served, errors)
        leases["big"].release()
        small.join(60)
        assert served == ["big", "small"] and leases["small"].ids == ("0",) and not errors, (served, errors)
    finally:
        gate.set()
        for lease in (*holders, *leases.values()):
            lease.release()
        big.join(60)
        small.join(60)


def test_bad_settings_name_their_variable(tmp_path):
    # Unicode digits ("²" raised ValueError), underscores, and a count no host has (it hung making the pool).
    for value in ("four", "0", "-2", "1.5", "²", "1_0", "9" * 30, str(devices.MAX_SIMULATED_DEVICES + 1)):
        with pytest.raises(ConfigError) as caught:
            devices.simulated_devices({ENV_SIMULATE_DEVICES: value})
        assert str(caught.value) == (f"Invalid {value!r} from {ENV_SIMULATE_DEVICES} environment variable: "
                                     f"expected a positive int of at most {devices.MAX_SIMULATED_DEVICES}"), caught.value
    for value in ("-1", "0", "soon", "inf"):
        with pytest.raises(ConfigError) as caught:
            devices.device_wait({ENV_DEVICE_WAIT: value})
        assert str(caught.value) == (f"Invalid device wait {value!r} from {ENV_DEVICE_WAIT} environment variable: "
                                     "expected a positive number of seconds"), caught.value
    # Good values are read as given; unset or blank is the documented default (docs/devices.rst: 600 s).
    assert devices.simulated_devices({ENV_SIMULATE_DEVICES: " 3 "}) == 3
    assert devices.simulated_devices({ENV_SIMULATE_DEVICES: " "}) is None and devices.simulated_devices({}) is None
    assert devices.device_wait({ENV_DEVICE_WAIT: "2.5"}) == 2.5
    assert devices.device_wait({}) == devices.device_wait({ENV_DEVICE_WAIT: " "}) == 600.0
    # A bad setting fails the world's lease before any device is touched, naming the variable.
    with pytest.raises(ConfigError, match=ENV_DEVICE_WAIT):
        devices.lease_for("cpu", lambda total: 1, "x", env=_env(tmp_path, **{ENV_DEVICE_WAIT: "-1"}))
    assert not glob.glob(str(tmp_path / "pool" / "*.lock"))


def test_the_visible_devices_of_the_parent_are_the_pool(tmp_path, monkeypatch):
    pool = devices.pool_for("cuda", {"CUDA_VISIBLE_DEVICES": "3,5", ENV_DEVICE_DIR: str(tmp_path / "pool")})
    assert pool is not None and pool.ids == ("3", "5")
    lease = pool.lease(2, "x", bound=1)
    assert lease.env() == {"CUDA_VISIBLE_DEVICES": "3,5"}  # rank 1 is cuda:1, the host's device 5
    lease.release()
    assert devices.pool_for("mps", {ENV_DEVICE_DIR: str(tmp_path / "pool")}) is None  # cannot be told apart


HOLDER = """
import sys, time
from continuous_test.controller import device_needs, devices
lease = devices.pool_for("cpu").lease(int(sys.argv[1]), "holder", bound=30)
print("held", lease.ids, flush=True)
time.sleep(float(sys.argv[2]))
"""


def _holder(tmp_path, count, seconds):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(count), str(seconds)], stdout=subprocess.PIPE,
                            text=True, env=helpers.scenario_env(_env(tmp_path)))
    assert proc.stdout is not None and proc.stdout.readline().startswith("held"), "the holder did not lease"
    return proc


@pytest.mark.e2e
def test_a_killed_holders_devices_go_back_at_once(tmp_path):
    holder = _holder(tmp_path, 4, 60)
    pool = _pool(tmp_path)
    with pytest.raises(DeviceWaitError, match=rf"held by pid {holder.pid} \(holder\)"):
        pool.lease(1, "waiter", bound=0.2)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    started = time.monotonic()
    lease = pool.lease(4, "after", bound=10)
    assert time.monotonic() - started < 5 and lease.ids == ("0", "1", "2", "3")
    lease.release()


@pytest.mark.e2e
def test_a_waiting_world_gets_its_devices_and_says_what_it_waits_for(tmp_path):
    holder = _holder(tmp_path, 3, 1.5)  # 0, 1 and 2 for 1.5 s
    pool = _pool(tmp_path)
    lines, meanwhile = [], []

    def beat(line):
        lines.append(line)
        meanwhile.append(pool.holders(["3"]))  # who holds the one free device while the world waits

    started = time.monotonic()
    lease = pool.lease(2, "waiter", bound=30, beat=beat, heartbeat=0.5)
    waited = time.monotonic() - started
    holder.wait()
    assert 0.5 < waited < 25, waited
    # The waiting world took device 3 at once and kept it; the first device its holder gave back completes it.
    assert meanwhile and set(meanwhile) == {f"pid {os.getpid()} (waiter)"}, meanwhile
    assert lease.ids == ("0", "3") and lease.env() == {"CUDA_VISIBLE_DEVICES": "0,3"}, lease.ids
    assert lines and lines[0].startswith("continuous_test: waiter waits for 2 simulated device(s) of 4"), lines
    assert f"held by pid {holder.pid} (holder)" in lines[0] and ENV_DEVICE_WAIT in lines[0], lines
    lease.release()


# -- worlds ------------------------------------------------------------------------------


@pytest.mark.e2e
def test_a_world_waits_with_a_heartbeat_until_a_killed_holders_devices_go_back(tmp_path):
    holder = _holder(tmp_path, 4, 60)
    env = helpers.scenario_env(_env(tmp_path, CONTINUOUS_TEST_HEARTBEAT="1", CONTINUOUS_TEST_DEVICE_WAIT="60"))
    proc = subprocess.Popen([helpers.interpreter(), SCENARIO, "-v", "One", "TooBig"], cwd=helpers.SCENARIOS, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        waiting = proc.stderr.readline()
        while waiting and "waits for" not in waiting:
            waiting = proc.stderr.readline()
        holder.kill()  # the waiting world gets the devices of a holder killed by SIGKILL
        out, err = proc.communicate(timeout=helpers.RUN_TIMEOUT)
    finally:
        holder.kill()
        holder.wait()
        proc.kill()
        proc.wait()
    assert f"One (world of 1) waits for 1 simulated device(s) of 4 (0 free; held by pid {holder.pid} (holder))" \
        in waiting, waiting + err
    assert unittest_counts(err) == {"ran": 3, "skipped": 1}, waiting + err
    assert "TooBig (world of 5) needs 5 simulated device(s), this host has 4" in err, err


@pytest.mark.e2e
def test_a_world_that_waits_too_long_fails_naming_the_setting(tmp_path):
    holder = _holder(tmp_path, 4, 60)
    try:
        proc = helpers.python(SCENARIO, "One", env=_env(tmp_path, CONTINUOUS_TEST_DEVICE_WAIT="0.5"))
    finally:
        holder.kill()
        holder.wait()
    assert unittest_counts(proc.stderr) == {"ran": 2, "errors": 2}, describe(proc)
    assert "DeviceWaitError: One (world of 1) waited 0.5 s for 1 simulated device(s)" in proc.stderr, describe(proc)


@pytest.mark.world
def test_a_process_never_waits_for_its_own_idle_world(tmp_path):
    # The module's @distributed world of 2 is idle while the class's world of 3 starts: it is parked.
    proc = helpers.pytest("test_devices_park.py", env=_env(tmp_path, CONTINUOUS_TEST_DEVICE_WAIT="5"))
    assert pytest_counts(proc.stdout) == {"passed": 3}, describe(proc)


def _records(folder):
    return [json.loads(line) for path in glob.glob(os.path.join(folder, "*.jsonl")) for line in open(path)]


def overlaps(records):
    """Pairs of records of different worlds whose spans overlap: (shared devices, a, b)."""
    found = []
    for i, a in enumerate(records):
        for b in records[i + 1:]:
            if (a["pid"], a["test"]) != (b["pid"], b["test"]) and a["start"] < b["end"] and b["start"] < a["end"]:
                found.append((set(a["visible"].split(",")) & set(b["visible"].split(",")), a, b))
    return found


@pytest.mark.e2e
def test_worlds_running_at_once_under_xdist_never_see_the_same_device(tmp_path):
    runs = int(os.environ.get("DEVICES_RUNS", "1"))  # more, to look for a rare overlap
    concurrent, run = 0, 0
    # Under load the workers may happen to run one after the other: up to 3 runs until two worlds met.
    while run < runs or (not concurrent and run < 3):
        folder = tmp_path / f"run{run}"
        folder.mkdir()
        run += 1
        proc = helpers.pytest(SCENARIO, "-n", "4", "--dist", "loadscope", "-rs",
                              env=_env(tmp_path, DEVICES_LOG_DIR=str(folder), DEVICES_HOLD="0.5"))
        assert pytest_counts(proc.stdout) == {"passed": 11, "skipped": 1}, describe(proc)
        records = _records(folder)
        assert len(records) == 20, records  # every rank of every test, from the rank's own environment
        ranks = {}
        for record in records:
            ranks.setdefault(record["test"], set()).add(record["rank"])
        for record in records:
            # Each rank sees its world's lease, one device per rank, and its LOCAL_RANK indexes into it.
            assert len(record["visible"].split(",")) == len(ranks[record["test"]]), record
            assert record["local_rank"] == record["rank"], record
        pairs = overlaps([r for r in records if r["rank"] == 0])
        assert not [p for p in pairs if p[0]], [p for p in pairs if p[0]]
        concurrent += len(pairs)
    assert concurrent, "no two worlds ran at the same time: the check saw nothing"


# -- the ct_devices marker -----------------------------------------------------------

MARKER_SCENARIO = "test_device_marker.py"


def _listed(proc):
    """The tests ``--collect-only -q`` listed, without their file."""
    return [line.split("::", 1)[1] for line in proc.stdout.splitlines() if "::" in line]


@pytest.mark.world
def test_every_distributed_test_is_marked_with_the_devices_it_needs():
    proc = helpers.pytest(MARKER_SCENARIO, "--collect-only", "-m", "ct_devices(n=2)")
    assert "continuous_test: devices needed: 2 by 3 tests (marker ct_devices(n=N)" in proc.stdout, describe(proc)
    # Each size of a test of several sizes needs its own count.
    assert _listed(proc) == ["Nccl::test_nccl", "FreshAsksForGpus::test_two_gpus", "test_sized_function[ws2]"], \
        describe(proc)
    assert "3/9 tests collected (6 deselected)" in proc.stdout, describe(proc)


@pytest.mark.world
@pytest.mark.parametrize("options, kept", [
    (["--ct-max-devices=0"], ["Gloo::test_cpu", "test_plain"]),
    # The keyword ct_devices_N selects too (-k): deselected with the rest.
    (["--ct-min-devices", "3", "-k", "ct_devices_4 or ct_devices_0"], ["test_nccl_function", "test_sized_function[ws4]"]),
])
def test_a_ci_job_routes_by_device_count(options, kept):
    proc = helpers.pytest(MARKER_SCENARIO, "--collect-only", *options)
    assert _listed(proc) == kept, describe(proc)
    assert f"{len(kept)}/9 tests collected ({9 - len(kept)} deselected)" in proc.stdout, describe(proc)


@pytest.mark.world
def test_a_simulated_host_marks_every_world_and_a_bad_limit_is_a_usage_error(tmp_path):
    proc = helpers.pytest(MARKER_SCENARIO, "--collect-only", env=_env(tmp_path))
    assert "devices needed: 1 by 1 test, 2 by 3 tests, 3 by 2 tests, 4 by 2 tests" in proc.stdout, describe(proc)
    proc = helpers.pytest(MARKER_SCENARIO, "--ct-max-devices=two")
    assert proc.returncode == 4, describe(proc)
    assert "Invalid device count 'two' from the --ct-max-devices option: expected an int >= 0" in proc.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
