"""``routegate learn``: labels from another fleet, refit, held-out APGR, and the artifact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

from classifiers.artifact import read_npz
from classifiers.complexity import ComplexityModel
from classifiers.labels import LabelError, parse_labels
from lab.learning import held_out_apgr, learn

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets" / "routing"

# Two kinds of everyday request. The shipped model finds the spreadsheet
# formulas the harder ones; the weak model of this (made-up) fleet is a
# spreadsheet specialist that fails every recipe question instead, and the
# strong one answers both. Only the labels can tell.
TOPICS = ["lentil soup", "banana bread", "pad thai", "risotto", "tomato sauce", "pancakes",
          "chili", "hummus", "omelette", "apple pie", "curry", "dumplings"]
CELLS = ["A1", "B2", "C3", "D4", "E5", "F6", "G7", "H8", "J9", "K10", "L11", "M12"]


def prompts() -> list[tuple[str, bool]]:
    out = []
    for i, topic in enumerate(TOPICS):
        for j, variant in enumerate(("How do I make {t} for {n} people?",
                                     "What goes into a good {t}? I cook for {n}.",
                                     "Give me a quick {t} recipe, serves {n}.")):
            out.append((variant.format(t=topic, n=2 + i + j), True))
    for i, cell in enumerate(CELLS):
        for j, variant in enumerate(("Write a spreadsheet formula that sums {c} to {c2} when "
                                     "the row is over {n}.",
                                     "Which formula looks up {c} in another sheet and returns "
                                     "column {n}?",
                                     "My VLOOKUP on {c} gives #N/A for row {n}; fix the formula.")):
            out.append((variant.format(c=cell, c2=CELLS[(i + 1) % len(CELLS)], n=3 + i + j),
                        False))
    return out


def label_lines() -> list[bytes]:
    lines = []
    for text, hard in prompts():
        lines.append(orjson.dumps({"prompt": text, "model": "strong", "score": 1.0}))
        lines.append(orjson.dumps({"prompt": text, "model": "weak",
                                   "score": 0.0 if hard else 1.0}))
    return lines


def test_a_bad_label_line_is_an_error_naming_its_line() -> None:
    good = orjson.dumps({"prompt": "hi", "model": "a", "score": 1})
    cases = [
        ([good, b"{not json"], "line 2"),
        ([good, orjson.dumps({"prompt": "hi", "model": "b", "score": 1.5})], "line 2"),
        ([good, orjson.dumps({"prompt": "hi", "model": "b", "score": True})], "line 2"),
        ([good, orjson.dumps({"model": "b", "score": 1})], "line 2: missing"),
        ([good, good], "at least two models"),
        ([b"", b"  "], "no labels"),
    ]
    for lines, message in cases:
        with pytest.raises(LabelError, match=message):
            parse_labels(lines)


def test_learning_on_another_fleets_labels_ranks_the_held_out_half_better() -> None:
    labels = parse_labels(label_lines())
    assert labels.names == ["strong", "weak"]
    result, _ = learn(ComplexityModel.load(), labels, seed=0)
    assert (labels.names[result.strong], labels.names[result.weak]) == ("strong", "weak")
    assert result.n_held_prompts >= 20
    assert result.before is not None and result.after is not None
    # The shipped model ranks them the wrong way round; the labels teach which need strong.
    _, held = labels.split(0.5, 0)
    need = np.zeros(len(labels.prompts))
    need[labels.prompt[(labels.model == result.weak) & (labels.score == 0)]] = 1.0
    best, _ = held_out_apgr(labels, held, result.strong, result.weak, need)
    assert best is not None
    assert result.before < 0.6 * best
    assert result.after > 0.95 * best


def test_strong_and_weak_are_compared_where_both_answered_not_by_overall_means() -> None:
    # Routed traffic: the cheap model gets the easy prompts (all right), and on
    # the prompts it shares with medium (escalations) it fails where medium
    # passes; medium alone gets the hard ones (half right). A model shadowed
    # once, on one shared prompt, scores below both. Overall means would call
    # cheap the strong one (0.8 against 0.6) and the shadowed one the weak.
    def line(i: int, model: str, score: float) -> bytes:
        return orjson.dumps({"prompt": f"prompt number {i}", "model": model, "score": score})

    lines = [line(i, "cheap", 1.0) for i in range(20)]
    lines += [line(i, m, s) for i in range(20, 26) for m, s in (("cheap", 0.0),
                                                                ("medium", 1.0))]
    lines += [line(i, "medium", float(i % 2)) for i in range(26, 44)]
    lines += [line(20, "shadowed", 0.0)]
    labels = parse_labels(lines)
    means = {name: float(labels.score[labels.model == j].mean())
             for j, name in enumerate(labels.names)}
    assert means["cheap"] > means["medium"] > means["shadowed"]
    strong, weak = labels.strong_weak()
    assert (labels.names[strong], labels.names[weak]) == ("medium", "cheap")
    # No pair scored apart where both answered: the overall means decide.
    alone = parse_labels([line(1, "a", 1.0), line(2, "b", 0.0), line(3, "b", 1.0)])
    assert [alone.names[k] for k in alone.strong_weak()] == ["a", "b"]


def test_the_cli_writes_an_artifact_that_classify_and_the_model_load(tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    labels.write_bytes(b"\n".join(label_lines()) + b"\n")
    out = tmp_path / "learned"
    # 72 labelled prompts: under the 100 a pair is compared on, so nothing vouches for a
    # write (refused, saying so) unless forced
    refused = subprocess.run([sys.executable, "-m", "routegate", "learn", "--labels",
                              str(labels), "--out", str(out)], capture_output=True, text=True,
                             timeout=300)
    assert refused.returncode == 1 and "needs more labels" in refused.stderr
    assert not out.exists()
    run = subprocess.run([sys.executable, "-m", "routegate", "learn", "--labels",
                          str(labels), "--out", str(out), "--force"], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "held-out APGR  after" in run.stdout and (out / "complexity.npz").is_file()
    provenance = json.loads((out / "LEARNED.json").read_text())
    assert provenance["models"] == ["strong", "weak"] and provenance["weak"] == "weak"
    assert provenance["held_out_apgr_after"] > provenance["held_out_apgr_before"]

    queries = [{"id": 0, "prompt": "How do I make mushroom soup for 5 people?"},
               {"id": 1, "prompt": "Write a spreadsheet formula that sums Z1 to Z9 when the "
                                   "row is over 40."}]
    scored = subprocess.run([sys.executable, "-m", "gateway.cli", "classify",
                             "--classifier", str(out)],
                            input="\n".join(json.dumps(q) for q in queries), capture_output=True,
                            text=True, timeout=120)
    assert scored.returncode == 0, scored.stderr
    soup, formula = (json.loads(line) for line in scored.stdout.splitlines())
    assert soup["difficulty"] > formula["difficulty"] + 0.3   # unseen prompts of each kind

    model = ComplexityModel.load(out)
    assert model.learned_terms("weak") is not None and model.learned_terms("small") is None
    # d0(x) is the shipped model's, learned_weight included: the fit and serving agree.
    shipped_meta = read_npz(ComplexityModel.artifact_file())[1]
    assert read_npz(out / "complexity.npz")[1]["learned_weight"] == shipped_meta["learned_weight"]
    ability, key = model.learned_terms("strong")  # type: ignore[misc]
    score = model.score(queries[0]["prompt"])     # type: ignore[arg-type]
    assert model.p_correct(score, ability, key) > 0.7                 # the soup: strong
    weak_ability, weak_key = model.learned_terms("weak")  # type: ignore[misc]
    assert model.p_correct(score, weak_ability, weak_key) < 0.3       # ... not weak
    formula = model.score(queries[1]["prompt"])   # type: ignore[arg-type]
    assert model.p_correct(formula, weak_ability, weak_key) > 0.7

    # `routegate eval` shows the learned model next to the shipped one: on the
    # shared test file, and on its own labels' held-out split, as learn measured it.
    if DATA.is_dir():
        shown = subprocess.run([sys.executable, "-m", "routegate", "eval", "--learned",
                                str(out)], capture_output=True, text=True, timeout=300)
        assert shown.returncode == 0, shown.stderr
        assert "router target=" in shown.stdout and "difficulty" in shown.stdout
        before, after = (provenance[k] for k in ("held_out_apgr_before", "held_out_apgr_after"))
        assert f"current: {before:.3f}   learned: {after:.3f}" in shown.stdout
        assert "it may replace the current one" in shown.stdout
    missing = subprocess.run([sys.executable, "-m", "routegate", "eval", "--learned",
                              str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "holds no complexity.npz" in missing.stderr


def _learn_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "routegate", "learn", *args],
                          capture_output=True, text=True, timeout=300)


def test_learn_refuses_to_write_a_model_that_is_not_better(tmp_path: Path) -> None:
    lines, rng = [], np.random.default_rng(3)
    for text, _ in prompts():   # labels that carry no signal: b fails at random
        lines += [orjson.dumps({"prompt": text, "model": "a", "score": 1.0}),
                  orjson.dumps({"prompt": text, "model": "b", "score": float(rng.random() < 0.5)})]
    labels = tmp_path / "flat.jsonl"
    labels.write_bytes(b"\n".join(lines))
    out = tmp_path / "learned"
    run = _learn_cli("--labels", str(labels), "--out", str(out))
    assert run.returncode == 1 and "not written" in run.stderr
    assert not out.exists()


def test_learn_refuses_what_it_cannot_use_before_fitting(tmp_path: Path) -> None:
    tied = tmp_path / "tied.jsonl"       # both models always right: neither is the stronger
    tied.write_bytes(b"\n".join(orjson.dumps({"prompt": t, "model": m, "score": 1.0})
                                for t, _ in prompts() for m in ("a", "b")))
    good = tmp_path / "good.jsonl"
    good.write_bytes(b"\n".join(label_lines()))
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    cases = [(("--labels", str(tied), "--out", str(tmp_path / "o")), "do not differ"),
             (("--labels", str(good), "--out", str(a_file)), "not a directory"),
             (("--labels", str(good), "--out", str(tmp_path / "o"), "--held-out", "1"),
              "between 0 and 1"),
             (("--labels", str(good), "--out", str(tmp_path / "o"), "--held-out", "nan"),
              "between 0 and 1")]
    for args, says in cases:
        run = _learn_cli(*args)
        assert run.returncode == 2 and says in run.stderr, (args, run.stderr)
        assert "Traceback" not in run.stderr
    assert a_file.read_text() == "x" and not (tmp_path / "o").exists()
    huge = tmp_path / "huge.jsonl"      # one line past the cap: refused as it is read
    huge.write_bytes(orjson.dumps({"prompt": "x" * (5 * 1024 * 1024), "model": "a",
                                   "score": 1.0}))
    run = _learn_cli("--labels", str(huge), "--out", str(tmp_path / "o"))
    assert run.returncode == 2 and "line 1: over" in run.stderr


def test_compare_encoder_ranks_the_same_held_out_half_with_the_reading_encoder(
        tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    labels.write_bytes(b"\n".join(label_lines()) + b"\n")
    run = subprocess.run([sys.executable, "-m", "routegate", "learn", "--labels", str(labels),
                          "--out", str(tmp_path / "learned"), "--compare-encoder", "--force"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    figures = {line.split(":")[0].strip(): line.rsplit(" ", 1)[-1]
               for line in run.stdout.splitlines() if line.startswith("held-out APGR")}
    encoder = [v for k, v in figures.items() if "encoder (MiniLM" in k]
    assert encoder and 0.0 <= float(encoder[0]) <= 1.0
    static = [v for k, v in figures.items() if "static encoder (distilled" in k]
    assert static and 0.0 <= float(static[0]) <= 1.0
    # Recipes against spreadsheets: a topic an embedding sees at once.
    assert float(encoder[0]) > float(figures["held-out APGR  before (current classifier)"])


def test_learning_again_holds_out_only_prompts_the_current_artifact_was_not_fitted_on(
        tmp_path: Path) -> None:
    """A learned artifact keeps the prompts it was fitted on; learning from it
    again must not score it on them, or 'before' is an in-sample figure."""
    lines = label_lines()
    first = tmp_path / "first.jsonl"      # every other prompt (two lines each)
    first.write_bytes(b"\n".join(line for i, line in enumerate(lines) if (i // 2) % 2 == 0))
    out = tmp_path / "learned"
    run = _learn_cli("--labels", str(first), "--out", str(out), "--force")
    assert run.returncode == 0, run.stderr
    current = ComplexityModel.load(out)
    old = parse_labels(first.read_bytes().splitlines())
    assert current.fitted_prompts == {p.digest for p in old.prompts}

    labels = parse_labels(lines)          # the old prompts and as many new ones
    result, _ = learn(current, labels, seed=0)
    held = {p.digest for p, h in zip(labels.prompts, result.held, strict=True) if h}
    assert held and not held & current.fitted_prompts
    assert result.n_fitted == len(old.prompts) == len(labels.prompts) // 2
    _, plain = labels.split(0.5, 0)       # the split without the rule holds old ones out
    assert any(p.digest in current.fitted_prompts
               for p, h in zip(labels.prompts, plain, strict=True) if h)

    again = _learn_cli("--labels", str(first), "--classifier", str(out),
                       "--out", str(tmp_path / "again"))
    assert again.returncode == 1, again.stderr    # nothing unseen to compare on
    assert f"{len(old.prompts)} prompts the current classifier was fitted on" in again.stdout
    assert "0 held-out prompts the current classifier was not fitted on" in again.stderr
    assert not (tmp_path / "again").exists()
