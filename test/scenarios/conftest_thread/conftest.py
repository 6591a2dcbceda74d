"""A conftest that starts a watchdog thread and sets torch's default dtype for the whole session."""
import threading

import torch

torch.set_default_dtype(torch.float64)
_STOP = threading.Event()
threading.Thread(target=_STOP.wait, name="session-watchdog", daemon=True).start()
