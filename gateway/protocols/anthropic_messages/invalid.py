"""A Messages body that fails its types (``model.py``), in the words this door has always used.

    raise invalid_request(exc)    # InvalidRequest("messages.0.role: 'system' is not one of [...]")

The phrasing is JSON schema's (the door was checked with ``jsonschema``
before it was typed), so clients read the messages they always have: the
path in Anthropic's dotted form, then what is wrong with the value there.

    pydantic error        message
    missing               'max_tokens' is a required property   (at the object that lacks it)
    *_type                5 is not of type 'string'
    greater_than_equal    0 is less than the minimum of 1
    less_than_equal       1.5 is greater than the maximum of 1
    too_short             [] should be non-empty
    literal_error         'system' is not one of ['user', 'assistant']
    union_tag_invalid     (at .type) 'pdf' is not one of ['base64', 'url']
    a refusal             its own words (``wire_model.refusal``)

Values shown are cut at ``MAX_SHOWN`` characters: an error never echoes a
whole body back.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from core.errors import InvalidRequest
from gateway.protocols.wire_model import first_error, refused, tag_names

MAX_SHOWN = 80
MISSING = "missing_required_parameter"
_JSON_TYPES = {"string_type": "string", "int_type": "integer", "int_from_float": "integer",
               "float_type": "number", "bool_type": "boolean", "list_type": "array",
               "dict_type": "object", "model_type": "object", "model_attributes_type": "object"}
_BOUNDS = {"greater_than_equal": ("ge", "is less than the minimum of"),
           "greater_than": ("gt", "is less than or equal to the minimum of"),
           "less_than_equal": ("le", "is greater than the maximum of"),
           "less_than": ("lt", "is greater than or equal to the maximum of")}


def shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."


def _number(bound: Any) -> Any:
    """1.0 as 1: the schema's own figure."""
    return int(bound) if isinstance(bound, float) and bound.is_integer() else bound


def _dotted(path: tuple[int | str, ...]) -> str:
    return ".".join(str(step) for step in path)


def _missing(path: tuple[int | str, ...], error: ErrorDetails) -> tuple[str, str] | None:
    """(where, what) of a missing field, said at the object without it, or None."""
    if error["type"] == "missing":
        return _dotted(path[:-1]), f"'{path[-1]}' is a required property"
    if error["type"] == "union_tag_not_found" and isinstance(error["input"], dict):
        return _dotted(path), "'type' is a required property"
    return None


def _words(where: str, error: ErrorDetails) -> tuple[str, str]:
    """(where, what is wrong) of any other error."""
    kind, ctx, value = error["type"], error.get("ctx") or {}, error["input"]
    if kind in _JSON_TYPES or kind == "union_tag_not_found":
        return where, f"{shown(value)} is not of type '{_JSON_TYPES.get(kind, 'object')}'"
    if kind in _BOUNDS:
        key, words = _BOUNDS[kind]
        return where, f"{shown(value)} {words} {_number(ctx[key])}"
    if kind in ("too_short", "string_too_short"):
        return where, f"{shown(value)} " + (
            "should be non-empty" if ctx.get("min_length") == 1 else "is too short")
    if kind in ("too_long", "string_too_long"):
        return where, f"{shown(value)} is too long"
    if kind == "literal_error":
        return where, f"{shown(value)} is not one of [{ctx['expected'].replace(' or ', ', ')}]"
    if kind == "string_pattern_mismatch":
        return where, f"{shown(value)} does not match {ctx['pattern']!r}"
    if kind == "union_tag_invalid":
        given = value.get("type") if isinstance(value, dict) else value
        return f"{where}.type", f"{shown(given)} is not one of {tag_names(ctx['expected_tags'])}"
    return where, str(error["msg"])     # pydantic's own words


def invalid_request(exc: ValidationError) -> InvalidRequest:
    """The 400 for a body that failed validation: its first error, named by its path."""
    path, error = first_error(exc)
    missing, refusal = _missing(path, error), refused(error)
    code: str | None = None
    if missing is not None:
        # "'max_tokens' is a required property" says it best at the object without it.
        (where, what), code = missing, MISSING
    elif refusal is not None:
        code, what, _ = refusal
        where = _dotted(path)
    else:
        where, what = _words(_dotted(path), error)
    return InvalidRequest(f"{where}: {what}" if where else what, param=where or None, code=code)
