"""@distributed(world_scope="session") functions of two files (this one, b) share one world; with
``$SCOPED_FUNCTIONS=""`` they set no scope and get a world each.  Each appends its rank pids to ``$PID_LOG``
(test_world_scopes.py)."""
import os

import torch.distributed as dist

import continuous_test


@continuous_test.distributed(world_size=2, backend="gloo", world_scope=os.environ.get("SCOPED_FUNCTIONS", "session") or None)
def test_in_file_b():
    pids = [None, None]
    dist.all_gather_object(pids, os.getpid())
    if dist.get_rank() == 0:
        with open(os.environ["PID_LOG"], "a") as f:
            f.write(f"b {pids}\n")
