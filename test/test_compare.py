"""TestCase.assertEqual on tensors, arrays, numbers and nested containers."""
from __future__ import annotations

import collections
import unittest

import numpy as np
import pytest
import torch

from continuous_test import TestCase


# An instance to call assertEqual on; unittest allows one without a test method,
# and it is not a test itself.
case = TestCase()


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


# -- torch's assertEqual semantics (torch.testing._internal.common_utils) ----------------


def test_devices_differ_only_with_exact_device():
    # torch's default is exact_device=False: values are compared on a common device,
    # and meta tensors by their metadata only.
    case.assertEqual(torch.ones(2), torch.ones(2, device="meta"))
    assert "device" in fails(torch.ones(2), torch.ones(2, device="meta"), exact_device=True)
    fails(torch.ones(2), torch.ones(3, device="meta"))


def test_dtypes_differ_only_without_exact_dtype():
    assert "dtype" in fails(torch.tensor([1]), torch.tensor([1.0]))
    case.assertEqual(torch.tensor([1]), torch.tensor([1.0]), exact_dtype=False)
    fails(torch.tensor([1]), torch.tensor([1.5]), exact_dtype=False)


def test_numbers_against_single_element_tensors_ignore_dtype():
    case.assertEqual(torch.tensor(3.0), 3)
    case.assertEqual(torch.tensor(3), 3.0)
    case.assertEqual(torch.tensor([3.0]), 3.0)
    case.assertEqual(np.float64(1.0), 1.0)
    case.assertEqual(np.int64(3), 3)
    case.assertEqual([1, 2], [torch.tensor(1), torch.tensor(2.0)])
    assert "single-element" in fails(torch.tensor([3.0, 3.0]), 3.0)
    fails(torch.tensor(3), 4)


def test_bools_compare_by_truth_value():
    case.assertEqual(True, torch.tensor([1.0]))
    case.assertEqual(torch.tensor(False), 0)
    case.assertEqual(np.bool_(True), True)
    fails(True, 0)


def test_tensor_against_list_uses_the_tensors_dtype():
    case.assertEqual(torch.tensor([1.0, 2.0]), [1, 2])
    case.assertEqual([[1, 1], [1, 1]], torch.ones(2, 2))
    fails(torch.tensor([1.0, 2.0]), [1, 3])


def test_sequences_of_different_types_compare_elementwise():
    case.assertEqual((1, 2), [1, 2])
    case.assertEqual(torch.Size([2, 3]), [2, 3])
    case.assertEqual(["a", "b"], ("a", "b"))
    assert "Lists differ" in fails((1, 2), [1, 3])


def test_ordered_dict_against_dict():
    ordered = collections.OrderedDict([("b", torch.zeros(2)), ("a", torch.ones(1))])
    case.assertEqual(ordered, {"a": torch.ones(1), "b": torch.zeros(2)})
    assert "at ['a']" in fails(ordered, {"a": torch.zeros(1), "b": torch.zeros(2)})


def test_sparse_layout_only_with_exact_layout():
    case.assertEqual(torch.eye(2).to_sparse(), torch.eye(2))
    fails(torch.eye(2).to_sparse(), torch.eye(2), exact_layout=True)
    fails(torch.ones(2, 2).t(), torch.ones(2, 2), exact_stride=True)


def test_infinities():
    case.assertEqual(float("inf"), float("inf"))
    fails(float("inf"), float("-inf"))
    fails(float("inf"), 1e308)
    case.assertEqual(torch.tensor([float("inf")]), torch.tensor([float("inf")]))


def test_precision_and_rel_tol_raise_the_tolerances():
    class Loose(TestCase):
        def runTest(self):  # noqa: N802
            pass

    loose = Loose()
    fails(torch.tensor([1.0]), torch.tensor([1.01]))
    loose.precision = 0.05
    loose.assertEqual(torch.tensor([1.0]), torch.tensor([1.01]))
    loose.assertEqual(1.0, 1.01)
    loose.precision, loose.rel_tol = 0.0, 0.05
    loose.assertEqual(torch.tensor([1.0]), torch.tensor([1.01]))
    with pytest.raises(AssertionError):
        loose.assertEqual(torch.tensor([1.0]), torch.tensor([1.5]))


def test_msg_may_be_a_callable():
    message = fails(torch.ones(1), torch.zeros(1), msg=lambda generated: "custom: " + generated.splitlines()[0])
    assert message.startswith("custom: ")


def test_same_verdicts_as_torchs_assert_equal():
    from torch.testing._internal.common_utils import TestCase as TorchTestCase

    class Torch(TorchTestCase):
        def runTest(self):  # noqa: N802
            pass

    torch_case = Torch()
    pairs = [
        (torch.ones(2), torch.ones(2, dtype=torch.float64), {}),
        (torch.ones(2), torch.ones(2, dtype=torch.float64), {"exact_dtype": False}),
        (torch.ones(2), torch.ones(2, device="meta"), {}),
        (torch.tensor(3.0), 3, {}),
        (torch.tensor([1.0]), torch.tensor([1.05]), {"rtol": 0, "atol": 0.1}),
        (torch.tensor([1.0]), torch.tensor([1.05]), {"rtol": 0, "atol": 0.01}),
        (collections.OrderedDict(a=torch.ones(1)), {"a": torch.ones(1)}, {}),
        ({"a": 1}, {"b": 1}, {}),
        (torch.tensor([1, 2]), [1, 2], {}),
        ((1, 2), [1, 2], {}),
        (torch.Size([2]), [2], {}),
        ([[1, 2]], [torch.Size([1, 2])], {}),
        ([(1, [2])], [[1, (2,)]], {}),
        ([[1, 2]], [torch.Size([1, 3])], {}),
        (np.array([1.0]), torch.tensor([1.0]), {}),
        (True, 2, {}),
        (1, 1.0, {}),
        (float("nan"), float("nan"), {}),
        (torch.tensor([float("nan")]), torch.tensor([float("nan")]), {"equal_nan": False}),
        (None, 0, {}),
        ("a", "b", {}),
        (torch.eye(2).to_sparse(), torch.eye(2), {}),
    ]

    def verdict(tc, first, second, kwargs):
        try:
            tc.assertEqual(first, second, **kwargs)
        except AssertionError:
            return "fail"
        return "pass"

    for first, second, kwargs in pairs:
        ours, torchs = verdict(case, first, second, kwargs), verdict(torch_case, first, second, kwargs)
        assert ours == torchs, (first, second, kwargs)


def test_exact_is_coalesced_is_checked_when_asked():
    i = torch.tensor([[0, 0], [1, 1]])
    uncoalesced = torch.sparse_coo_tensor(i, torch.tensor([1.0, 2.0]), (2, 2), check_invariants=True)
    coalesced = uncoalesced.coalesce()
    case.assertEqual(uncoalesced, coalesced)  # the same values
    with pytest.raises(AssertionError, match=r"is_coalesced\(\) differs: False != True"):
        case.assertEqual(uncoalesced, coalesced, exact_is_coalesced=True)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
