"""A test file that starts threads when it is imported: an executor it uses, a logging QueueListener.

Each rank must have them working, as a process of its own that imported the
file would: the executor runs what is submitted to it, and records logged
through the queue reach the listener's handler.
"""
import logging
import logging.handlers
import queue
import time
from concurrent.futures import ThreadPoolExecutor

import continuous_test
from continuous_test import MultiProcContinuousTest, run_tests

EXECUTOR = ThreadPoolExecutor(1)
EXECUTOR.submit(lambda: None).result()  # used at import: its worker thread runs from now on

RECORDS = []


class _Keep(logging.Handler):
    def emit(self, record):
        RECORDS.append(record.getMessage())


QUEUE = queue.Queue()
LISTENER = logging.handlers.QueueListener(QUEUE, _Keep())
LISTENER.start()
LOG = logging.getLogger("import_threads")
LOG.addHandler(logging.handlers.QueueHandler(QUEUE))
LOG.setLevel(logging.INFO)
LOG.propagate = False


class ImportThreadsTest(MultiProcContinuousTest):
    world_size = 2

    @continuous_test.timeout(30)
    def test_executor_runs_work(self):
        self.assertEqual(EXECUTOR.submit(lambda: 40 + 2).result(timeout=10), 42)

    @continuous_test.timeout(30)
    def test_listener_gets_records(self):
        LOG.info("from rank %s", self.rank)
        deadline = time.monotonic() + 10
        while f"from rank {self.rank}" not in RECORDS and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertIn(f"from rank {self.rank}", RECORDS)


if __name__ == "__main__":
    run_tests()
