"""Packaging for continuous_test."""
from setuptools import find_packages, setup

setup(
    name="continuous_test",
    version="0.1.0",
    description="unittest base classes for fast, reliable torch.distributed tests",
    long_description=open("README.rst", encoding="utf-8").read(),
    long_description_content_type="text/x-rst",
    packages=find_packages(include=["continuous_test", "continuous_test.*"]),
    # torch 2.13 itself needs 3.10.  3.10 to 3.13 are the versions that ran (docs/compat.rst, "Python
    # versions"); no upper bound, which would only make pip pick an older release on a newer Python.
    python_requires=">=3.10",
    install_requires=["torch>=2.12", "numpy", "expecttest"],
    extras_require={
        # pytest-cov: test/test_coverage_support.py; pytest-timeout: a runner's own timeout in
        # test/test_controller_faults.py (skipped without it).
        "test": ["pytest>=7", "pytest-xdist", "pytest-cov>=7", "pytest-timeout"],
        # Pinned: a new release of either may report new findings and turn CI red on its own.
        "lint": ["mypy==2.4.1", "ruff==0.17.6"],
        # benchmarks/run.py draws its figure with matplotlib (optional: without it, no figure).
        "bench": ["matplotlib>=3.5"],
    },
    # py.typed: users' type checkers see the public types; the run report's JSON Schema (docs/run-report.rst).
    package_data={"continuous_test": ["py.typed", "run_report.schema.json"]},
    entry_points={
        "console_scripts": ["continuous-test-lint=continuous_test.lint:main"],
        "pytest11": ["continuous_test.pytest_plugin = continuous_test.pytest_plugin"],
    },
    classifiers=[
        "Framework :: Pytest",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "Topic :: Software Development :: Testing",
    ],
)
