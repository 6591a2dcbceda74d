"""TestCase.assertEqual on tensors, arrays, numbers and nested containers."""
from __future__ import annotations

import collections
import unittest

import numpy as np
import pytest
import torch

from continuous_test import TestCase


class _Case(TestCase):
    def runTest(self):  # noqa: N802
        pass


case = _Case()


def fails(first, second, **kwargs) -> str:
    with pytest.raises(AssertionError) as info:
        case.assertEqual(first, second, **kwargs)
    return str(info.value)


def test_tensors_close_within_dtype_tolerance():
    case.assertEqual(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-7]))
    assert "Mismatched elements: 1 / 2" in fails(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.1]))


def test_rtol_atol_keywords():
    case.assertEqual(torch.tensor([1.0]), torch.tensor([1.05]), rtol=0, atol=0.1)
    fails(torch.tensor([1.0]), torch.tensor([1.05]), rtol=0, atol=0.01)
    with pytest.raises(ValueError):
        case.assertEqual(1.0, 1.0, rtol=0.1)


def test_dtype_and_device_checks():
    assert "dtype" in fails(torch.ones(2), torch.ones(2, dtype=torch.float64))
    case.assertEqual(torch.ones(2), torch.ones(2, dtype=torch.float64), exact_dtype=False)
    assert "device" in fails(torch.ones(2), torch.ones(2, device="meta"), exact_device=True)


def test_integers_and_bools_are_exact():
    fails(torch.tensor([1, 2]), torch.tensor([1, 3]))
    fails(1, 2)
    fails(True, False)
    case.assertEqual(3, 3)


def test_python_floats_close():
    case.assertEqual(0.1 + 0.2, 0.3)
    assert "difference" in fails(1.0, 1.1)


def test_scalar_against_zero_dim_tensor():
    case.assertEqual(torch.tensor(3.0), 3.0)
    case.assertEqual(2, torch.tensor(2))
    fails(torch.tensor(3.0), 4.0)


def test_numpy_arrays():
    case.assertEqual(np.array([1.0, 2.0]), np.array([1.0, 2.0]))
    case.assertEqual(torch.tensor([1.0, 2.0], dtype=torch.float64), np.array([1.0, 2.0]))
    fails(np.array([1.0, 2.0]), np.array([1.0, 3.0]))


def test_nested_state_dicts_name_the_path():
    a = {"layer.weight": torch.ones(2, 2), "layer.bias": [torch.zeros(2), 1.0]}
    b = collections.OrderedDict([("layer.weight", torch.ones(2, 2)), ("layer.bias", [torch.zeros(2), 1.0])])
    case.assertEqual(a, b)
    b["layer.bias"] = [torch.tensor([0.0, 5.0]), 1.0]
    message = fails(a, b)
    assert "at ['layer.bias'][0]" in message
    assert "Greatest absolute difference: 5.0" in message
    assert "keys differ" in fails({"a": torch.ones(1)}, {"b": torch.ones(1)})
    assert "lengths differ" in fails([torch.ones(1)], [torch.ones(1), torch.ones(1)])


def test_msg_keyword_is_kept():
    assert "custom context" in fails(torch.ones(1), torch.zeros(1), msg="custom context")


def test_plain_values_use_unittest_diffs():
    assert "Lists differ" in fails(["a"], ["b"])
    case.assertEqual("x", "x")


def test_assert_not_equal():
    case.assertNotEqual(torch.ones(2), torch.zeros(2))
    with pytest.raises(AssertionError):
        case.assertNotEqual(torch.ones(2), torch.ones(2))


def test_usable_as_a_plain_unittest_case():
    class Plain(TestCase):
        def test_ok(self):
            self.assertEqual(torch.ones(1), torch.ones(1))

    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(Plain).run(result)
    assert result.wasSuccessful() and result.testsRun == 1


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
