"""Long non-ASCII names in the files a report keeps: a test named in CJK that prints a big output and
fails on rank 1, an exception class with a long accented name and a big message, and a class whose
own name is long and CJK (its world's directory is named after it)."""
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, run_tests

LONG_CJK = "分布式测试名称很长" * 12  # 108 characters, 324 bytes of UTF-8

# 160 characters, 315 bytes of UTF-8
Échec = type("Échec" + "é" * 155, (Exception,), {})


class LongNamesTest(MultiProcContinuousTest):
    world_size = 2

    def test_a_long_accented_exception_class_with_a_big_message(self):
        dist.barrier()
        raise Échec("début du message " + "é" * 60_000 + " fin du message")


def _prints_and_fails(self):
    dist.barrier()
    for line in range(500):
        print(f"line {line} of rank {self.rank}")
    self.assertEqual(self.rank, 0, "rank 1 fails after a big output")


setattr(LongNamesTest, "test_" + LONG_CJK, _prints_and_fails)

class 長い名前のクラス長い名前のクラス長い名前のクラス長い名前のクラス長い名前のクラス長い名前のクラス長い名前のクラス長い名前のクラス長い名前のクラス長い名前のクラス長い名前のクラス長い名前のクラス長い名前のクラス長い名前のクラス長い名前のクラス(MultiProcContinuousTest):  # 120 characters, 360 bytes
    world_size = 2

    def test_passes(self):
        dist.barrier()


if __name__ == "__main__":
    run_tests()
