"""The N jobs of one sharded run: six plain classes, A to F, of three tests each.

Each test prints ``ran <Class>.<test>``.  The tests of the class named in
SLOW_CLASS sleep a little, so that the durations a job stores weigh that class
differently from the estimates the other jobs may have split with.
"""
import os
import time

from continuous_test import TestCase, run_tests


def _class(name):
    def make(test):
        def method(self):
            if os.environ.get("SLOW_CLASS") == name:
                time.sleep(0.2)
            print(f"ran {name}.{test}", flush=True)
        method.__name__ = test
        return method
    return type(name, (TestCase,), {t: make(t) for t in ("test_x", "test_y", "test_z")})


A, B, C, D, E, F = (_class(name) for name in "ABCDEF")


if __name__ == "__main__":
    run_tests()
