"""Settings resolution and the errors for bad values."""
from __future__ import annotations

import pytest

from continuous_test import config
from continuous_test.config import ConfigError


class Plain:
    test_timeout = None
    grace_period = None


class WithAttrs:
    test_timeout = 7
    grace_period = 0.5


@config.timeout(3)
def decorated():
    pass


def test_documented_defaults():
    # The README documents these numbers: literals, not the module's own constants.
    assert config.test_time_limit(Plain, None, env={}) == 300.0
    assert config.grace_period(Plain, env={}) == 3.0
    assert config.shutdown_timeout(Plain, env={}) == 10.0
    assert config.start_timeout(Plain, env={}) == 120.0


def test_precedence_for_time_limit():
    assert config.test_time_limit(WithAttrs, None, env={}) == 7
    assert config.test_time_limit(WithAttrs, decorated, env={}) == 3
    assert config.test_time_limit(WithAttrs, decorated, env={config.ENV_TIMEOUT: "11"}) == 11
    config.set_cli_timeout(13)
    try:
        assert config.test_time_limit(WithAttrs, decorated, env={config.ENV_TIMEOUT: "11"}) == 13
    finally:
        config.set_cli_timeout(None)


def test_scale_multiplies():
    assert config.test_time_limit(WithAttrs, decorated, env={config.ENV_TIMEOUT_SCALE: "2.5"}) == 7.5


def test_grace():
    assert config.grace_period(WithAttrs, env={}) == 0.5
    assert config.grace_period(WithAttrs, env={config.ENV_GRACE: "9"}) == 9


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "inf", ""])
def test_bad_environment_values_name_the_variable(value):
    if value == "":
        assert config.test_time_limit(Plain, None, env={config.ENV_TIMEOUT: value}) == config.DEFAULT_TEST_TIMEOUT
        return
    with pytest.raises(ConfigError) as info:
        config.test_time_limit(Plain, None, env={config.ENV_TIMEOUT: value})
    assert str(info.value) == config.INVALID_VALUE.format(
        what="timeout", value=value, source="CONTINUOUS_TEST_TIMEOUT environment variable")


def test_bad_scale_and_grace():
    with pytest.raises(ConfigError, match="Invalid timeout scale 'x' from CONTINUOUS_TEST_TIMEOUT_SCALE"):
        config.test_time_limit(Plain, None, env={config.ENV_TIMEOUT_SCALE: "x"})
    with pytest.raises(ConfigError, match="Invalid grace period '-2' from CONTINUOUS_TEST_GRACE"):
        config.grace_period(Plain, env={config.ENV_GRACE: "-2"})


def test_bad_decorator_and_class_values():
    with pytest.raises(ConfigError, match=r"Invalid timeout 0 from @continuous_test.timeout"):
        config.timeout(0)
    with pytest.raises(ConfigError, match="Invalid timeout True"):
        config.timeout(True)

    class Bad:
        test_timeout = "soon"

    with pytest.raises(ConfigError, match=r"Invalid timeout 'soon' from .*Bad.test_timeout"):
        config.test_time_limit(Bad, None, env={})


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
