import io
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from classifiers.commands import classify_stream, main
from classifiers.complexity import ComplexityModel

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO / ".." / "shared"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))
    return env


def test_classify_contract_in_process():
    lines = [
        {"id": "a", "prompt": "What is 2 + 2?"},
        {"id": 7, "messages": [{"role": "user", "content": "Write quicksort in C."}]},
        {"id": "bad"},
    ]
    source = io.BytesIO(b"\n".join(orjson.dumps(x) for x in lines) + b"\nnot json\n\n")
    sink = io.BytesIO()
    assert classify_stream(ComplexityModel.load(), source, sink) == 4
    out = [orjson.loads(x) for x in sink.getvalue().splitlines()]
    assert [o["id"] for o in out] == ["a", 7, "bad", None]
    for o in out[:2]:
        assert set(o) == {"id", "difficulty", "tier", "confidence", "prompt_tokens"}
        assert 0 <= o["difficulty"] <= 1 and o["prompt_tokens"] > 0
    assert "error" in out[2] and "error" in out[3]


def test_classify_subprocess():
    stdin = b'{"id": 1, "prompt": "hello there"}\n{"id": 2, "prompt": "Prove Fermat"}\n'
    result = subprocess.run([sys.executable, "-m", "classifiers.commands", "classify"],
                            input=stdin, capture_output=True, cwd=REPO, env=_env(),
                            check=True, timeout=60)
    out = [orjson.loads(x) for x in result.stdout.splitlines()]
    assert [o["id"] for o in out] == [1, 2]
    assert out[0]["tier"] in {"easy", "medium", "hard"}


def test_calibrate_prints_ability(tmp_path, capsys):
    data = tmp_path / "labelled.jsonl"
    rows = [{"prompt": f"What is {i} + {i}?", "score": float(i % 3 != 0)} for i in range(30)]
    data.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    assert main(["calibrate", "--model", "mine", "--data", str(data), "--family", "qwen"]) == 0
    out = capsys.readouterr().out
    ability = float(out.split("ability:")[1].split()[0])
    assert 0.3 < ability < 1.0


@pytest.mark.skipif(not (SHARED / "datasets" / "routing").is_dir(), reason="no shared data")
def test_calibrate_on_shared_format_recovers_known_ability(capsys):
    data = SHARED / "datasets" / "routing" / "llmrouter_test.jsonl"
    assert main(["calibrate", "--model", "gemma-2-9b-it", "--data", str(data)]) == 0
    assert "ability:" in capsys.readouterr().out


@pytest.mark.parametrize("make", ["empty-dir", "cut", "foreign", "missing"])
def test_a_bad_artifact_is_one_line_and_exit_2(tmp_path, capsys, make):
    """--classifier / --artifact / --learned naming something that is not a usable
    artifact: exit 2 and one line naming the file, on every command, no traceback."""
    import numpy as np

    from classifiers.complexity import DEFAULT_ARTIFACT, ArtifactError
    from gateway.cli import main as cli

    target = tmp_path / make
    if make == "empty-dir":
        target.mkdir()
    elif make == "cut":
        target.write_bytes(DEFAULT_ARTIFACT.read_bytes()[:100_000])
    elif make == "foreign":
        with open(target, "wb") as fh:
            np.savez(fh, x=np.zeros(3))
    with pytest.raises(ArtifactError, match=str(target)):
        ComplexityModel.load(target)
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(orjson.dumps({"prompt": f"q{i}", "model": m, "score": s}).decode()
                              + "\n" for i in range(4) for m, s in (("a", 1), ("b", 0))))
    for argv in (["classify", "--classifier", str(target)], ["eval", "--artifact", str(target)],
                 ["eval", "--learned", str(target)],
                 ["learn", "--labels", str(labels), "--out", str(tmp_path / "out"),
                  "--classifier", str(target)]):
        sys.stdin = io.TextIOWrapper(io.BytesIO(b'{"id": 1, "prompt": "hi"}\n'))
        try:
            assert cli(argv) == 2, argv
        finally:
            sys.stdin = sys.__stdin__
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(target) in err[0] and "Traceback" not in err[0], err
    assert not (tmp_path / "out").exists()


def test_classify_turns_a_line_over_the_cap_into_an_error_line_and_goes_on(monkeypatch):
    import classifiers.commands as commands

    monkeypatch.setattr(commands, "MAX_CLASSIFY_LINE", 200)
    lines = [orjson.dumps({"id": 1, "prompt": "hi"}),
             orjson.dumps({"id": 2, "prompt": "x" * 1000}),      # over the cap
             orjson.dumps({"id": 3, "prompt": "y" * 150})]       # under it
    sink = io.BytesIO()
    assert classify_stream(ComplexityModel.load(), io.BytesIO(b"\n".join(lines) + b"\n"),
                           sink) == 3
    out = [orjson.loads(x) for x in sink.getvalue().splitlines()]
    assert [o.get("id") for o in out] == [1, None, 3]
    assert out[1]["error"] == "line over 200 bytes" and "difficulty" in out[2]
