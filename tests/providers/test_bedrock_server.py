"""The Bedrock test server against the oracle: boto3's ``bedrock-runtime`` client calls it.

boto3 signs with its own SigV4 signer, serializes with the service model and
parses the JSON answers and the binary event stream: if it accepts the
server's answers and the server accepts its requests (and refuses a wrong
signature), the server speaks Bedrock's protocol as the SDK knows it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import boto3
import botocore.exceptions
import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

from tests.providers.bedrock_server import ACCESS_KEY, REGION, SECRET_KEY, BedrockServer
from tests.providers.loopback import serve

HAIKU = "anthropic.claude-3-haiku-20240307-v1:0"
PROFILE = ("arn:aws:bedrock:us-east-1:123456789012:inference-profile/"
           "us.anthropic.claude-3-5-sonnet-20241022-v2:0")
HELLO: Any = [{"role": "user", "content": [{"text": "Say hello to the team."}]}]
WEATHER: Any = {"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}}]}


@pytest.fixture(scope="module")
def bedrock() -> Iterator[tuple[BedrockServer, str]]:
    server = BedrockServer({HAIKU, PROFILE})
    with serve(server.app) as url:
        yield server, url


def client(url: str, secret: str = SECRET_KEY, key: str = ACCESS_KEY, region: str = REGION,
           validate: bool = True) -> Any:
    return boto3.client("bedrock-runtime", endpoint_url=url, region_name=region,
                        aws_access_key_id=key, aws_secret_access_key=secret,
                        config=Config(retries={"total_max_attempts": 1, "mode": "standard"},
                                      parameter_validation=validate))


def code_of(exc: BaseException) -> str:
    assert isinstance(exc, botocore.exceptions.ClientError)
    return str(exc.response["Error"]["Code"])


def test_converse_answers_and_reports_its_own_count(bedrock) -> None:
    server, url = bedrock
    answer = client(url).converse(modelId=HAIKU, messages=HELLO,
                                  system=[{"text": "Be brief."}])
    row = server.ledger.rows[-1]
    assert answer["output"]["message"]["content"][0]["text"].startswith("Hello! You said: Say")
    assert answer["stopReason"] == "end_turn"
    assert (answer["usage"]["inputTokens"], answer["usage"]["outputTokens"]) == (
        row.input_tokens, row.output_tokens)
    assert server.ledger.raw_paths[-1] == "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"


def test_an_inference_profile_arn_is_signed_over_its_encoded_path(bedrock) -> None:
    server, url = bedrock
    client(url).converse(modelId=PROFILE, messages=HELLO)
    assert server.ledger.raw_paths[-1].startswith("/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A")
    assert "%2Fus.anthropic" in server.ledger.raw_paths[-1]


def test_converse_stream_is_real_event_stream_framing(bedrock) -> None:
    server, url = bedrock
    answer = client(url).converse_stream(modelId=HAIKU, messages=HELLO, toolConfig={
        **WEATHER, "toolChoice": {"tool": {"name": "get_weather"}}})
    events = list(answer["stream"])
    kinds = [next(iter(e)) for e in events]
    assert kinds[0] == "messageStart" and kinds[-2:] == ["messageStop", "metadata"]
    start = next(e["contentBlockStart"] for e in events if "contentBlockStart" in e)
    assert start["start"]["toolUse"]["name"] == "get_weather"
    pieces = "".join(e["contentBlockDelta"]["delta"]["toolUse"]["input"]
                     for e in events if "contentBlockDelta" in e)
    assert pieces == '{"city": "Paris"}'
    assert events[-1]["metadata"]["usage"]["outputTokens"] == server.ledger.rows[-1].output_tokens


def test_a_stream_can_throw_an_exception_frame(bedrock) -> None:
    server, url = bedrock
    server.break_stream(HAIKU, after_events=2)
    answer = client(url).converse_stream(modelId=HAIKU, messages=HELLO)
    with pytest.raises(botocore.exceptions.EventStreamError) as broken:
        list(answer["stream"])
    assert code_of(broken.value) == "throttlingException"


@pytest.mark.parametrize("kw, expected", [
    ({"secret": "wrong-secret"}, "InvalidSignatureException"),
    ({"key": "AKIDSOMEONEELSE0001"}, "UnrecognizedClientException"),
    ({"region": "eu-west-1"}, "InvalidSignatureException"),
], ids=["wrong secret", "unknown key", "other region"])
def test_a_bad_signature_is_refused_with_403(bedrock, kw: dict[str, Any], expected: str) -> None:
    server, url = bedrock
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        client(url, **kw).converse(modelId=HAIKU, messages=HELLO)
    assert code_of(refused.value) == expected
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


@pytest.mark.parametrize("kw, words", [
    ({"messages": [{"role": "assistant", "content": [{"text": "Hi"}]}]}, "start with a user"),
    ({"messages": [{"role": "user", "content": [{"text": "  "}]}]}, "is blank"),
    ({"messages": HELLO, "inferenceConfig": {"temperature": 1.5}}, "temperature"),
    ({"messages": [{"role": "user", "content": [{"text": "Hi", "cachePoint": {
        "type": "default"}}]}]}, "tagged union"),
    ({"messages": [*HELLO, {"role": "assistant", "content": [{"toolUse": {
        "toolUseId": "t1", "name": "get_weather", "input": {}}}]}]}, "toolConfig field"),
], ids=["assistant first", "blank text", "temperature", "two members in one block",
        "tool use without toolConfig"])
def test_off_spec_bodies_are_validation_exceptions(bedrock, kw: dict[str, Any],
                                                   words: str) -> None:
    _, url = bedrock
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        client(url, validate=False).converse(modelId=HAIKU, **kw)
    assert code_of(refused.value) == "ValidationException"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert words in str(refused.value)


@pytest.mark.parametrize("error, status", [("ThrottlingException", 429),
                                           ("ModelNotReadyException", 429)])
def test_faults_come_as_bedrocks_errors(bedrock, error: str, status: int) -> None:
    server, url = bedrock
    server.throttle(HAIKU, times=1, error=error)
    with pytest.raises(botocore.exceptions.ClientError) as failed:
        client(url).converse(modelId=HAIKU, messages=HELLO)
    assert code_of(failed.value) == error
    assert failed.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    client(url).converse(modelId=HAIKU, messages=HELLO)        # once only


def test_a_cache_point_writes_then_reads(bedrock) -> None:
    _, url = bedrock
    system = [{"text": "House rule: be brief and exact. " * 200}, {"cachePoint": {"type": "default"}}]
    first = client(url).converse(modelId=HAIKU, messages=HELLO, system=system)["usage"]
    second = client(url).converse(modelId=HAIKU, messages=HELLO, system=system)["usage"]
    assert first["cacheWriteInputTokens"] >= 1024 and first["cacheReadInputTokens"] == 0
    assert second["cacheReadInputTokens"] == first["cacheWriteInputTokens"]
    assert second["cacheWriteInputTokens"] == 0
    assert second["inputTokens"] == first["inputTokens"]      # the uncached rest, alike


def signed_post(url: str, model_id: str, body: dict[str, Any]) -> httpx.Response:
    """A Converse call boto3 would refuse to send, signed as boto3 signs."""
    path = f"/model/{quote(model_id, safe='')}/converse"
    request = AWSRequest(method="POST", url=url + path, data=json.dumps(body).encode(),
                         headers={"Content-Type": "application/json"})
    SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "bedrock", REGION).add_auth(request)
    return httpx.post(url + path, content=request.body, headers=dict(request.headers.items()))


@pytest.mark.parametrize("extra, words", [
    ({"bogus": 1}, 'Unknown parameter in input: "bogus"'),
    ({"toolConfig": {**WEATHER, "toolChoice": {"none": {}}}}, "toolChoice"),
], ids=["unknown member", "toolChoice none"])
def test_members_outside_the_service_model_are_refused(bedrock, extra: dict[str, Any],
                                                       words: str) -> None:
    _, url = bedrock
    answer = signed_post(url, HAIKU, {"messages": HELLO, **extra})
    assert answer.status_code == 400
    assert answer.headers["x-amzn-errortype"].startswith("ValidationException")
    assert words in answer.json()["message"]
