"""``routegate classify``: the scoring contract, in process and as a command."""

import io
import os
import subprocess
import sys
from pathlib import Path

import orjson

from classifiers.classify_command import classify_stream
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
    result = subprocess.run([sys.executable, "-m", "gateway.cli", "classify"],
                            input=stdin, capture_output=True, cwd=REPO, env=_env(),
                            check=True, timeout=60)
    out = [orjson.loads(x) for x in result.stdout.splitlines()]
    assert [o["id"] for o in out] == [1, 2]
    assert out[0]["tier"] in {"easy", "medium", "hard"}


def test_classify_turns_a_line_over_the_cap_into_an_error_line_and_goes_on(monkeypatch):
    import classifiers.classify_command as commands

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
