"""Write docs/timeline.rst from a real run of docs/timeline_example.py under pytest.

Usage::

    python docs/capture_timeline.py          # rewrite docs/timeline.rst
    python docs/capture_timeline.py --check  # exit 1 if the file differs from a fresh capture

The reports in the page are pytest's own output, cut to the error's first line
and the "collective timeline" section; nothing in them is typed by hand.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAGE = HERE / "timeline.rst"
TESTS = ("TrainStepTest.test_step", "TrainStepTest.test_shapes")


def run_example() -> str:
    """pytest's output for the example file (it fails on purpose)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUOUS_TEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--tb=short", "-rN",
                           "timeline_example.py"], cwd=HERE, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)
    return proc.stdout


def excerpt(output: str, test: str) -> str:
    """The error's first line and the collective timeline section of one test's report."""
    block = re.search(rf"^_+ {re.escape(test)} _+$(.*?)(?=^_{{3,}} |^=+ |\Z)", output, re.M | re.S)
    if block is None:
        raise SystemExit(f"no report for {test} in:\n{output}")
    text = block.group(1)
    head = re.search(r"^E\s+(\S.*)$", text, re.M)
    # The section ends at the next one, or at pytest's closing line (the last test's section).
    section = re.search(r"^-+ collective timeline -+\n(.*?)(?=^-{3,} |^\d+ (?:failed|passed|error)|\Z)",
                        text, re.M | re.S)
    if head is None or section is None:
        raise SystemExit(f"no error line or timeline for {test} in:\n{text}")
    return f"{head.group(1)}\n--- collective timeline ---\n{section.group(1).rstrip()}"


def page(output: str) -> str:
    """The whole page, with the captured reports."""
    step, shapes = (excerpt(output, test) for test in TESTS)
    template = (HERE / "timeline.rst.in").read_text()
    return template.replace("@STEP@", _indent(step)).replace("@SHAPES@", _indent(shapes))


def _indent(text: str) -> str:
    return "\n".join("    " + line if line else "" for line in text.splitlines())


def main() -> int:
    fresh = page(run_example())
    if "--check" in sys.argv[1:]:
        return 0 if PAGE.exists() and PAGE.read_text() == fresh else 1
    PAGE.write_text(fresh)
    print(fresh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
