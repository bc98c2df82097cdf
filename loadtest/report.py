"""Writing a load test report: ``report.json``, the plots, and a Markdown table.

    paths = write_report(report, Path("out"))   # out/report.json, out/*.png
    print(markdown_table(report))
    print_rows([{"run": "a", "req_per_s": 12.5}, ...])   # a benchmark's rows, then their JSON
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _plain(report: dict[str, Any]) -> dict[str, Any]:
    """The report without the raw per-request results the plots used."""
    runs = [{k: v for k, v in run.items() if not k.startswith("_")} for run in report["runs"]]
    return {**report, "runs": runs}


def write_report(report: dict[str, Any], out: Path, *, plots: bool = True) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.json"
    path.write_text(json.dumps(_plain(report), indent=1) + "\n")
    paths = [path]
    if plots:
        from loadtest.plots import draw_all

        paths += draw_all(report, out)
    return paths


def print_rows(rows: list[dict[str, Any]]) -> None:
    """A benchmark's rows as a Markdown table (the first row's keys are the
    columns), then as one line of JSON."""
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in cols) + " |")
    print(json.dumps(rows))


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:.{digits}f}" if isinstance(value, float | int) else str(value)


def markdown_table(report: dict[str, Any]) -> str:
    head = ("| scenario | policy | offered req/s | batch req/s | interactive goodput req/s | "
            "SLO attainment | TTFT p50 / p95 / p99 ms | TPOT p50 / p95 ms | batch goodput req/s "
            "| USD per completed | J per completed | models (interactive) |")
    lines = [head, "|" + "---|" * 12]
    sessions = [r for r in report["runs"] if r["scenario"] == "agent_sessions"]
    for run in report["runs"]:
        if run["scenario"] == "agent_sessions":
            continue
        inter, batch = run["pools"]["interactive"], run["pools"]["batch"]
        ttft, tpot = inter["ttft_ms"], inter["tpot_ms"]
        mix = ", ".join(f"{m} {n}" for m, n in inter["models"].items())
        lines.append(
            f"| {run['scenario']} | {run['policy']} | {_fmt(run['offered_rps'])} | "
            f"{_fmt(run['batch_rps'])} | {_fmt(inter['goodput_rps'], 2)} | "
            f"{_fmt(inter['slo_attainment'], 2)} | {_fmt(ttft['p50'])} / {_fmt(ttft['p95'])} / "
            f"{_fmt(ttft['p99'])} | {_fmt(tpot['p50'])} / {_fmt(tpot['p95'])} | "
            f"{_fmt(batch['goodput_rps'], 2)} | {_fmt(run.get('cost_per_completed_usd'), 6)} | "
            f"{_fmt(run.get('energy_per_completed_j'), 0)} | {mix} |")
    if len(lines) == 2:
        lines = []
    if sessions:
        lines += ["", "| agent_sessions | completed sessions | USD per completed session | "
                  "USD per session all completed | "
                  "the same turns: never evicted / switches free | "
                  "prefix-cache hit rate | switches per session | quality target met | TTFT p50 / "
                  "p95 ms | models |", "|" + "---|" * 10]
        for run in sessions:
            ttft = run["pools"]["interactive"]["ttft_ms"]
            mix = ", ".join(f"{m} {n}" for m, n in run["models"].items())
            lines.append(
                f"| {run['policy']} | {run['completed_sessions']}/{run['sessions']} | "
                f"{_fmt(run['cost_per_completed_session_usd'], 5)} | "
                f"{_fmt(run.get('cost_per_session_completed_by_all_usd'), 5)} "
                f"({run.get('sessions_completed_by_all', '-')}) | "
                f"{_fmt(run.get('kept_cache_cost_per_completed_session_usd'), 5)} / "
                f"{_fmt(run.get('free_switch_cost_per_completed_session_usd'), 5)} | "
                f"{_fmt(run['prefix_cache_hit_rate'], 3)} | "
                f"{_fmt(run['model_switches_per_session'], 2)} | "
                f"{_fmt(run['quality_target_met'], 3)} | {_fmt(ttft['p50'])} / "
                f"{_fmt(ttft['p95'])} | {mix} |")
    return "\n".join(lines)
