"""Shift the wall clock of a gateway process under test (imported by ``site`` at start-up).

    run_gateway(config, env={"PYTHONPATH": f"{CLOCK_SHIM}:{REPO}",
                             "ROUTEGATE_E2E_CLOCK_SHIFT_S": "86400"})

Only ``time.time`` moves (the budget's calendar windows read it); monotonic
clocks, and so every timeout, are untouched. The rollover test uses it when
no timezone's midnight is close enough to wait for.
"""

import os
import time

_shift = float(os.environ.get("ROUTEGATE_E2E_CLOCK_SHIFT_S") or 0)
if _shift:
    _real_time, _real_time_ns = time.time, time.time_ns
    time.time = lambda: _real_time() + _shift
    time.time_ns = lambda: _real_time_ns() + int(_shift * 1e9)
