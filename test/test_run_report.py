"""Verdicts for machines and a picture of the run: the JSON run report, the JUnit properties, the HTML page.

Real runs of scenario files (``python`` with ``CONTINUOUS_TEST_REPORT``, pytest with
``--ct-report``, ``--junitxml`` and xdist) write the report; it is validated
against ``continuous_test/run_report.schema.json`` and its diagnoses read back.
The page is rendered in real headless Chromium where it is installed.
"""
from __future__ import annotations

import copy
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import helpers
import pytest
import schema_subset
from helpers import describe, pytest_counts, unittest_counts

from continuous_test import report_html
from continuous_test.controller import run_log
from continuous_test.wire.env import ENV_REPORT, ENV_REPORT_HTML

ORDER_TESTS = ("test_a", "test_b", "test_e", "test_g")  # a polluter, a bystander, its victim, a plain failure


def schema() -> dict:
    return json.loads(Path(run_log.SCHEMA_FILE).read_text())


def assert_valid(report: dict) -> None:
    found = schema_subset.errors(report, schema())
    assert found == [], "\n".join(found)


@pytest.fixture(scope="module")
def unittest_run(tmp_path_factory):
    """test_order.py under ``python``, with the report and its page asked for through the environment."""
    tmp = tmp_path_factory.mktemp("unittest_run")
    args = [arg for name in (*ORDER_TESTS, "test_f") for arg in ("-k", name)]
    proc = helpers.python("test_order.py", *args, env={"FLAKY_DIR": str(tmp), ENV_REPORT: str(tmp / "run.json"),
                                                       ENV_REPORT_HTML: str(tmp / "run.html"), **helpers.BISECT_ON})
    return proc, json.loads((tmp / "run.json").read_text()), tmp / "run.html"


@pytest.fixture(scope="module")
def pytest_run(tmp_path_factory):
    """test_order.py under pytest, with --ct-report, --ct-report-html and --junitxml."""
    tmp = tmp_path_factory.mktemp("pytest_run")
    proc = helpers.pytest("test_order.py", "-k", " or ".join(ORDER_TESTS), f"--junitxml={tmp / 'junit.xml'}",
                          f"--ct-report={tmp / 'run.json'}", f"--ct-report-html={tmp / 'run.html'}",
                          env={"FLAKY_DIR": str(tmp), **helpers.BISECT_ON})
    return proc, json.loads((tmp / "run.json").read_text()), tmp / "junit.xml"


def _tests(report: dict) -> dict:
    return {t["id"].rsplit(".", 1)[-1].rsplit("::", 1)[-1]: t for t in report["tests"]}


@pytest.mark.world
def test_the_report_of_run_tests_validates_and_says_each_verdict(unittest_run):
    proc, report, _ = unittest_run
    assert unittest_counts(proc.stderr) == {"ran": 5, "failures": 3}, describe(proc)
    assert_valid(report)
    assert report["version"] == run_log.VERSION
    tests = _tests(report)
    victim = tests["test_e_victim"]["diagnosis"]
    assert (victim["verdict"], victim["polluters"]) == ("order-dependent", ["__main__.OrderTest.test_a_poisons"])
    assert tests["test_f_first_run"]["diagnosis"]["verdict"] == "flaky"
    assert tests["test_g_always"]["diagnosis"]["verdict"] == "fails-alone"
    assert tests["test_b"]["diagnosis"] is None and tests["test_b"]["outcome"] == "passed"
    assert tests["test_g_always"]["failing_ranks"] == [0, 1] and tests["test_g_always"]["outcome"] == "failed"


@pytest.mark.world
def test_the_report_has_world_starts_restarts_and_times(unittest_run):
    _, report, _ = unittest_run
    shared = [w for w in report["worlds"] if w["kind"] == "shared"]
    assert len(shared) == 1, report["worlds"]
    starts = shared[0]["starts"]
    # Started for test_a, restarted after each of the three failures but the last.
    assert [s["restart"] for s in starts] == [False, True, True]
    assert starts[1]["after"] == "__main__.OrderTest.test_e_victim"
    tests = _tests(report)
    assert [tests[n]["world_restarts"] for n in ("test_a_poisons", "test_e_victim", "test_g_always")] == [0, 0, 2]
    assert tests["test_e_victim"]["restarts_world"] and not tests["test_b"]["restarts_world"]
    replays = [w for w in report["worlds"] if w["kind"] == "replay"]
    assert {w["for_test"] for w in replays} == {f"__main__.OrderTest.{n}" for n in
                                                ("test_e_victim", "test_f_first_run", "test_g_always")}
    assert {s["purpose"] for w in replays for s in w["starts"]} == {"rerun", "bisect"}
    for test in report["tests"]:
        assert report["started"] <= test["start"] <= test["end"] <= report["finished"], test
    # The victim's time holds its rerun and bisect, which ran in fresh worlds meanwhile.
    victim = tests["test_e_victim"]
    replayed = [r for r in report["runs"] if r["for_test"] == victim["id"] and r["purpose"] != "tests"]
    assert replayed and all(victim["start"] <= r["start"] <= r["end"] <= victim["end"] for r in replayed)


@pytest.mark.world
def test_the_outcome_words_are_the_schemas_and_a_failure_outranks_the_rest():
    # One answer: run_tests' result and the pytest plugin both say a test's outcome through run_log.
    assert list(run_log.OUTCOMES) == schema()["$defs"]["outcome"]["enum"]
    assert run_log.outcome_after(run_log.FAILED, run_log.PASSED) == run_log.FAILED
    assert run_log.outcome_after(run_log.ERROR, run_log.SKIPPED) == run_log.ERROR
    assert run_log.outcome_after(run_log.SKIPPED, run_log.FAILED) == run_log.FAILED
    assert run_log.outcome_after(None, run_log.XPASSED) == run_log.XPASSED


def test_the_validator_rejects_a_broken_report(unittest_run):
    _, report, _ = unittest_run
    broken = copy.deepcopy(report)
    del broken["version"]
    broken["tests"][0]["diagnosis"] = {"verdict": "guessed"}
    broken["worlds"][0]["world_size"] = "2"
    found = "\n".join(schema_subset.errors(broken, schema()))
    assert "'version' is required" in found and "matches 0 of the oneOf" in found and "$.worlds[0].world_size" in found


@pytest.mark.world
def test_junit_properties_carry_every_diagnosis(pytest_run):
    proc, report, junit = pytest_run
    assert pytest_counts(proc.stdout) == {"failed": 2, "passed": 2, "deselected": 8}, describe(proc)
    props = {case.get("name"): dict((p.get("name"), p.get("value")) for p in case.iter("property"))
             for case in ET.parse(junit).getroot().iter("testcase")}
    assert props["test_e_victim"] == {
        "failing_ranks": "0,1", "raising_ranks": "0,1", "diagnosis": "order-dependent", "world": "OrderTest",
        "world_restarts": "0",
        "polluters": "test/scenarios/test_order.py::OrderTest::test_a_poisons", "restarts_world": "true"}
    assert props["test_g_always"]["diagnosis"] == "fails-alone"
    assert props["test_g_always"]["world_restarts"] == "1"
    assert props["test_b"] == {"world": "OrderTest", "world_restarts": "0"}
    assert_valid(report)
    assert _tests(report)["test_e_victim"]["outcome"] == "failed"


@pytest.mark.e2e
def test_xdist_workers_send_their_parts_and_leaks_and_the_seed_are_recorded(tmp_path):
    proc = helpers.pytest("test_leaks.py", "test_basic.py", "-n", "2", "--dist", "loadscope", "--ct-shuffle=5",
                          "-k", "test_1_leaks or test_2_sensitive or AllReduce", f"--ct-report={tmp_path / 'r.json'}",
                          f"--junitxml={tmp_path / 'junit.xml'}")
    assert pytest_counts(proc.stdout) == {"passed": 6}, describe(proc)
    report = json.loads((tmp_path / "r.json").read_text())
    assert_valid(report)
    assert sorted(report["workers"]) == ["gw0", "gw1"] and report["shuffle_seed"] == 5
    assert len(report["tests"]) == 6 and all(t["worker"] in ("gw0", "gw1") for t in report["tests"])
    assert {w["id"].split(":", 1)[0] for w in report["worlds"]} == {"gw0", "gw1"}, report["worlds"]
    leaked = _tests(report)["test_1_leaks"]
    assert leaked["leaks_restored"] is True
    assert {"torch default dtype", "environment variable LEAKED_VAR"} <= {leak["item"] for leak in leaked["leaks"]}
    props = {case.get("name"): dict((p.get("name"), p.get("value")) for p in case.iter("property"))
             for case in ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")}
    assert props["test_1_leaks"]["leaks_restored"] == "true" and "torch default dtype" in props["test_1_leaks"]["leaks"]
    assert props["test_sum"]["shuffle_seed"] == "5"


@pytest.mark.world
def test_run_tests_writes_what_the_variables_ask_for(tmp_path):
    # Only the page is asked for: no JSON is left behind; with neither, nothing is written.
    page = tmp_path / "page.html"
    proc = helpers.python("test_basic.py", "-k", "test_sum", env={ENV_REPORT_HTML: str(page)})
    assert proc.returncode == 0 and page.is_file(), describe(proc)
    assert "AllReduceTest.test_sum" in page.read_text() and os.listdir(tmp_path) == ["page.html"]
    proc = helpers.python("test_basic.py", "-k", "test_sum", env={ENV_REPORT: "", ENV_REPORT_HTML: ""})
    assert proc.returncode == 0 and os.listdir(tmp_path) == ["page.html"], describe(proc)


@pytest.mark.world
def test_a_world_that_fails_to_start_is_marked(tmp_path):
    proc = helpers.python("test_badconfig.py", "-k", "test_init", env={ENV_REPORT: str(tmp_path / "r.json"),
                                                                        ENV_REPORT_HTML: str(tmp_path / "r.html")})
    assert unittest_counts(proc.stderr) == {"ran": 2, "errors": 2}, describe(proc)
    report = json.loads((tmp_path / "r.json").read_text())
    assert_valid(report)
    (world,) = report["worlds"]
    assert [s["failed"].split(":")[0] for s in world["starts"]] == ["WorldStartError"], world
    assert [t["world"] for t in report["tests"]] == ["InitRaisesTest", None]  # the second is not retried
    assert 'class="marker start failed"' in (tmp_path / "r.html").read_text()


@pytest.mark.e2e
def test_a_run_without_ranks_has_tests_and_no_worlds(tmp_path):
    test_file = tmp_path / "test_plain.py"
    test_file.write_text("def test_one():\n    pass\n\ndef test_two():\n    assert False\n")
    proc = helpers.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(test_file),
                        f"--ct-report={tmp_path / 'r.json'}"], cwd=tmp_path)
    report = json.loads((tmp_path / "r.json").read_text())
    assert_valid(report)
    assert report["worlds"] == [] and [t["outcome"] for t in report["tests"]] == ["passed", "failed"], describe(proc)


# -- the page ------------------------------------------------------------------------------


@pytest.mark.world
def test_the_page_is_self_contained_and_marks_what_happened(unittest_run):
    _, report, page = unittest_run
    text = page.read_text()
    assert "http://" not in text and "https://" not in text and "<script" not in text and "<link" not in text
    assert text.count('<g class="lane ') == len(report["worlds"])  # every test ran in a world here
    assert 'class="marker restart"' in text and 'class="marker start rerun"' in text
    assert 'data-test="OrderTest.test_g_always" data-ranks="0,1"' in text
    assert text == report_html.render(report)  # the file is the page of the report


# Every character HTML gives a meaning to, in a parametrized test's id (pytest keeps ids as written).
ODD = """test/test_q.py::Quoted::test_x[it's "a" <b> & </script><script>alert(1)</script>]"""
ODD_PLAIN = """test/test_q.py::test_plain['<&>"]"""
ODD_START = """WorldStartError: rank 0 could not join: ValueError('<bad> "x" & y')"""


def _odd_report() -> dict:
    """A run report (valid by the schema) whose test ids, polluters, leaks and start error are full of them."""
    start = {"time": 10.0, "seconds": 0.5, "restart": False, "after": None, "purpose": "tests", "for_test": ODD,
             "failed": None}
    worlds = [
        {"id": "Quoted", "worker": None, "class": "Quoted", "world_size": 2, "kind": "shared", "for_test": None,
         "starts": [start, dict(start, time=12.0, restart=True, after=ODD),
                    dict(start, time=13.0, restart=True, after=ODD, failed=ODD_START)], "stopped": 14.0},
        {"id": "Quoted (replay)", "worker": None, "class": "Quoted", "world_size": 2, "kind": "replay",
         "for_test": ODD, "starts": [dict(start, time=11.5, purpose="rerun")], "stopped": 12.0},
    ]
    run = {"world": "Quoted", "worker": None, "test": ODD, "for_test": ODD, "start": 11.0, "end": 11.5,
           "outcome": "failed", "failing_ranks": [0, 1], "raising_ranks": [1], "purpose": "tests"}
    runs = [run, dict(run, world="Quoted (replay)", start=11.6, end=11.9, purpose="rerun")]
    test = {"id": ODD, "worker": None, "outcome": "failed", "start": 11.0, "end": 11.5, "seconds": 0.5,
            "world": "Quoted", "world_start": 1, "world_restarts": 0, "restarts_world": True, "failing_ranks": [0, 1],
            "raising_ranks": [1], "diagnosis": {"verdict": "order-dependent", "polluters": [ODD_PLAIN], "worlds": 1, "seconds": 0.3,
                          "text": ODD},
            "leaks": [{"item": ODD_START, "ranks": [0], "restored": True, "before": "'<'", "after": '">"'}],
            "leaks_restored": True, "shuffle_seed": None, "repeat": None}
    plain = dict(test, id=ODD_PLAIN, outcome="passed", start=13.5, end=13.6, seconds=0.1, world=None,
                 world_start=None, restarts_world=False, failing_ranks=[], raising_ranks=[], diagnosis=None, leaks=[],
                 leaks_restored=None)
    return {"version": 1, "tool": "continuous_test", "started": 9.0, "finished": 15.0, "shuffle_seed": None,
            "workers": [], "worlds": worlds, "tests": [test, plain], "runs": runs}


class _Page(HTMLParser):
    """The elements of a page as a browser's parser sees them: (tag, attributes) and the text in each."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list = []
        self.texts: dict = {}
        self._open: list = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        if tag != "meta":  # the page's one element without an end tag
            self._open.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in self._open:
            while self._open.pop() != tag:
                pass

    def handle_data(self, data):
        if self._open:
            self.texts.setdefault(self._open[-1], []).append(data)


def test_the_page_escapes_quotes_and_markup_of_test_ids_in_attributes_and_text():
    report = _odd_report()
    assert_valid(report)
    text = report_html.render(report)
    page = _Page(text)
    tags = [tag for tag, _ in page.elements]
    assert "script" not in tags and "b" not in tags, "markup of a test id became elements of the page"
    # Attributes: each value read back whole (a quote left as is would end it early and add attributes).
    tested = [attrs["data-test"] for _, attrs in page.elements if "data-test" in attrs]
    assert tested == [ODD, ODD, ODD_PLAIN, ODD, ODD_PLAIN], tested  # the bars lane by lane, then the table's rows
    assert [attrs["data-world"] for _, attrs in page.elements if "data-world" in attrs] == \
        ["Quoted", "Quoted (replay)", "without ranks"]
    known = {"lang", "charset", "class", "data-test", "data-world", "data-ranks", "x", "y", "x1", "y1", "x2", "y2",
             "width", "height", "viewbox", "role", "aria-label", "fill", "opacity", "d", "rx", "stroke",
             "stroke-width", "stroke-dasharray", "style", "text-anchor"}
    assert {name for _, attrs in page.elements for name in attrs} <= known
    # Text: tooltips, labels and the table's cells say them as they are.
    titles = page.texts["title"]
    assert f"{ODD}: failed, 0.50 s, failing ranks 0, 1 (raised on rank 1; the others waited)" in titles
    assert f"{ODD}: failed, 0.30 s, failing ranks 0, 1 (raised on rank 1; the others waited) (rerun for {ODD})" in titles
    assert f"world restarted (0.50 s to start) after {ODD}" in titles
    assert f"world failed to start: {ODD_START}" in titles
    assert f"2 ranks, rerun/bisect of {ODD.rsplit('::', 1)[1]}" in page.texts["text"]  # the replay lane's name
    cells = page.texts["td"]
    assert ODD in cells and ODD_PLAIN in cells and f"order-dependent after {ODD_PLAIN}" in cells
    assert f"{ODD_START} (restored)" in cells
    assert ODD not in text and ODD_PLAIN not in text  # never raw, even where the parser forgives it


def test_each_failed_bar_is_labelled_with_its_failing_ranks_without_a_browser():
    # The Chromium tests below check the label where Chromium is installed, and skip where it is not;
    # this reads the page as a browser's parser does, everywhere: one visible label per failed bar
    # (a lane's and its replay lane's), the ranks that raised in brackets.
    page = _Page(report_html.render(_odd_report()))
    labels = [attrs for tag, attrs in page.elements if tag == "text" and attrs.get("class") == "rank-label"]
    assert len(labels) == 2, labels
    assert [text for text in page.texts["text"] if text.startswith("ranks ")] == ["ranks 0,1 (1 raised)"] * 2


def test_a_lane_of_one_rank_says_rank_not_ranks():
    # Issue 38, Messages: a world of one rank was drawn as "1 ranks".
    report = _odd_report()
    for world in report["worlds"]:
        world["world_size"] = 1
    texts = _Page(report_html.render(report)).texts["text"]
    assert "1 rank, 3 starts" in texts and f"1 rank, rerun/bisect of {ODD.rsplit('::', 1)[1]}" in texts, texts
    assert not any("1 ranks" in text for text in texts), texts


@pytest.mark.e2e
def test_the_command_writes_the_page_and_refuses_what_is_not_a_report(unittest_run, tmp_path):
    _, report, _ = unittest_run
    (tmp_path / "run.json").write_text(json.dumps(report))
    proc = helpers.run([sys.executable, "-m", "continuous_test.report_html", str(tmp_path / "run.json"), "-o",
                        str(tmp_path / "page.html")], cwd=tmp_path)
    assert proc.returncode == 0 and (tmp_path / "page.html").read_text() == report_html.render(report), describe(proc)
    (tmp_path / "other.json").write_text("[1, 2]")
    proc = helpers.run([sys.executable, "-m", "continuous_test.report_html", str(tmp_path / "other.json")],
                       cwd=tmp_path)
    assert proc.returncode == 2 and "is not a continuous_test run report" in proc.stderr, describe(proc)


def chromium() -> str:
    """The path of Debian's Chromium, or skip saying why."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("Chromium is not installed (Debian: apt-get install chromium); the page is not rendered")


def headless(page: Path, *args: str) -> subprocess.CompletedProcess:
    """Run headless Chromium on ``page`` with a private profile and no network of its own."""
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                               "--disable-background-networking", "--disable-component-update", "--no-first-run",
                               f"--user-data-dir={profile}", *args, page.as_uri()],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=120)


@pytest.mark.e2e
def test_chromium_renders_one_lane_per_world_and_the_failing_ranks(unittest_run):
    _, report, page = unittest_run
    proc = headless(page, "--dump-dom")
    assert proc.returncode == 0, describe(proc)
    dom = proc.stdout
    # The browser parsed the SVG: every lane, every bar, the failing ranks as text.
    assert dom.count('class="lane ') == len(report["worlds"]), dom[:2000]
    assert dom.count('class="run ') == len(report["runs"])
    assert "ranks 0,1</text>" in dom and 'class="marker restart"' in dom
    assert '<tr class="failed" data-test="__main__.OrderTest.test_e_victim">' in dom


@pytest.mark.e2e
def test_chromium_draws_the_page(unittest_run, tmp_path):
    _, _, page = unittest_run
    shot = tmp_path / "page.png"
    proc = headless(page, f"--screenshot={shot}", "--window-size=1280,800")
    assert proc.returncode == 0 and shot.is_file(), describe(proc)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000  # a drawn page, not a blank one


@pytest.mark.world
def test_repeat_counts_reach_the_report_and_each_run_is_a_junit_property(tmp_path):
    # --ct-repeat (session/repeat.py) fills each run's "repeat" in the JSON; JUnit names the run.
    report, junit = tmp_path / "run.json", tmp_path / "junit.xml"
    proc = helpers.pytest("test_world_sizes.py", "-k", "all_reduce and ws2", "--ct-repeat=3", f"--ct-report={report}",
                          f"--junitxml={junit}")
    assert pytest_counts(proc.stdout) == {"passed": 3, "deselected": 9}, describe(proc)
    found = json.loads(report.read_text())
    assert_valid(found)
    repeats = [t["repeat"] for t in found["tests"]]
    assert repeats == [{"runs": 3, "passed": 3, "diagnosis": "passed every run"}] * 3, found["tests"]
    runs = sorted(p.get("value") for p in ET.parse(junit).getroot().iter("property") if p.get("name") == "repeat")
    assert runs == ["repeat-1of3", "repeat-2of3", "repeat-3of3"], runs


# -- where the files go (wire/files.py) ---------------------------------------------------


def _fifo_reader(path: Path) -> tuple:
    os.mkfifo(path)
    read: list = []
    reader = threading.Thread(target=lambda: read.append(path.read_text()), daemon=True)
    reader.start()
    return reader, read


@pytest.mark.world
def test_pytest_writes_through_a_link_into_a_fifo_and_dev_null_and_replaces_none(tmp_path):
    # --ct-report through a link (the link kept), --ct-report-html into a FIFO that a thread reads,
    # --ct-store-durations and --junitxml into /dev/null, which stays the device it was.
    target, link = tmp_path / "kept" / "run.json", tmp_path / "run.json"
    target.parent.mkdir()
    link.symlink_to(target)
    reader, read = _fifo_reader(tmp_path / "page.fifo")
    proc = helpers.pytest("test_basic.py", "-k", "test_sum", f"--ct-report={link}",
                          f"--ct-report-html={tmp_path / 'page.fifo'}", "--ct-store-durations=/dev/null",
                          "--junitxml=/dev/null", env=helpers.QUIET)
    reader.join(30)
    assert pytest_counts(proc.stdout) == {"passed": 1, "deselected": 4}, describe(proc)
    assert stat.S_ISCHR(os.lstat(os.devnull).st_mode) and stat.S_ISCHR(os.lstat("/dev/full").st_mode)
    assert link.is_symlink() and os.readlink(link) == str(target), describe(proc)
    assert_valid(json.loads(target.read_text()))
    assert stat.S_ISFIFO(os.lstat(tmp_path / "page.fifo").st_mode) and "test_sum" in read[0], describe(proc)


@pytest.mark.e2e
def test_run_tests_writes_into_dev_null_and_through_a_link_from_where_it_started(tmp_path):
    # CONTINUOUS_TEST_REPORT=/dev/null stays a device; a relative page path is where the run started,
    # though a test changed the controller's working directory; the link to it is kept.
    elsewhere, started = tmp_path / "elsewhere", tmp_path / "started"
    elsewhere.mkdir(), started.mkdir()
    (started / "page.html").symlink_to(tmp_path / "page.html")
    proc = helpers.python(str(helpers.SCENARIOS / "test_report_paths.py"), cwd=started,
                          env={ENV_REPORT: os.devnull, ENV_REPORT_HTML: "page.html", "CHDIR_TO": str(elsewhere),
                               **helpers.QUIET})
    assert unittest_counts(proc.stderr) == {"ran": 3, "failures": 1}, describe(proc)
    assert stat.S_ISCHR(os.lstat(os.devnull).st_mode)
    assert (started / "page.html").is_symlink() and "test_fails_on_rank_1" in (tmp_path / "page.html").read_text()
    assert os.listdir(elsewhere) == [], describe(proc)


@pytest.mark.world
@pytest.mark.parametrize("runner", ["pytest", "python"])
@pytest.mark.parametrize("bad", ["/proc/version/x.json", "{tmp}"])
def test_a_report_path_that_cannot_be_written_is_a_usage_error_before_any_test(tmp_path, runner, bad):
    bad = bad.format(tmp=tmp_path)
    if runner == "pytest":
        proc = helpers.pytest("test_report_paths.py", f"--ct-report={bad}")
        source, code = "the --ct-report option", pytest.ExitCode.USAGE_ERROR
    else:
        proc = helpers.python("test_report_paths.py", env={ENV_REPORT_HTML: bad})
        source, code = f"the {ENV_REPORT_HTML} environment variable", 2
    why = "it is a directory" if bad == str(tmp_path) else "/proc/version is not a directory"
    assert f"{source}: cannot write {bad!r}: {why}" in proc.stderr, describe(proc)
    assert proc.returncode == code and "Traceback" not in proc.stderr + proc.stdout, describe(proc)
    assert "test_fails_on_rank_1" not in proc.stdout + proc.stderr, describe(proc)


def _broken_at_the_end(tmp_path: Path) -> tuple:
    folder = tmp_path / "reports"
    folder.mkdir()
    return folder / "run.json", {"BREAK_DIR": str(folder), **helpers.QUIET}


@pytest.mark.world
def test_a_report_that_cannot_be_written_at_the_end_leaves_pytests_summary(tmp_path):
    report, env = _broken_at_the_end(tmp_path)
    proc = helpers.pytest("test_report_paths.py", f"--ct-report={report}", "-rf", env=env)
    assert pytest_counts(proc.stdout) == {"failed": 1, "passed": 2}, describe(proc)
    assert "= FAILURES =" in proc.stdout and "short test summary info" in proc.stdout, describe(proc)
    assert f"the run report for the --ct-report option was not written to {str(report)!r}" in proc.stdout, describe(proc)
    assert "NotADirectoryError" not in proc.stdout + proc.stderr and proc.returncode == 1, describe(proc)


@pytest.mark.e2e
def test_a_report_that_cannot_be_written_at_the_end_leaves_the_summary_under_xdist(tmp_path):
    report, env = _broken_at_the_end(tmp_path)
    proc = helpers.pytest("test_report_paths.py", "-n", "2", f"--ct-report={report}", "-rf", env=env)
    assert pytest_counts(proc.stdout) == {"failed": 1, "passed": 2}, describe(proc)
    assert "= FAILURES =" in proc.stdout and "short test summary info" in proc.stdout, describe(proc)
    assert "--ct-report option was not written" in proc.stdout and proc.returncode == 1, describe(proc)


@pytest.mark.world
def test_a_report_that_cannot_be_written_at_the_end_leaves_unittests_summary(tmp_path):
    report, env = _broken_at_the_end(tmp_path)
    proc = helpers.python("test_report_paths.py", env={ENV_REPORT: str(report), **env})
    assert unittest_counts(proc.stderr) == {"ran": 3, "failures": 1} and proc.returncode == 1, describe(proc)
    assert "rank 1 fails here" in proc.stderr and "Traceback (most recent call last)" in proc.stderr
    assert (f"the run report for the {ENV_REPORT} environment variable was not written to {str(report)!r}"
            in proc.stderr), describe(proc)


@pytest.mark.world
def test_the_rank_that_raised_is_told_apart_from_the_rank_that_waited(tmp_path):
    # Rank 1 raises; rank 0 only waits in all_reduce for it, and is stuck after the grace period.
    test = "BreaksTheWorld.test_b_rank_1_raises_while_rank_0_waits"
    proc = helpers.python("test_launched_faults.py", test, env={ENV_REPORT: str(tmp_path / "run.json"), **helpers.QUIET})
    assert unittest_counts(proc.stderr) == {"ran": 1, "errors": 1}, describe(proc)
    assert "test_b_rank_1_raises_while_rank_0_waits failed on rank 1 of 2" in proc.stderr, describe(proc)
    report = json.loads((tmp_path / "run.json").read_text())
    assert_valid(report)
    (entry,) = report["tests"]
    assert (entry["failing_ranks"], entry["raising_ranks"]) == ([0, 1], [1]), entry
    assert [(r["failing_ranks"], r["raising_ranks"]) for r in report["runs"]] == [([0, 1], [1])]
    junit = tmp_path / "junit.xml"
    proc = helpers.pytest("test_launched_faults.py", "-k", "test_b_rank_1", f"--junitxml={junit}", env=helpers.QUIET)
    (case,) = ET.parse(junit).getroot().iter("testcase")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert (props.get("failing_ranks"), props.get("raising_ranks")) == ("0,1", "1"), describe(proc)


def test_a_rank_whose_collective_a_peer_broke_waited(tmp_path):
    from continuous_test.verdict.report import RankReport, RankStatus, failing_ranks, raising_ranks

    statuses = {0: RankReport(RankStatus.FAILED, "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer"),
                1: RankReport(RankStatus.FAILED, "ValueError: rank 1's own"), 2: RankReport(RankStatus.PASSED)}
    assert (failing_ranks(statuses), raising_ranks(statuses)) == ([0, 1], [1])
    # When every failing rank only saw a broken collective, none can be told apart: all are named.
    statuses[1] = RankReport(RankStatus.FAILED, "RuntimeError: Timed out waiting 10000ms for recv operation")
    assert raising_ranks(statuses) == [0, 1]
    statuses[1] = RankReport(RankStatus.STUCK, "stacks")
    assert (failing_ranks(statuses), raising_ranks(statuses)) == ([0, 1], [0])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-p", "no:cacheprovider", *sys.argv[1:]]))
