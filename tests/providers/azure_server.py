"""A protocol-faithful Azure OpenAI data plane for tests, on loopback, with a ledger.

    server = AzureServer(deployments={"gpt4o": "chat", "emb": "embedding"})
    with serve(server.app) as endpoint:                     # tests/providers/loopback.py
        client = openai.AzureOpenAI(azure_endpoint=endpoint, api_key=server.key,
                                    api_version="2024-10-21")
        client.chat.completions.create(model="gpt4o", messages=[...])
    server.ledger.rows          # what it served and counted; .refused: what it turned away
    server.throttle("gpt4o", times=1, retry_after_s=3)      # the next call gets a 429

It answers as Azure does (``/work/notes/providers.md`` section 2, the 2024-10-21
inference spec), in this order:

1. ``api-version`` missing or unknown: 404 ``{"error": {"code": "404", "message":
   "Resource not found"}}``;
2. no valid ``api-key`` (or ``Authorization: Bearer`` token): 401;
3. a deployment it does not have: 404 ``DeploymentNotFound``;
4. a throttle set by the test: 429 with ``retry-after`` and ``retry-after-ms``;
5. a body off the spec (``azure_schema.py``): 400, OpenAI's error shape;
6. a prompt holding ``CONTENT_FILTER_TRIGGER``: 400 ``content_filter`` with
   ``innererror.content_filter_result``, as Azure's content management policy answers.

An answer carries ``prompt_filter_results`` and per-choice ``content_filter_results``;
a stream starts with Azure's empty-``choices`` chunk holding only the prompt's
filter results, and ends with a usage chunk when ``stream_options.include_usage``
asks. Usage is the server's own count (``azure_count.py``); a prompt of 1,024 tokens
or more whose prefix it saw before reports ``cached_tokens`` in 128-token steps.
"""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.providers.answers import instance, pieces_of, reply, split_words
from tests.providers.azure_count import ENCODING, PromptCount
from tests.providers.azure_schema import (
    EMBEDDINGS_SCHEMA,
    KNOWN_VERSIONS,
    chat_problem,
    schema_problem,
)

CONTENT_FILTER_TRIGGER = "forbidden-topic"
SAFE = {"filtered": False, "severity": "safe"}
PROMPT_FILTER = [{"prompt_index": 0, "content_filter_results": {
    "hate": SAFE, "jailbreak": {"filtered": False, "detected": False}, "self_harm": SAFE,
    "sexual": SAFE, "violence": SAFE}}]
CHOICE_FILTER = {"hate": SAFE, "self_harm": SAFE, "sexual": SAFE, "violence": SAFE}
UNAUTHORIZED = ("Access denied due to invalid subscription key or wrong API endpoint. Make "
                "sure to provide a valid key for an active subscription and use a correct "
                "regional API endpoint for your resource.")


@dataclass
class Row:
    deployment: str
    route: str
    stream: bool
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int


@dataclass
class Ledger:
    rows: list[Row] = field(default_factory=list)
    refused: list[tuple[int, str]] = field(default_factory=list)   # off-spec: (status, why)
    throttled: int = 0
    filtered: int = 0


def error(status: int, message: str, code: str | None = None, param: str | None = None,
          **extra: Any) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error",
                                   "param": param, "code": code, **extra}}, status)


class AzureServer:
    def __init__(self, deployments: dict[str, str], key: str = "azure-test-key",
                 bearer_tokens: tuple[str, ...] = ()) -> None:
        self.deployments = deployments          # name -> "chat" | "embedding"
        self.key = key
        self.bearer_tokens = bearer_tokens
        self.ledger = Ledger()
        self.headers_seen: list[dict[str, str]] = []
        self._throttles: dict[str, tuple[int, float]] = {}
        self._cache: dict[str, list[list[int]]] = {}
        self._lock = threading.Lock()
        self._ids = 0
        self.app = Starlette(routes=[
            Route("/openai/deployments/{deployment}/chat/completions", self.chat,
                  methods=["POST"]),
            Route("/openai/deployments/{deployment}/embeddings", self.embeddings,
                  methods=["POST"]),
            Route("/openai/models", self.models, methods=["GET"])])

    def throttle(self, deployment: str, times: int = 1, retry_after_s: float = 2) -> None:
        """The next ``times`` calls to ``deployment`` get a 429 (-1: every call)."""
        self._throttles[deployment] = (times, retry_after_s)

    def refuse(self, status: int, why: str, response: Response) -> Response:
        with self._lock:
            self.ledger.refused.append((status, why))
        return response

    def _gate(self, request: Request, kind: str) -> Response | None:
        """The checks before the body: version, key, deployment, throttle."""
        self.headers_seen.append(dict(request.headers))
        version = request.query_params.get("api-version")
        if version not in KNOWN_VERSIONS:
            return self.refuse(404, f"api-version {version!r}", JSONResponse(
                {"error": {"code": "404", "message": "Resource not found"}}, 404))
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        if request.headers.get("api-key") != self.key and bearer not in self.bearer_tokens:
            return self.refuse(401, "credential", JSONResponse(
                {"error": {"code": "401", "message": UNAUTHORIZED}}, 401))
        deployment = request.path_params["deployment"]
        if self.deployments.get(deployment) != kind:
            return self.refuse(404, f"deployment {deployment!r}", JSONResponse({"error": {
                "code": "DeploymentNotFound", "message": "The API deployment for this "
                "resource does not exist. If you created the deployment within the last 5 "
                "minutes, please wait a moment and try again."}}, 404))
        return self._throttled(deployment, version)

    def _throttled(self, deployment: str, version: str) -> Response | None:
        with self._lock:
            times, wait = self._throttles.get(deployment, (0, 0.0))
            if times == 0:
                return None
            self._throttles[deployment] = (times - 1 if times > 0 else times, wait)
            self.ledger.throttled += 1
        seconds = max(1, int(wait))
        return JSONResponse({"error": {"code": "429", "message": (
            f"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version "
            f"{version} have exceeded token rate limit of your current OpenAI S0 pricing tier. "
            f"Please retry after {seconds} seconds.")}}, 429,
            headers={"retry-after": str(seconds), "retry-after-ms": str(int(wait * 1000))})

    async def _body(self, request: Request) -> tuple[Any, Response | None]:
        if "application/json" not in request.headers.get("content-type", ""):
            return None, self.refuse(400, "content-type", error(
                400, "Unsupported content type: expected application/json."))
        try:
            return json.loads(await request.body()), None
        except ValueError:
            return None, self.refuse(400, "json", error(
                400, "We could not parse the JSON body of your request.", "invalid_json"))

    async def chat(self, request: Request) -> Response:
        refused = self._gate(request, "chat")
        if refused is not None:
            return refused
        body, refused = await self._body(request)
        if refused is not None:
            return refused
        problem = chat_problem(body, request.query_params["api-version"])
        if problem is not None:
            return self.refuse(400, problem[0], error(400, problem[0], param=problem[1]))
        if CONTENT_FILTER_TRIGGER in json.dumps(body["messages"]):
            return self._filtered()
        return self._answer(request.path_params["deployment"], body)

    def _filtered(self) -> Response:
        with self._lock:
            self.ledger.filtered += 1
        verdicts = {**CHOICE_FILTER, "hate": {"filtered": True, "severity": "medium"},
                    "jailbreak": {"filtered": False, "detected": False}}
        return JSONResponse({"error": {
            "message": "The response was filtered due to the prompt triggering Azure OpenAI's "
                       "content management policy. Please modify your prompt and retry.",
            "type": None, "param": "prompt", "code": "content_filter", "status": 400,
            "innererror": {"code": "ResponsibleAIPolicyViolation",
                           "content_filter_result": verdicts}}}, 400)

    def _cached(self, deployment: str, ids: list[int]) -> int:
        """Tokens of the longest prefix seen before, in 128-token steps from 1,024."""
        with self._lock:
            seen = self._cache.setdefault(deployment, [])
            best = 0
            for old in seen:
                n = 0
                for a, b in zip(old, ids, strict=False):
                    if a != b:
                        break
                    n += 1
                best = max(best, n)
            seen.append(ids)
            self._ids += 1
        return best // 128 * 128 if best >= 1024 else 0

    def _answer(self, deployment: str, body: dict[str, Any]) -> Response:
        count = PromptCount.of(body)
        cached = min(self._cached(deployment, count.ids), count.tokens)
        message, finish = answer(body)
        choices = max(1, body.get("n") or 1)
        completion = choices * output_tokens(message)
        stream = bool(body.get("stream"))
        with self._lock:
            self.ledger.rows.append(Row(deployment, "chat/completions", stream, count.tokens,
                                        cached, completion))
            ident = f"chatcmpl-az{self._ids}"
        usage = {"prompt_tokens": count.tokens, "completion_tokens": completion,
                 "total_tokens": count.tokens + completion,
                 "prompt_tokens_details": {"cached_tokens": cached},
                 "completion_tokens_details": {"reasoning_tokens": 0}}
        base = {"id": ident, "created": 1733400000, "model": "gpt-4o-2024-11-20",
                "system_fingerprint": "fp_test"}
        if not stream:
            return JSONResponse({**base, "object": "chat.completion",
                                 "prompt_filter_results": PROMPT_FILTER, "usage": usage,
                                 "choices": [{"index": i, "finish_reason": finish,
                                              "message": message, "logprobs": None,
                                              "content_filter_results": CHOICE_FILTER}
                                             for i in range(choices)]})
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(stream_chunks(base, message, finish, choices,
                                               usage if with_usage else None),
                                 media_type="text/event-stream")

    async def embeddings(self, request: Request) -> Response:
        refused = self._gate(request, "embedding")
        if refused is not None:
            return refused
        body, refused = await self._body(request)
        if refused is not None:
            return refused
        problem = schema_problem(body, EMBEDDINGS_SCHEMA)
        if problem is not None:
            return self.refuse(400, problem[0], error(400, problem[0], param=problem[1]))
        inputs = [body["input"]] if isinstance(body["input"], str) else body["input"]
        tokens = sum(len(ENCODING.encode(text)) for text in inputs)
        dims = body.get("dimensions") or 8
        with self._lock:
            self.ledger.rows.append(Row(request.path_params["deployment"], "embeddings", False,
                                        tokens, 0, 0))
        return JSONResponse({"object": "list", "model": "text-embedding-3-small", "data": [
            {"object": "embedding", "index": i, "embedding": [0.125] * dims}
            for i in range(len(inputs))], "usage": {"prompt_tokens": tokens,
                                                     "total_tokens": tokens}})

    async def models(self, request: Request) -> Response:
        if request.query_params.get("api-version") not in KNOWN_VERSIONS:
            return JSONResponse({"error": {"code": "404", "message": "Resource not found"}}, 404)
        return JSONResponse({"object": "list", "data": []})


def answer(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The assistant's message and finish_reason, decided by the request alone."""
    tools, choice = body.get("tools") or [], body.get("tool_choice", "auto")
    last = body["messages"][-1]
    if tools and choice != "none" and (choice != "auto" or last["role"] == "user"):
        named = choice["function"]["name"] if isinstance(choice, dict) else None
        tool = next((t for t in tools if t["function"]["name"] == named), tools[0])["function"]
        arguments = json.dumps(instance(tool.get("parameters") or {}))
        call = {"id": f"call_{zlib.crc32(arguments.encode()):08x}", "type": "function",
                "function": {"name": tool["name"], "arguments": arguments}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        content = json.dumps(instance(fmt["json_schema"].get("schema") or {}))
        return {"role": "assistant", "content": content}, "stop"
    cap = body.get("max_completion_tokens") or body.get("max_tokens") or 4096
    text, cut = reply(_text_of(last.get("content")), cap, ENCODING)
    if fmt.get("type") == "json_object":
        text, cut = json.dumps({"answer": text}), False
    return {"role": "assistant", "content": text}, "length" if cut else "stop"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def output_tokens(message: dict[str, Any]) -> int:
    text = message.get("content") or ""
    for call in message.get("tool_calls") or []:
        text += call["function"]["name"] + call["function"]["arguments"]
    return len(ENCODING.encode(text))


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


async def stream_chunks(base: dict[str, Any], message: dict[str, Any], finish: str,
                        choices: int, usage: dict[str, Any] | None) -> AsyncIterator[bytes]:
    yield _sse({"choices": [], "created": 0, "id": "", "model": "", "object": "",
                "prompt_filter_results": PROMPT_FILTER})
    chunk = {**base, "object": "chat.completion.chunk"}

    def delta(i: int, d: dict[str, Any], finish_reason: str | None = None) -> bytes:
        filters = {} if "role" in d else CHOICE_FILTER
        return _sse({**chunk, "choices": [{"index": i, "delta": d, "logprobs": None,
                                           "finish_reason": finish_reason,
                                           "content_filter_results": filters}]})

    for i in range(choices):
        yield delta(i, {"role": "assistant", "content": "", "refusal": None})
        for n, call in enumerate(message.get("tool_calls") or []):
            yield delta(i, {"tool_calls": [{"index": n, "id": call["id"], "type": "function",
                                            "function": {"name": call["function"]["name"],
                                                         "arguments": ""}}]})
            for piece in pieces_of(call["function"]["arguments"]):
                yield delta(i, {"tool_calls": [{"index": n, "function": {"arguments": piece}}]})
        if message.get("content"):
            for word in split_words(message["content"]):
                yield delta(i, {"content": word})
        yield delta(i, {}, finish)
    if usage is not None:
        yield _sse({**chunk, "choices": [], "usage": usage})
    yield b"data: [DONE]\n\n"
