"""Settings resolution and the errors for bad values."""
from __future__ import annotations

import pytest

from continuous_test import config
from continuous_test.wire import env as env_names
from continuous_test.errors import ConfigError


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
    assert config.test_time_limit(WithAttrs, decorated, env={env_names.ENV_TIMEOUT: "11"}) == 11
    with config.overridden(config.Overrides(marked_time_limit=5)):
        assert config.test_time_limit(WithAttrs, decorated, env={}) == 5
        assert config.test_time_limit(WithAttrs, decorated, env={env_names.ENV_TIMEOUT: "11"}) == 11
    with config.overridden(config.Overrides(time_limit=13)):
        assert config.test_time_limit(WithAttrs, decorated, env={env_names.ENV_TIMEOUT: "11"}) == 13
    assert config.current_overrides() == config.Overrides()  # nothing left behind


def test_scale_multiplies():
    assert config.test_time_limit(WithAttrs, decorated, env={env_names.ENV_TIMEOUT_SCALE: "2.5"}) == 7.5


@pytest.mark.parametrize("read, name, attribute", [
    (config.grace_period, env_names.ENV_GRACE, "grace_period"),
    (config.start_timeout, env_names.ENV_START_TIMEOUT, "start_timeout"),
    (config.shutdown_timeout, env_names.ENV_SHUTDOWN_TIMEOUT, "shutdown_timeout"),
])
def test_seconds_settings_come_from_their_variable_first(read, name, attribute):
    attrs = type("Attrs", (), {attribute: 0.5})
    assert read(attrs, env={}) == 0.5
    assert read(attrs, env={name: "9"}) == 9
    assert read(attrs, env={name: ""}) == 0.5
    with pytest.raises(ConfigError, match=f"'-2' from {name} environment variable"):
        read(attrs, env={name: "-2"})


def test_grace():
    assert config.grace_period(WithAttrs, env={}) == 0.5
    assert config.grace_period(WithAttrs, env={env_names.ENV_GRACE: "9"}) == 9


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "inf", ""])
def test_bad_environment_values_name_the_variable(value):
    if value == "":
        assert config.test_time_limit(Plain, None, env={env_names.ENV_TIMEOUT: value}) == config.DEFAULT_TEST_TIMEOUT
        return
    with pytest.raises(ConfigError) as info:
        config.test_time_limit(Plain, None, env={env_names.ENV_TIMEOUT: value})
    assert str(info.value) == config.INVALID_VALUE.format(
        what="timeout", value=value, source="CONTINUOUS_TEST_TIMEOUT environment variable")


def test_bad_scale_and_grace():
    with pytest.raises(ConfigError, match="Invalid timeout scale 'x' from CONTINUOUS_TEST_TIMEOUT_SCALE"):
        config.test_time_limit(Plain, None, env={env_names.ENV_TIMEOUT_SCALE: "x"})
    with pytest.raises(ConfigError, match="Invalid grace period '-2' from CONTINUOUS_TEST_GRACE"):
        config.grace_period(Plain, env={env_names.ENV_GRACE: "-2"})


def test_bad_decorator_and_class_values():
    with pytest.raises(ConfigError, match=r"Invalid timeout 0 from @continuous_test.timeout"):
        config.timeout(0)
    with pytest.raises(ConfigError, match="Invalid timeout True"):
        config.timeout(True)

    class Bad:
        test_timeout = "soon"

    with pytest.raises(ConfigError, match=r"Invalid timeout 'soon' from .*Bad.test_timeout"):
        config.test_time_limit(Bad, None, env={})


@pytest.mark.parametrize("value, source", [("abc", "RANK"), ("0", "--ct-world-size"), (True, "a marker"), (2.5, "x")])
def test_bad_ints_name_their_source(value, source):
    with pytest.raises(ConfigError, match=f"Invalid world size {value!r} from {source}: expected a positive int".replace("(", r"\(").replace(")", r"\)")):
        config.parse_positive_int(value, "world size", source)


def test_start_method_is_a_config_error():
    with pytest.raises(ConfigError, match="Invalid start method 'thread' from CONTINUOUS_TEST_START_METHOD"):
        config.start_method(env={env_names.ENV_START_METHOD: "thread"})


def test_torch_testcase_choice():
    assert config.torch_testcase_wanted(env={}) is None
    assert config.torch_testcase_wanted(env={env_names.ENV_TORCH_TESTCASE: "1"}) is True
    assert config.torch_testcase_wanted(env={env_names.ENV_TORCH_TESTCASE: " Off "}) is False
    with pytest.raises(ConfigError, match="Invalid value 'maybe' from CONTINUOUS_TEST_TORCH_TESTCASE"):
        config.torch_testcase_wanted(env={env_names.ENV_TORCH_TESTCASE: "maybe"})


def test_environment_variable_names_come_from_the_wire_format_alone():
    # One answer per name: config reads them from wire/env.py and re-exports none of them.
    assert [name for name in vars(config) if name.startswith("ENV_")] == []
    assert env_names.ENV_TIMEOUT == "CONTINUOUS_TEST_TIMEOUT"


@pytest.mark.parametrize("name", sorted(env_names.SWITCHES))
def test_every_switch_takes_the_same_words_and_rejects_others(name):
    # One parser, one rule, for every CONTINUOUS_TEST_* on/off switch.
    for word in ("1", "on", "TRUE", " yes "):
        assert env_names.switch_if_set(name, {name: word}) is True
    for word in ("0", "off", "False", "no"):
        assert env_names.switch_if_set(name, {name: word}) is False
    assert env_names.switch_if_set(name, {name: ""}) is None
    with pytest.raises(ConfigError) as raised:
        env_names.switch_if_set(name, {name: "sometimes"})
    assert str(raised.value) == env_names.BAD_SWITCH.format(
        value="sometimes", name=name, words="1, on, true, yes, 0, off, false, no")
    with pytest.raises(ConfigError, match=name):
        config.check_switches({name: "sometimes"})


def test_check_switches_fills_in_the_defaults():
    assert config.check_switches({}) == env_names.SWITCHES
    assert config.check_switches({env_names.ENV_AHEAD: "off"})[env_names.ENV_AHEAD] is False
    # The readers use the same parser: live output and recording follow it.
    from continuous_test.controller import progress
    from continuous_test.rank import recorder

    assert progress.live_output({env_names.ENV_LIVE_OUTPUT: "on"}) is True
    assert recorder.enabled_by_env({env_names.ENV_RECORD: "off"}) is False
    assert recorder.enabled_by_env({env_names.ENV_RECORD: "sometimes"}) is True  # the controller reports it


def test_resolve_reads_torch_override_points_once():
    from continuous_test import MultiProcContinuousTest

    class Sized(MultiProcContinuousTest):
        __module__ = __name__

        @property
        def world_size(self):
            return 3

        @classmethod
        def backend_str(cls):
            return "gloo"

    settings = config.resolve(Sized, check_importable=False, env={env_names.ENV_GRACE: "2"})
    assert (settings.world_size, settings.device_type, settings.backend, settings.grace) == (3, "cpu", "gloo", 2.0)
    with config.overridden(config.Overrides(world_size=5)):
        assert config.resolve(Sized, check_importable=False).world_size == 5


# -- the torch this package needs ---------------------------------------------------------


def test_the_oldest_torch_is_setup_pys_bound():
    import re
    from pathlib import Path

    import continuous_test

    setup = (Path(continuous_test.__file__).resolve().parent.parent / "setup.py").read_text()
    [bound] = re.findall(r'"torch>=([0-9.]+)"', setup)
    assert tuple(int(part) for part in bound.split(".")) == continuous_test.MIN_TORCH


@pytest.mark.parametrize("version, too_old", [("2.11.0", True), ("1.13.1+cu117", True), ("2.12.0", False),
                                              ("2.13.0+cpu", False), ("2.14.0.dev20260101", False)])
def test_a_torch_older_than_the_bound_is_named(version, too_old):
    import types

    import continuous_test

    fake = types.SimpleNamespace(__version__=version)
    if not too_old:
        continuous_test.check_torch(fake)
        return
    with pytest.raises(ImportError) as raised:
        continuous_test.check_torch(fake)
    assert str(raised.value) == f"continuous_test needs torch 2.12 or newer (found torch {version}); upgrade torch"


@pytest.mark.e2e
def test_importing_the_bases_with_a_too_old_torch_fails_in_one_line():
    import sys

    import helpers

    code = ("import torch; torch.__version__ = '2.1.0'\n"
            "from continuous_test import MultiProcContinuousTest")
    proc = helpers.run([sys.executable, "-c", code])
    assert proc.returncode == 1, helpers.describe(proc)
    assert proc.stderr.splitlines()[-1] == ("ImportError: continuous_test needs torch 2.12 or newer (found torch 2.1.0); "
                                            "upgrade torch"), helpers.describe(proc)
    assert "continuous_test.case" not in proc.stderr, helpers.describe(proc)  # stopped before its modules ran


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
