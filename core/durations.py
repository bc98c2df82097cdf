"""Durations on the command line: ``90s``, ``30m``, ``1h``, ``7d`` (``--since``)."""

from __future__ import annotations

import re
from datetime import timedelta

_SINCE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str) -> timedelta:
    match = _SINCE.match(text.strip())
    if not match:
        raise ValueError(f"--since takes a duration like 90s, 30m, 1h or 7d, not {text!r}")
    return timedelta(seconds=float(match[1]) * _UNIT[match[2]])
