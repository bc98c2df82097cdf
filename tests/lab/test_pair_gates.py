"""``routegate learn``'s write gates on pair heads: a head passes on its gain interval's
lower end, a head that did not pass is never written (``--force`` or not), each rung is
paired with its neighbour, and one failing pair of a ladder stops the write."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

from classifiers.complexity import ComplexityModel
from classifiers.labels import parse_labels
from lab.learn_pairs import Outcome, learn_with_pairs
from lab.pair_heads import MIXES, PairResult, final_head
from tests.lab.test_pair_learning import ANIMALS, TEMPLATES, VEHICLES

REPO = Path(__file__).resolve().parents[2]
LADDER = ["small", "medium", "large"]


def ladder_lines() -> list[bytes]:
    """``large`` answers all; ``medium`` fails 30% of prompts at random; ``small`` fails
    every animal's prompt and, on a vehicle's, does as medium. So small -> medium's gain
    is the noun's kind (a head on the embedding ranks it), medium -> large's is noise."""
    rng = np.random.default_rng(7)
    lines = []
    for x, animal in [(x, True) for x in ANIMALS] + [(x, False) for x in VEHICLES]:
        for t in TEMPLATES:
            medium = float(rng.random() >= 0.3)
            scores = {"small": 0.0 if animal else medium, "medium": medium, "large": 1.0}
            lines += [orjson.dumps({"prompt": t.format(x=x), "model": m, "score": s})
                      for m, s in scores.items()]
    return lines


@pytest.fixture(scope="module")
def outcome() -> Outcome:
    lines = ladder_lines()
    texts = [json.loads(line)["prompt"] for line in lines[::3]]
    return learn_with_pairs(ComplexityModel.load(), parse_labels(lines), texts, LADDER)


def _result(chosen: str, gain: tuple[float, float, float]) -> PairResult:
    result = PairResult("weak", "strong", 200, 100, chosen=chosen,
                        calibration=(np.asarray([-0.5, 0.5]), np.asarray([0.0, 1.0])))
    result.gains[chosen] = gain
    return result


def test_a_head_passes_on_its_gain_intervals_lower_end_not_its_point_gain() -> None:
    assert not _result("ridge", (0.05, -0.01, 0.1)).passes
    assert _result("ridge", (0.05, 0.01, 0.1)).passes
    assert not PairResult("weak", "strong", 200, 100).passes       # nothing compared


@pytest.mark.parametrize("chosen", ["ridge", "knn", "blend"])
def test_a_chosen_head_that_did_not_pass_is_written_as_irt_alone_uncalibrated(
        chosen: str) -> None:
    rng = np.random.default_rng(1)
    emb = rng.normal(size=(120, 8))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    gain = (emb[:, 0] > 0).astype(float)
    head = final_head(_result(chosen, (0.05, -0.01, 0.1)), emb, gain)
    assert head.kind == "irt" and list(head.mix) == list(MIXES["irt"])
    assert not head.ridge_w.any() and head.ridge_b == 0.0 and head.ridge_w.shape == (8,)
    assert head.knn_x.shape == (0, 8) and head.knn_y.size == 0 and head.knn_k == 0
    assert head.calib_x.size == 0 and head.calib_y.size == 0
    kept = final_head(_result(chosen, (0.05, 0.01, 0.1)), emb, gain)    # it passes
    assert kept.kind == chosen and list(kept.calib_x) == [-0.5, 0.5]


def test_each_rung_is_paired_with_its_neighbour(outcome: Outcome) -> None:
    pairs = [(p.weak, p.strong) for p in outcome.pairs]
    assert pairs == [("small", "medium"), ("medium", "large")]
    assert [(h.weak, h.strong) for h in outcome.heads] == pairs


def test_one_failing_pair_of_a_ladder_stops_the_write(outcome: Outcome,
                                                      tmp_path: Path) -> None:
    passing, failing = outcome.pairs
    assert passing.passes and passing.head is not None and passing.head.kind != "irt"
    assert failing.chosen is not None and not failing.passes      # compared, and failed
    assert failing.head is not None and failing.head.kind == "irt"
    assert not outcome.writable
    labels, out = tmp_path / "labels.jsonl", tmp_path / "learned"
    labels.write_bytes(b"\n".join(ladder_lines()) + b"\n")
    run = subprocess.run([sys.executable, "-m", "routegate", "learn", "--labels", str(labels),
                          "--ladder", ",".join(LADDER), "--out", str(out)],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert run.returncode == 1, (run.stdout, run.stderr)
    assert "pair small -> medium" in run.stdout and "pair medium -> large" in run.stdout
    assert "not written: medium -> large" in run.stderr and "small -> medium:" not in run.stderr
    assert not out.exists()
