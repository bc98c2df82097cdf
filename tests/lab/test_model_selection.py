import numpy as np

from lab.dataset import PRICED_SOURCE, Row
from lab.model_selection import holdout_metrics, split_rows


def _rows(n: int, source: str) -> list[Row]:
    return [Row(f"p{i}", "gsm8k", source, {f"{source}/a": 1.0}) for i in range(n)]


def test_split_holds_out_a_seeded_fifth_of_the_priced_source_only():
    rows = _rows(50, PRICED_SOURCE) + _rows(30, "routerdc7")
    train, held = split_rows(rows, seed=7)
    assert len(held) == 10 and all(r.source == PRICED_SOURCE for r in held)
    assert len(train) == 70
    assert [r.prompt for r in split_rows(rows, seed=7)[1]] == [r.prompt for r in held]
    assert [r.prompt for r in split_rows(rows, seed=8)[1]] != [r.prompt for r in held]


def test_perfect_predictions_beat_the_bar():
    prices = {f"{PRICED_SOURCE}/cheap": 0.1, f"{PRICED_SOURCE}/big": 1.0}
    # cheap answers the first seven prompts, big all but the last one.
    rows = [Row(f"p{i}", "gsm8k", PRICED_SOURCE,
                {f"{PRICED_SOURCE}/cheap": float(i < 7),
                 f"{PRICED_SOURCE}/big": float(i < 9)}) for i in range(10)]
    names = sorted(prices)
    pred = np.asarray([[row.scores[m] * 0.98 + 0.01 for m in names] for row in rows])
    metrics = holdout_metrics(pred, rows, rows, prices, kappa=0.1)
    assert metrics["bar"] >= 0.0 and metrics["apgr"] > 0.5 and metrics["log_loss"] < 0.05
