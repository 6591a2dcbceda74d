"""Code that checks torch.distributed's functions by identity, pickles or inspects them: the recorder is not seen.

Each test passes on torch's own classes; with the recorder on (the default) it
must pass here too.  ``test_z_helper_module_diverges`` fails on purpose: its
report must show the call made through a helper module's imported name.
"""
import functools
import inspect
import pickle

import recorder_helper
import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

import continuous_test
from continuous_test import MultiProcContinuousTest, run_tests


class InvisibleTest(MultiProcContinuousTest):
    world_size = 2
    grace_period = 1.0

    def test_batched_point_to_point(self):
        peer = 1 - self.rank
        out, got = torch.full((4,), float(self.rank)), torch.zeros(4)
        ops = [dist.P2POp(dist.isend, out, peer), dist.P2POp(dist.irecv, got, peer)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        self.assertEqual(got.tolist(), [float(peer)] * 4)

    def test_identity_and_equality(self):
        self.assertIs(dist.isend, distributed_c10d.isend)
        self.assertIs(recorder_helper.isend, dist.isend)
        self.assertIn(dist.irecv, (distributed_c10d.isend, distributed_c10d.irecv))
        self.assertEqual(functools.partial(dist.isend).func, distributed_c10d.isend)

    def test_pickle_and_signature(self):
        self.assertIs(pickle.loads(pickle.dumps(dist.all_reduce)), dist.all_reduce)
        self.assertEqual(list(inspect.signature(dist.isend).parameters)[:3], ["tensor", "dst", "group"])
        self.assertIn("def isend(", inspect.getsource(dist.isend))

    def test_compiled_collective(self):
        @torch.compile(backend="eager", fullgraph=True)
        def reduce(t):
            dist.all_reduce(t)
            return t * 2

        self.assertEqual(reduce(torch.ones(2)).tolist(), [4.0, 4.0])

    @continuous_test.timeout(3)
    def test_z_helper_module_diverges(self):
        if self.rank == 0:
            recorder_helper.reduce_in_helper(torch.ones(3))
        else:
            dist.broadcast(torch.ones(3), src=1)


if __name__ == "__main__":
    run_tests()
