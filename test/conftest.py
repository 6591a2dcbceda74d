"""Make the test helpers importable and keep scenario files out of collection."""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

# Scenario files are run as subprocesses by the tests, never collected directly;
# gpu/ is run by gpu/check.py on machines with GPUs.
collect_ignore_glob = ["scenarios/*", "gpu/*"]
