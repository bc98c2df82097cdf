"""The tiktoken fallback warning: once per process, however many encodings are missing.

Each test runs a fresh process (the warning is per process), with an empty
``TIKTOKEN_CACHE_DIR`` and an HTTPS proxy that refuses, so tiktoken's download
fails fast whether or not the machine has internet.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support import REPO, TEST_KEY, base_config, child_env, run_gateway, run_simulator

WARNING = "tiktoken encoding"
CLOSED = "http://127.0.0.1:9"      # the discard port: nothing listens there


def offline(cache: Path) -> dict[str, str]:
    return {"TIKTOKEN_CACHE_DIR": str(cache), "HTTPS_PROXY": CLOSED, "https_proxy": CLOSED}


def test_two_missing_encodings_warn_once(tmp_path: Path) -> None:
    script = """
import logging
logging.basicConfig(level=logging.INFO)
from classifiers.length import TokenCounter, counter_for
for enc in ("o200k_base", "cl100k_base", "o200k_base"):
    assert not counter_for(enc).exact
    assert not TokenCounter(enc).exact
print(counter_for("cl100k_base").count_text("12345678"))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env=child_env(**offline(tmp_path)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2"]            # the estimate: 8 bytes / 4
    assert done.stderr.count(WARNING) == 1, done.stderr
    assert "WARNING:routegate.length:tiktoken encoding o200k_base unavailable" in done.stderr


def test_serve_warns_once_with_two_tokenizers(tmp_path: Path) -> None:
    with run_simulator() as sim:
        config = base_config(sim)
        config["models"][1]["tokenizer"] = "cl100k_base"    # "strong"; "fast" keeps o200k_base
        with run_gateway(config, env=offline(tmp_path)) as gw:
            for model in ("fast", "strong"):
                r = httpx.post(gw.url + "/v1/chat/completions", timeout=30, headers={
                    "authorization": f"Bearer {TEST_KEY}"}, json={
                    "model": model, "max_tokens": 4,
                    "messages": [{"role": "user", "content": "hello there"}]})
                assert r.status_code == 200, r.text
            time.sleep(0.3)
            log = gw.log()
    assert log.count(WARNING) == 1, log
