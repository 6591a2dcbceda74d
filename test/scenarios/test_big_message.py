"""A test whose exception carries a 20 MB message: the report holds its head and tail, once."""
from continuous_test import MultiProcContinuousTest, run_tests


class BigMessageTest(MultiProcContinuousTest):
    world_size = 2

    def test_raises_a_huge_message(self):
        raise ValueError("start of the message " + "y" * 20_000_000 + " end of the message")


if __name__ == "__main__":
    run_tests()
