"""``python -m lab.new_traffic``: its draws, its labels and its summary (the full table
trains three artifacts: docs/routing.md has its figures and command)."""

from __future__ import annotations

import pytest

from lab.dataset import Row
from lab.new_traffic import DrawResult, format_table, labels_of, split_draw


def _rows(n: int) -> list[Row]:
    return [Row(f"prompt number {i}", "t", "src", {"src/a": float(i % 2), "src/b": 1.0,
                                                    **({"src/c": 0.0} if i % 3 else {})})
            for i in range(n)]


def test_a_draw_is_two_disjoint_halves_of_prompts_both_models_answered() -> None:
    rows = _rows(300)
    learn, test = split_draw(rows, "src/b", "src/c", draw=0, limit=120)
    assert 40 < len(learn) < 80 and len(learn) + len(test) == 120
    assert not {r.prompt for r in learn} & {r.prompt for r in test}
    assert all("src/c" in r.scores for r in learn + test)
    again, _ = split_draw(rows, "src/b", "src/c", draw=0, limit=120)
    other, _ = split_draw(rows, "src/b", "src/c", draw=1, limit=120)
    assert again == learn and other != learn
    labels = labels_of(learn, "src/b", "src/a")
    assert labels.names == ["a", "b"] and len(labels) == 2 * len(learn)


def test_the_summary_averages_draws_then_sources_and_shows_what_would_be_deployed() -> None:
    def result(source: str, shipped: float, learned: float, written: bool) -> DrawResult:
        return DrawResult(source, 0, 10, 10, 0.1, (shipped, 0, 1), (learned, 0, 1),
                          (learned - shipped, -1, 1), "ridge", written)

    table = format_table([result("a", 0.5, 0.7, True), result("a", 0.5, 0.4, False),
                          result("b", 0.6, 0.7, False)])
    last = table.splitlines()[-1]
    cells = [float(c.strip(" *")) for c in last.split("|")[2:-1]]
    # a: shipped 0.5, learned 0.55, deployed (0.7 + 0.5) / 2; b: 0.6, 0.7, 0.6 (not written)
    assert cells == pytest.approx([0.55, 0.625, 0.075, 0.6])
