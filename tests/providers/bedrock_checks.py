"""What Bedrock's Converse accepts, strictly: the service model's shapes, and the rules
the service states in its errors.

    problem = converse_problem(model_id, body)     # None, or ValidationException's message

The shapes are botocore's own copy of the published service model
(``bedrock-runtime/2023-09-30``): unknown members, missing required ones,
unions holding more or less than one member, wrong types and values under a
minimum are refused by botocore's ``ParamValidator``, as boto3 refuses them
before sending. On top, what the model states but the validator does not
check (patterns, maxima) and what the service answers with a
ValidationException: a conversation that does not start with the user or does
not alternate, blank text, base64 that is not an image of its format,
tool blocks without a toolConfig, tool results that answer no tool use, a
forced tool that is not defined.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import botocore.session
from botocore.validate import ParamValidator

SERVICE = botocore.session.get_session().get_service_model("bedrock-runtime")
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_.:-]{1,64}$")
MAGIC = {"png": (b"\x89PNG\r\n\x1a\n",), "jpeg": (b"\xff\xd8\xff",), "gif": (b"GIF87a", b"GIF89a"),
         "webp": (b"RIFF",)}


def converse_problem(model_id: str, body: Any, operation: str = "Converse") -> str | None:
    if not isinstance(body, dict):
        return "Malformed input request, please reformat your input and try again."
    shape = SERVICE.operation_model(operation).input_shape
    report = ParamValidator().validate({"modelId": model_id, **body}, shape)
    if report.has_errors():
        return report.generate_report().replace("\n", " ")
    return _config_problem(body) or _conversation_problem(body) or _tool_problem(body)


def _config_problem(body: dict[str, Any]) -> str | None:
    config = body.get("inferenceConfig") or {}
    for name in ("temperature", "topP"):
        if name in config and not 0 <= config[name] <= 1:
            return f"inferenceConfig.{name} must be less than or equal to 1."
    if any(not s for s in config.get("stopSequences") or []):
        return "inferenceConfig.stopSequences must not hold an empty string."
    return None


def _image_problem(image: dict[str, Any], where: str) -> str | None:
    data = image["source"].get("bytes")
    if data is None:
        return None
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return f"The image at {where} is not valid base64."
    if not raw.startswith(MAGIC[image["format"]]):
        return f"The image at {where} is not a valid {image['format']} image."
    return None


def _block_problem(block: dict[str, Any], where: str) -> str | None:
    if "text" in block and not block["text"].strip():
        return (f"The text field in the ContentBlock object at {where} is blank. Add text to "
                "the text field, and try again.")
    if "image" in block:
        return _image_problem(block["image"], where)
    if "toolUse" in block and not TOOL_USE_ID.match(block["toolUse"]["toolUseId"]):
        return f"The toolUseId at {where} does not match the pattern [a-zA-Z0-9_.:-]+."
    return None


def _conversation_problem(body: dict[str, Any]) -> str | None:
    messages = body["messages"]
    if not messages or messages[0]["role"] != "user":
        return "A conversation must start with a user message. Try again with a conversation "\
               "that starts with a user message."
    for i, message in enumerate(messages):
        if message["role"] not in ("user", "assistant"):
            return f"messages.{i}.role must be user or assistant."
        if i and message["role"] == messages[i - 1]["role"]:
            return ("A conversation must alternate between user and assistant roles. Make sure "
                    "the conversation alternates between user and assistant roles and try again.")
        if not message["content"]:
            return f"The content field in the Message object at messages.{i} is empty."
        for j, block in enumerate(message["content"]):
            problem = _block_problem(block, f"messages.{i}.content.{j}")
            if problem:
                return problem
    for j, block in enumerate(body.get("system") or []):
        if "text" in block and not block["text"].strip():
            return f"The text field in the SystemContentBlock at system.{j} is blank."
    return None


def _tool_problem(body: dict[str, Any]) -> str | None:
    tools = [t["toolSpec"] for t in (body.get("toolConfig") or {}).get("tools", [])
             if "toolSpec" in t]
    names = [t["name"] for t in tools]
    if any(not TOOL_NAME.match(n) for n in names) or len(set(names)) != len(names):
        return "The tool names must be unique and match [a-zA-Z0-9_-]{1,64}."
    if any(not isinstance(t["inputSchema"].get("json"), dict)
           or t["inputSchema"]["json"].get("type") != "object" for t in tools):
        return "A tool's inputSchema.json must be a JSON schema of type object."
    forced = ((body.get("toolConfig") or {}).get("toolChoice") or {}).get("tool")
    if forced and forced["name"] not in names:
        return f"The tool {forced['name']} named in toolChoice is not defined in tools."
    open_uses: set[str] = set()
    for i, message in enumerate(body["messages"]):
        blocks = message["content"]
        uses = {b["toolUse"]["toolUseId"] for b in blocks if "toolUse" in b}
        results = {b["toolResult"]["toolUseId"] for b in blocks if "toolResult" in b}
        if (uses or results) and "toolConfig" not in body:
            return ("The toolConfig field must be defined when using toolUse and toolResult "
                    "content blocks.")
        if message["role"] == "user":
            if results - open_uses:
                return (f"messages.{i}.content holds toolResult blocks for ids without a toolUse "
                        f"in the previous turn: {sorted(results - open_uses)}")
            if open_uses - results:
                return (f"Expected toolResult blocks at messages.{i}.content for the following "
                        f"Ids: {', '.join(sorted(open_uses - results))}")
        open_uses = uses
    return None
