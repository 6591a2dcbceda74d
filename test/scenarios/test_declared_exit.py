"""A fresh rank's test is judged once its ranks declared their exit, not once the template reaped them.

Rank 0 stops the template (its parent, which reaps the ranks and reports their ends)
as its test ends.  The controller resumes it in tearDownClass, after the verdict, or
a thread of the controller does after ``HOLD`` seconds: a controller that waits for
the template to report the ranks' ends (a rank that did not declare its exit code)
judges the test only then.  Writes the template's pid to ``$STAMP_DIR/template``.
"""
import os
import signal
import threading
import time

from continuous_test import MultiProcessTestCase, run_tests

HOLD = 12.0
STAMP = os.path.join(os.environ["STAMP_DIR"], "template")


def _stopped(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def _resume(path):
    try:
        with open(path) as f:
            os.kill(int(f.read()), signal.SIGCONT)
    except (OSError, ValueError):
        pass


def _resume_later(path):
    while not os.path.exists(path):
        time.sleep(0.01)
    time.sleep(HOLD)
    _resume(path)


class DeclaredExitTest(MultiProcessTestCase):
    world_size = 2

    @classmethod
    def setUpClass(cls):  # in the controller
        super().setUpClass()
        threading.Thread(target=_resume_later, args=(STAMP,), daemon=True).start()

    @classmethod
    def tearDownClass(cls):  # in the controller, after the verdict
        _resume(STAMP)
        super().tearDownClass()

    def test_the_template_is_stopped_as_the_ranks_end(self):
        started = os.path.join(os.environ["STAMP_DIR"], "rank1-started")
        if self.rank != 0:
            open(started, "w").close()
            return
        # Each fresh rank runs its test as soon as it is forked: rank 0 stops the template only once it
        # has forked rank 1 (under load, it could still be forking it, and the controller then waited).
        deadline = time.monotonic() + 30
        while not os.path.exists(started) and time.monotonic() < deadline:
            time.sleep(0.01)
        template = os.getppid()
        with open(STAMP + ".part", "w") as f:
            f.write(str(template))
        os.rename(STAMP + ".part", STAMP)
        os.kill(template, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while not _stopped(template) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertTrue(_stopped(template))


if __name__ == "__main__":
    run_tests()
