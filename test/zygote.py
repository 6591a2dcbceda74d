"""Real Python processes for the e2e tier, forked from an interpreter that imported torch once.

An e2e test's point is the real process: its own pid, exit code, ``atexit``
handlers, signals, file descriptors and launchers.  What it need not pay for is
``import torch`` (about 2 s of CPU here) in every ``python``, ``pytest``,
``torchrun`` and xdist process it starts, and in every process those start.

This module is two programs and the helpers' side of them:

* **The zygote** (``python zygote.py SOCKET``), one per test process, started on
  first use.  It imports torch, ``torch.distributed``, numpy and pytest, then waits on
  a Unix socket.  For each request it forks a child that becomes the process the
  request names, as the interpreter would have started it: ``python [-u] [-B]
  SCRIPT|-m MODULE|-c CODE args...`` with the caller's standard streams (passed as
  file descriptors), environment, working directory, SIGINT ignored or not,
  ``sys.argv``, ``sys.path``, ``__main__``, and fresh random seeds.  It reports the child's pid, then its wait
  status; when the caller dies, it kills the child.
* **The shim** (:func:`python`), an executable file named ``python`` in a private
  directory.  A command line that names it runs as ``python`` would, through the
  zygote: it hands over its streams, forwards the signals it gets to the child and
  exits as the child did.  Inside a forked child ``sys.executable`` (and
  multiprocessing's executable) is the shim, so what the child starts with
  ``sys.executable`` (torchrun's ranks, xdist's workers, a forkserver) is forked too.

The zygote refuses, and the shim then ``exec``s the real interpreter, whatever it
cannot reproduce: another option than ``-u``/``-B``, a script on standard input, an
interactive session, or an environment that differs from the zygote's in a variable
that the interpreter, torch or coverage read when they start (``PYTHON*`` but
``PYTHONPATH``, ``PYTHONUNBUFFERED`` and ``PYTHONDONTWRITEBYTECODE``; ``LD_*``,
``OMP_*`` but ``OMP_NUM_THREADS``, ``MKL_*``, ``TORCHDYNAMO*``, ``TORCH_LOGS``,
``COV_CORE_*`` and the like: ``_STARTUP_PREFIXES``).  A forkserver (the library's
fresh-interpreter template) is forked too: its starter knows it by the shim's pid, and
the library's ranks check their parent against the pid the template itself sets in
their environment.  So a run is either a
faithful fork or a real interpreter.  What a forked child has that a fresh one has not:
torch, numpy and pytest already in ``sys.modules`` (a test about what a process
imports runs with ``fresh=True``: ``helpers.run``), and the zygote's hash seed.  And
its end: threads joined, ``atexit`` run, streams and open files flushed, as the
interpreter's, but without the interpreter's teardown of every module (objects still
referenced then are not deallocated), which would write every page the child
inherited (:func:`_end`; skipping it took the suite's busy CPU from 608-622 to 460-506 s).
``CT_ZYGOTE=0`` turns it off: every process is a fresh interpreter.
"""
from __future__ import annotations

import array
import atexit
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

ENV_SOCKET = "CT_ZYGOTE_SOCKET"  # where the shim finds the zygote (in every scenario run's environment)
ENV_SWITCH = "CT_ZYGOTE"  # "0": every process is a fresh interpreter
_PRELOAD = ("torch", "torch.distributed", "numpy", "pytest")
# Variables read as the process starts, by the interpreter, its allocator and loader, coverage's startup hook,
# the OpenMP and BLAS runtimes torch loads, and torch's import (its logging and compiler settings): a request
# whose value of one differs from the zygote's gets a real interpreter.  What torch.distributed, gloo, NCCL,
# torchelastic or CUDA read when they are used (GLOO_SOCKET_IFNAME, TORCHELASTIC_*, CUDA_VISIBLE_DEVICES) is read
# in the child, from its own environment.
_STARTUP_PREFIXES = ("PYTHON", "LD_", "MALLOC", "COV_CORE", "COVERAGE", "OMP_", "MKL_", "KMP_", "GOMP", "OPENBLAS",
                     "TORCHDYNAMO", "TORCH_COMPILE", "TORCH_LOGS", "TORCH_CPP_LOG", "TORCH_SHOW_CPP", "TORCH_USE_",
                     "PYTORCH_JIT", "TRITON")
_HANDLED = ("PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "OMP_NUM_THREADS")  # set in the child
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
              signal.SIGALRM, signal.SIGWINCH)
_LENGTH = struct.Struct("!I")

# The shim: a tiny interpreter without site (about 10 ms), the real one's path in its first line.
_SHIM = '''\
import array, os, signal, socket, struct, sys
REAL = {real!r}
def real():
    os.execv(REAL, [REAL, *sys.argv[1:]])
path = os.environ.get({env!r})
if not path:
    real()
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    conn.connect(path)
except OSError:
    real()
fds = []
for name in os.listdir("/proc/self/fd"):
    fd = int(name)
    if fd != conn.fileno():
        try:
            os.fstat(fd)
        except OSError:
            continue  # listdir's own
        fds.append(fd)
if len(fds) > 250 or not {{0, 1, 2}} <= set(fds):
    conn.close()
    real()
payload = ({{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(), "fds": fds,
            "sigint_ignored": signal.getsignal(signal.SIGINT) == signal.SIG_IGN}})
import json
data = json.dumps(payload).encode()
conn.sendmsg([struct.pack("!I", len(data))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
conn.sendall(data)
reader = conn.makefile("rb")
line = reader.readline()
if not line.startswith(b"P"):
    conn.close()
    real()
child = int(line[1:])
def forward(signum, frame):
    try:
        os.kill(child, signum)
    except ProcessLookupError:
        pass
for s in {forwarded!r}:
    signal.signal(s, forward)
line = reader.readline()
code = os.waitstatus_to_exitcode(int(line[1:])) if line.startswith(b"X") else 70
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
os._exit(code & 0xFF)
'''


# ---- the helpers' side ---------------------------------------------------------------------------------------

_zygote: Optional[Tuple[subprocess.Popen, str, str]] = None  # (process, socket path, shim path)


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1") != "0"


def python() -> str:
    """The interpreter for a real process: the shim over this process's zygote (started on first use), or
    ``sys.executable`` where the zygote is off or could not start."""
    if not enabled():
        return sys.executable
    started = _start()
    return started[2] if started else sys.executable


def socket_path() -> Optional[str]:
    """The zygote's socket (started on first use), for a child's environment (None: it is off or could not
    start)."""
    started = _start() if enabled() else None
    return started[1] if started else None


def running() -> Optional[Tuple[str, str]]:
    """The socket and the shim of this process's zygote if it is running now (None: it was not started)."""
    return (_zygote[1], _zygote[2]) if _zygote and _zygote[0].poll() is None else None


def _start() -> Optional[Tuple[subprocess.Popen, str, str]]:
    global _zygote
    if _zygote and _zygote[0].poll() is None:
        return _zygote
    home = tempfile.mkdtemp(prefix="ct-zygote-")  # 0700: the socket and the shim are this user's alone
    sock, shim, log = os.path.join(home, "sock"), os.path.join(home, "python"), os.path.join(home, "log")
    with open(shim, "w") as f:
        f.write(f"#!{sys.executable} -IS\n" + _SHIM.format(real=sys.executable, env=ENV_SOCKET,
                                                            forwarded=tuple(int(s) for s in _FORWARDED)))
    os.chmod(shim, 0o700)
    env = {k: v for k, v in os.environ.items() if k != ENV_SOCKET}
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, __file__, sock, shim], env=env, stdin=subprocess.DEVNULL,
                                stdout=err, stderr=err, cwd=home)
    deadline = time.monotonic() + 60
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            return None
        time.sleep(0.02)
    _zygote = (proc, sock, shim)
    atexit.register(stop)
    return _zygote


def stop() -> None:
    """End this process's zygote (its children are the callers' to end) and remove its directory."""
    global _zygote
    if _zygote is None:
        return
    proc, sock, _ = _zygote
    _zygote = None
    proc.kill()
    proc.wait()
    home = os.path.dirname(sock)
    for name in os.listdir(home):
        os.unlink(os.path.join(home, name))
    os.rmdir(home)


# ---- the zygote ----------------------------------------------------------------------------------------------

def _startup_env(env: Dict[str, str]) -> Dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_STARTUP_PREFIXES) and k not in _HANDLED}


def _parse(argv: List[str]) -> Tuple[Optional[dict], str]:
    """What the interpreter would run for ``argv`` (None and why, where the zygote cannot reproduce it)."""
    flags = set()
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] not in ("-", "-c", "-m"):
        letters = argv[i][1:]
        if not letters or set(letters) - {"u", "B"}:
            return None, f"option {argv[i]}"
        flags |= set(letters)
        i += 1
    if i == len(argv) or argv[i] == "-":
        return None, "an interactive session or a script on standard input"
    if argv[i] in ("-c", "-m"):
        if i + 1 == len(argv):
            return None, f"{argv[i]} without an argument"
        return {"kind": argv[i], "what": argv[i + 1], "args": argv[i + 2:], "flags": sorted(flags)}, ""
    return {"kind": "script", "what": argv[i], "args": argv[i + 1:], "flags": sorted(flags)}, ""


class _Zygote:
    def __init__(self, sock_path: str, shim: str) -> None:
        self.shim = shim
        self.parent = os.getppid()
        self.env = _startup_env(os.environ)
        own = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        self.base_path = [p for p in sys.path[1:] if p not in own]
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(sock_path + ".new")
        self.listener.listen(64)
        os.rename(sock_path + ".new", sock_path)  # the helpers wait for the name: it appears once we listen
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        # A child's end wakes the loop: SIGCHLD writes to this pipe.
        self.wakeup_r, wakeup_w = os.pipe()
        os.set_blocking(self.wakeup_r, False)
        os.set_blocking(wakeup_w, False)
        signal.set_wakeup_fd(wakeup_w)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        self.selector.register(self.wakeup_r, selectors.EVENT_READ, "wakeup")
        self.children: Dict[int, socket.socket] = {}

    def serve(self) -> dict:
        """Serve until a forked child returns from here with what it must run."""
        zygote = os.getpid()
        while True:
            try:
                for key, _ in self.selector.select(timeout=1.0):
                    if key.data == "wakeup":
                        _drain(self.wakeup_r)
                    elif key.fileobj is self.listener:
                        conn, _ = self.listener.accept()
                        spec = self._request(conn)
                        if spec is not None:
                            return spec
                    else:
                        self._caller_ended(key.fileobj, key.data)  # type: ignore[arg-type]
                self._reap()
            except Exception:  # noqa: BLE001 - one caller's trouble must not end the zygote for the others
                if os.getpid() != zygote:
                    raise  # a child that failed to become its program: it ends, with the traceback
                import traceback

                traceback.print_exc()
            if os.getppid() != self.parent:
                os._exit(0)  # the test process is gone

    def _request(self, conn: socket.socket) -> Optional[dict]:
        fds: List[int] = []
        try:
            conn.settimeout(10)
            head, ancdata, _, _ = conn.recvmsg(_LENGTH.size, socket.CMSG_SPACE(256 * array.array("i").itemsize))
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.extend(array.array("i", data[:len(data) - len(data) % 4]))
            (length,) = _LENGTH.unpack(head)
            body = b""
            while len(body) < length:
                chunk = conn.recv(length - len(body))
                if not chunk:
                    raise ConnectionError("the caller left")
                body += chunk
            request = json.loads(body)
            spec, why = _parse(request["argv"])
            if spec is None or len(fds) != len(request["fds"]) or _startup_env(request["env"]) != self.env:
                conn.sendall(b"R" + (why or "its environment").encode() + b"\n")
                raise ConnectionError("refused")
            conn.settimeout(None)
        except (OSError, ValueError, KeyError, TypeError, struct.error):  # a caller that left, or sent nonsense
            for fd in fds:
                os.close(fd)
            conn.close()
            return None
        pid = os.fork()
        if pid == 0:
            self._become_child(conn, fds)
            return {**spec, "env": request["env"], "cwd": request["cwd"], "fds": dict(zip(request["fds"], fds)),
                    "sigint_ignored": bool(request.get("sigint_ignored"))}
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        try:
            conn.sendall(b"P%d\n" % pid)
            self.selector.register(conn, selectors.EVENT_READ, pid)
        except OSError:  # the caller was killed meanwhile: so is the process it stood for
            os.kill(pid, signal.SIGKILL)
        return None

    def _become_child(self, conn: socket.socket, fds: List[int]) -> None:
        os.close(signal.set_wakeup_fd(-1))
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        self.selector.close()
        os.close(self.wakeup_r)
        self.listener.close()
        conn.close()
        for other in self.children.values():
            other.close()

    def _caller_ended(self, conn: socket.socket, pid: int) -> None:
        """The caller (the shim) closed its end: it died, so its child dies too, as the process it stood for."""
        try:
            self.selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            try:
                self.selector.unregister(conn)
            except (KeyError, ValueError):
                pass
            try:
                conn.sendall(b"X%d\n" % status)
            except OSError:
                pass
            conn.close()

    def become(self, spec: dict) -> None:
        """In the forked child: be the process ``spec`` describes, as far as Python can tell."""
        import importlib
        import io
        import multiprocessing
        import random
        import types

        # The caller's descriptors at its numbers (a forkserver's, a launcher's): first out of the way of every
        # target number, then each to its own.
        import fcntl

        above = max([*spec["fds"], *spec["fds"].values()]) + 1
        high = {target: fcntl.fcntl(fd, fcntl.F_DUPFD, above) for target, fd in spec["fds"].items()}
        for fd in spec["fds"].values():
            os.close(fd)
        for target, fd in high.items():
            os.dup2(fd, target)
            os.close(fd)
        # Ctrl-C as the caller had it: an interpreter started with SIGINT ignored (a job a shell put in the
        # background, nohup) keeps it ignored; else it raises KeyboardInterrupt.  Not the zygote's own.
        signal.signal(signal.SIGINT, signal.SIG_IGN if spec["sigint_ignored"] else signal.default_int_handler)
        os.environ.clear()
        os.environ.update(spec["env"])
        os.chdir(spec["cwd"])
        unbuffered = "u" in spec["flags"] or bool(spec["env"].get("PYTHONUNBUFFERED"))
        sys.dont_write_bytecode = "B" in spec["flags"] or bool(spec["env"].get("PYTHONDONTWRITEBYTECODE"))
        sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.open(0, "rb", closefd=False), encoding="utf-8")
        sys.stdout = sys.__stdout__ = _stream(1, unbuffered, "strict")
        sys.stderr = sys.__stderr__ = _stream(2, unbuffered, "backslashreplace")

        kind, what = spec["kind"], spec["what"]
        own = [p for p in spec["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        first = {"script": os.path.dirname(os.path.realpath(what)), "-m": os.getcwd(), "-c": ""}[kind]
        sys.path[:] = [first, *own, *self.base_path]
        sys.path_importer_cache.clear()
        importlib.invalidate_caches()
        sys.argv[:] = [{"script": what, "-m": "-m", "-c": "-c"}[kind], *spec["args"]]
        sys.executable = self.shim
        multiprocessing.set_executable(self.shim)
        multiprocessing.current_process().authkey = os.urandom(32)
        sys.modules["multiprocessing.process"].ORIGINAL_DIR = os.getcwd()  # read at its import: the zygote's
        random.seed()
        threads = spec["env"].get("OMP_NUM_THREADS", "")
        if threads.isdigit() and int(threads) > 0:
            sys.modules["torch"].set_num_threads(int(threads))  # as torch reads it when its pool starts
        sys.modules["numpy"].random.seed()
        import tempfile as tempfile_module

        tempfile_module.tempdir = None

        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = __builtins__
        sys.modules["__main__"] = sys.modules["__mp_main__"] = main  # multiprocessing's alias, made at its import
        try:
            _run(kind, what, main)
        except SystemExit:
            raise
        except BaseException as exc:  # as the interpreter ends on it: the traceback from the program's own frames
            tb = exc.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename == _run.__code__.co_filename:
                tb = tb.tb_next
            sys.excepthook(type(exc), exc.with_traceback(tb), tb)
            if isinstance(exc, KeyboardInterrupt):
                _end_by_sigint()
            raise SystemExit(1) from None


def _run(kind: str, what: str, main) -> None:
    """Run the program as ``python -m``, ``-c`` or a script would, in ``main``'s namespace."""
    if kind == "-m":
        import runpy

        runpy._run_module_as_main(what, alter_argv=True)  # type: ignore[attr-defined]
        return
    if kind == "-c":
        code = compile(what, "<string>", "exec", dont_inherit=True)
    else:
        from importlib.machinery import SourceFileLoader

        path = os.path.abspath(what)  # as Python 3.9 and later make it (sys.argv[0] stays as given)
        main.__file__ = path
        main.__cached__ = None
        main.__loader__ = SourceFileLoader("__main__", path)
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec", dont_inherit=True)
    exec(code, main.__dict__)


def _end_by_sigint() -> None:
    """End as the interpreter does after an uncaught KeyboardInterrupt: threads joined, ``atexit`` run, then
    killed by SIGINT."""
    import atexit as atexit_module
    import threading

    threading._shutdown()  # type: ignore[attr-defined]
    atexit_module._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _stream(fd: int, unbuffered: bool, errors: str):
    import io

    raw = io.FileIO(fd, "w", closefd=False)
    tty = os.isatty(fd)
    if unbuffered:
        return io.TextIOWrapper(raw, encoding="utf-8", errors=errors, write_through=True)  # type: ignore[type-var]
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8", errors=errors,
                            line_buffering=tty or fd == 2)


def _main(sock_path: str, shim: str) -> None:
    for name in _PRELOAD:
        __import__(name)
    import numpy.random  # noqa: F401 - numpy 2 imports it lazily; the child reseeds it
    import gc

    gc.collect()
    gc.freeze()  # what the zygote imported is no child's garbage: its end need not walk it (0.4 s a process)
    zygote = _Zygote(sock_path, shim)
    spec = zygote.serve()
    try:
        zygote.become(spec)  # the child's program
    except SystemExit as exc:
        _end(exit_status(exc.code))
    _end(0)


def exit_status(code: object) -> int:
    """The exit status the interpreter makes of ``SystemExit(code)``: None is 0, an int itself (its low byte, as
    the system keeps it), anything else printed to stderr and 1.  Also what an in-process run reports
    (``inprocess``)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except Exception:
        pass
    return 1


def _end(status: int) -> None:
    """End the child as the interpreter ends, up to its teardown of every module, which it skips.

    As ``Py_FinalizeEx``: threads joined, ``atexit`` handlers run (``weakref.finalize``'s,
    multiprocessing's and coverage's among them), standard streams flushed (a failed flush
    of stdout makes the status 120), and then every file object still open flushed, as
    its deallocation in the teardown would.  The teardown itself would drop every object
    torch and the zygote made, writing each page it inherited (benchmarks/README.rst).
    """
    import atexit as atexit_module
    import gc
    import io
    import threading

    threading._shutdown()  # type: ignore[attr-defined]
    atexit_module._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None and not stream.closed:
                stream.flush()
        except Exception:
            status = 120 if stream in (sys.stdout, sys.__stdout__) else status
    for obj in gc.get_objects():  # the child's own objects: the zygote's are frozen
        # type(), not isinstance(): a weak proxy whose object is gone raises on isinstance.
        if issubclass(type(obj), (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom)):
            try:
                if not obj.closed:
                    obj.flush()
            except Exception:
                pass
    os._exit(status)


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
