"""Run docs/run_report_example.py under pytest with the run report on, and draw docs/run-report.png.

Usage::

    python docs/capture_run_report.py          # rewrite docs/run-report.png (and print the JSON's path)

It needs Debian's Chromium (``apt-get install chromium``) for the screenshot.
The JSON report and the page are kept in a temporary directory whose path is
printed; nothing in the picture is drawn by hand.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PICTURE = HERE / "run-report.png"


def run_example(out: Path) -> Path:
    """pytest on the example, writing out/run.json and out/run.html; returns the page."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUOUS_TEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "run_report_example.py",
                    f"--ct-report={out / 'run.json'}", f"--ct-report-html={out / 'run.html'}"],
                   cwd=HERE, env=env, stdout=subprocess.DEVNULL, timeout=300)
    return out / "run.html"


def screenshot(page: Path, picture: Path) -> None:
    """Draw ``page`` with headless Chromium (its own profile, no network of its own)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("Chromium is not installed (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                        "--disable-component-update", "--no-first-run", "--hide-scrollbars",
                        f"--user-data-dir={profile}", f"--screenshot={picture}", "--window-size=1280,760",
                        page.as_uri()], check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=120)


def main() -> int:
    out = Path(tempfile.mkdtemp(prefix="ct-run-report-"))
    page = run_example(out)
    screenshot(page, PICTURE)
    print(f"{PICTURE} from {out / 'run.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
