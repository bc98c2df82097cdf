"""PNG plots of a load test report (matplotlib, no display needed).

    paths = draw_all(report, out_dir)   # goodput_vs_load.png, ttft_cdf.png, routing_mix.png

Runs still carry their raw results (``_results``) here; report.json does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the headless backend

from loadtest.run import latencies  # noqa: E402


def _sweep(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    by_policy: dict[str, list[dict[str, Any]]] = {}
    for run in report["runs"]:
        if run["scenario"] in ("load_sweep", "run"):   # run: a --ramp of loads
            by_policy.setdefault(run["policy"], []).append(run)
    return {p: sorted(rows, key=lambda r: r["offered_rps"]) for p, rows in by_policy.items()}


def goodput_vs_load(report: dict[str, Any], path: Path) -> Path:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for policy, rows in _sweep(report).items():
        x = [r["offered_rps"] for r in rows]
        left.plot(x, [r["pools"]["interactive"]["goodput_rps"] for r in rows], "o-", label=policy)
        right.plot(x, [r.get("cost_per_completed_usd") or 0 for r in rows], "o-", label=policy)
    top = max((r["offered_rps"] for rows in _sweep(report).values() for r in rows), default=1)
    left.plot([0, top], [0, top], ":", color="grey", label="offered")
    left.set(xlabel="offered load (req/s)", ylabel="goodput at the SLO (req/s)",
             title="interactive goodput")
    right.set(xlabel="offered load (req/s)", ylabel="USD per completed request",
              title="cost per completed task")
    left.legend()
    right.legend()
    return _save(fig, path)


def _cdf(ax: Any, values: list[float], label: str) -> None:
    if not values:
        return
    xs = sorted(v * 1000 for v in values)
    ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", label=label)


def latency_cdfs(report: dict[str, Any], path: Path) -> Path:
    """TTFT CDFs: each policy at the highest load, and with_batch alone vs with batch."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
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
    return _save(fig, path)


def routing_mix(report: dict[str, Any], path: Path) -> Path:
    runs = [r for r in report["runs"]]
    # Long names wrap at their underscores, so that neighbouring labels stay apart.
    labels = [f"{r['policy'].replace('_', '_' + chr(10))}\n{r['offered_rps']:g}"
              + (f"+b{r['batch_rps']:g}" if r["batch_rps"] else "") for r in runs]
    models = sorted({m for r in runs for pool in r["pools"].values() for m in pool["models"]})
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(runs)), 4))
    bottom = [0.0] * len(runs)
    for model in models:
        share = []
        for r in runs:
            mix = r["pools"]["interactive"]["models"]
            total = sum(mix.values()) or 1
            share.append(mix.get(model, 0) / total)
        ax.bar(range(len(runs)), share, bottom=bottom, label=model)
        bottom = [b + s for b, s in zip(bottom, share, strict=True)]
    ax.set_xticks(range(len(runs)), labels, fontsize=7)
    ax.set(ylabel="share of completed interactive requests", title="routing mix (policy, req/s)")
    ax.legend()
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw_all(report: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    if _sweep(report):
        paths.append(goodput_vs_load(report, out / "goodput_vs_load.png"))
    paths.append(latency_cdfs(report, out / "ttft_cdf.png"))
    paths.append(routing_mix(report, out / "routing_mix.png"))
    return paths
