"""``routegate eval --learned DIR``: the current classifier and a learned one, side by side.

Two views, because neither alone decides:

- the shared test file (``llmrouter_test.jsonl``), the same table ``routegate
  eval`` prints, with one column per classifier, plus the ranking by each
  one's own ``difficulty`` (for a learned model: how much the stronger of its
  labelled models is needed);
- the held-out split of the learned model's own labels, as ``routegate learn``
  measured it before writing (its provenance, in the artifact's metadata as
  in ``LEARNED.json``): the distribution it was
  learned for, and where it had to beat the current one to be written.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from classifiers.complexity import ComplexityModel
from lab.evaluation import Report, apgr_cpt


def difficulty_apgr(model: ComplexityModel, prompts: list[str], strong: np.ndarray,
                    weak: np.ndarray) -> tuple[float, float]:
    """APGR and CPT(50%) of ranking the prompts by the model's own ``difficulty``."""
    difficulty = np.asarray([model.score(p).difficulty for p in prompts])
    return apgr_cpt(np.argsort(-difficulty, kind="stable"), strong, weak)


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else "n/a"


def side_by_side(current: Report, learned: Report, names: tuple[str, str]) -> str:
    """One table, a column pair per classifier: router targets (score, $/Mtok), then
    the rankings' APGR."""
    a, b = names
    lines = [f"{'on the shared test file':<32} {a:>17} {b:>17}",
             f"{'':<32} {'score':>8} {'$/Mtok':>8} {'score':>8} {'$/Mtok':>8}", "-" * 68]
    for target, (score, cost) in current.router.items():
        other = learned.router.get(target, (float("nan"), float("nan")))
        lines.append(f"{f'router target={target:.2f}':<32} {score:8.3f} {cost:8.3f} "
                     f"{other[0]:8.3f} {other[1]:8.3f}")
    lines += ["", f"{'ranking (APGR)':<32} {a:>17} {b:>17}", "-" * 68]
    for name in current.apgr:
        theirs = learned.apgr.get(name, (float("nan"), 0.0))[0]
        lines.append(f"{name:<32} {current.apgr[name][0]:17.3f} {theirs:17.3f}")
    return "\n".join(lines)


def held_out_section(provenance: Any) -> str:
    if not isinstance(provenance, dict):
        return "no provenance in the artifact: not written by `routegate learn`"
    before, after = provenance.get("held_out_apgr_before"), provenance.get("held_out_apgr_after")
    better = isinstance(before, (int, float)) and isinstance(after, (int, float)) \
        and after > before
    source = provenance.get("labels") or provenance.get("source") or "traffic"
    return "\n".join([
        f"on its own labels' held-out split ({provenance.get('held_out_fraction', '?')} of "
        f"{provenance.get('n_prompts', '?')} prompts; labels: {source}; "
        f"{provenance.get('strong', '?')} vs {provenance.get('weak', '?')}):",
        f"  held-out APGR  current: {_fmt(before)}   learned: {_fmt(after)}",
        "  the learned model is better there: it may replace the current one" if better else
        "  the learned model is NOT better there: keep the current one",
    ])
