"""The splits inside a pair's evaluation: held-out prompts are ranked by heads that never
saw their labels, ``k`` is chosen leaving each prompt out of its own neighbours, and the
calibration maps the out-of-fold outputs of the head that is written."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import lab.pair_heads as lab_heads
from lab.pair_heads import PairResult, _predictions, calibration, evaluate_pair, knn_k, out_of_fold

N = 240
HELD = np.arange(N) % 2 == 0


def _pair(seed: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(unit embeddings, a gain the embedding tells, an item-response gain that does not)."""
    rng = np.random.default_rng(seed)
    emb = rng.normal(size=(N, 8))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    return emb, (emb[:, 0] > 0).astype(float), rng.random(N)


def _flipped(gain: np.ndarray, rows: np.ndarray = HELD) -> np.ndarray:
    out = gain.copy()
    out[rows] = 1.0 - gain[rows]
    return out


def test_held_out_predictions_do_not_read_the_held_out_labels() -> None:
    emb, gain, irt = _pair()
    train = np.flatnonzero(~HELD)
    got, other = (_predictions(emb, g, train, irt) for g in (gain, _flipped(gain)))
    for kind in ("ridge", "knn", "blend"):
        assert np.array_equal(got[kind][HELD], other[kind][HELD]), kind
    trained = _predictions(emb, _flipped(gain, ~HELD), train, irt)      # they read train's
    assert not np.array_equal(got["knn"][HELD], trained["knn"][HELD])


def test_the_heads_a_pair_is_ranked_by_are_fitted_on_the_learn_split_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    emb, gain, irt = _pair()
    seen: list[dict[str, np.ndarray]] = []
    real: Callable[..., dict[str, np.ndarray]] = lab_heads._predictions

    def recorded(*args: np.ndarray) -> dict[str, np.ndarray]:
        seen.append(real(*args))
        return seen[-1]
    monkeypatch.setattr(lab_heads, "_predictions", recorded)
    ranked = []
    for g in (gain, _flipped(gain)):
        seen.clear()
        strong = np.ones(N)
        evaluate_pair(PairResult("weak", "strong", N, int(HELD.sum())), emb, g, HELD, irt,
                      np.zeros(N), strong, strong - g)
        ranked.append(seen[0])                  # the first: the held-out ranking's heads
    for kind in ("ridge", "knn", "blend"):
        assert np.array_equal(ranked[0][kind][HELD], ranked[1][kind][HELD]), kind


def test_k_is_chosen_leaving_each_prompt_out_of_its_own_neighbours() -> None:
    """Four tight clusters of 75 prompts, each gain a coin of its cluster's bias: the
    mean of 50 neighbours is the best guess. Counting a prompt among its own neighbours
    would pick 5 (its own label weighs a fifth)."""
    rng = np.random.default_rng(9)
    centres = rng.normal(size=(4, 16))
    x = np.repeat(centres, 75, axis=0) + rng.normal(scale=0.05, size=(300, 16))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = (rng.random(300) < np.repeat([0.2, 0.8, 0.3, 0.7], 75)).astype(float)
    assert knn_k(x, y) == 50


def test_the_calibration_maps_the_written_heads_out_of_fold_outputs() -> None:
    emb, gain, irt = _pair()
    strong = np.ones(N)
    result = PairResult("weak", "strong", N, int(HELD.sum()))
    evaluate_pair(result, emb, gain, HELD, irt, np.zeros(N), strong, strong - gain)
    assert result.chosen in ("ridge", "knn", "blend") and result.calibration is not None
    want = calibration(out_of_fold(result.chosen, emb, gain, irt), gain)
    assert np.array_equal(result.calibration[0], want[0])
    assert np.array_equal(result.calibration[1], want[1])
