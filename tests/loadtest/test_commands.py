"""``routegate loadtest experiment --loads``: the sweep's loads, bounded."""

from __future__ import annotations

import pytest

from loadtest.commands import _loads


def test_loads_are_a_bounded_comma_separated_list() -> None:
    assert _loads("16, 24") == [16.0, 24.0]
    for bad in ("", "0", "-3", "1001", "4,x"):
        with pytest.raises(SystemExit):
            _loads(bad)
