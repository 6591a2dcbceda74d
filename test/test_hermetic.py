"""Hermetic worlds: loopback only, private files, no dependence on the hostname."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import helpers
import pytest
from helpers import describe, unittest_counts

HOSTNAME = "unresolvable-host-xyz"


@pytest.mark.world
def test_loopback_only_and_private_files(tmp_path):
    proc = helpers.python("test_hermetic.py", "-v", env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 5}, describe(proc)
    assert "listening: [('tcp', '127.0.0.1'" in proc.stderr, describe(proc)
    # ... and the private directory and rendezvous file are gone afterwards.
    assert [p for p in os.listdir(tmp_path) if not p.startswith("torchinductor_")] == []


@pytest.mark.world
def test_rpc_listens_on_loopback_only_also_after_ranks_leave_early():
    # TensorPipe's listeners (TP_SOCKET_IFNAME, pinned by each rank) and its gloo group,
    # while RPC runs, and in the next test of the same ranks after a non-graceful shutdown.
    proc = helpers.python("test_hermetic_rpc.py", "-v")
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 4}, describe(proc)
    assert "rpc listening: [('tcp', '127.0.0.1'" in proc.stdout + proc.stderr, describe(proc)
    assert "listening after an early leave: [('tcp', '127.0.0.1'" in proc.stdout + proc.stderr, describe(proc)


def _external_interface():
    for _, name in socket.if_nameindex():
        if name.startswith("lo"):
            continue
        probe = helpers.run([sys.executable, "-c", f"import socket, fcntl, struct; s = socket.socket(); "
                             f"fcntl.ioctl(s.fileno(), 0x8915, struct.pack('256s', b'{name}'))"])
        if probe.returncode == 0:
            return name
    return None


@pytest.mark.e2e
def test_the_loopback_check_can_fail():
    # With gloo told to use a real interface, the socket check in the scenario must fail:
    # this is what the default (loopback) protects against.
    iface = _external_interface()
    if iface is None:
        pytest.skip("no non-loopback interface with an IPv4 address on this machine")
    proc = helpers.python("test_hermetic.py", "-k", "HermeticWorldTest",
                          env={"GLOO_SOCKET_IFNAME": iface, "EXPECTED_GLOO_IFNAME": iface})
    assert proc.returncode == 1, describe(proc)
    assert "FAIL: test_every_listening_socket_is_loopback" in proc.stderr, describe(proc)
    assert "test_gloo_interface_is_loopback_unless_configured" not in proc.stderr.split("FAIL:", 1)[1]


@pytest.mark.e2e
def test_the_rpc_loopback_check_can_fail():
    # With TensorPipe told to use a real interface, the RPC socket checks must fail.
    iface = _external_interface()
    if iface is None:
        pytest.skip("no non-loopback interface with an IPv4 address on this machine")
    proc = helpers.python("test_hermetic_rpc.py", "-v", real=True,
                          env={"TP_SOCKET_IFNAME": iface, "EXPECTED_TP_IFNAME": iface})
    assert proc.returncode == 1, describe(proc)
    assert "FAIL: test_1_rpc_listeners_are_loopback" in proc.stderr, describe(proc)
    assert "FAIL: test_3_nothing_beyond_loopback_after_early_leave" in proc.stderr, describe(proc)


def _can_unshare() -> str:
    if shutil.which("unshare") is None:
        return "the unshare command is not installed"
    probe = subprocess.run(["unshare", "--uts", "hostname", HOSTNAME], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"a private UTS namespace is not permitted here: {probe.stderr.strip()}"
    return ""


@pytest.mark.e2e
def test_world_starts_when_the_hostname_does_not_resolve():
    why_not = _can_unshare()
    if why_not:
        pytest.skip(why_not)
    script = f'hostname {HOSTNAME} && exec "$0" "$@"'
    proc = helpers.run(["unshare", "--uts", "sh", "-c", script, sys.executable, "test_hermetic.py", "-v"],
                       env={"EXPECT_UNRESOLVABLE_HOSTNAME": HOSTNAME})
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 5}, describe(proc)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
