"""torch's ``ShardedTensorTestBase`` (``distributed._shard.sharded_tensor``), on :class:`~continuous_test.MultiProcessTestCase`.

Built by :func:`~continuous_test.torch_compat.derived.rebase` from torch's own class
body: fresh ranks per test, ``world_size`` 4 as torch's, and torch's ``init_pg``,
``init_rpc``, ``init_comms``, ``destroy_comms`` and ``assert_sharded_tensor_equal``.
torch's ``with_comms`` of that module works on it as it is (it skips with torch's
exit code where the backend needs more accelerators, then calls ``init_comms``).
"""
from __future__ import annotations

from torch.testing._internal import common_distributed as _torch_distributed
from torch.testing._internal.distributed._shard import sharded_tensor as _torch_sharded_tensor

from continuous_test.multiprocess import MultiProcessTestCase
from continuous_test.torch_compat.derived import rebase

__all__ = ["ShardedTensorTestBase"]

# Hide this module's frames from unittest tracebacks.
__unittest = True

ShardedTensorTestBase = rebase(_torch_sharded_tensor.ShardedTensorTestBase,
                               {_torch_distributed.MultiProcessTestCase: MultiProcessTestCase}, __name__)
