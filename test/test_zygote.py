"""test/zygote.py: a forked process is the process the command line names, or a real interpreter runs it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import helpers
import pytest
import zygote

pytestmark = pytest.mark.e2e

PROGRAM = """\
import atexit, multiprocessing, os, sys  # multiprocessing: as torch imports it (the zygote has)
atexit.register(print, "atexit ran", flush=True)
print("argv", sys.argv, "name", __name__, "file", globals().get("__file__"), "path0", repr(sys.path[0]))
print("main", sys.modules["__main__"] is sys.modules["__mp_main__"])
print("buffered", sys.stdout.line_buffering, sys.stderr.line_buffering)
how = os.environ.get("HOW")
if how == "exit":
    sys.exit(3)
if how == "raise":
    raise ValueError("from the program")
if how == "interrupt":
    raise KeyboardInterrupt
"""


def _both(args, env=None, cwd=None):
    """The same command line run forked (through the shim) and by a real interpreter."""
    runs = []
    for exe in (helpers.interpreter(), sys.executable):
        runs.append(subprocess.run([exe, *args], env=helpers.scenario_env(env), cwd=cwd or helpers.SCENARIOS,
                                   stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120))
    return runs


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    return path


@pytest.mark.parametrize("how", ["", "exit", "raise", "interrupt"])
def test_a_script_ends_as_it_would_in_a_real_interpreter(program, how, tmp_path):
    forked, real = _both([program.name, "a", "b"], env={"HOW": how}, cwd=tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)
    assert "atexit ran" in real.stdout


ENDING = """\
import os, sys, threading, time, weakref
class Gone:
    pass
gone = Gone()
proxy = weakref.proxy(gone)  # a proxy to an object that no longer exists, still referenced at the end
del gone
log = open(sys.argv[1], "w")  # never closed: flushed as the interpreter's end deallocates it
log.write("written, not flushed")
threading.Thread(target=lambda: (time.sleep(0.3), print("thread ended", flush=True))).start()
sys.exit("a message, not a number")
"""


def test_an_open_file_a_running_thread_and_an_exit_message_end_as_in_a_real_interpreter(tmp_path):
    # A forked child skips the interpreter's teardown of modules (zygote._end): what that teardown would do
    # that a program can see, it does itself.
    (tmp_path / "ending.py").write_text(ENDING)
    runs = []
    for exe in (helpers.interpreter(), sys.executable):
        log = tmp_path / f"{len(runs)}.log"
        proc = subprocess.run([exe, "ending.py", str(log)], env=helpers.scenario_env(), cwd=tmp_path,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        runs.append((proc.returncode, proc.stdout, proc.stderr, log.read_text()))
    assert runs[0] == runs[1]
    assert runs[1] == (1, "thread ended\n", "a message, not a number\n", "written, not flushed")


def test_modules_and_code_run_as_with_m_and_c(tmp_path):
    for args in (["-m", "json.tool", "--sort-keys"], ["-c", "import sys; print(sys.argv, repr(sys.path[0]))", "x"],
                 ["-u", "-B", "-c", "import sys; print(sys.dont_write_bytecode)"]):
        forked, real = _both(args, cwd=tmp_path)
        assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr), args


def test_a_forked_process_is_forked_and_so_is_what_it_starts():
    code = ("import subprocess, sys; print('torch' in sys.modules); "
            "print(subprocess.run([sys.executable, '-c', 'import sys; print(\"torch\" in sys.modules)'], "
            "capture_output=True, text=True).stdout.strip())")
    forked = subprocess.run([helpers.interpreter(), "-c", code], env=helpers.scenario_env(), capture_output=True,
                            text=True, timeout=60)
    assert forked.stdout.split() == ["True", "True"], forked.stderr  # torch already there: forked, twice


def test_what_it_cannot_reproduce_runs_in_a_real_interpreter():
    probe = "import sys; print('torch' in sys.modules)"
    for args, env in ((["-X", "dev", "-c", probe], None), (["-c", probe], {"PYTHONHASHSEED": "7"}),
                      (["-c", probe], {"OMP_PROC_BIND": "true"})):
        proc = subprocess.run([helpers.interpreter(), *args], env=helpers.scenario_env(env), capture_output=True,
                              text=True, timeout=60)
        assert proc.stdout.strip() == "False", (args, env, proc.stderr)


def test_fresh_seeds_descriptors_and_the_callers_directory(tmp_path):
    read, write = os.pipe()
    code = ("import os, random, numpy; os.write(int(os.environ['FD']), b'x'); "
            "print(random.random(), numpy.random.random(), os.getcwd())")
    outs = []
    for _ in range(2):
        proc = subprocess.run([helpers.interpreter(), "-c", code], env=helpers.scenario_env({"FD": str(write)}),
                              pass_fds=[write], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout.split())
    os.close(write)
    assert os.read(read, 10) == b"xx"
    assert outs[0][2] == outs[1][2] == str(tmp_path)
    assert outs[0][0] != outs[1][0] and outs[0][1] != outs[1][1]


def test_signals_reach_the_child_and_a_killed_caller_takes_it_along(tmp_path):
    code = ("import os, signal, sys, time; "
            "signal.signal(signal.SIGTERM, lambda *a: (print('got TERM', flush=True), sys.exit(5))); "
            "print(os.getpid(), flush=True); time.sleep(60)")
    for sig, code_seen in ((signal.SIGTERM, 5), (signal.SIGKILL, -9)):
        proc = subprocess.Popen([helpers.interpreter(), "-c", code], env=helpers.scenario_env(),
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        assert child != proc.pid  # the forked child, not the shim
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == code_seen, out
        deadline = time.monotonic() + 10
        while helpers.running(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not helpers.running(child), f"the child outlived its caller (killed by {sig.name})"


def test_ctrl_c_is_as_the_caller_had_it_not_as_the_zygote_has_it():
    # An interpreter inherits an ignored SIGINT and keeps it; else Ctrl-C raises KeyboardInterrupt.
    code = "import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"
    for ignored in (True, False):
        sigint = signal.SIG_IGN if ignored else signal.SIG_DFL
        proc = subprocess.run([helpers.interpreter(), "-c", code], env=helpers.scenario_env(), capture_output=True,
                              text=True, timeout=60, preexec_fn=lambda s=sigint: signal.signal(signal.SIGINT, s))
        assert proc.stdout.strip() == str(ignored), helpers.describe(proc)


def test_the_zygote_survives_a_caller_that_leaves_before_it_asks():
    import socket

    path = zygote.socket_path()
    assert path
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(path)  # and leave without a request
    proc = subprocess.run([helpers.interpreter(), "-c", "import sys; print('torch' in sys.modules)"],
                          env=helpers.scenario_env(), capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "True", proc.stderr


def test_a_caller_killed_after_its_request_takes_its_child_along(tmp_path):
    import array
    import json
    import socket
    import struct

    path = zygote.socket_path()
    assert path
    stamp = tmp_path / "alive"
    request = {"argv": ["-c", f"import time; time.sleep(1); open({str(stamp)!r}, 'w').close()"],
               "env": helpers.scenario_env(), "cwd": str(tmp_path), "fds": [0, 1, 2]}
    data = json.dumps(request).encode()
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(path)
        conn.sendmsg([struct.pack("!I", len(data))],
                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
        conn.sendall(data)  # and leave before the answer, as a shim killed at that moment would
    time.sleep(3)
    assert not stamp.exists(), "the child outlived the caller that asked for it"
    proc = subprocess.run([helpers.interpreter(), "-c", "print(1)"], env=helpers.scenario_env(), capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "1\n"), proc.stderr
    assert zygote.socket_path() == path, "the zygote died and was replaced"


@pytest.mark.world
def test_a_run_in_this_process_starts_its_fresh_interpreter_template_through_the_zygote():
    # test/inprocess.py: in a worker whose zygote runs, the library's forkserver template
    # (started when the process runs other threads) is forked as well; multiprocessing's
    # executable is put back exactly after the run (it keeps bytes: putting back its
    # str() grew the path at every run until a worker ran out of memory).
    import multiprocessing.spawn

    import inprocess

    sock, shim = zygote.socket_path(), zygote.python()
    before = multiprocessing.spawn.get_executable()
    for _ in range(3):
        with inprocess._scoped(helpers._scenario_env(), ["python"], [], []):
            assert os.fsdecode(multiprocessing.spawn.get_executable()) == shim
            assert os.environ[zygote.ENV_SOCKET] == sock
        assert multiprocessing.spawn.get_executable() == before
    proc = helpers.python("test_template.py", env={"CONTINUOUS_TEST_START_METHOD": "forkserver"})
    assert proc.returncode == 0 and helpers.unittest_counts(proc.stderr) == {"ran": 3}, helpers.describe(proc)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
