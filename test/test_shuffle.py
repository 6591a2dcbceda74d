"""Shuffled order: replayable from a seed, classes kept together, under every runner."""
from __future__ import annotations

import re

import helpers
import pytest
from helpers import describe

from continuous_test import config
from continuous_test.session import shuffle
from continuous_test.wire.env import ENV_SHUFFLE

DEFAULT = ["Alpha.test_a", "Alpha.test_b", "Alpha.test_c", "Alpha.test_d", "Beta.test_a", "Beta.test_b",
           "Beta.test_c", "Zeta.test_a", "Zeta.test_fails", "Zeta.test_z"]


def order(proc) -> list:
    return re.findall(r"ran (\w+\.\w+)", proc.stdout)


def seeded(seed: str, **env: str) -> dict:
    return {ENV_SHUFFLE: seed, **env}


@pytest.mark.e2e
def test_a_seed_replays_one_order_and_keeps_classes_together():
    first = helpers.python("test_shuffle.py", env=seeded("7"))
    again = helpers.python("test_shuffle.py", env=seeded("7"))
    other = helpers.python("test_shuffle.py", env=seeded("8"))
    plain = helpers.python("test_shuffle.py")
    assert order(plain) == DEFAULT, describe(plain)
    assert order(first) == order(again) != DEFAULT, describe(first)
    assert order(other) != order(first) and sorted(order(first)) == DEFAULT
    classes = [name.split(".")[0] for name in order(first)]
    assert sum(1 for a, b in zip(classes, classes[1:]) if a != b) == 2, "a class was split"
    assert shuffle.SEED_LINE.format(seed=7) in first.stderr
    unittest_main = helpers.unittest("test_shuffle", env=seeded("7"), real=True)
    assert order(unittest_main) == order(first), describe(unittest_main)


@pytest.mark.world
def test_the_seed_is_in_every_failure_report():
    proc = helpers.python("test_shuffle.py", env=seeded("7", FAIL_ONE="1"))
    assert proc.returncode == 1
    failure = proc.stderr.split("FAIL: test_fails")[1]
    assert config.SHUFFLE_FAILURE_LINE.format(seed=7) in failure, describe(proc)


@pytest.mark.world
def test_pytest_same_order_with_k_and_x():
    unittest_order = order(helpers.python("test_shuffle.py", env=seeded("7")))
    proc = helpers.pytest("test_shuffle.py", "-s", "--ct-shuffle=7")
    assert order(proc) == unittest_order, describe(proc)
    proc = helpers.pytest("test_shuffle.py", "-s", "--ct-shuffle=7", "-k", "test_b or test_z")
    assert order(proc) == [n for n in unittest_order if n.endswith(("test_b", "test_z"))], describe(proc)
    proc = helpers.pytest("test_shuffle.py", "-s", "--ct-shuffle=7", "-x", env={"FAIL_ONE": "1"})
    expected = unittest_order[:unittest_order.index("Zeta.test_fails") + 1]
    assert order(proc) == expected, describe(proc)
    assert config.SHUFFLE_FAILURE_LINE.format(seed=7) in proc.stdout


@pytest.mark.e2e
def test_pytest_bare_option_picks_a_seed_shared_by_xdist_workers():
    proc = helpers.pytest("test_shuffle.py", "-n", "2", "--dist", "loadscope", "--ct-shuffle")
    assert proc.returncode == 0, describe(proc)
    assert helpers.pytest_counts(proc.stdout) == {"passed": len(DEFAULT)}, describe(proc)
    assert re.search(r"shuffled with seed \d+", proc.stdout), describe(proc)


@pytest.mark.world
def test_bad_seed_names_its_source():
    proc = helpers.pytest("test_shuffle.py", env=seeded("soon"))
    assert "Invalid shuffle seed 'soon' from CONTINUOUS_TEST_SHUFFLE environment variable" in proc.stderr, describe(proc)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
