"""Code for test_coverage.py: each function runs in one place only, so a report shows who measured what."""


def in_continuous_rank(rank):
    doubled = rank * 2  # only a MultiProcContinuousTest rank runs this
    return doubled + 1


def in_fresh_rank(rank):
    tripled = rank * 3  # only a MultiProcessTestCase rank runs this
    return tripled + 1


def in_controller():
    value = "controller"  # only the controller runs this
    return value
