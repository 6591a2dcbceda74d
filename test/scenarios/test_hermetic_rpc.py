"""RPC in a shared world: every TensorPipe listener of every rank is on loopback, while RPC runs and after ranks leave early."""
import os

import torch
import torch.distributed.rpc as rpc

from continuous_test import run_tests
from continuous_test.torch_compat.rpc import RpcWorld
from test_hermetic import is_loopback, listening_sockets


def pid():
    return os.getpid()


class HermeticRpcTest(RpcWorld):
    world_size = 2

    def start_rpc(self):
        options = rpc.TensorPipeRpcBackendOptions(init_method=f"file://{self.file_name}", rpc_timeout=20)
        rpc.init_rpc(f"worker{self.rank}", rank=self.rank, world_size=self.world_size, rpc_backend_options=options)

    def test_1_rpc_listeners_are_loopback(self):
        self.start_rpc()
        self.assertEqual(rpc.rpc_sync(f"worker{1 - self.rank}", torch.add, args=(torch.ones(1), 1)), torch.ones(1) * 2)
        sockets = listening_sockets([rpc.rpc_sync(f"worker{r}", pid) for r in range(self.world_size)])
        print("rpc listening:", sockets)
        rpc.shutdown()  # graceful, so first: no rank's failed check ends its agent while a peer still calls it
        self.assertTrue(sockets, "TensorPipe should listen somewhere")
        self.assertEqual([s for s in sockets if not is_loopback(s[1])], [])

    def test_2_ranks_leave_early(self):
        # As torch's test_local_shutdown: each rank ends its agent without waiting for the others
        # (a call to itself only: a call to a peer could find it gone).
        self.start_rpc()
        rpc.rpc_sync(f"worker{self.rank}", torch.add, args=(torch.ones(1), 1))
        rpc.shutdown(graceful=False)

    def test_3_nothing_beyond_loopback_after_early_leave(self):
        self.start_rpc()
        sockets = listening_sockets([rpc.rpc_sync(f"worker{r}", pid) for r in range(self.world_size)])
        print("listening after an early leave:", sockets)
        rpc.shutdown()  # graceful, so first (see test_1)
        self.assertEqual([s for s in sockets if not is_loopback(s[1])], [])

    def test_4_tensorpipe_interface_is_loopback_unless_configured(self):
        self.assertEqual(os.environ["TP_SOCKET_IFNAME"], os.environ.get("EXPECTED_TP_IFNAME", "lo"))


if __name__ == "__main__":
    run_tests()
