"""torch's RPC suite, from the torch wheel, on continuous_test's engine, with torch's test names.

PyTorch runs ``rpc_utils.generate_tests`` through two files,
``test/distributed/rpc/test_tensorpipe_agent.py`` (``GENERIC_TESTS +
TENSORPIPE_TESTS`` on ``TensorPipeRpcAgentTestFixture``, prefix ``TensorPipe``: 436
tests on CPU) and ``test_faulty_agent.py`` (``FAULTY_AGENT_TESTS`` on
``FaultyRpcAgentTestFixture``, prefix ``Faulty``: 28), each mixing in ``SpawnHelper``,
which spawns fresh interpreters for every test.  This file is both: ``RPC_AGENT``
picks the agent (``tensorpipe``, the default, or ``faulty``), one per process as
torch's files are (the faulty fixture's import re-creates rpc's ``BackendType``).
Here the classes are built on ``continuous_test.torch_compat.rpc.SpawnHelper``: one
world of warm ranks per class, each test with its own ``init_rpc``/``shutdown`` on a
rendezvous of its own, and fresh ranks from the template for the tests
``needs_fresh_ranks`` picks (docs/rpc.rst)::

    python examples/test_torch_rpc_suite.py -v -k TensorPipeRpcTest.test_add
    RPC_AGENT=faulty python -m pytest examples/test_torch_rpc_suite.py

``CT_SUITE_ENGINE=torch`` builds them on torch's ``SpawnHelper`` instead: torch's two
files, which ``benchmarks/torch_rpc_suite.py`` compares with this one.
"""
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
