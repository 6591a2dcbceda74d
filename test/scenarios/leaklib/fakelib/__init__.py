"""A library that, at its first import, adds its vendored directory to sys.path and a filter for its warnings."""
import os
import sys
import warnings

VENDOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_vendor")
if VENDOR not in sys.path:
    sys.path.append(VENDOR)
warnings.filterwarnings("ignore", category=DeprecationWarning, module="fakelib")
