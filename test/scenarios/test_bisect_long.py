"""A long history: fifty tests run before the one that fails, and one of them, in the middle, is to blame."""
from continuous_test import MultiProcContinuousTest, run_tests

STATE = {"poisoned": False}


def _innocent(self):
    pass


def _poisons(self):
    STATE["poisoned"] = True


class LongHistoryTest(MultiProcContinuousTest):
    world_size = 2

    for _i in range(50):
        locals()[f"test_{_i:02d}"] = _poisons if _i == 31 else _innocent

    def test_zz_victim(self):
        self.assertFalse(STATE["poisoned"], "poisoned by an earlier test")


del LongHistoryTest._i


if __name__ == "__main__":
    run_tests()
