"""Write docs/reports.rst's captured reports from real runs of docs/reports_example.py.

Usage::

    python docs/capture_reports.py          # rewrite docs/reports.rst from docs/reports.rst.in
    python docs/capture_reports.py --check  # exit 1 if a report differs from a fresh capture (times, paths and
                                            # numbers aside) or is longer than MAX_LINES

One report of each kind, as each runner prints it: unittest (``python file.py``),
pytest, pytest-xdist, torchrun with one rank failing, torchrun with every rank
hung.  Each is the runner's own output from the failure's report to its summary;
torchrun's own ``ChildFailedError`` block after it is left out (docs/launchers.rst
says how to read it).  Nothing in them is typed by hand.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PAGE = HERE / "reports.rst"
MAX_LINES = 60
FAILING = "ReportExample.test_fails_on_rank_1"
HUNG = "ReportExample.test_every_rank_hangs"


def _env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTINUOUS_TEST_", "TORCHELASTIC_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["COLUMNS"] = "120"
    return env


def _run(args: List[str]) -> str:
    proc = subprocess.run([sys.executable, *args], cwd=HERE, env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300, stdin=subprocess.DEVNULL)
    return proc.stdout


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(test: str) -> List[str]:
    return ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
            "--master-port", str(_port()), "reports_example.py", test]


def _from(output: str, start: str) -> str:
    at = output.find(start)
    return output[at:] if at >= 0 else output


def _until_launcher(output: str) -> str:
    """The ranks' report, without torchrun's banner, its own log lines and its closing ChildFailedError block."""
    kept = []
    lines = output.splitlines()
    for index, line in enumerate(lines):
        if re.match(r"^\[?[WEI]\d{4} |^\*{5,}|^Setting OMP_NUM_THREADS", line) or "socket.cpp" in line:
            continue
        if line.startswith("Traceback (most recent call last):") and "<frozen runpy>" in "".join(lines[index + 1:index + 2]):
            break  # torchrun's own ChildFailedError
        kept.append(line)
    return "\n".join(kept).strip("\n") + "\n"


def captures() -> Dict[str, str]:
    """Each kind of report, by its placeholder in reports.rst.in."""
    pytest = ["-m", "pytest", "-p", "no:cacheprovider", "-q", "-rf", "reports_example.py::" + FAILING.replace(".", "::")]
    return {
        "@UNITTEST@": _from(_run(["reports_example.py", FAILING]), "=" * 70),
        "@PYTEST@": _from(_run(pytest), "=" * 10),
        "@XDIST@": _from(_run([*pytest, "-n", "2"]), "=" * 10),
        "@TORCHRUN_FAILED@": _until_launcher(_run(_torchrun(FAILING))),
        "@TORCHRUN_HUNG@": _until_launcher(_run(_torchrun(HUNG))),
    }


def normalized(text: str) -> str:
    """What must not change between two captures: times, paths, ports and numbers aside."""
    text = text.replace(str(ROOT), "<repo>")
    text = re.sub(r"(-- Python \S+ )\S+", r"\1<python>", text)  # xdist's worker line: whichever interpreter ran it
    text = re.sub(r"/\S*/(site-packages|lib/python[\d.]+)/", "<lib>/", text)
    return re.sub(r"\d+", "N", text)


# Two processes print these: the order of their lines may differ between runs.
INTERLEAVED = ("@TORCHRUN_FAILED@", "@TORCHRUN_HUNG@")


def _in_page(key: str, report: str, current: str) -> bool:
    fresh = normalized(_indent(report.replace(str(ROOT), "/work/main")))
    if key not in INTERLEAVED:
        return fresh in current
    lines = current.splitlines()
    return all(line in lines for line in fresh.splitlines())


def page(found: Dict[str, str]) -> str:
    text = (HERE / "reports.rst.in").read_text()
    for key, report in found.items():
        text = text.replace(key, _indent(report.replace(str(ROOT), "/work/main")))
    return text


def _indent(text: str) -> str:
    return "\n".join("    " + line if line else "" for line in text.rstrip("\n").splitlines())


def main() -> int:
    found = captures()
    too_long = {key: len(report.splitlines()) for key, report in found.items() if len(report.splitlines()) > MAX_LINES}
    if "--check" in sys.argv[1:]:
        current = normalized(PAGE.read_text()) if PAGE.exists() else ""
        stale = [key for key, report in found.items() if not _in_page(key, report, current)]
        for key in stale:
            print(f"{key} differs from a fresh capture:\n{found[key]}")
        for key, n in too_long.items():
            print(f"{key} has {n} lines (at most {MAX_LINES})")
        return 1 if stale or too_long else 0
    PAGE.write_text(page(found))
    for key, report in found.items():
        print(f"{key}: {len(report.splitlines())} lines")
    return 1 if too_long else 0


if __name__ == "__main__":
    raise SystemExit(main())
