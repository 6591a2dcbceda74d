"""A failing test with a local variable: with the runner's locals option, the rank's traceback shows it."""
from continuous_test import MultiProcContinuousTest, run_tests


class LocalsTest(MultiProcContinuousTest):
    world_size = 2

    def test_fails_with_a_local(self):
        a_local_to_show = 12345 + self.rank
        self.assertEqual(a_local_to_show, -1)


if __name__ == "__main__":
    run_tests()
