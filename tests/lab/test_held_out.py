"""``python -m lab.arena`` and ``routegate eval --held-out``: the chat table's tools.

The Arena-Bench files are not in the repository (public data, fetched by the
operator); these tests write a few lines in the same layout (``question.jsonl``,
``model_judgment/<model>.jsonl`` with 1-10 grades, -1 for a failed grade).
"""

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest

from lab.arena import arena_rows, vicuna_rows
from lab.arena import main as arena_main
from lab.commands import main
from lab.dataset import Row
from lab.held_out import default_pair, held_out_results, resolve


def _arena(tmp_path: Path) -> Path:
    root = tmp_path / "arena-bench-v1"
    (root / "model_judgment").mkdir(parents=True)
    questions = [{"question_id": f"q{i}", "category": "arena-bench-v1",
                  "turns": [f"question {i} " + "word " * i]} for i in range(4)]
    (root / "question.jsonl").write_text("\n".join(json.dumps(q) for q in questions) + "\n")
    grades = {"gpt-4": [10, 9, 1, -1], "mistralai/Mixtral-8x7B": [5, 1, 1, 3]}
    for model, scores in grades.items():
        lines = [json.dumps({"question_id": f"q{i}", "model": model, "score": s,
                             "judgment": "..."}) for i, s in enumerate(scores)]
        lines.append(json.dumps({"question_id": "unknown", "model": model, "score": 10}))
        (root / "model_judgment" / f"{model.split('/')[-1]}.jsonl").write_text(
            "\n".join(lines) + "\n")
    return root


def test_arena_rows_map_grades_and_drop_failed_ones(tmp_path):
    rows = arena_rows(_arena(tmp_path))
    assert [r["id"] for r in rows] == ["q0", "q1", "q2", "q3"]     # the unknown id is dropped
    assert rows[0]["scores"] == {"gpt-4": 1.0, "Mixtral-8x7B": pytest.approx(4 / 9)}
    assert rows[3]["scores"] == {"Mixtral-8x7B": pytest.approx(2 / 9)}   # -1: no outcome
    assert {(r["source"], r["task"]) for r in rows} == {("arena-bench-v1", "chat")}


def _vicuna(tmp_path: Path) -> Path:
    """FastChat's ``eval/table`` layout: questions, answers, and GPT-4's pairwise reviews."""
    root = tmp_path / "table"
    (root / "answer").mkdir(parents=True)
    questions = [{"question_id": i, "text": f"question {i}", "category": c}
                 for i, c in ((1, "generic"), (2, "math"), (3, "coding"))]
    (root / "question.jsonl").write_text("\n".join(json.dumps(q) for q in questions) + "\n")
    for model in ("gpt35", "vicuna-13b", "llama-13b"):
        (root / "answer" / f"answer_{model}.jsonl").write_text("\n".join(
            json.dumps({"answer_id": f"{model}-{i}", "question_id": i, "text": "..."})
            for i in (1, 2, 3)) + "\n")

    def review(folder: str, a: str, b: str, grades: list[list[float]]) -> None:
        (root / "review" / folder).mkdir(parents=True, exist_ok=True)
        lines = [json.dumps({"question_id": i, "answer1_id": f"{a}-{i}", "answer2_id": f"{b}-{i}",
                             "score": g}) for i, g in zip((1, 2, 3), grades, strict=True)]
        lines.append(json.dumps({"question_id": 9, "answer1_id": "x", "answer2_id": "y",
                                 "score": [1, 1]}))              # unknown answers: skipped
        (root / "review" / folder / f"review_{a}_{b}.jsonl").write_text("\n".join(lines) + "\n")

    review("vicuna-13b", "gpt35", "vicuna-13b", [[9, 8.5], [10, 1], [-1, 7]])
    review("vicuna-13b", "llama-13b", "vicuna-13b", [[3, 9], [1, 2], [2, 8]])
    review("gpt-3.5-turbo_review_vicuna-13b", "gpt35", "vicuna-13b", [[1, 1], [1, 1], [1, 1]])
    return root


def test_vicuna_rows_name_each_grade_by_its_opponent(tmp_path):
    rows = vicuna_rows(_vicuna(tmp_path))
    assert [(r["id"], r["task"], r["prompt"]) for r in rows] == [
        ("1", "generic", "question 1"), ("2", "math", "question 2"), ("3", "coding", "question 3")]
    assert {r["source"] for r in rows} == {"vicuna-bench"}
    # GPT-4's review only: the gpt-3.5-turbo folder's all-1 grades are not read.
    assert rows[1]["scores"] == {"gpt35@vicuna-13b": 1.0, "vicuna-13b@gpt35": 0.0,
                                 "llama-13b@vicuna-13b": 0.0, "vicuna-13b@llama-13b": pytest.approx(1 / 9)}
    assert rows[0]["scores"]["vicuna-13b@gpt35"] == pytest.approx(7.5 / 9)
    assert "gpt35@vicuna-13b" not in rows[2]["scores"]          # a failed grade (-1): no outcome
    assert rows[2]["scores"]["vicuna-13b@gpt35"] == pytest.approx(6 / 9)


def test_eval_held_out_reads_the_vicuna_layout(tmp_path, capsys):
    out = tmp_path / "vicuna.jsonl"
    with open(out, "w") as sink, contextlib.redirect_stdout(sink):
        assert arena_main([str(_vicuna(tmp_path))]) == 0
    assert main(["eval", "--held-out", str(out), "--pair", "gpt35@vicuna-13b,vicuna-13b@gpt35"]) == 0
    assert "gpt35@vicuna-13b vs vicuna-13b@gpt35" in capsys.readouterr().out
    assert arena_main([str(tmp_path / "nothing-here")]) == 2
    assert "fastchat/eval/table" in capsys.readouterr().err


def _rows(gains: list[float], lengths: list[int]) -> list[Row]:
    return [Row("x" * n, "chat", "f", {"f/strong": 0.5 + g / 2, "f/weak": 0.5 - g / 2})
            for g, n in zip(gains, lengths, strict=True)]


def test_held_out_apgr_follows_the_gain():
    gains = list(np.linspace(1.0, 0.0, 20))
    aligned = held_out_results(_rows(gains, list(range(40, 20, -1))), [("f/strong", "f/weak")], {})
    reversed_ = held_out_results(_rows(gains, list(range(21, 41))), [("f/strong", "f/weak")], {})
    assert aligned[0].apgr["length"] > 0.6 > 0.4 > reversed_[0].apgr["length"]
    assert aligned[0].apgr["random"] == 0.5 and aligned[0].prompts == 20


def test_bootstrap_intervals_bracket_the_apgr_and_narrow_with_more_prompts():
    rng = np.random.default_rng(1)

    def result(n: int):
        gains = list(rng.random(n))
        rows = _rows(gains, list(rng.integers(20, 60, n)))     # length: unrelated to the gain
        noisy = np.asarray(gains) + rng.normal(0, 0.3, n)       # a ranking that reads the gain
        return held_out_results(rows, [("f/strong", "f/weak")], {}, {"reads": noisy})[0]

    small, large = result(40), result(400)
    for r in (small, large):
        lo, hi = r.interval["reads"]
        assert lo <= r.apgr["reads"] <= hi and set(r.interval) == {"reads", "length"}
        assert r.versus_length["reads"][0] > 0       # paired: clearly ahead of length
        assert "length" not in r.versus_length
    width = {id(r): r.interval["length"][1] - r.interval["length"][0] for r in (small, large)}
    assert width[id(large)] < 0.6 * width[id(small)]
    none = held_out_results(_rows([0.5, 0.2, 0.1], [1, 2, 3]), [("f/strong", "f/weak")], {}, draws=0)
    assert none[0].interval == {} and none[0].versus_length == {}


def test_pairs_resolve_by_short_name_and_default_to_extremes():
    rows = _rows([0.5, 0.2], [10, 20])
    assert resolve(rows, "weak") == "f/weak"
    with pytest.raises(ValueError, match="not in the file"):
        resolve(rows, "gpt-5")
    assert default_pair(rows) == ("f/strong", "f/weak")


def test_eval_held_out_end_to_end(tmp_path, capsys):
    out = tmp_path / "chat.jsonl"
    with open(out, "w") as sink, contextlib.redirect_stdout(sink):
        assert arena_main([str(_arena(tmp_path))]) == 0
    assert main(["eval", "--held-out", str(out), "--pair", "gpt-4,Mixtral-8x7B"]) == 0
    table = capsys.readouterr().out
    assert "gpt-4 vs Mixtral-8x7B" in table and "current" in table and "length" in table
    assert "95% bootstrap intervals" in table and "(vs length" in table
    assert main(["eval", "--held-out", str(out), "--pair", "gpt-4,Mixtral-8x7B",
                 "--bootstrap", "0"]) == 0
    assert "bootstrap" not in capsys.readouterr().out
    assert main(["eval", "--held-out", str(out), "--pair", "gpt-4,nobody"]) == 2
    assert "'nobody' is not in the file" in capsys.readouterr().err


def test_encoder_table_scores_a_head_on_each_left_out_task():
    from lab.encoder_table import leave_tasks_out
    from lab.outofdomain import source_pairs

    rng = np.random.default_rng(0)
    hard = rng.random(120)
    tasks = ["gsm8k", "mmlu", "math"] * 40
    rows = [Row(f"{t} prompt {i}", t, "src", {"src/strong": 1 - h / 3, "src/weak": 1 - h})
            for i, (t, h) in enumerate(zip(tasks, hard, strict=True))]
    reads = np.column_stack([hard, rng.random(120)])        # an embedding that holds the answer
    noise = rng.random((120, 2))
    table = leave_tasks_out(rows, {"reads": reads, "noise": noise}, {"reads": 1.0, "noise": 1.0},
                            source_pairs(rows))
    pair_table, perfect_table = table.split("\n\n", 1)   # the source's pair; a perfect model
    for part in (pair_table, perfect_table):
        mean = part.splitlines()[-1].split("|")
        reads_apgr, noise_apgr = float(mean[5].strip(" *")), float(mean[6].strip(" *"))
        assert reads_apgr > 0.6 and abs(noise_apgr - 0.5) < 0.1 and reads_apgr > noise_apgr + 0.1
        assert part.count("| task ") == 1 + 3       # the header, then one row per task


@pytest.mark.parametrize("line, says", [
    ('{"prompt": "q", "scores": {"a": null}}', "score of 'a' must be a number"),
    ('{"prompt": "q", "scores": {"a": NaN}}', "not JSON"),
    ('{"prompt": "q", "scores": {"a": 7}}', "score of 'a' must be a number"),
    ('{"prompt": "q", "scores": {"a": true}}', "score of 'a' must be a number"),
    ('{"prompt": "q", "scores": [1, 0]}', '"scores" must be an object'),
    ('{"prompt": 5, "scores": {"a": 1}}', '"prompt" must be a non-empty string'),
    ('[1, 2]', "not a JSON object"),
    ('{"prompt": "q"', "not JSON"),
])
def test_a_bad_held_out_line_is_named(tmp_path, capsys, line, says):
    path = tmp_path / "h.jsonl"
    path.write_text('{"prompt": "fine", "scores": {"a": 1, "b": 0}}\n' + line + "\n")
    assert main(["eval", "--held-out", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{path}:2:" in err and says in err and len(err.splitlines()) == 1, err


def test_held_out_pairs_must_be_two_models_that_share_prompts(tmp_path, capsys):
    path = tmp_path / "h.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"q{i}", "scores": scores}) + "\n"
                            for i, scores in enumerate([{"a": 1, "b": 0}, {"a": 1, "b": 1},
                                                        {"c": 0}, {"c": 1}])))
    cases = {("--pair", "a,a"): "one model twice", ("--pair", "a,c"): "0 prompt(s)",
             ("--bootstrap", "-5"): "--bootstrap takes 0 to"}
    for args, says in cases.items():
        assert main(["eval", "--held-out", str(path), *args]) == 2
        assert says in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert main(["eval", "--held-out", str(empty)]) == 2
    assert "no prompts" in capsys.readouterr().err
    assert main(["eval", "--held-out", str(path), "--pair", "a,b"]) == 0
