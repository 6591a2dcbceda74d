"""A plain test that runs before a shared world changes this process's state; the ranks must not see it.

Under every runner the ranks come from a template made once the tests were
imported and before any ran, so they see the file as imported, whatever ran
in the controller before their world started.
"""
import unittest

from continuous_test import MultiProcContinuousTest, run_tests

STATE = {"changed_by": None}


class A_PlainFirst(unittest.TestCase):
    def test_changes_state(self):
        STATE["changed_by"] = "a plain test that ran before"


class B_Shared(MultiProcContinuousTest):
    world_size = 2

    def test_ranks_see_the_file_as_imported(self):
        self.assertEqual(STATE, {"changed_by": None})


if __name__ == "__main__":
    run_tests()
