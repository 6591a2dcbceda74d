"""Order shuffling: plain unittest classes (no world needed) that print their order.

Each test prints ``ran <Class>.<test>`` on stdout; ``test_fails`` of ``Zeta``
fails when FAIL_ONE=1, so the seed's place in a failure report can be checked.
"""
import os

from continuous_test import TestCase, run_tests


def _say(case):
    print(f"ran {type(case).__name__}.{case._testMethodName}", flush=True)


class Alpha(TestCase):
    def test_a(self):
        _say(self)

    def test_b(self):
        _say(self)

    def test_c(self):
        _say(self)

    def test_d(self):
        _say(self)


class Beta(TestCase):
    def test_a(self):
        _say(self)

    def test_b(self):
        _say(self)

    def test_c(self):
        _say(self)


class Zeta(TestCase):
    def test_a(self):
        _say(self)

    def test_fails(self):
        _say(self)
        if os.environ.get("FAIL_ONE"):
            self.fail("failing on purpose")

    def test_z(self):
        _say(self)


if __name__ == "__main__":
    run_tests()
