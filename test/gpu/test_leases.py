"""Two one-GPU classes that test/gpu/check.py runs under ``pytest -n 2``: each rank records the GPU it saw.

Each test holds memory on its device for a while and writes, to
``$GPU_CHECK_LOG_DIR``, the UUID of the device its own CUDA sees, how many devices
it sees, ``CUDA_VISIBLE_DEVICES`` and the span of time it ran in; check.py then
asserts that the two worlds never saw the same GPU while both ran (device leases,
docs/devices.rst).
"""
import json
import os
import time

import torch

from continuous_test import MultiProcContinuousTest, run_tests

HOLD = 2.0  # seconds each test keeps its device busy, so that the two workers overlap


class _OneGpu(MultiProcContinuousTest):
    world_size = 1

    @classmethod
    def backend_str(cls):
        return "nccl"

    @classmethod
    def device_type(cls):
        return "cuda"

    def test_hold_a_gpu(self):
        start = time.time()
        held = torch.ones(1 << 20, device=self.device)
        properties = torch.cuda.get_device_properties(self.device)
        time.sleep(HOLD)
        torch.cuda.synchronize()
        line = {"test": self.id(), "pid": os.getpid(), "uuid": str(getattr(properties, "uuid", properties.name)),
                "count": torch.cuda.device_count(), "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "start": start, "end": time.time()}
        del held
        folder = os.environ.get("GPU_CHECK_LOG_DIR")
        if folder:
            with open(os.path.join(folder, f"{os.getpid()}.jsonl"), "a") as f:
                f.write(json.dumps(line) + "\n")


class OneGpuA(_OneGpu):
    pass


class OneGpuB(_OneGpu):
    pass


del _OneGpu

if __name__ == "__main__":
    run_tests()
