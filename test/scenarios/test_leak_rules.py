"""What the leak check keeps, and what it must not miss.

Run with ``leaklib`` on ``PYTHONPATH``.  ``ImportTimeTest``: ``test_a`` imports
``fakelib`` for the first time, which adds its ``_vendor`` directory to sys.path
and warnings filters for itself (one naming it, two that do not), sets a variable
and registers a ``sys.modules`` entry that is not a module; ``test_b`` needs them.  ``test_c`` sets a
variable torch's compile stack sets for itself (kept); ``test_d`` sets one of its
own (a leak).  ``MissedTest``: ``test_a`` leaves the umask, a lowered recursion limit,
a trace and a profile function, a pending timer and a ``torch.device`` context
changed, SIGCHLD and SIGTERM handlers, the open-file limit, numpy's error handling
and print options, anomaly mode, gc thresholds, the socket timeout, torch's print
options and TZ, and a child running in a session of its own; ``test_b`` needs them as
they were.  ``SessionChildTest`` (leak check off) leaves such a child to the end
of the run, which must end it.  ``ThreadTest``: a thread that ended is followed by a new one that
may reuse its ident (the first one is a library's, which the check leaves alone),
and stays alive: a leak either way.  ``DaemonTest``: ``test_a`` leaves a daemon
thread that ends its rank 2 s later (a leak: the world is restarted, and
``test_b`` passes); ``test_c`` uses a library's per-process thread pool, which
``test_d`` finds still there (kept: no restart).  ``TorchOwnTest`` (4 ranks): DDP
and a 2-D ``init_device_mesh`` in each test, which torch keeps per process by
design (the first DDP sets ``TORCHINDUCTOR_CACHE_DIR``): no leak.
"""
import os
import signal
import subprocess
import sys
import threading
import time
import warnings

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, run_tests

# As in a process where torch's compile stack has not run yet (the caller's may have).
os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)


class Gloo(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"


class ImportTimeTest(Gloo):
    def test_a_first_import(self):
        import fakelib  # noqa: F401

    def test_b_needs_what_the_import_set(self):
        import fake_vendored

        self.assertEqual(fake_vendored.VALUE, 42)
        self.assertTrue(os.environ["FAKELIB_HOME"].endswith("fakelib"))
        import fakelib_shim

        self.assertEqual(fakelib_shim.ANSWER, 42)
        for message, module in ((None, "fakelib"), (".*fakelib's old api.*", None), (None, r"fakelib\..*")):
            self.assertTrue(any(f[0] == "ignore" and getattr(f[1], "pattern", None) == message
                                and getattr(f[3], "pattern", None) == module for f in warnings.filters),
                            (message, module, warnings.filters))

    def test_c_torch_sets_its_cache_dir(self):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = "/tmp/torchinductor_test"

    def test_d_sets_a_variable_of_its_own(self):
        os.environ["LEAK_RULES_VAR"] = "1"


def _trace(frame, event, arg):
    return None


def _unwatched_before():
    """The state test_a changes that the leak check once left alone, as test_b must find it."""
    import gc
    import resource
    import socket

    import numpy as np

    return {"sigchld": signal.getsignal(signal.SIGCHLD), "sigterm": signal.getsignal(signal.SIGTERM),
            "nofile": resource.getrlimit(resource.RLIMIT_NOFILE), "seterr": np.geterr(),
            "anomaly": torch.is_anomaly_enabled(), "gc": gc.get_threshold(), "socket": socket.getdefaulttimeout(),
            "np_print": np.get_printoptions(), "torch_print": torch._tensor_str.PRINT_OPTS.precision,
            "tz": os.environ.get("TZ"), "local": time.localtime(0).tm_hour}


def _change_the_unwatched():
    import gc
    import resource
    import socket

    import numpy as np

    signal.signal(signal.SIGCHLD, lambda *a: None)
    signal.signal(signal.SIGTERM, lambda *a: None)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 1, hard))
    np.seterr(all="raise")
    torch.set_anomaly_enabled(True)
    gc.set_threshold(1)
    socket.setdefaulttimeout(0.5)
    np.set_printoptions(precision=2)
    torch.set_printoptions(precision=1)
    os.environ["TZ"] = "JST-9"
    time.tzset()


class MissedTest(Gloo):
    def test_a_changes_process_state(self):
        type(self).unwatched = _unwatched_before()
        _change_the_unwatched()
        os.umask(0o077)
        sys.setrecursionlimit(sys.getrecursionlimit() - 100)
        sys.settrace(_trace)
        sys.setprofile(_trace)
        signal.setitimer(signal.ITIMER_REAL, 100.0)
        torch.device("meta").__enter__()  # a `with torch.device(...)` left entered
        type(self).child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                            start_new_session=True)

    def test_b_needs_it_as_it_was(self):
        self.assertEqual(torch.ones(1).device.type, "cpu")
        self.assertIsNotNone(MissedTest.child.poll())  # ended, not left to outlive the run
        mask = os.umask(0o022)
        os.umask(mask)
        self.assertEqual(mask, 0o022)
        self.assertIsNone(sys.gettrace())
        self.assertIsNone(sys.getprofile())
        self.assertEqual(signal.getitimer(signal.ITIMER_REAL), (0.0, 0.0))
        self.assertEqual(_unwatched_before(), MissedTest.unwatched)


_ENDING = threading.Event()


class ThreadTest(Gloo):
    def test_a_starts_a_thread_that_ends_later(self):
        import fakelib

        fakelib.start_watcher(_ENDING)

    def test_b_reuses_its_ident(self):
        ended = next(t for t in threading.enumerate() if t.name == "fakelib-watcher")
        ident = ended.ident
        _ENDING.set()
        ended.join()
        stop = threading.Event()
        late = threading.Thread(target=stop.wait, args=(30,), name="still-running", daemon=False)
        late.start()
        print(f"IDENT_REUSED {late.ident == ident}", flush=True)


def _end_rank_later():
    time.sleep(2.0)
    os._exit(7)


class DaemonTest(Gloo):
    def test_a_leaves_a_daemon_thread(self):
        threading.Thread(target=_end_rank_later, name="ends-the-rank", daemon=True).start()

    def test_b_innocent(self):
        time.sleep(3.0)
        dist.all_reduce(torch.ones(2))

    def test_c_uses_a_library_pool(self):
        import fakelib

        self.assertEqual(fakelib.run_in_pool(lambda: 3), 3)

    def test_d_finds_the_pool_kept(self):
        import fakelib

        print(f"POOL_KEPT {fakelib.pool_kept()}", flush=True)


class TorchOwnTest(Gloo):
    """What torch keeps per process by design: the first DDP sets TORCHINDUCTOR_CACHE_DIR; a mesh's subgroups."""

    world_size = 4

    def _ddp_step(self):
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(torch.nn.Linear(4, 2))
        model(torch.ones(3, 4)).sum().backward()

    def test_a_ddp(self):
        self._ddp_step()

    def test_b_ddp(self):
        self._ddp_step()

    def test_c_device_mesh(self):
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        t = torch.ones(1)
        dist.all_reduce(t, group=mesh.get_group("dp"))
        self.assertEqual(t.item(), 2.0)


class SessionChildTest(Gloo):
    leak_policy = "off"

    def test_starts_a_child_for_the_class(self):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        print(f"SESSION_CHILD {child.pid}", flush=True)


if __name__ == "__main__":
    run_tests()
