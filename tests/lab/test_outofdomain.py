import numpy as np

from lab.dataset import Row
from lab.outofdomain import (
    fair_models,
    format_table,
    out_of_domain,
    ranking_apgr,
    source_pairs,
    versus_perfect,
)


def _rows() -> list[Row]:
    # On every task the strong model answers all prompts, the weak one only the short ones.
    rows = []
    for task in ("gsm8k", "mmlu", "trivia_qa"):
        for i in range(10):
            prompt = "x" * (i + 1)
            rows.append(Row(prompt, task, "src", {"src/strong": 1.0, "src/weak": float(i < 5)}))
    return rows


def test_source_pairs_are_strongest_and_weakest_by_mean():
    assert source_pairs(_rows()) == {"src": ("src/strong", "src/weak")}


def test_ranking_apgr_rewards_the_right_order_and_skips_missing_outcomes():
    rows = _rows()[:10] + [Row("y", "gsm8k", "src", {"src/strong": 1.0})]
    longest_first = np.arange(11, dtype=float)
    assert ranking_apgr(longest_first, rows, "src/strong", "src/weak") > 0.7
    assert ranking_apgr(-longest_first, rows, "src/strong", "src/weak") < 0.3


def test_each_task_is_held_out_and_ranked_without_its_own_rows():
    seen_by_fit = []

    def fit(train):
        seen_by_fit.append({row.task for row in train})
        return {"difficulty": lambda prompts, strong, weak: np.asarray([len(p) for p in prompts])}

    results = out_of_domain(_rows(), fit, by="task")
    assert sorted(r.task for r in results) == ["gsm8k", "mmlu", "trivia_qa"]
    assert all(len(tasks) == 2 for tasks in seen_by_fit)
    assert all(r.apgr["difficulty"] == r.apgr["length"] > 0.7 for r in results)
    assert "| **mean**" in format_table(results)


def test_versus_perfect_scores_the_fair_models_failures_and_skips_the_others():
    # "fair" fails the five longest prompts; "broken" fails everything; "ace" nothing.
    rows = [Row("x" * (i + 1), "gsm8k", "src",
                {"src/fair": float(i < 5), "src/broken": 0.0, "src/ace": 1.0}) for i in range(10)]
    assert fair_models(rows) == ["src/fair"]
    longest_first = np.arange(10, dtype=float)
    assert versus_perfect(longest_first, rows) > 0.7   # the best order of 10 prompts
    assert versus_perfect(-longest_first, rows) < 0.3
    assert np.isnan(versus_perfect(longest_first, [Row("y", "t", "s", {"s/ace": 1.0})]))


def test_the_table_has_a_second_part_against_a_perfect_model():
    def fit(train):
        return {"difficulty": lambda prompts, strong, weak: np.asarray([len(p) for p in prompts])}

    results = out_of_domain(_rows(), fit, by="task")
    assert all(r.perfect["difficulty"] == r.perfect["length"] > 0.7 for r in results)
    table = format_table(results)
    assert "answers every prompt" in table and "(3 rows with a fair model)" in table
