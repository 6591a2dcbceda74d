"""Classes with bad configuration; each test must fail with a message naming the class."""
from continuous_test import MultiProcContinuousTest, run_tests


class ZeroWorldTest(MultiProcContinuousTest):
    world_size = 0

    def test_zero(self):
        pass


class NegativeWorldTest(MultiProcContinuousTest):
    world_size = -3

    def test_negative(self):
        pass


class StringWorldTest(MultiProcContinuousTest):
    world_size = "2"

    def test_string(self):
        pass


def make_local_class():
    class LocalTest(MultiProcContinuousTest):
        world_size = 2

        def test_local(self):
            pass

    return LocalTest


LocalTest = make_local_class()


class UnknownBackendTest(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "glo"

    def test_unknown_backend(self):
        pass


class BadTimeoutTest(MultiProcContinuousTest):
    world_size = 2
    test_timeout = -5

    def test_bad_timeout(self):
        pass


class InitRaisesTest(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def _init_pg(cls, rank, world_size, rdvz_file):
        if rank == 1:
            raise RuntimeError("cannot join on rank 1")
        super()._init_pg(rank, world_size, rdvz_file)

    def test_init_a(self):
        pass

    def test_init_b(self):
        pass


if __name__ == "__main__":
    run_tests()
