"""PNG plots of a load test report (matplotlib, no display needed).

    paths = draw_all(report, out_dir)   # goodput_vs_load.png, ttft_cdf.png, routing_mix.png
    fig = routing_mix_figure(report)    # the same figure, not saved: to inspect it

Runs still carry their raw results (``_results``) here; report.json does not,
so only the goodput and routing mix plots can be redrawn from a saved report.

What the figures promise a reader comparing routers:
- panels side by side that plot the same x quantity share one x range;
- cost is on a log axis: the routers' costs differ by orders of magnitude, and
  on a linear axis the cheap ones lie on top of each other near 0 (a run with
  no cost, or a cost of 0, has no point there);
- the routing mix says over how many completed requests each bar's shares
  are, and its legend sits beside the bars, never on them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from loadtest.run import latencies


def _sweep(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    by_policy: dict[str, list[dict[str, Any]]] = {}
    for run in report["runs"]:
        if run["scenario"] in ("load_sweep", "run"):   # run: a --ramp of loads
            by_policy.setdefault(run["policy"], []).append(run)
    return {p: sorted(rows, key=lambda r: r["offered_rps"]) for p, rows in by_policy.items()}


def _log_ready(value: float | None) -> float:
    """A cost as a log axis can draw it: a gap (NaN) where there is none above 0."""
    return value if value is not None and value > 0 else math.nan


def goodput_figure(report: dict[str, Any]) -> Figure:
    """Interactive goodput and cost per completed task against offered load."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    sweep = _sweep(report)
    for policy, rows in sweep.items():
        x = [r["offered_rps"] for r in rows]
        left.plot(x, [r["pools"]["interactive"]["goodput_rps"] for r in rows], "o-", label=policy)
        right.plot(x, [_log_ready(r.get("cost_per_completed_usd")) for r in rows], "o-",
                   label=policy)
    top = max((r["offered_rps"] for rows in sweep.values() for r in rows), default=1)
    left.plot([0, top], [0, top], ":", color="grey", label="offered")
    left.set(xlabel="offered load (req/s)", ylabel="goodput at the SLO (req/s)",
             title="interactive goodput")
    right.set(xlabel="offered load (req/s)", ylabel="USD per completed request (log)",
              title="cost per completed task", yscale="log")
    right.grid(True, which="major", axis="y", alpha=0.3)
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    return fig


def goodput_vs_load(report: dict[str, Any], path: Path) -> Path:
    return _save(goodput_figure(report), path)


def _cdf(ax: Any, values: list[float], label: str) -> None:
    if not values:
        return
    xs = sorted(v * 1000 for v in values)
    ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", label=label)


def latency_figure(report: dict[str, Any]) -> Figure:
    """TTFT CDFs: each policy at the highest load, and with_batch alone vs with batch."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    slo = report["slo"]["ttft_ms"]
    for policy, rows in _sweep(report).items():
        top = rows[-1]
        _cdf(left, latencies(top.get("_results", []), "interactive")["ttft"],
             f"{policy} @ {top['offered_rps']:g} req/s")
    for run in report["runs"]:
        if run["scenario"] == "with_batch":
            _cdf(right, latencies(run.get("_results", []), "interactive")["ttft"],
                 f"interactive, batch {run['batch_rps']:g} req/s")
    for ax, title in ((left, "TTFT at the highest load"), (right, "interactive TTFT, with_batch")):
        ax.axvline(slo, color="grey", linestyle=":", label=f"SLO {slo:g} ms")
        ax.set(xscale="log", xlabel="TTFT (ms)", ylabel="share of completed requests",
               title=title)
        ax.legend(fontsize=8)
    return fig


def latency_cdfs(report: dict[str, Any], path: Path) -> Path:
    return _save(latency_figure(report), path)


def _bar_label(run: dict[str, Any]) -> str:
    # Long names wrap at their underscores, so that neighbouring labels stay apart.
    return (f"{run['policy'].replace('_', '_' + chr(10))}\n{run['offered_rps']:g}"
            + (f"+b{run['batch_rps']:g}" if run["batch_rps"] else ""))


def completed_interactive(run: dict[str, Any]) -> int:
    """How many interactive requests of ``run`` completed: the bar's whole."""
    pool = run["pools"]["interactive"]
    return int(pool.get("completed", sum(pool["models"].values())))


def routing_mix_figure(report: dict[str, Any]) -> Figure:
    """Each run's share of completed interactive requests per model, n above each bar."""
    runs = report["runs"]
    models = sorted({m for r in runs for pool in r["pools"].values() for m in pool["models"]})
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(runs)) + 1.2, 4))
    bottom = [0.0] * len(runs)
    for model in models:
        share = []
        for r in runs:
            mix = r["pools"]["interactive"]["models"]
            share.append(mix.get(model, 0) / (sum(mix.values()) or 1))
        ax.bar(range(len(runs)), share, bottom=bottom, label=model)
        bottom = [b + s for b, s in zip(bottom, share, strict=True)]
    for i, (run, height) in enumerate(zip(runs, bottom, strict=True)):
        ax.text(i, height + 0.01, f"n={completed_interactive(run)}", ha="center", va="bottom",
                fontsize=7)
    ax.set_xticks(range(len(runs)), [_bar_label(r) for r in runs], fontsize=7)
    ax.set_ylim(0, 1.08)     # room for the counts above full bars
    ax.set(ylabel="share of completed interactive requests",
           title="routing mix (policy, req/s; n = completed interactive requests)")
    ax.legend(title="model", loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0)
    return fig


def routing_mix(report: dict[str, Any], path: Path) -> Path:
    return _save(routing_mix_figure(report), path)


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    # "tight": the routing mix's legend is outside its axes, and must stay in the file.
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def sessions_figure(runs: list[dict[str, Any]]) -> Figure:
    """agent_sessions: per policy, cost per completed session, prefix-cache hit rate,
    model switches per session, the share of turns meeting their quality target and p95
    TTFT. A figure a run has not (no session completed, no turn streamed) has no bar."""
    fig, axes = plt.subplots(1, 5, figsize=(16, 3.6))
    names = [r["policy"] for r in runs]
    for ax, key, title in zip(axes, ("cost_per_completed_session_usd", "prefix_cache_hit_rate",
                                     "model_switches_per_session", "quality_target_met", "p95"),
                              ("USD per completed session", "prefix-cache hit rate",
                               "model switches per session", "turns meeting their quality target",
                               "interactive TTFT p95 (ms)"),
                              strict=True):
        values = [r["pools"]["interactive"]["ttft_ms"]["p95"] if key == "p95" else r.get(key)
                  for r in runs]
        ax.bar(range(len(runs)), [math.nan if v is None else v for v in values],
               color=["C0", "C1", "C2", "C3"][:len(runs)])
        ax.set_xticks(range(len(runs)), names, fontsize=8)
        ax.set_title(title, fontsize=9)
    return fig


def draw_all(report: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    sessions = [r for r in report["runs"] if r["scenario"] == "agent_sessions"]
    report = {**report, "runs": [r for r in report["runs"] if r["scenario"] != "agent_sessions"]}
    if sessions:
        paths.append(_save(sessions_figure(sessions), out / "agent_sessions.png"))
    if not report["runs"]:
        return paths
    if _sweep(report):
        paths.append(goodput_vs_load(report, out / "goodput_vs_load.png"))
    paths.append(latency_cdfs(report, out / "ttft_cdf.png"))
    paths.append(routing_mix(report, out / "routing_mix.png"))
    return paths
