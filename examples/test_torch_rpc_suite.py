"""torch's RPC suite (rpc_utils.generate_tests) on continuous_test's engine; draft."""
import os
import sys

import torch.distributed as dist

if not dist.is_available():
    print("Distributed not available, skipping tests", file=sys.stderr)
    sys.exit(0)

AGENT = os.environ.get("RPC_AGENT", "tensorpipe")

if AGENT == "faulty":
    from torch.testing._internal.distributed.rpc.faulty_rpc_agent_test_fixture import (
        FaultyRpcAgentTestFixture as Fixture,
    )
    from torch.testing._internal.distributed.rpc_utils import FAULTY_AGENT_TESTS as SUITES
    PREFIX = "Faulty"
else:
    from torch.testing._internal.distributed.rpc.tensorpipe_rpc_agent_test_fixture import (
        TensorPipeRpcAgentTestFixture as Fixture,
    )
    from torch.testing._internal.distributed.rpc_utils import GENERIC_TESTS, TENSORPIPE_TESTS
    SUITES = GENERIC_TESTS + TENSORPIPE_TESTS
    PREFIX = "TensorPipe"

if os.environ.get("CT_SUITE_ENGINE", "ours") == "ours":
    from continuous_test import run_tests
    from continuous_test.torch_compat.rpc import generate_tests

    globals().update(generate_tests(PREFIX, Fixture, SUITES, __name__))
else:
    from torch.testing._internal.common_utils import run_tests
    from torch.testing._internal.distributed.rpc_utils import generate_tests

    globals().update(generate_tests(PREFIX, Fixture, SUITES, __name__))

if __name__ == "__main__":
    run_tests()
