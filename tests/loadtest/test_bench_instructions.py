"""bench_instructions reads callgrind's total, and each target's command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.bench_instructions import instructions
from loadtest.targets import target_command


def test_the_total_comes_from_the_summary_line(tmp_path: Path) -> None:
    dump = tmp_path / "x.callgrind.1"
    dump.write_text("version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nfn=(1) main\n"
                    "16 120\nsummary: 922075757\ntotals: 922075757\n")
    assert instructions(dump) == 922_075_757
    (tmp_path / "empty").write_text("events: Ir\n")
    with pytest.raises(ValueError):
        instructions(tmp_path / "empty")


def test_each_target_runs_its_own_server(tmp_path: Path) -> None:
    bare, ready = target_command("bare-aiohttp", "http://127.0.0.1:1", 5, tmp_path)
    assert bare[0] == "loadtest.bare_proxy" and "aiohttp" in bare and ready == "/health"
    gateway, ready = target_command("routegate-nobudget", "http://127.0.0.1:1", 5, tmp_path)
    assert gateway[:2] == ["gateway.cli", "serve"] and ready == "/healthz"
    config = Path(gateway[gateway.index("--config") + 1]).read_text()
    assert "enabled: false" in config and "http://127.0.0.1:1/v1" in config
