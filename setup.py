"""Packaging for continuous_test."""
from setuptools import find_packages, setup

setup(
    name="continuous_test",
    version="0.1.0",
    description="unittest base classes for fast, reliable torch.distributed tests",
    long_description=open("README.rst", encoding="utf-8").read(),
    long_description_content_type="text/x-rst",
    packages=find_packages(include=["continuous_test", "continuous_test.*"]),
    python_requires=">=3.9",
    install_requires=["torch>=2.2", "numpy", "expecttest"],
    # bench: benchmarks/run.py draws its figure with matplotlib (optional: without it, no figure).
    extras_require={"test": ["pytest>=7", "pytest-xdist"], "bench": ["matplotlib>=3.5"]},
    entry_points={
        "console_scripts": ["continuous-test-lint=continuous_test.lint:main"],
        "pytest11": ["continuous_test.pytest_plugin = continuous_test.pytest_plugin"],
    },
    classifiers=[
        "Framework :: Pytest",
        "Programming Language :: Python :: 3",
        "Topic :: Software Development :: Testing",
    ],
)
