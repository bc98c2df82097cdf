"""A protocol-faithful Amazon Bedrock runtime (Converse, ConverseStream) for tests, with a ledger.

    server = BedrockServer(models={"anthropic.claude-3-haiku-20240307-v1:0"})
    with serve(server.app) as endpoint:                         # tests/providers/loopback.py
        client = boto3.client("bedrock-runtime", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)
        client.converse(modelId=..., messages=[...])
    server.ledger.rows        # what it served, as it counted it; .refused: what it turned away
    server.throttle(model_id, times=1)       # the next call gets ThrottlingException (429)

It answers as Bedrock does (``/work/notes/providers.md`` section 3), in order:

1. a path other than ``/model/{percent-encoded modelId}/converse[-stream]``: 404;
2. a SigV4 signature that is missing or wrong, from an unknown key, for another
   region or service, or stale: 403 (``sigv4.py``, recomputed with botocore);
3. a model it does not serve: ValidationException;
4. a fault the test set: 429 ThrottlingException or ModelNotReadyException;
5. a body off the service model (``bedrock_checks.py``): 400 ValidationException.

Errors carry AWS's shape: ``{"message": ...}`` and ``x-amzn-ErrorType``. Usage is its
own count (``bedrock_count.py``: cl100k_base, cache points); streams are real
event-stream frames (``eventstream.py``) whose events carry the padding member
``p`` real ones do, and a test may have one throw an exception frame.
"""

from __future__ import annotations

import json
import re
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.providers.answers import instance, pieces_of, reply, split_words
from tests.providers.bedrock_checks import converse_problem
from tests.providers.bedrock_count import ENCODING, Prompt, PromptCache
from tests.providers.eventstream import event, exception
from tests.providers.sigv4 import Received, signature_problem

ACCESS_KEY, SECRET_KEY = "AKIDROUTEGATETEST01", "routegate-test-secret"
REGION = "us-east-1"
_PATH = re.compile(r"^/model/([^/]+)/(converse|converse-stream)$")
STATUS = {"ValidationException": 400, "ThrottlingException": 429, "ModelNotReadyException": 429,
          "AccessDeniedException": 403, "UnknownOperationException": 404}


@dataclass
class Row:
    model_id: str
    stream: bool
    input_tokens: int
    cache_read: int
    cache_write: int
    output_tokens: int

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read + self.cache_write

    @property
    def completion_tokens(self) -> int:
        return self.output_tokens


@dataclass
class Ledger:
    rows: list[Row] = field(default_factory=list)
    refused: list[tuple[int, str]] = field(default_factory=list)    # off-spec: (status, why)
    throttled: int = 0
    raw_paths: list[str] = field(default_factory=list)
    tokens: list[str | None] = field(default_factory=list)    # x-amz-security-token seen


def aws_error(code: str, message: str, status: int | None = None) -> Response:
    return Response(json.dumps({"message": message}), status or STATUS.get(code, 403),
                    headers={"x-amzn-ErrorType": f"{code}:http://internal.amazon.com/coral/"
                                                 "com.amazon.bedrock/",
                             "x-amzn-RequestId": "test-request", "content-type":
                                 "application/json"})


class BedrockServer:
    def __init__(self, models: set[str], region: str = REGION,
                 keys: dict[str, tuple[str, str | None]] | None = None) -> None:
        self.models = models
        self.region = region
        self.keys = keys or {ACCESS_KEY: (SECRET_KEY, None)}
        self.ledger = Ledger()
        self._faults: dict[str, tuple[str, int]] = {}            # model -> (error, times)
        self._stream_faults: dict[str, tuple[str, int]] = {}     # model -> (exception, after)
        self._cache = PromptCache()
        self._lock = threading.Lock()
        self.app = Starlette(routes=[Route("/{rest:path}", self.handle, methods=["POST"])])

    def throttle(self, model_id: str, times: int = 1, error: str = "ThrottlingException") -> None:
        """The next ``times`` calls of ``model_id`` fail with ``error`` (-1: all of them)."""
        self._faults[model_id] = (error, times)

    def break_stream(self, model_id: str, after_events: int,
                     kind: str = "throttlingException") -> None:
        """The next stream of ``model_id`` throws ``kind`` after ``after_events`` events."""
        self._stream_faults[model_id] = (kind, after_events)

    def _refuse(self, status: int, code: str, message: str) -> Response:
        with self._lock:
            self.ledger.refused.append((status, f"{code}: {message}"))
        return aws_error(code, message, status)

    def _fault(self, model_id: str) -> Response | None:
        with self._lock:
            error, times = self._faults.get(model_id, ("", 0))
            if times == 0:
                return None
            self._faults[model_id] = (error, times - 1 if times > 0 else times)
            self.ledger.throttled += 1
        return aws_error(error, "Too many requests, please wait before trying again."
                         if error == "ThrottlingException" else "The model is not ready.")

    async def handle(self, request: Request) -> Response:
        raw_path = request.scope["raw_path"].decode("latin-1")
        self.ledger.raw_paths.append(raw_path)
        self.ledger.tokens.append(request.headers.get("x-amz-security-token"))
        matched = _PATH.match(raw_path)
        if matched is None:
            return self._refuse(404, "UnknownOperationException", f"no operation at {raw_path}")
        body = await request.body()
        received = Received("POST", raw_path, request.scope["query_string"].decode(),
                            dict(request.headers), body)
        problem = signature_problem(received, self.keys, self.region)
        if problem is not None:
            return self._refuse(403, *problem)
        model_id, operation = unquote(matched.group(1)), matched.group(2)
        if model_id not in self.models:
            return self._refuse(400, "ValidationException", "The provided model identifier is "
                                "invalid.")
        fault = self._fault(model_id)
        if fault is not None:
            return fault
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        stream = operation == "converse-stream"
        why = converse_problem(model_id, data, "ConverseStream" if stream else "Converse")
        if why is not None:
            return self._refuse(400, "ValidationException", why)
        return self._answer(model_id, data, stream)

    def _answer(self, model_id: str, body: dict[str, Any], stream: bool) -> Response:
        prompt = Prompt.of(body)
        read, written = self._cache.use(prompt)
        blocks, stop = answer(body)
        output = output_tokens(blocks)
        row = Row(model_id, stream, len(prompt.ids) - read - written, read, written, output)
        with self._lock:
            self.ledger.rows.append(row)
            fault = self._stream_faults.pop(model_id, None) if stream else None
        usage = {"inputTokens": row.input_tokens, "outputTokens": output,
                 "totalTokens": row.prompt_tokens + output, "cacheReadInputTokens": read,
                 "cacheWriteInputTokens": written}
        headers = {"x-amzn-RequestId": f"req-{len(self.ledger.rows)}"}
        if not stream:
            return Response(json.dumps({
                "output": {"message": {"role": "assistant", "content": blocks}},
                "stopReason": stop, "usage": usage, "metrics": {"latencyMs": 5}}),
                headers={**headers, "content-type": "application/json"})
        frames = list(stream_frames(blocks, stop, usage))
        if fault is not None:
            frames = frames[:fault[1]] + [exception(fault[0], "Too many tokens, please wait "
                                                              "before trying again.")]
        return StreamingResponse(iter(frames), headers=headers,
                                 media_type="application/vnd.amazon.eventstream")


def _text(blocks: list[dict[str, Any]]) -> str:
    parts = []
    for block in blocks:
        if "text" in block:
            parts.append(block["text"])
        elif "toolResult" in block:
            parts += [p.get("text", "") for p in block["toolResult"]["content"]]
    return " ".join(parts)


def answer(body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """The assistant's content blocks and stopReason, decided by the request alone."""
    config = body.get("toolConfig") or {}
    tools = [t["toolSpec"] for t in config.get("tools", []) if "toolSpec" in t]
    choice = config.get("toolChoice") or {"auto": {}}
    last = body["messages"][-1]
    answered = any("toolResult" in b for b in last["content"])
    if tools and ("auto" not in choice or (last["role"] == "user" and not answered)):
        named = (choice.get("tool") or {}).get("name")
        spec = next((t for t in tools if t["name"] == named), tools[0])
        arguments = instance(spec["inputSchema"]["json"])
        use_id = f"tooluse_{zlib.crc32(json.dumps(arguments).encode()):08x}"
        return [{"toolUse": {"toolUseId": use_id, "name": spec["name"],
                             "input": arguments}}], "tool_use"
    cap = (body.get("inferenceConfig") or {}).get("maxTokens", 4096)
    text, cut = reply(_text(last["content"]), cap, ENCODING)
    return [{"text": text}], "max_tokens" if cut else "end_turn"


def output_tokens(blocks: list[dict[str, Any]]) -> int:
    return sum(len(ENCODING.encode(b["text"] if "text" in b else
                                   b["toolUse"]["name"] + json.dumps(b["toolUse"]["input"])))
               for b in blocks)


def stream_frames(blocks: list[dict[str, Any]], stop: str, usage: dict[str, Any]
                  ) -> Iterator[bytes]:
    yield event("messageStart", {"role": "assistant", "p": "abcdefghijkl"})
    for index, block in enumerate(blocks):
        if "text" in block:
            for word in split_words(block["text"]):
                yield event("contentBlockDelta", {"contentBlockIndex": index,
                                                  "delta": {"text": word}, "p": "abcd"})
        else:
            use = block["toolUse"]
            yield event("contentBlockStart", {"contentBlockIndex": index, "start": {"toolUse": {
                "toolUseId": use["toolUseId"], "name": use["name"]}}})
            for piece in pieces_of(json.dumps(use["input"])):
                yield event("contentBlockDelta", {"contentBlockIndex": index,
                                                  "delta": {"toolUse": {"input": piece}}})
        yield event("contentBlockStop", {"contentBlockIndex": index})
    yield event("messageStop", {"stopReason": stop})
    yield event("metadata", {"usage": usage, "metrics": {"latencyMs": 5}, "p": "abcdefgh"})
