"""Public per-question outcomes read into routing-format held-out rows."""

import json

import pytest

from lab.held_out import read_held_out
from lab.public_sets import bbh_date_rows, main, mmlu_pro_rows


def _mmlu_pro(folder, model, preds):
    items = [
        {"question_id": 1, "question": "What is 2+2?", "options": "['3', '4']", "answer": "B",
         "pred": preds[0], "category": "math", "src": "stemez-Math"},
        {"question_id": 2, "question": "Capital of Peru?", "options": ["Lima", "Quito"],
         "answer": "A", "pred": preds[1], "category": "other", "src": "ori_mmlu-geography"},
        {"question_id": 3, "question": "Integrate x.", "options": ["x^2/2", "x"], "answer": "A",
         "pred": preds[2], "category": "math", "src": "theoremQA-Math"},
    ]
    (folder / f"model_outputs_{model}_5shots.json").write_text(json.dumps(items))


def test_mmlu_pro_scores_each_model_and_leaves_out_mmlus_own_questions(tmp_path):
    _mmlu_pro(tmp_path, "strong", ["B", "A", "A"])
    _mmlu_pro(tmp_path, "weak", ["A", "A", None])      # no prediction counts as wrong
    (tmp_path / "README.md").write_text("not a model file")
    rows = list(mmlu_pro_rows(tmp_path))
    assert [r["task"] for r in rows] == ["stemez", "theoremQA"]
    assert rows[0]["prompt"] == "What is 2+2?\n(A) 3\n(B) 4"   # options kept as a repr too
    assert rows[0]["scores"] == {"strong": 1.0, "weak": 0.0}
    assert rows[1]["scores"] == {"strong": 1.0, "weak": 0.0}
    assert [r["task"] for r in mmlu_pro_rows(tmp_path, keep_mmlu=True)] == [
        "stemez", "ori_mmlu", "theoremQA"]


def test_bbh_date_scores_are_shares_of_correct_samples(tmp_path):
    def write(path, items):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(json.dumps(items))

    q = ["Yesterday was April 30, 2021. What is the date today?", "Today is 1/1/2000. Tomorrow?"]
    write("GPT4_result/date_greedy_cot1.json",
          [{"question": q[0], "answer": "05/01/2021", "results": ["05/01/2021"]},
           {"question": q[1], "answer": "01/02/2000", "results": ["01/02/2000"]}])
    write("GPT3_result/date_cot1.json",
          [{"question": q[0], "answer": "05/01/2021", "results": ["05/01/2021", "5/1/2021"]},
           {"question": q[1], "answer": "01/02/2000", "results": []}])
    write("llama2_13B_result/date_cot1.json",   # this file keeps the options as a dict's repr
          [{"question": q[0], "answer": "{'05/01/2021': 1, '04/29/2021': 0}",
            "results": ["04/29/2021", "05/01/2021", "05/01/2021", "x"]},
           {"question": q[1], "answer": "{'01/02/2000': 1}", "results": ["01/02/2000"]}])
    rows = list(bbh_date_rows(tmp_path))
    assert rows[0]["scores"] == {"gpt-4": 1.0, "gpt-3.5-turbo": 0.5, "llama-2-13b": 0.5}
    assert rows[1]["scores"] == {"gpt-4": 1.0, "gpt-3.5-turbo": 0.0, "llama-2-13b": 1.0}
    out = tmp_path / "date.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert len(read_held_out(out)) == 2   # what `routegate eval --held-out` reads


def test_a_folder_without_outputs_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["mmlu-pro", str(tmp_path)]) == 2
    assert main(["bbh-date", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("lab.public_sets: ") for line in err)


def test_bbh_date_files_must_hold_the_same_questions(tmp_path):
    questions = ["a", "b"]
    for i, path in enumerate(["GPT4_result/date_greedy_cot1.json", "GPT3_result/date_cot1.json",
                              "llama2_13B_result/date_cot1.json"]):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(json.dumps(
            [{"question": questions[min(i, 1)], "answer": "1", "results": ["1"]}]))
    with pytest.raises(ValueError, match="differs"):
        list(bbh_date_rows(tmp_path))
