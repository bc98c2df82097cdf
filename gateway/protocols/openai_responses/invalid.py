"""A Responses body that fails its types (``model.py``), as OpenAI words it.

    raise invalid_request(exc)
    # InvalidRequest("Invalid type for 'temperature': expected a number, but got a string instead.",
    #                param="temperature", code="invalid_value")

``param`` is OpenAI's path (``input[0].content[1].text``, ``metadata.k``);
the code is ``missing_required_parameter`` for a missing one, the refusal's
own for the door's checks (``unknown_parameter``, ...), else
``invalid_value``. Names and values shown are cut (``MAX_SHOWN``): a
client's long key or value is never echoed whole.

    pydantic error        message
    missing               Missing required parameter: 'input[0].content'.
    *_type                Invalid type for 'store': expected a boolean, but got a string instead.
    greater_than_equal    Invalid 'max_output_tokens': expected a value >= 1, but got 0 instead.
    too_long              Invalid 'metadata': expected at most 16 items, but got 17 instead.
    string_too_long       Invalid 'metadata.k': expected a string of at most 512 characters.
    literal_error         Invalid value: 'critic'. Supported values are: 'user', 'assistant', ...
    union_tag_invalid     (at .type) Invalid value: 'yaml'. Supported values are: 'text', ...
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from core.errors import InvalidRequest
from gateway.protocols.wire_model import KEY, first_error, refused, tag_names

MAX_SHOWN = 64
MISSING = "missing_required_parameter"
_EXPECTED = {"string_type": "a string", "int_type": "an integer", "int_from_float": "an integer",
             "float_type": "a number", "bool_type": "a boolean", "list_type": "an array",
             "dict_type": "an object", "model_type": "an object", "model_attributes_type": "an object",
             "union_tag_not_found": "an object"}
_BOUNDS = {"greater_than_equal": ("ge", ">="), "greater_than": ("gt", ">"),
           "less_than_equal": ("le", "<="), "less_than": ("lt", "<")}


def param_of(path: tuple[int | str, ...]) -> str:
    """OpenAI's form of a path: ``input[0].content``; a client's long key is cut."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else f"{'.' if out else ''}{str(step)[:MAX_SHOWN]}"
    return out


def json_kind(value: Any) -> str:
    """What a JSON value is, in OpenAI's words: "a string", "an array", ..."""
    for kind, words in ((bool, "a boolean"), (int, "an integer"), (float, "a number"),
                        (str, "a string"), (list, "an array"), (dict, "an object")):
        if isinstance(value, kind):
            return words
    return "null"


def shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."


def _listed(expected: list[str]) -> str:
    """OpenAI's list of values: "'a', 'b', and 'c'"."""
    if len(expected) < 3:
        return " and ".join(expected)
    return ", ".join(expected[:-1]) + ", and " + expected[-1]


def _words(param: str, error: ErrorDetails) -> str:
    kind, ctx, value = error["type"], error.get("ctx") or {}, error["input"]
    if kind in _EXPECTED:
        return f"Invalid type for '{param}': expected {_EXPECTED[kind]}, but got {json_kind(value)} instead."
    if kind in _BOUNDS:
        key, sign = _BOUNDS[kind]
        return f"Invalid '{param}': expected a value {sign} {ctx[key]}, but got {shown(value)} instead."
    if kind == "too_long":
        count = len(value) if isinstance(value, list | dict) else ctx.get("actual_length")
        return f"Invalid '{param}': expected at most {ctx['max_length']} items, but got {count} instead."
    if kind == "string_too_long":
        what = "a key" if error["loc"][-1] == KEY else "a string"
        return f"Invalid '{param}': expected {what} of at most {ctx['max_length']} characters."
    if kind == "string_too_short":
        return f"Invalid '{param}': expected a string of at least {ctx['min_length']} characters."
    if kind == "literal_error":     # pydantic's "'a', 'b' or 'c'"
        return (f"Invalid value: {shown(value)}. Supported values are: "
                f"{_listed(re.split(r', | or ', ctx['expected']))}.")
    if kind == "union_tag_invalid":
        given = value.get("type") if isinstance(value, dict) else value
        names = [repr(name) for name in tag_names(ctx["expected_tags"])]
        return f"Invalid value: {shown(given)}. Supported values are: {_listed(names)}."
    return f"Invalid '{param}': {error['msg']}"


def invalid_request(exc: ValidationError) -> InvalidRequest:
    """The 400 for a body that failed validation: its first error, with OpenAI's param."""
    path, error = first_error(exc)
    refusal = refused(error)
    if refusal is not None:
        code, message, param = refusal
        return InvalidRequest(message, param=param or param_of(path), code=code)
    kind = error["type"]
    untyped = kind == "union_tag_not_found" and isinstance(error["input"], dict)
    if untyped or kind == "union_tag_invalid":
        path = (*path, "type")       # what is wrong (or missing) is the object's type
    param = param_of(path)
    if untyped or kind == "missing":
        return InvalidRequest(f"Missing required parameter: '{param}'.", param=param, code=MISSING)
    return InvalidRequest(_words(param, error), param=param)
