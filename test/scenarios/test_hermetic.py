"""While a world is up: every listening socket of every rank is on loopback, files are private."""
import ipaddress
import os
import socket
import stat

import torch
import torch.distributed as dist

from continuous_test import _role, MultiProcContinuousTest, MultiProcessTestCase, run_tests


def socket_inodes(pid):
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def decode_address(hex_addr):
    host, port = hex_addr.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1])), int(port, 16)
    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
    return str(ipaddress.IPv6Address(b"".join(words))), int(port, 16)


def listening_sockets(pids):
    """(proto, address, port, pid) of every listening TCP / bound UDP socket of pids."""
    inodes = {inode: pid for pid in pids for inode in socket_inodes(pid)}
    found = []
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        with open(f"/proc/net/{proto}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                listening = state == "0A" if proto.startswith("tcp") else state == "07"
                if listening and inode in inodes:
                    found.append((proto, *decode_address(local), inodes[inode]))
    return found


def is_loopback(address):
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


class HermeticWorldTest(MultiProcContinuousTest):
    world_size = 3

    def test_every_listening_socket_is_loopback(self):
        t = torch.ones(1)
        dist.all_reduce(t)  # make sure every pair connection exists
        pids = [None] * self.world_size
        dist.all_gather_object(pids, os.getpid())
        sockets = listening_sockets(pids)
        print("listening:", sockets)
        self.assertTrue(sockets, "gloo should listen somewhere")
        self.assertEqual([s for s in sockets if not is_loopback(s[1])], [])

    def test_world_files_are_private(self):
        spec = _role.current().spec
        self.assertEqual(mode(spec.world_dir), 0o700)
        self.assertEqual(mode(spec.rendezvous_file) & 0o077, 0)
        self.assertEqual(mode(spec.log_file), 0o600)

    def test_gloo_interface_is_loopback_unless_configured(self):
        self.assertEqual(os.environ["GLOO_SOCKET_IFNAME"], os.environ.get("EXPECTED_GLOO_IFNAME", "lo"))

    def test_hostname_may_not_resolve(self):
        expected = os.environ.get("EXPECT_UNRESOLVABLE_HOSTNAME")
        if expected:
            self.assertEqual(socket.gethostname(), expected)
            with self.assertRaises(OSError):
                socket.getaddrinfo(socket.gethostname(), None)


class HermeticFreshTest(MultiProcessTestCase):
    world_size = 2

    def test_fresh_world_listens_on_loopback_and_is_private(self):
        self.init_pg("gloo")
        t = torch.ones(1)
        dist.all_reduce(t)
        pids = [None] * self.world_size
        dist.all_gather_object(pids, os.getpid())
        self.assertEqual([s for s in listening_sockets(pids) if not is_loopback(s[1])], [])
        self.assertEqual(mode(os.path.dirname(self.file_name)), 0o700)
        self.assertEqual(mode(self.file_name) & 0o077, 0)


if __name__ == "__main__":
    run_tests()
