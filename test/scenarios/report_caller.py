"""Calls a @distributed function directly and catches the rank's own exception type."""
import subprocess
import sys

import torch.distributed as dist

import continuous_test


@continuous_test.distributed(world_size=2)
def test_runs_a_failing_command():
    if dist.get_rank() == 1:
        subprocess.run([sys.executable, "-c", "raise SystemExit(3)"], check=True)


if __name__ == "__main__":
    try:
        test_runs_a_failing_command()
    except subprocess.CalledProcessError as exc:
        print(f"caught CalledProcessError returncode={exc.returncode}")
        print(f"first line: {str(exc).splitlines()[0]}")
    else:
        print("nothing was raised")
