"""A plain test, a class setup and the shared class's own setUpClass change this process's state first.

The ranks must see none of it.

Under every runner the ranks come from a template made once the tests were
imported and before any ran, so they see the file as imported, whatever ran
in the controller before their world started.
"""
import unittest

from continuous_test import MultiProcContinuousTest, run_tests

STATE = {"changed_by": None}


class A_PlainFirst(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        STATE["class_setup"] = "a plain class's setUpClass"

    def test_changes_state(self):
        STATE["changed_by"] = "a plain test that ran before"


class B_Shared(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def setUpClass(cls):  # runs in the controller only, before the world starts
        STATE["own_setup"] = "the shared class's setUpClass, in the controller"
        super().setUpClass()

    def test_ranks_see_the_file_as_imported(self):
        self.assertEqual(STATE, {"changed_by": None})


if __name__ == "__main__":
    run_tests()
