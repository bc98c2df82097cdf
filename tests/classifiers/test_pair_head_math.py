"""A pair head's raw gain is its mix of the three parts, each weighed by the mix, and the
heads of a ladder embed a prompt once between them (none when no head reads it)."""

from __future__ import annotations

import numpy as np
import pytest

from classifiers.pair_heads import PairHead, PairHeads
from classifiers.static_embedding import StaticEmbedding

EMB = np.asarray([1.0, 0.0, 0.0, 0.0], dtype=np.float32)


def _head(mix: tuple[float, float, float], weak: str = "a", strong: str = "b",
          dims: int = 4) -> PairHead:
    """On ``EMB`` the ridge part is 0.4 + 0.1 and the knn part (k = 2) is 0.75: the two
    rows nearest it hold 1.0 and 0.5."""
    knn_x = np.zeros((4, dims))
    knn_x[:, :2] = [[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-1.0, 0.0]]
    ridge_w = np.zeros(dims, dtype=np.float32)
    ridge_w[:2] = [0.4, 2.0]
    return PairHead(weak, strong, "blend", np.asarray(mix), ridge_w, 0.1,
                    knn_x.astype(np.float16), np.asarray([1.0, 0.5, -1.0, -1.0], np.float32),
                    2, np.zeros(0), np.zeros(0))


@pytest.mark.parametrize(("mix", "want"), [
    ((0.5, 0.5, 0.0), 0.5 * 0.3 + 0.5 * 0.5),
    ((0.2, 0.3, 0.5), 0.2 * 0.3 + 0.3 * 0.5 + 0.5 * 0.75),
    ((0.0, 0.25, 0.75), 0.25 * 0.5 + 0.75 * 0.75),
])
def test_each_part_of_the_raw_gain_is_weighed_by_the_mix(
        mix: tuple[float, float, float], want: float) -> None:
    head = _head(mix)
    assert head.raw_gain(EMB, 0.3) == pytest.approx(want, abs=1e-3)
    assert head.gain(EMB, 0.3) == pytest.approx(want, abs=1e-3)          # uncalibrated


def test_the_heads_embed_a_prompt_once_and_only_when_one_reads_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    static = StaticEmbedding.load()
    calls: list[str] = []
    embed = StaticEmbedding.embed

    def counted(self: StaticEmbedding, text: str) -> np.ndarray:
        calls.append(text)
        return embed(self, text)
    monkeypatch.setattr(StaticEmbedding, "embed", counted)
    irt = {"small": 0.5, "medium": 0.7, "large": 0.9}
    ladder = ["small", "medium", "large"]
    reading = PairHeads(ladder, [_head((0, 1, 0), "small", "medium", static.dims),
                                 _head((0, 0, 1), "medium", "large", static.dims)], static)
    gains = reading.gains("Prove that there are infinitely many primes.", irt)
    assert set(gains) == {("small", "medium"), ("medium", "large")}
    assert calls == ["Prove that there are infinitely many primes."]
    calls.clear()
    irt_only = PairHeads(ladder, [_head((1, 0, 0), "small", "medium", static.dims),
                                  _head((1, 0, 0), "medium", "large", static.dims)], static)
    assert irt_only.gains("hi", irt) == pytest.approx(
        {("small", "medium"): 0.2, ("medium", "large"): 0.2})
    assert calls == []


def test_the_calibration_reads_as_np_interp() -> None:
    """The calibration is read in Python on the request path (``_interp``): the same
    value as ``np.interp`` between its points, on them, and flat beyond its ends."""
    rng = np.random.default_rng(1)
    for _ in range(300):
        xs = np.unique(rng.uniform(-1.0, 1.0, int(rng.integers(1, 20))))
        ys = np.sort(rng.uniform(-1.0, 1.0, xs.size))
        head = PairHead("a", "b", "irt", np.asarray([1.0, 0.0, 0.0]), np.zeros(0), 0.0,
                        np.zeros((0, 0)), np.zeros(0), 0, xs, ys)
        for x in [*rng.uniform(-1.5, 1.5, 10), *xs, -2.0, 2.0]:
            assert head.gain(None, float(x)) == pytest.approx(
                float(np.interp(x, xs, ys)), abs=1e-12)
