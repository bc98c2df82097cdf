"""numba's ``njit`` as the compiled score uses it: imported only when numba is there."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba


def jit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """numba.njit, cached where a cache can be written."""
    try:
        return numba.njit(nogil=True, cache=True)(fn)
    except RuntimeError:     # no directory where the cache can be written
        return numba.njit(nogil=True)(fn)
