"""A plain class that @distributed cannot run (PLAIN_BAD picks which): collection fails, naming it."""
import os

import continuous_test

if os.environ.get("PLAIN_BAD") == "static":
    @continuous_test.distributed(world_size=2)
    class TestStatic:
        @staticmethod
        def test_static():
            pass

elif os.environ.get("PLAIN_BAD") == "no_tests":
    @continuous_test.distributed(world_size=2)
    class TestNothing:
        def helper(self):
            pass

elif os.environ.get("PLAIN_BAD") == "marker":
    import pytest

    @continuous_test.distributed(world_size=2)
    class TestBadMarker:
        @pytest.mark.world_size([2, 0])
        def test_bad_list(self):
            pass

        @pytest.mark.world_size("two")
        def test_bad_size(self):
            pass
